"""Exposure diff: what changing the ranker does to who is in the limelight.

For two exposure stores over the same documents and the same query set (e.g. BM25 → hybrid on
the Debian catalog × the log), per document: r(d) (cutoff ``c``, the stores' o_q), the number
of queries that expose it within ``c``, and its mean exposure Σ_q o_q μ(rank_q(d)) / Σ_q o_q
under a browsing model μ (default RBP, γ = 0.8); their changes; per group of a document field
(``section``, list-valued ``tags``…) the same sums; the biggest winners and losers; the
documents that become retrievable (r = 0 → r > 0) or irretrievable. Everything is one pass of
``np.bincount`` over each store's pairs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from limelight.errors import LimelightError
from limelight.exposure.browsing import parse_browsing_model
from limelight.exposure.retrievability import as_labels, gini

_METRICS = ("r", "n", "exposure")


@dataclass
class ExposureDiff:
    """The per-document table (``docs``), per-group table (``groups``, when a field was given)
    and a summary of the change from store A to store B."""

    docs: pd.DataFrame
    summary: dict
    groups: pd.DataFrame | None = None
    names: tuple[str, str] = ("A", "B")
    extra: dict = field(default_factory=dict)

    def winners(self, n: int = 10, by: str = "delta_r") -> pd.DataFrame:
        """The ``n`` documents whose ``by`` grows most (ties: document id)."""
        d = self.docs[self.docs[by] > 0]
        return d.sort_values([by, "docid"], ascending=[False, True]).head(n)

    def losers(self, n: int = 10, by: str = "delta_r") -> pd.DataFrame:
        """The ``n`` documents whose ``by`` falls most."""
        d = self.docs[self.docs[by] < 0]
        return d.sort_values([by, "docid"], ascending=[True, True]).head(n)

    @property
    def newly_retrievable(self) -> pd.DataFrame:
        """Documents with r = 0 under A and r > 0 under B."""
        return self.docs[(self.docs["r_a"] == 0) & (self.docs["r_b"] > 0)]

    @property
    def newly_irretrievable(self) -> pd.DataFrame:
        """Documents with r > 0 under A and r = 0 under B."""
        return self.docs[(self.docs["r_a"] > 0) & (self.docs["r_b"] == 0)]

    def to_dict(self, top: int = 10) -> dict:
        """JSON-ready: the summary, the winners and losers, the (ir)retrievable documents'
        ids (at most ``top`` each, with their counts in the summary) and the group table."""
        cols = ["docid", "r_a", "r_b", "delta_r", "n_a", "n_b", "exposure_a", "exposure_b"]
        out = {"stores": list(self.names), "summary": self.summary,
               "winners": self.winners(top)[cols].to_dict("records"),
               "losers": self.losers(top)[cols].to_dict("records"),
               "newly_retrievable": self.newly_retrievable["docid"].head(top).tolist(),
               "newly_irretrievable": self.newly_irretrievable["docid"].head(top).tolist()}
        if self.groups is not None:
            out["groups"] = self.groups.head(max(top, 20)).to_dict("records")
        return out


def _store_name(st) -> str:
    return Path(st.path).name or str(st.path)


def check_same_basis(a, b) -> None:
    """A one-line ``LimelightError`` when two stores differ in their documents or their query
    set (the manifests' fingerprints), naming what differs."""
    ma, mb = a.manifest, b.manifest
    diffs = []
    if ma.get("documents") != mb.get("documents") or len(a.doc_ids) != len(b.doc_ids):
        how = (f"{len(a.doc_ids):,} vs {len(b.doc_ids):,} documents"
               if len(a.doc_ids) != len(b.doc_ids) else "same number of documents, other ids")
        diffs.append(f"different collections ({how})")
    if ma.get("queries") != mb.get("queries") or len(a.queries) != len(b.queries):
        how = (f"{len(a.queries):,} vs {len(b.queries):,} queries"
               if len(a.queries) != len(b.queries) else
               "same number of queries, other ids, texts or weights")
        diffs.append(f"different query sets ({how})")
    if diffs:
        raise LimelightError(f"cannot diff {a.path} and {b.path}: {' and '.join(diffs)}")


def default_cutoff(*stores) -> int:
    """The cutoff c a diff uses when none is given: 100, or the smallest depth of ``stores``
    where it is below 100 (a store of depth 20 has no rank beyond 20)."""
    return min(100, *(int(s.depth) for s in stores))


def store_document_stats(store, c: int, browsing: str = "rbp:0.8") -> dict[str, np.ndarray]:
    """Per document of ``store``: ``r`` (cutoff ``c``, o_q), ``n`` (queries exposing it within
    ``c``) and ``exposure`` (Σ_q o_q μ(rank) / Σ_q o_q over the whole stored depth)."""
    if c < 1 or c > store.depth:
        raise LimelightError(f"cutoff c={c} must lie in 1..{store.depth} (the depth of {store.path})")
    model = parse_browsing_model(browsing)
    q, d, rank, _ = store.pair_arrays()
    o = np.asarray(store.queries.weights, dtype=np.float64)
    nd = len(store.doc_ids)
    within = rank <= c
    ow = o[q]
    r = np.bincount(d[within], weights=ow[within], minlength=nd)
    n = np.bincount(d[within], minlength=nd)
    total = o.sum()
    ex = np.bincount(d, weights=ow * model.weights(rank), minlength=nd) / (total if total > 0 else 1.0)
    return {"r": r, "n": n, "exposure": ex}


def _group_table(df: pd.DataFrame, values: Sequence) -> pd.DataFrame:
    """Sums and means of the per-document columns per group of a (possibly list-valued) field."""
    if len(values) != len(df):
        raise LimelightError(f"field has {len(values)} values for {len(df)} documents")
    vals = values.tolist() if isinstance(values, np.ndarray | pd.Series) else list(values)
    labels = [as_labels(v) for v in vals]
    lens = np.fromiter((len(x) for x in labels), dtype=np.int64, count=len(labels))
    doc = np.repeat(np.arange(len(df)), lens)
    g = pd.DataFrame({"group": [x for lab in labels for x in lab]})
    cols = ["r_a", "r_b", "n_a", "n_b", "exposure_a", "exposure_b"]
    for col in cols:
        g[col] = df[col].to_numpy()[doc]
    g["new_retrievable"] = ((df["r_a"].to_numpy() == 0) & (df["r_b"].to_numpy() > 0))[doc]
    g["new_irretrievable"] = ((df["r_a"].to_numpy() > 0) & (df["r_b"].to_numpy() == 0))[doc]
    out = g.groupby("group", sort=False).agg(
        n_docs=("r_a", "size"), r_a=("r_a", "sum"), r_b=("r_b", "sum"), n_a=("n_a", "sum"),
        n_b=("n_b", "sum"), exposure_a=("exposure_a", "mean"), exposure_b=("exposure_b", "mean"),
        newly_retrievable=("new_retrievable", "sum"),
        newly_irretrievable=("new_irretrievable", "sum")).reset_index()
    ta, tb = df["r_a"].sum(), df["r_b"].sum()
    out["share_a"] = out["r_a"] / ta if ta > 0 else 0.0
    out["share_b"] = out["r_b"] / tb if tb > 0 else 0.0
    out["delta_r"] = out["r_b"] - out["r_a"]
    out["delta_share"] = out["share_b"] - out["share_a"]
    out["delta_exposure"] = out["exposure_b"] - out["exposure_a"]
    return out.sort_values(["delta_share", "group"], ascending=[False, True], ignore_index=True)


def diff_stores(a, b, c: int | None = None, browsing: str = "rbp:0.8",
                group_values: Sequence | None = None,
                names: tuple[str, str] | None = None) -> ExposureDiff:
    """The change from store ``a`` to store ``b`` (``ExposureStore`` objects or paths): per
    document ``r_a, r_b, delta_r, n_a, n_b, delta_n, exposure_a, exposure_b, delta_exposure``
    (``store_document_stats``), per group of ``group_values`` (one value or list per document,
    in the stores' document order) and a summary (Gini, retrievable fractions, counts of
    documents that gain, lose, become retrievable or irretrievable). The cutoff ``c`` defaults
    to 100, or to the stores' depth where it is below 100 (``default_cutoff``)."""
    from limelight.exposure.store import ExposureStore

    a = a if isinstance(a, ExposureStore) else ExposureStore.open(a)
    b = b if isinstance(b, ExposureStore) else ExposureStore.open(b)
    check_same_basis(a, b)
    c = default_cutoff(a, b) if c is None else c
    sa, sb = store_document_stats(a, c, browsing), store_document_stats(b, c, browsing)
    df = pd.DataFrame({"docid": a.doc_ids.strings})
    for m in _METRICS:
        df[f"{m}_a"], df[f"{m}_b"] = sa[m], sb[m]
        df[f"delta_{m}"] = sb[m] - sa[m]
    ra, rb = sa["r"], sb["r"]
    summary = {
        "c": int(c), "browsing": browsing, "n_docs": len(df), "n_queries": len(a.queries),
        "gini_a": gini(ra), "gini_b": gini(rb),
        "retrievable_fraction_a": float((ra > 0).mean()), "retrievable_fraction_b": float((rb > 0).mean()),
        "n_gain": int((rb > ra).sum()), "n_lose": int((rb < ra).sum()), "n_same": int((rb == ra).sum()),
        "newly_retrievable": int(((ra == 0) & (rb > 0)).sum()),
        "newly_irretrievable": int(((ra > 0) & (rb == 0)).sum()),
        "r_moved": float(np.abs(rb - ra).sum() / 2.0),
    }
    groups = _group_table(df, group_values) if group_values is not None else None
    return ExposureDiff(df, summary, groups, names or (_store_name(a), _store_name(b)))


def plot_diff(diff: ExposureDiff, out: str | os.PathLike, top_groups: int = 15) -> list[Path]:
    """r(d) under B against r(d) under A (symlog, one point per document, the diagonal), and,
    with groups, the change of each group's share of r (the ``top_groups`` largest moves);
    saved as PNG and SVG."""
    import matplotlib

    from limelight.exposure.plots import save_figure

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    na, nb = diff.names
    has_groups = diff.groups is not None and len(diff.groups) > 0
    fig, axes = plt.subplots(1, 2 if has_groups else 1, figsize=(11 if has_groups else 5.5, 4.5),
                             dpi=120, squeeze=False)
    ax = axes[0, 0]
    d = diff.docs
    ax.scatter(d["r_a"], d["r_b"], s=3, alpha=0.3, color="tab:blue", rasterized=True)
    hi = float(max(d["r_a"].max(), d["r_b"].max(), 1.0))
    ax.plot([0, hi], [0, hi], color="grey", lw=0.8, ls="--")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_yscale("symlog", linthresh=1.0)
    s = diff.summary
    ax.set_xlabel(f"r(d) under {na} (G={s['gini_a']:.3f})")
    ax.set_ylabel(f"r(d) under {nb} (G={s['gini_b']:.3f})")
    ax.set_title(f"r(d), c={s['c']}: {s['n_gain']:,} gain, {s['n_lose']:,} lose; "
                 f"{s['newly_retrievable']:,} newly retrievable, "
                 f"{s['newly_irretrievable']:,} newly irretrievable", fontsize=8)
    if has_groups:
        g = diff.groups.reindex(diff.groups["delta_share"].abs().sort_values(ascending=False).index)
        g = g.head(top_groups).iloc[::-1]
        ax2 = axes[0, 1]
        colors = np.where(g["delta_share"] > 0, "tab:green", "tab:red")
        ax2.barh(g["group"].astype(str), 100 * g["delta_share"], color=colors)
        ax2.set_xlabel(f"change of the group's share of r(d), points ({na} → {nb})")
        ax2.tick_params(axis="y", labelsize=7)
        ax2.set_title(f"the {len(g)} largest moves between groups", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out)


def field_values(store, field_name: str, index: str | os.PathLike | None = None) -> np.ndarray:
    """The values of a document field in ``store``'s document order, read from the index
    directory the store was computed over (``index``, default the one its manifest records:
    ``limelight exposure compute`` writes it) — its ``docs.parquet`` keeps every field."""
    import pyarrow.parquet as pq

    idx = index if index is not None else (store.manifest.get("settings") or {}).get("index")
    if idx is None:
        raise LimelightError(f"{store.path}: the store does not record its index; pass the index "
                             "directory to read the field from")
    path = Path(idx) / "docs.parquet"
    if not path.exists():
        raise LimelightError(f"{idx}: no docs.parquet (not an index directory written by `limelight index`)")
    names = pq.read_schema(path).names
    if field_name not in names:
        fields = [n for n in names if n not in ("doc_id", "text")]
        raise LimelightError(f"{idx}: no document field {field_name!r} (fields: {', '.join(fields) or 'none'})")
    t = pq.read_table(path, columns=["doc_id", field_name])
    own = store.doc_ids.to_arrow()
    col = t.column("doc_id").combine_chunks()
    if col.type == own.type and col.equals(own):  # the index's document order is the store's
        return np.asarray(t.column(field_name).to_pylist(), dtype=object)
    from limelight.data.ids import IdMap

    ids = IdMap(t.column("doc_id").to_pylist(), kind="document")
    pos = ids.encode(store.doc_ids.strings, missing=-1)
    if (pos < 0).any():
        raise LimelightError(f"{idx}: document {store.doc_ids[int(np.flatnonzero(pos < 0)[0])]!r} of "
                             f"{store.path} is not in this index")
    return np.asarray(t.column(field_name).to_pylist(), dtype=object)[pos]
