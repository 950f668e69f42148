"""Several variant draws per query: intervals across draws, query length strata and truncation.

Penha, Câmara & Hauff (ECIR 2022) draw one variant per query and method. A single draw mixes the
effect of the method with the luck of the draw (which word got the typo), so here the protocol of
Table 4 (``limelight.querygen.robustness``) is repeated over several seeds and summarised:

- ``draw_values``: one draw (one seed) of every method for every pipeline, as a long table of
  per-query values (``system seed method category qid length original value valid``).
- ``summarize_draws``: per pipeline and method, and per pipeline and category (a query's value
  averaged over the category's methods, as in the report), the mean over draws of the mean value
  and of the relative drop ``(original − value) / original``, a confidence interval of the
  relative drop across draws (Student's t with ``draws − 1`` degrees of freedom: it measures the
  spread due to the draw, the queries being fixed), how many draws are significant with the
  paper's test (two-sided paired t-test, Bonferroni over the methods resp. the categories of one
  pipeline, α = 0.05), and a pooled test of the same kind on each query's value averaged over the
  draws.
- Query length: ``content_length`` counts a query's content words (whitespace words whose core is
  not one of NLTK's stopwords, the list the generators use); ``truncate_queries`` keeps a query's
  text up to and including its ``n``-th content word (the stopwords before it stay, so a question
  keeps its form); ``stratified_drops`` gives the relative drop per length bin and draw.

Deterministic methods (``RmvStopWords``) give the same variant at every seed: their interval has
width 0, which says the draw does not matter for them, not that the drop is certain.

Usage::

    from limelight.querygen.draws import draw_values, summarize_draws, truncate_queries
    frame = pd.concat([draw_values({"BM25": bm25 % 1000}, ds.queries, ds.qrels, seed=s)
                       for s in range(5)])
    summary = summarize_draws(frame)            # one row per (system, level, method)
    short = truncate_queries(ds.queries, 3)     # the paper's TREC-DL-2019 length (3.2 content words)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as _st

from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.errors import LimelightError
from limelight.evaluation.stats import paired_t
from limelight.querygen.robustness import robustness_report
from limelight.querygen.variations import _split_core, _tokens, generate_variations, is_stopword

DRAW_COLUMNS = ("system", "seed", "method", "category", "qid", "length", "original", "value", "valid")


# ---- query length ------------------------------------------------------------------------------


def _content_positions(text: str) -> tuple[list[str], list[int]]:
    """The text's pieces (words and the whitespace between them) and the piece indices of its
    content words (non-empty core that is not a stopword)."""
    pieces, words = _tokens(text or "")
    content = [i for i in words if (core := _split_core(pieces[i]).core) and not is_stopword(core)]
    return pieces, content


def content_length(texts: Queries | Iterable[str]) -> np.ndarray:
    """Number of content words of each text: whitespace words whose core (leading and trailing
    punctuation removed) is not empty and not one of NLTK's English stopwords."""
    seq = texts.texts.tolist() if isinstance(texts, Queries) else list(texts)
    return np.fromiter((len(_content_positions(t if isinstance(t, str) else "")[1]) for t in seq),
                       dtype=np.int64, count=len(seq))


def truncate_text(text: str, n: int) -> str:
    """``text`` up to and including its ``n``-th content word (unchanged when it has ``n`` or
    fewer); whitespace inside the kept prefix is kept as it was."""
    if n < 1:
        raise LimelightError(f"a truncated query keeps at least one content word, got n={n}")
    pieces, content = _content_positions(text or "")
    if len(content) <= n:
        return text
    return "".join(pieces[: content[n - 1] + 1])


def truncate_queries(queries: Queries, n: int) -> Queries:
    """The query set with every query truncated to its first ``n`` content words (same ids,
    weights and fields; field ``truncated`` says which queries were shortened)."""
    texts = queries.texts.tolist()
    new = [truncate_text(t if isinstance(t, str) else "", n) for t in texts]
    changed = np.array([a != b for a, b in zip(texts, new, strict=True)], dtype=bool)
    return Queries(queries.ids, np.asarray(new, dtype=object), queries.weights.copy(), queries.intents,
                   {**queries.fields, "truncated": changed}, f"{queries.name}:first{n}")


# ---- draws ---------------------------------------------------------------------------------------


