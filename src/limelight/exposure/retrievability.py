"""Retrievability (Azzopardi & Vinay 2008) and its inequality, as CtrlQGen §4.3 computes them.

r(d) = Σ_q o_q · f(k_dq, c) over **every document of the collection** (documents no query
retrieves have r = 0), with the cumulative f = 1[k ≤ c] or the gravity f = 1[k ≤ c] / k^β
(k the 1-based rank; ``limelight.evaluation.discounts.retrievability_discount``). The Gini coefficient is CtrlQGen's (Gastwirth 1972) over r sorted
ascending: G = Σ_i (2i − N − 1) r_i / (N Σ_j r_j).

Everything works on one sparse documents × queries matrix of 1-based ranks (0 = not
retrieved), so no computation loops over queries in Python.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp

from limelight.data.ids import IdMap
from limelight.errors import FormatError, LimelightError
from limelight.evaluation.discounts import retrievability_discount

# ---- the rank matrix ------------------------------------------------------------------------


def rank_matrix(q: np.ndarray, d: np.ndarray, rank: np.ndarray, n_docs: int,
                n_queries: int) -> sp.csr_matrix:
    """Documents × queries CSR matrix of 1-based ranks from parallel (q, d, rank) arrays.

    A (query, document) pair may occur once only; ranks must be ≥ 1.
    """
    q = np.asarray(q, dtype=np.int64)
    d = np.asarray(d, dtype=np.int64)
    rank = np.asarray(rank)
    if len(rank) and int(rank.min()) < 1:
        raise LimelightError("ranks must be 1-based (≥ 1)")
    m = sp.coo_matrix((rank.astype(np.int32), (d, q)), shape=(n_docs, n_queries)).tocsr()
    if m.nnz != len(rank):  # coo→csr sums duplicates
        raise LimelightError("a (query, document) pair occurs more than once")
    m.sort_indices()
    return m


def _check_weights(weights: np.ndarray, n_queries: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_queries,):
        raise LimelightError(f"expected {n_queries} query weights, got {w.shape[0] if w.ndim else 'a scalar'}")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        raise LimelightError(f"query weight #{int(np.flatnonzero(bad)[0])} must be a finite number ≥ 0")
    return w


def f_matrix(ranks: sp.csr_matrix, c: int = 100, beta: float | None = None) -> sp.csr_matrix:
    """The matrix f(k_dq, c) with the same sparsity as ``ranks`` (explicit zeros dropped)."""
    f = retrievability_discount(c, beta)  # checks c and β
    # copies: eliminate_zeros works in place and must not touch ``ranks``' index arrays
    m = sp.csr_matrix((f.weights(ranks.data), ranks.indices.copy(), ranks.indptr.copy()),
                      shape=ranks.shape)
    m.eliminate_zeros()
    return m


def retrievability_from_pairs(q: np.ndarray, d: np.ndarray, rank: np.ndarray, n_docs: int,
                              weights: np.ndarray, c: int = 100,
                              beta: float | None = None) -> np.ndarray:
    """r(d) from parallel (q, d, 1-based rank) arrays in one pass (no matrix built)."""
    return _pairs_r_n(q, d, rank, n_docs, weights, c, beta)[0]


def _pairs_r_n(q: np.ndarray, d: np.ndarray, rank: np.ndarray, n_docs: int, weights: np.ndarray,
               c: int, beta: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(r(d), number of pairs per document) from parallel pair arrays, in one pass."""
    f = retrievability_discount(c, beta)  # checks c and β
    w = np.asarray(weights, dtype=np.float64)
    q, d, rank = np.asarray(q), np.asarray(d), np.asarray(rank)
    if not len(q):
        return np.zeros(n_docs), np.zeros(n_docs, np.int64)
    if int(d.max()) >= n_docs or int(d.min()) < 0 or int(q.max()) >= len(w) or int(q.min()) < 0:
        raise LimelightError("a pair's document or query code is outside the collection or query set")
    top = min(f.c, int(rank.max()))  # no rank beyond ``top`` needs a weight
    f_table = np.concatenate([[0.0], f.weights(np.arange(1, top + 1))])  # f(k) at k = 0..top
    return _r_from_pairs(q, d, rank, w, f_table, int(n_docs))


