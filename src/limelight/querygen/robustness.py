"""Robustness of retrieval pipelines to query variations (Table 4 of Penha et al., ECIR 2022).

Every pipeline runs on the original queries and on each method's variants (a query without a
valid variant keeps its original text, as in the paper; ``#Q`` counts the valid ones). For each
method, and for each category (a query's value averaged over the category's methods), the report
gives the mean of a measure (nDCG@10 by default), its absolute and relative drop against the
original queries, a two-sided paired Student's t-test with Bonferroni correction (over the
methods, resp. the categories, compared for one pipeline in one mode), and the fraction of
judged documents in the top 10 (the paper's check that drops are not unjudged documents).

Two modes (section 5): ``full``, the whole pipeline sees the variant; ``rerank``, the first stage
retrieves with the original query and only the re-ranker sees the variant. ``rerank`` applies to
pipelines written ``first >> reranker`` (or given as a ``(first, reranker)`` pair).

Usage (also the audit stage's entry point)::

    from limelight.querygen.robustness import robustness_report
    rep = robustness_report({"BM25": bm25 % 1000, "MiniLM": dense % 1000}, ds.queries, ds.qrels,
                            methods="all", measure="nDCG@10", mode="full", dataset="cranfield")
    print(rep.to_markdown())        # Table 4 layout, one column per pipeline, ↓/↑ = significant
    rep.to_json("robustness.json")  # every number, per method and per category
    rep.plot("robustness.png")      # relative drop per method and pipeline
    rep.rows                        # the same as a pandas DataFrame

``variations=`` reuses variants generated once (``generate_variations``); otherwise they are
generated here with ``methods``, ``seed`` and ``models`` (local checkpoints of the model-based
methods). Methods that cannot run are listed in ``rep.skipped`` with the reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.evaluation.evaluate import Evaluator
from limelight.evaluation.measures import parse_measure
from limelight.evaluation.stats import paired_t
from limelight.querygen.variations import CATEGORIES, Variations, generate_variations
from limelight.retrieval.base import Stage, Then

MODES = ("full", "rerank")


@dataclass
class RobustnessReport:
    """The result of ``robustness_report``.

    ``rows``: one row per (system, mode, level, method or category) with ``n_queries``,
    ``n_valid`` (#Q), ``original``, ``value``, ``abs_drop`` (original − value), ``rel_drop``
    (abs_drop / original), ``p_value``, ``p_bonferroni``, ``sig`` (``↓``/``↑`` when
    ``p_bonferroni < alpha``), ``judged_original`` and ``judged`` (mean fraction of judged
    documents in the top ``judged_k``). ``per_query[(system, mode, method)]`` holds the
    per-query values (``"original"`` for the original queries) aligned with ``qids``.
    """

    rows: pd.DataFrame
    measure: str
    systems: list[str]
    modes: list[str]
    methods: list[str]
    qids: list[str]
    per_query: dict[tuple[str, str, str], np.ndarray] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dataset: str = ""
    alpha: float = 0.05
    judged_k: int = 10

    def to_pandas(self) -> pd.DataFrame:
        return self.rows.copy()

    def row(self, system: str, method: str, mode: str = "full") -> pd.Series:
        """The row of one (system, method or category name, mode)."""
        r = self.rows
        sel = r[(r["system"] == system) & (r["mode"] == mode) &
                ((r["method"] == method) | ((r["level"] == "category") & (r["category"] == method)))]
        if sel.empty:
            raise LimelightError(f"no row for system {system!r}, method {method!r}, mode {mode!r}")
        return sel.iloc[0]

    # ---- output ----------------------------------------------------------------------------------
    def to_markdown(self) -> str:
        """Table 4's layout per mode: rows = category / variation, one column per system
        (``↓``/``↑``: significant loss/gain), ``#Q`` = valid variants; then category rows,
        judged fractions and skipped methods."""
        out: list[str] = []
        r = self.rows
        title = f"{self.measure}" + (f" on {self.dataset}" if self.dataset else "")
        for mode in self.modes:
            sub = r[r["mode"] == mode]
            if sub.empty:
                continue
            systems = [s for s in self.systems if s in set(sub["system"])]
            what = ("the whole pipeline sees the variant" if mode == "full"
                    else "only the re-ranker sees the variant")
            out.append(f"**{title}, mode `{mode}`** ({what}; ↓/↑: two-sided paired t-test, "
                       f"Bonferroni, α={self.alpha})\n")
            out.append("| Category | Variation | " + " | ".join(systems) + " | #Q |")
            out.append("|---|---|" + "---:|" * (len(systems) + 1))
            first = sub[sub["level"] == "method"]
            orig = [first[first["system"] == s]["original"].iloc[0] if (first["system"] == s).any() else np.nan
                    for s in systems]
            out.append("| – | original query | " + " | ".join(f"{v:.3f}" for v in orig) +
                       f" | {len(self.qids)} |")
            for level in ("method", "category"):
                lv = sub[sub["level"] == level]
                keys = list(dict.fromkeys(zip(lv["category"], lv["method"], strict=True)))
                if level == "category" and keys:
                    out.append("| **category** | (mean of its methods) |" + " |" * len(systems) + " |")
                for cat, meth in keys:
                    cells, nq = [], ""
                    for s in systems:
                        x = lv[(lv["system"] == s) & (lv["category"] == cat) & (lv["method"] == meth)]
                        if x.empty:
                            cells.append("")
                            continue
                        x = x.iloc[0]
                        cells.append(f"{x['value']:.3f}{x['sig']} ({x['rel_drop'] * -100 + 0.0:+.0f}%)")
                        nq = str(int(x["n_valid"]))
                    label = CATEGORIES[cat].label if cat in CATEGORIES else cat
                    out.append(f"| {label} | {meth if level == 'method' else 'all'} | " +
                               " | ".join(cells) + f" | {nq} |")
            jd = sub[sub["level"] == "method"].groupby("system", sort=False)[["judged_original", "judged"]].mean()
            if not jd.empty:
                parts = [f"{s}: {jd.loc[s, 'judged_original']:.3f} → {jd.loc[s, 'judged']:.3f}"
                         for s in systems if s in jd.index]
                out.append(f"\nJudged fraction of the top {self.judged_k} (original → mean over "
                           f"variations): " + "; ".join(parts) + "\n")
        for m, why in self.skipped.items():
            out.append(f"- skipped {m}: {why}")
        for n in self.notes:
            out.append(f"- {n}")
        return "\n".join(out) + "\n"

    def to_dict(self) -> dict:
        rows = self.rows.replace({np.nan: None}).to_dict(orient="records")
        return {"dataset": self.dataset, "measure": self.measure, "alpha": self.alpha,
                "judged_k": self.judged_k, "systems": self.systems, "modes": self.modes,
                "methods": self.methods, "n_queries": len(self.qids), "rows": rows,
                "skipped": self.skipped, "notes": self.notes}

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """JSON text of ``to_dict()``; also written (atomically) to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1, ensure_ascii=False)
        if path is not None:
            from limelight._io import atomic_path

            with atomic_path(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
        return text

    def plot(self, path: str | os.PathLike, mode: str | None = None) -> Path:
        """Bar chart of the relative drop per method (one bar per system; ``*`` marks a
        significant change), saved as PNG (or SVG/PDF by suffix), atomically."""
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        from limelight._io import atomic_path

        mode = mode or self.modes[0]
        sub = self.rows[(self.rows["mode"] == mode) & (self.rows["level"] == "method")]
        methods = list(dict.fromkeys(sub["method"]))
        systems = [s for s in self.systems if s in set(sub["system"])]
        fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(methods) + 2), 4.2), dpi=120)
        width = 0.8 / max(1, len(systems))
        x = np.arange(len(methods))
        for j, s in enumerate(systems):
            vals, sig = [], []
            for m in methods:
                row = sub[(sub["system"] == s) & (sub["method"] == m)]
                vals.append(float(row["rel_drop"].iloc[0]) * -100 if not row.empty else np.nan)
                sig.append(bool(row["sig"].iloc[0]) if not row.empty else False)
            bars = ax.bar(x + (j - (len(systems) - 1) / 2) * width, vals, width, label=s)
            for b, flag in zip(bars, sig, strict=True):
                if flag and np.isfinite(b.get_height()):
                    ax.annotate("*", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                                va="top" if b.get_height() < 0 else "bottom", fontsize=11)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(x, methods, rotation=35, ha="right")
        ax.set_ylabel(f"change of {self.measure} (%)")
        ax.set_title(f"{self.dataset + ': ' if self.dataset else ''}query variations, mode {mode} "
                     f"(* significant, Bonferroni)", fontsize=9)
        ax.legend(fontsize=8)
        path = Path(path)
        fmt = path.suffix.lstrip(".") or "png"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, bbox_inches="tight")
        plt.close(fig)
        return path