def draw_values(systems: Mapping, queries: Queries, qrels: Qrels, seed: int,
                methods: str | Sequence[str] = "all", measure: str = "nDCG@10",
                models: Mapping | None = None) -> pd.DataFrame:
    """One draw: variants of every query under every method at ``seed`` (``generate_variations``,
    n = 1), every pipeline run on the originals and on each method's variants
    (``robustness_report``, mode ``full``). Returns one row per (system, method, judged query)
    with the query's content length, its original and varied value, and whether it had a valid
    variant (else the original text was used, as in the paper). Skipped methods (no checkpoint)
    have no rows; ``frame.attrs["skipped"]`` names them."""
    var = generate_variations(queries, methods, n=1, seed=seed, models=models)
    rep = robustness_report(systems, queries, qrels, variations=var, measure=measure)
    lengths = dict(zip(queries.ids.strings, content_length(queries).tolist(), strict=True))
    valid_of = {m: dict(zip(queries.ids.strings, var.queries(m).fields["valid"].tolist(), strict=True))
                for m in rep.methods}
    cat_of = dict(zip(var.frame["method"], var.frame["category"], strict=False))
    parts = []
    for sname in rep.systems:
        orig = rep.per_query[(sname, "full", "original")]
        for m in rep.methods:
            parts.append(pd.DataFrame({
                "system": sname, "seed": int(seed), "method": m, "category": cat_of.get(m, ""),
                "qid": rep.qids, "length": [lengths.get(q, 0) for q in rep.qids],
                "original": orig, "value": rep.per_query[(sname, "full", m)],
                "valid": [bool(valid_of[m].get(q, False)) for q in rep.qids]}))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(DRAW_COLUMNS))
    frame.attrs["skipped"] = dict(rep.skipped)
    frame.attrs["measure"] = rep.measure
    return frame