@numba.njit(cache=True, nogil=True)
def _r_from_pairs(q, d, rank, w, f_table, n_docs):  # pragma: no cover - numba
    """One pass over the pairs: r[d] += o_q · f(k, c), with f(k, c) looked up in ``f_table``
    (ranks 1..c; no per-pair temporaries), and the number of pairs of each document (at any
    rank)."""
    r = np.zeros(n_docs)
    n = np.zeros(n_docs, np.int64)
    _r_accumulate(q, d, rank, w, f_table, r, n)
    return r, n


@numba.njit(cache=True, nogil=True)
def _r_accumulate(q, d, rank, w, f_table, r, n):  # pragma: no cover - numba
    """``_r_from_pairs``'s pass, adding into ``r`` and ``n`` (pairs given chunk by chunk in row
    order add up to the one-pass figures, bit for bit)."""
    c = len(f_table) - 1
    for i in range(len(q)):
        k = rank[i]
        n[d[i]] += 1
        if 1 <= k <= c:
            r[d[i]] += w[q[i]] * f_table[k]


def retrievability(ranks: sp.csr_matrix, weights: np.ndarray | None = None, c: int = 100,
                   beta: float | None = None) -> np.ndarray:
    """r(d) = Σ_q o_q f(k_dq, c) for every row (document) of ``ranks``."""
    w = np.ones(ranks.shape[1]) if weights is None else _check_weights(weights, ranks.shape[1])
    return np.asarray(f_matrix(ranks, c, beta) @ w, dtype=np.float64)


# ---- inequality -----------------------------------------------------------------------------


def gini(r: np.ndarray) -> float:
    """CtrlQGen's Gini: Σ_i (2i − N − 1) r_(i) / (N Σ_j r_j), r sorted ascending, i 1-based.

    0 when every value is equal (including all zero); 1 − 1/N when one value holds everything.
    """
    r = np.asarray(r, dtype=np.float64).ravel()
    n = len(r)
    if n == 0:
        raise LimelightError("Gini of an empty set of documents")
    if (r < 0).any() or not np.isfinite(r).all():
        raise LimelightError("retrievability scores must be finite and ≥ 0")
    total = r.sum()
    if total == 0:
        return 0.0
    s = np.sort(r)
    i = np.arange(1, n + 1, dtype=np.float64)
    return float(np.dot(2 * i - n - 1, s) / (n * total))


def gini_columns(r: np.ndarray) -> np.ndarray:
    """The Gini of each column of a (documents × samples) array."""
    n = r.shape[0]
    s = np.sort(r, axis=0)
    coef = 2 * np.arange(1, n + 1, dtype=np.float64) - n - 1
    tot = s.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        g = (coef @ s) / (n * tot)
    return np.where(tot > 0, g, 0.0)