# ---- helpers -----------------------------------------------------------------------------------------


def _systems(spec) -> dict[str, Stage | tuple[Stage, Stage]]:
    if isinstance(spec, Stage | tuple):
        spec = [spec]
    if isinstance(spec, Mapping):
        out = dict(spec)
    else:
        out = {}
        for s in spec:
            name = s.name if isinstance(s, Stage) else f"{s[0].name}>>{s[1].name}"
            base, i = name, 2
            while name in out:
                name, i = f"{base}#{i}", i + 1
            out[name] = s
    if not out:
        raise LimelightError("no pipeline given")
    for name, s in out.items():
        ok = isinstance(s, Stage) or (isinstance(s, tuple) and len(s) == 2 and all(isinstance(x, Stage) for x in s))
        if not ok:
            raise LimelightError(f"pipeline {name!r} is neither a Stage nor a (first stage, re-ranker) pair")
    return out


def _split(stage) -> tuple[Stage, Stage] | None:
    """``(first stage, re-ranker)`` of a two-stage pipeline, or ``None``."""
    if isinstance(stage, tuple):
        return stage
    if isinstance(stage, Then):
        return stage.first, stage.second
    return None


def _run_full(stage, queries: Queries) -> Run:
    if isinstance(stage, tuple):
        return stage[1].transform(queries, stage[0].transform(queries))
    return stage.transform(queries)


