"""Evaluating EQI methods against the exposure store (RELQ, one-tailed paired t-tests)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from limelight.errors import LimelightError
from limelight.exposure.relq import RELQ, TABLE2, parse_relq, relq_many


def method_lists(method, docs: np.ndarray, texts: Sequence[str] | None = None,
                 embeddings: np.ndarray | None = None, k: int = 100,
                 batch: int = 2048) -> np.ndarray:
    """The ``(m, k)`` query codes a method returns for store documents ``docs``."""
    from limelight.exposure.eqi.reverse import BruteForce

    docs = np.asarray(docs)
    if isinstance(method, BruteForce):
        return method.search_docs(docs, k)[0]
    out = []
    for s in range(0, len(docs), batch):
        t = None if texts is None else list(texts[s:s + batch])
        e = None if embeddings is None else embeddings[s:s + batch]
        if getattr(method, "kind", None) is not None and hasattr(method, "add_documents"):
            raise LimelightError("exact reverse search answers new documents; use brute-force for stored ones")
        out.append(method.search(texts=t, embeddings=e, k=k)[0])
    return np.concatenate(out) if out else np.zeros((0, k), np.int32)


def evaluate_lists(store, docs: np.ndarray, lists: Mapping[str, np.ndarray],
                   measures: Sequence[RELQ | str] = TABLE2) -> dict[str, dict[str, np.ndarray]]:
    """Per-document RELQ of given lists: ``{method: {measure: (m,) values}}`` (NaN for
    documents without an exposing query)."""
    truth = store.ranks()[np.asarray(docs)]
    ms = [parse_relq(x) if isinstance(x, str) else x for x in measures]
    return {name: relq_many(codes, truth, ms) for name, codes in lists.items()}


def summarize(per_doc: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, float]]:
    """Means over the documents that have an exposing query (``n_docs`` says how many)."""
    out: dict[str, dict[str, float]] = {}
    for name, vals in per_doc.items():
        out[name] = {}
        for mname, v in vals.items():
            ok = ~np.isnan(v)
            out[name][mname] = float(v[ok].mean()) if ok.any() else float("nan")
        first = next(iter(vals.values()))
        out[name]["n_docs"] = int((~np.isnan(first)).sum())
    return out


def one_tailed_t(x: np.ndarray, y: np.ndarray) -> float:
    """p-value of a one-tailed paired t-test of mean(x) > mean(y) (NaN pairs dropped)."""
    from limelight.evaluation.stats import paired_t

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    p = paired_t(x, y)
    return p / 2 if (x - y).mean() > 0 else 1 - p / 2


def evaluate_eqi(store, methods: Mapping[str, object], docs: np.ndarray,
                 texts: Sequence[str] | None = None, embeddings: np.ndarray | None = None,
                 measures: Sequence[RELQ | str] = TABLE2, k: int = 100) -> dict[str, dict[str, float]]:
    """Mean RELQ of each method on store documents ``docs`` (their ``texts`` for lexical methods,
    base ``embeddings`` for dense ones): ``{method: {"RELQ(0.5,0.9)": .., ..., "n_docs": ..}}``."""
    lists = {name: method_lists(m, docs, texts, embeddings, k) for name, m in methods.items()}
    return summarize(evaluate_lists(store, docs, lists, measures))