def lorenz(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lorenz curve: (cumulative share of documents, cumulative share of retrievability), both
    starting at 0 and ending at 1, documents sorted by r ascending."""
    s = np.sort(np.asarray(r, dtype=np.float64).ravel())
    n = len(s)
    x = np.arange(n + 1, dtype=np.float64) / max(n, 1)
    y = np.concatenate([[0.0], np.cumsum(s)])
    y = y / y[-1] if y[-1] > 0 else x.copy()
    return x, y


def retrievable_fraction(r: np.ndarray) -> float:
    """The fraction of documents with r(d) > 0."""
    r = np.asarray(r)
    return float((r > 0).mean()) if len(r) else 0.0


# ---- a summary ------------------------------------------------------------------------------


@dataclass
class Retrievability:
    """r(d) of every document and its summaries.

    ``gini`` covers every document of the collection; ``gini_retrieved_only`` only documents
    that some query retrieves at any depth (what tools that see only a run file report).
    """

    r: np.ndarray
    doc_ids: IdMap
    c: int
    beta: float | None
    gini: float
    gini_retrieved_only: float
    retrievable_fraction: float
    n_docs: int
    n_queries: int
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {"gini": self.gini, "retrievable_fraction": self.retrievable_fraction,
               "n_docs": self.n_docs, "n_queries": self.n_queries, "c": self.c,
               "beta": self.beta, "gini_retrieved_only": self.gini_retrieved_only}
        out.update(self.extra)
        return out

    def to_pandas(self) -> pd.DataFrame:
        return pd.DataFrame({"doc_id": self.doc_ids.strings, "r": self.r})

    def write_tsv(self, path: str | os.PathLike, overwrite: bool = False, flag: str | None = None) -> None:
        """``docid<TAB>r`` for every document (atomically). A file already at ``path`` that
        limelight did not write is refused (one line naming it) unless ``overwrite``
        (``limelight._io.atomic_output_file``; ``flag``: the command's option that allows it)."""
        from limelight._io import atomic_output_file

        with atomic_output_file(path, overwrite, flag) as tmp:
            self.to_pandas().to_csv(tmp, sep="\t", header=False, index=False, float_format="%.10g")


def summarise(r: np.ndarray, retrieved: np.ndarray, doc_ids: IdMap, n_queries: int, c: int,
              beta: float | None) -> Retrievability:
    """A ``Retrievability`` from r(d) and the mask of documents retrieved at any depth."""
    if len(r) != len(doc_ids):
        raise LimelightError(f"{len(r)} retrievability scores for {len(doc_ids)} documents")
    return Retrievability(r, doc_ids, int(c), beta, gini(r),
                          gini(r[retrieved]) if retrieved.any() else 0.0,
                          retrievable_fraction(r), len(r), int(n_queries))


def analyse(ranks: sp.csr_matrix, doc_ids: IdMap, weights: np.ndarray | None = None,
            c: int = 100, beta: float | None = None) -> Retrievability:
    """r(d), Gini (all documents and retrieved-only) and the retrievable fraction."""
    if ranks.shape[0] != len(doc_ids):
        raise LimelightError(f"rank matrix has {ranks.shape[0]} documents, doc ids {len(doc_ids)}")
    r = retrievability(ranks, weights, c, beta)
    return summarise(r, np.diff(ranks.indptr) > 0, doc_ids, ranks.shape[1], c, beta)


def analyse_pairs(q: np.ndarray, d: np.ndarray, rank: np.ndarray, doc_ids: IdMap,
                  weights: np.ndarray, c: int = 100, beta: float | None = None) -> Retrievability:
    """``analyse`` from parallel (q, d, rank) arrays (one pass, no matrix)."""
    w = _check_weights(weights, len(weights))
    r, n = _pairs_r_n(q, d, rank, len(doc_ids), w, c, beta)
    retrieved = n > 0
    return summarise(r, retrieved, doc_ids, len(w), c, beta)


def analyse_pair_chunks(chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], doc_ids: IdMap,
                        weights: np.ndarray, c: int = 100, beta: float | None = None) -> Retrievability:
    """``analyse_pairs`` of the pairs given as ``(q, d, rank)`` chunks in row order (an exposure
    store's shards, one at a time): the same r(d), bit for bit, in the memory of one chunk."""
    w = np.asarray(_check_weights(weights, len(weights)), dtype=np.float64)
    f = retrievability_discount(c, beta)  # checks c and β
    n_docs = len(doc_ids)
    r, n = np.zeros(n_docs), np.zeros(n_docs, np.int64)
    for q, d, rank in chunks:
        q, d, rank = np.asarray(q), np.asarray(d), np.asarray(rank)
        if not len(q):
            continue
        if int(d.max()) >= n_docs or int(d.min()) < 0 or int(q.max()) >= len(w) or int(q.min()) < 0:
            raise LimelightError("a pair's document or query code is outside the collection or query set")
        top = min(f.c, int(rank.max()))
        f_table = np.concatenate([[0.0], f.weights(np.arange(1, top + 1))])
        _r_accumulate(q, d, rank, w, f_table, r, n)
    return summarise(r, n > 0, doc_ids, len(w), c, beta)


# ---- bootstrap --------------------------------------------------------------------------------


def _resampled_weights(rng: np.random.Generator, w: np.ndarray, b: int) -> np.ndarray:
    """(n_queries × b) weights: o_q times how often q is drawn in a resample of the queries."""
    nq = len(w)
    counts = rng.multinomial(nq, np.full(nq, 1.0 / nq), size=b).T.astype(np.float64)
    return counts * w[:, None]


def bootstrap_gini(ranks: sp.csr_matrix, weights: np.ndarray | None = None, c: int = 100,
                   beta: float | None = None, n_boot: int = 1000, alpha: float = 0.05,
                   seed: int = 0, chunk: int = 50) -> dict:
    """Bootstrap CI of the Gini, resampling queries with replacement (o_q kept per query).

    Resampling queries makes r(d) more concentrated (queries left out of a resample drop their
    documents), so the bootstrap distribution of the Gini sits above the estimate. The interval
    is therefore the bias-corrected percentile interval
    ``[q_{α/2} − bias, q_{1−α/2} − bias]`` with ``bias = mean(G*) − Ĝ``; the raw percentiles are
    returned as ``percentile``. Returns ``{"gini", "low", "high", "bias", "percentile",
    "samples"}``.
    """
    w = np.ones(ranks.shape[1]) if weights is None else _check_weights(weights, ranks.shape[1])
    f = f_matrix(ranks, c, beta)
    rng = np.random.default_rng(seed)
    samples = np.empty(n_boot)
    for s in range(0, n_boot, chunk):
        b = min(chunk, n_boot - s)
        samples[s:s + b] = gini_columns(np.asarray(f @ _resampled_weights(rng, w, b)))
    g = gini(f @ w)
    lo, hi = np.quantile(samples, [alpha / 2, 1 - alpha / 2])
    bias = float(samples.mean() - g)
    return {"gini": g, "low": float(lo - bias), "high": float(hi - bias), "bias": bias,
            "percentile": (float(lo), float(hi)), "samples": samples}


def paired_bootstrap_gini(ranks_a: sp.csr_matrix, ranks_b: sp.csr_matrix,
                          weights: np.ndarray | None = None, c: int = 100,
                          beta: float | None = None, n_boot: int = 1000, alpha: float = 0.05,
                          seed: int = 0, chunk: int = 50) -> dict:
    """Paired bootstrap test of Gini(A) − Gini(B) for two systems on the same queries.

    Both systems are evaluated on the same resamples of the queries; the interval of the
    difference is bias-corrected as in ``bootstrap_gini``. The p-value is two-sided,
    from the bootstrap distribution shifted to the null (difference 0):
    p = (1 + #{|δ*_b − mean(δ*)| ≥ |δ̂|}) / (B + 1). Returns ``{"gini_a", "gini_b", "diff", "low",
    "high", "p_value", "samples"}``.
    """
    if ranks_a.shape[1] != ranks_b.shape[1]:
        raise LimelightError("the two systems were run on different numbers of queries")
    nq = ranks_a.shape[1]
    w = np.ones(nq) if weights is None else _check_weights(weights, nq)
    fa, fb = f_matrix(ranks_a, c, beta), f_matrix(ranks_b, c, beta)
    rng = np.random.default_rng(seed)
    diffs = np.empty(n_boot)
    for s in range(0, n_boot, chunk):
        b = min(chunk, n_boot - s)
        wb = _resampled_weights(rng, w, b)
        diffs[s:s + b] = gini_columns(np.asarray(fa @ wb)) - gini_columns(np.asarray(fb @ wb))
    ga, gb = gini(fa @ w), gini(fb @ w)
    obs = ga - gb
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    bias = float(diffs.mean() - obs)
    p = (1 + int(np.sum(np.abs(diffs - diffs.mean()) >= abs(obs)))) / (n_boot + 1)
    return {"gini_a": ga, "gini_b": gb, "diff": obs, "low": float(lo - bias),
            "high": float(hi - bias), "bias": bias, "p_value": float(p), "samples": diffs}


# ---- groups -----------------------------------------------------------------------------------


def as_labels(v) -> list[str]:
    """A document field's value as its group labels: none for a missing value, a list's items
    (also a JSON list written as a string), else the value itself, all as strings."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return []
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            try:
                return [str(x) for x in json.loads(s)]
            except json.JSONDecodeError:
                pass
        return [s] if s else []
    if isinstance(v, list | tuple | np.ndarray):
        return [str(x) for x in v]
    return [str(v)]


def group_retrievability(r: np.ndarray, values: Sequence | np.ndarray) -> pd.DataFrame:
    """Retrievability per group of a document field (``section``, a genre, or list-valued
    ``tags``: a document counts in each of its groups; documents without a value are skipped).

    Columns: ``group, n_docs, r_sum, r_mean, r_share`` (of the total r over all documents),
    ``retrievable_fraction``; sorted by ``r_mean`` descending.
    """
    r = np.asarray(r, dtype=np.float64)
    if len(values) != len(r):
        raise LimelightError(f"field has {len(values)} values for {len(r)} documents")
    labels = [as_labels(v) for v in (values.tolist() if isinstance(values, np.ndarray) else values)]
    lens = np.fromiter((len(x) for x in labels), dtype=np.int64, count=len(labels))
    doc = np.repeat(np.arange(len(r)), lens)
    grp = [g for x in labels for g in x]
    df = pd.DataFrame({"group": grp, "r": r[doc], "hit": r[doc] > 0})
    total = r.sum()
    out = df.groupby("group", sort=False).agg(n_docs=("r", "size"), r_sum=("r", "sum"),
                                              r_mean=("r", "mean"),
                                              retrievable_fraction=("hit", "mean")).reset_index()
    out["r_share"] = out["r_sum"] / total if total > 0 else 0.0
    out = out[["group", "n_docs", "r_sum", "r_mean", "r_share", "retrievable_fraction"]]
    return out.sort_values(["r_mean", "group"], ascending=[False, True], ignore_index=True)


# ---- from a TREC run file ---------------------------------------------------------------------


def read_doc_ids(path: str | os.PathLike) -> IdMap:
    """Document ids from a file of ids (one per line) or a ``docs.jsonl`` (field ``id``)."""
    from limelight.data.formats import read_text

    p = Path(path)
    ids: list[str] = []
    # one decoding path: a non-UTF-8 byte is told with its line (formats.read_text)
    for lineno, line in enumerate(read_text(p).splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("{"):
            try:
                rec = json.loads(s)
            except json.JSONDecodeError as e:
                raise FormatError(p, lineno, f"invalid JSON: {e.msg} column {e.colno}") from None
            key = next((k for k in ("id", "doc_id", "docno", "_id") if k in rec), None)
            if key is None:
                raise FormatError(p, lineno, "no id field (id, doc_id, docno or _id)")
            s = str(rec[key])
        ids.append(s)
    if not ids:
        raise FormatError(p, None, "no document ids")
    try:
        return IdMap(ids, kind="document")
    except ValueError as e:
        raise FormatError(p, None, str(e)) from None


def ranks_from_trec_run(path: str | os.PathLike, doc_ids: IdMap | None = None
                        ) -> tuple[sp.csr_matrix, IdMap, IdMap]:
    """The rank matrix of a TREC run, read as every command reads one
    (``limelight.data.formats.read_trec_run``, as ``evaluate`` and ``exposure compute --run`` do):
    each query's documents ranked by score, ties by document id descending (trec_eval); the
    rank column is not used; a non-finite score, a duplicate result or (with ``doc_ids``) a
    document not among them is a one-line error naming the line. With ``doc_ids`` the rows
    are those documents; otherwise the documents the run retrieves.

    Returns ``(ranks, doc_ids, query_ids)``.
    """
    from limelight.data.formats import read_trec_run

    run = read_trec_run(path, doc_map=doc_ids)
    if len(run) == 0:
        raise FormatError(path, None, "empty run: no result lines")
    return rank_matrix(run.q, run.d, run.ranks(), len(run.docids), len(run.qids)), run.docids, run.qids