def judged_fraction(run: Run, qrels: Qrels, qids: Sequence[str], k: int = 10) -> np.ndarray:
    """Per query (aligned with ``qids``): the fraction of the top ``k`` documents that have a
    judgment (any grade) in ``qrels``; 0 for a query that retrieves nothing."""
    top = run.topk(k)
    tq = top.qids.decode(top.q).astype(object)
    td = top.docids.decode(top.d).astype(object)
    qd = qrels.qids.decode(qrels.q).astype(object)
    dd = qrels.docids.decode(qrels.d).astype(object)
    judged = pd.MultiIndex.from_arrays([qd, dd])
    hit = pd.MultiIndex.from_arrays([tq, td]).isin(judged)
    counts = pd.Series(hit.astype(np.float64)).groupby(tq).sum()
    return counts.reindex(list(qids)).fillna(0.0).to_numpy() / float(k)


def _family_rows(rows: list[dict], alpha: float) -> None:
    """Bonferroni over one family (same system, mode, level): p × number of comparisons."""
    m = len(rows)
    for r in rows:
        r["p_bonferroni"] = min(1.0, r["p_value"] * m)
        r["sig"] = ("↓" if r["value"] < r["original"] else "↑") if r["p_bonferroni"] < alpha else ""


def _variations_of(queries: Queries, methods: str | Sequence, variations: Variations | None,
                   seed: int, models: Mapping[str, str | os.PathLike] | None) -> Variations:
    """The variations of ``queries`` by ``methods``: generated, or ``variations`` restricted
    to ``methods`` (they must have been generated for ``queries``)."""
    if variations is None:
        variations = generate_variations(queries, methods, seed=seed, models=models)
    elif methods != "all":
        names = [s.strip() for s in methods.split(",")] if isinstance(methods, str) else list(methods)
        keep = set(names)
        variations = Variations(variations.frame[variations.frame["method"].isin(keep)], variations.original,
                                {k: v for k, v in variations.skipped.items() if k in keep},
                                [m for m in variations.methods if m in keep], variations.seed)
    if len(variations.original) != len(queries) or list(variations.original.ids.strings) != list(queries.ids.strings):
        raise LimelightError("the variations were generated for another query set")
    return variations