def _t_interval(x: np.ndarray, level: float) -> tuple[float, float]:
    """Student's t interval of the mean of ``x`` (a point when ``x`` has one value or no spread)."""
    x = np.asarray(x, dtype=np.float64)
    m = float(x.mean())
    if len(x) < 2:
        return m, m
    half = float(_st.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return m - half, m + half


def _with_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """Method rows plus category rows (per system, seed, category and query: the mean over the
    category's methods), with a ``level`` column."""
    meth = frame.assign(level="method")
    cat = (frame.groupby(["system", "seed", "category", "qid"], sort=False)
           .agg(length=("length", "first"), original=("original", "first"), value=("value", "mean"),
                valid=("valid", "max"))
           .reset_index())
    cat = cat.assign(level="category", method=cat["category"])
    return pd.concat([meth, cat[meth.columns]], ignore_index=True)


def summarize_draws(frame: pd.DataFrame, alpha: float = 0.05, level: float = 0.95) -> pd.DataFrame:
    """One row per (system, level, category, method) over the draws of ``frame``
    (``draw_values`` tables of several seeds concatenated).

    Columns: ``n_draws``, ``n_queries``, ``original`` (mean), ``value`` (mean over draws of the
    mean), ``abs_drop``, ``rel_drop`` (mean over draws of each draw's relative drop),
    ``rel_drop_lo`` / ``rel_drop_hi`` (``level`` t-interval across draws), ``rel_drop_sd``,
    ``n_sig`` (draws with a significant change: two-sided paired t-test, Bonferroni over the
    family of the same system, level and draw), ``n_sig_down`` (of them, losses), ``p_pooled``
    (paired t-test of each query's value averaged over the draws against the original,
    Bonferroni over the family) and ``sig_pooled`` (``↓``/``↑``/``""``).
    """
    if frame.empty:
        raise LimelightError("no draws to summarise")
    full = _with_categories(frame)
    fam_size = full.groupby(["system", "level", "seed"])["method"].nunique()
    per_draw = []
    for (sname, lv, cat, meth, seed), g in full.groupby(["system", "level", "category", "method", "seed"],
                                                         sort=False):
        o, v = g["original"].to_numpy(), g["value"].to_numpy()
        om, vm = float(o.mean()), float(v.mean())
        p = min(1.0, paired_t(v, o) * int(fam_size.loc[(sname, lv, seed)]))
        per_draw.append({"system": sname, "level": lv, "category": cat, "method": meth, "seed": seed,
                         "n_queries": len(g), "original": om, "value": vm,
                         "rel_drop": (om - vm) / om if om > 0 else np.nan,
                         "sig": p < alpha, "down": vm < om})
    pd_frame = pd.DataFrame(per_draw)
    pooled = (full.groupby(["system", "level", "category", "method", "qid"], sort=False)
              .agg(original=("original", "first"), value=("value", "mean")).reset_index())
    # a mean of equal floats can differ from them in the last bit: snap those back, so that a
    # method that changes no query (BM25 under word order) has p = 1, not a test of rounding
    same = np.isclose(pooled["value"], pooled["original"], rtol=0.0, atol=1e-12)
    pooled.loc[same, "value"] = pooled.loc[same, "original"]
    fam_pooled = pooled.groupby(["system", "level"])["method"].nunique()
    rows = []
    for (sname, lv, cat, meth), g in pd_frame.groupby(["system", "level", "category", "method"], sort=False):
        rd = g["rel_drop"].to_numpy(dtype=np.float64)
        lo, hi = _t_interval(rd, level)
        q = pooled[(pooled["system"] == sname) & (pooled["level"] == lv) & (pooled["method"] == meth)
                   & (pooled["category"] == cat)]
        p = min(1.0, paired_t(q["value"].to_numpy(), q["original"].to_numpy()) * int(fam_pooled.loc[(sname, lv)]))
        down = float(q["value"].mean()) < float(q["original"].mean())
        rows.append({"system": sname, "level": lv, "category": cat, "method": meth,
                     "n_draws": len(g), "n_queries": int(g["n_queries"].iloc[0]),
                     "original": float(g["original"].mean()), "value": float(g["value"].mean()),
                     "abs_drop": float((g["original"] - g["value"]).mean()),
                     "rel_drop": float(rd.mean()), "rel_drop_lo": lo, "rel_drop_hi": hi,
                     "rel_drop_sd": float(rd.std(ddof=1)) if len(rd) > 1 else 0.0,
                     "n_sig": int(g["sig"].sum()), "n_sig_down": int((g["sig"] & g["down"]).sum()),
                     "p_pooled": p, "sig_pooled": ("↓" if down else "↑") if p < alpha else ""})
    return pd.DataFrame(rows)


def stratified_drops(frame: pd.DataFrame, bins: Sequence[int], level: float = 0.95,
                     by: str = "category") -> pd.DataFrame:
    """Relative drop per content-length bin: ``bins`` are the left edges (a query of length ``l``
    falls in the last edge ≤ ``l``). Per (system, ``by`` value, bin) and draw, the relative drop
    of the bin's mean, then its mean and ``level`` t-interval across draws, with ``n_queries``
    in the bin. ``by``: ``"category"`` (a query's value averaged over the category's methods) or
    ``"method"``."""
    if by not in ("category", "method"):
        raise LimelightError(f"by must be 'category' or 'method', got {by!r}")
    edges = np.asarray(sorted(bins), dtype=np.int64)
    if len(edges) == 0:
        raise LimelightError("no bins given")
    full = _with_categories(frame)
    full = full[full["level"] == by].copy()
    idx = np.searchsorted(edges, full["length"].to_numpy(), side="right") - 1
    full = full[idx >= 0]
    full["bin"] = edges[idx[idx >= 0]]
    labels = {int(e): (f"{e}-{edges[i + 1] - 1}" if i + 1 < len(edges) else f"{e}+")
              for i, e in enumerate(edges.tolist())}
    per = (full.groupby(["system", "method", "bin", "seed"], sort=True)
           .agg(original=("original", "mean"), value=("value", "mean"), n=("qid", "nunique")).reset_index())
    per["rel_drop"] = (per["original"] - per["value"]) / per["original"].where(per["original"] > 0)
    rows = []
    for (sname, meth, b), g in per.groupby(["system", "method", "bin"], sort=True):
        rd = g["rel_drop"].dropna().to_numpy()
        lo, hi = _t_interval(rd, level) if len(rd) else (np.nan, np.nan)
        rows.append({"system": sname, by: meth, "bin": labels[int(b)], "bin_start": int(b),
                     "n_queries": int(g["n"].iloc[0]), "original": float(g["original"].mean()),
                     "value": float(g["value"].mean()), "rel_drop": float(rd.mean()) if len(rd) else np.nan,
                     "rel_drop_lo": lo, "rel_drop_hi": hi, "n_draws": len(rd)})
    return pd.DataFrame(rows)