def robustness_report(pipeline_or_retrievers, queries: Queries, qrels: Qrels,
                      methods: str | Sequence = "all", measure: str = "nDCG@10", *,
                      variations: Variations | None = None, mode: str = "full", seed: int = 0,
                      models: Mapping[str, str | os.PathLike] | None = None, alpha: float = 0.05,
                      judged_k: int = 10, dataset: str = "", n_docs: int | None = None,
                      progress: bool = False) -> RobustnessReport:
    """Run pipelines on original and varied queries and compare (see the module docstring).

    ``pipeline_or_retrievers``: a ``Stage`` (e.g. ``bm25 % 1000`` or ``bm25 % 100 >> tk``), a
    ``(first, reranker)`` pair, a list of them, or a ``{name: stage}`` mapping. ``mode``:
    ``"full"``, ``"rerank"`` or ``"both"``. ``measure``: any measure ``limelight.evaluation``
    parses (``nDCG@10``, ``AP``, ``RR@10``...).
    """
    systems = _systems(pipeline_or_retrievers)
    modes = list(MODES) if mode == "both" else [mode]
    if any(m not in MODES for m in modes):
        raise LimelightError(f"mode must be full, rerank or both, got {mode!r}")
    m_obj = parse_measure(measure)
    variations = _variations_of(queries, methods, variations, seed, models)
    method_names = list(variations.methods)
    cat_of = dict(zip(variations.frame["method"], variations.frame["category"], strict=False))
    ev = Evaluator(qrels, [m_obj], n_docs)
    qids = list(ev.qids.strings)
    notes: list[str] = []
    rows: list[dict] = []
    per_query: dict[tuple[str, str, str], np.ndarray] = {}
    varied = {m: variations.queries(m) for m in method_names}

    def score(run: Run) -> np.ndarray:
        return ev.evaluate(run, warn=False).per_query[m_obj]

    for sname, stage in systems.items():
        base = _run_full(stage, queries)
        orig = score(base)
        orig_j = judged_fraction(base, qrels, qids, judged_k)
        pair = _split(stage)
        first_run = None
        for md in modes:
            if md == "rerank":
                if pair is None:
                    notes.append(f"{sname}: no re-ranker, so no `rerank` mode rows")
                    continue
                first_run = first_run if first_run is not None else pair[0].transform(queries)
            per_query[(sname, md, "original")] = orig
            fam: list[dict] = []
            by_cat: dict[str, list[np.ndarray]] = {}
            judged_cat: dict[str, list[float]] = {}
            valid_cat: dict[str, np.ndarray] = {}
            for meth in method_names:
                vq = varied[meth]
                run = _run_full(stage, vq) if md == "full" else pair[1].transform(vq, first_run)
                vals = score(run)
                per_query[(sname, md, meth)] = vals
                j = judged_fraction(run, qrels, qids, judged_k)
                cat = cat_of.get(meth, "")
                by_cat.setdefault(cat, []).append(vals)
                judged_cat.setdefault(cat, []).append(float(j.mean()))
                n_valid = int(vq.fields["valid"].sum())
                valid_cat[cat] = valid_cat.get(cat, np.zeros(len(vq), bool)) | vq.fields["valid"]
                fam.append(_row(sname, md, "method", cat, meth, orig, vals, n_valid, len(vq),
                                float(orig_j.mean()), float(j.mean())))
                if progress:
                    print(f"  {sname} [{md}] {meth}: {fam[-1]['value']:.4f} (orig {fam[-1]['original']:.4f})",
                          flush=True)
            _family_rows(fam, alpha)
            rows.extend(fam)
            cfam = []
            for cat, vs in by_cat.items():
                vals = np.mean(np.vstack(vs), axis=0)
                per_query[(sname, md, f"category:{cat}")] = vals
                cfam.append(_row(sname, md, "category", cat, cat, orig, vals, int(valid_cat[cat].sum()),
                                 len(queries), float(orig_j.mean()), float(np.mean(judged_cat[cat]))))
            _family_rows(cfam, alpha)
            rows.extend(cfam)
    cols = ["system", "mode", "level", "category", "method", "n_queries", "n_valid", "original",
            "value", "abs_drop", "rel_drop", "p_value", "p_bonferroni", "sig", "judged_original", "judged"]
    frame = pd.DataFrame(rows, columns=cols)
    used_modes = [m for m in modes if (frame["mode"] == m).any()] or modes
    return RobustnessReport(frame, str(m_obj), list(systems), used_modes, method_names, qids, per_query,
                            dict(variations.skipped), notes, dataset, alpha, judged_k)


def _row(system, mode, level, cat, method, orig, vals, n_valid, n_queries, j0, j1) -> dict:
    o, v = float(orig.mean()), float(vals.mean())
    return {"system": system, "mode": mode, "level": level, "category": cat, "method": method,
            "n_queries": int(n_queries), "n_valid": int(n_valid), "original": o, "value": v,
            "abs_drop": o - v, "rel_drop": (o - v) / o if o > 0 else np.nan,
            "p_value": paired_t(vals, orig), "judged_original": j0, "judged": j1}


def build_systems(collection, names: str, k: int = 1000, tk: str | os.PathLike | None = None,
                  rerank_depth: int = 100) -> dict:
    """Pipelines by name: ``bm25``, ``dense`` (all-MiniLM-L6-v2 + FAISS) and, with a TK
    checkpoint, ``bm25>>tk`` (BM25 top ``rerank_depth`` re-ranked)."""
    from functools import cache

    from limelight.retrieval.bm25 import BM25, BM25Index

    @cache
    def bm25():
        return BM25(BM25Index.build(collection))

    def dense():
        from limelight.retrieval.dense import DenseIndex, DenseRetriever

        return DenseRetriever(DenseIndex.build(collection))

    #: option spelling -> (label, the retriever over ``collection``)
    systems = {"bm25": ("BM25", bm25), "dense": ("MiniLM", dense), "minilm": ("MiniLM", dense)}
    out: dict = {}
    for name in [s.strip().lower() for s in names.split(",") if s.strip()]:
        if name not in systems:
            raise LimelightError(f"unknown system {name!r} (bm25, dense)")
        label, make = systems[name]
        out[label] = make() % k
    if tk is not None:
        from limelight.rerank.ranker import KernelReranker, NeuralRanker

        ranker = NeuralRanker.load(tk)
        out[f"BM25>>{ranker.name.upper()}"] = (bm25() % rerank_depth) >> KernelReranker(ranker, collection)
    return out
