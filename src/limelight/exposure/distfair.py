"""Attention against merit accumulated over a sequence of rankings (after DistFaiR: Balagopalan
et al. 2025), for documents and for groups, query-aware and query-agnostic.

The setting of ``limelight.exposure.fairness`` (a store's pairs, query weights o_q, a ``Merit``
source and a ``Groups`` assignment A whose rows sum to 1), read as a *sequence*: the log's
queries in their order: a store keeps them in order of first entry in the file, and ``distfair``
given the store's ``log`` walks them in time order where that log has a time column (by each
query's first issue, ties in file order: ``limelight.data.logorder``); ``order`` takes any
other. The summary's ``order`` says which was used ("file order …" or "time order, from column
X"). For a query q of the queries with merit:

* **Attention** a_qd = μ(k_qd), μ a browsing model of ``limelight.exposure.browsing`` (or
  ``trec``), as the expected-exposure code uses it (default ``dcg``, the fairness command's);
  E_q = Σ_d a_qd.
* **Merit** m_qd > 0: qrels grades, or a reference system's ``max(score, 0)`` — an assumption,
  stated in the output. Normalised **within each query**: the query's attention is owed to its
  documents in proportion to their merit, τ_qd = E_q m_qd / Σ_d' m_qd' (the fairness module's
  ``merit`` target; so a reference system's scores count only relative to the same query's,
  whatever their scale across queries).
* Both accumulated over the log with the query weights, and normalised by the attention handed
  out, Z = Σ_q o_q E_q: the attention distribution â_qd = o_q a_qd / Z and the merit
  distribution m̂_qd = o_q τ_qd / Z over (query, document) pairs (both sum to 1).

**The divergence** is the total-variation distance, TV(P, Q) = ½ Σ |P − Q| (the L1 distance
halved): the share of all attention that would have to move to make attention proportional to
merit. Chosen (the issue leaves it open) because (1) it is 0 exactly when attention is
proportional to merit and at most 1; (2) it is finite where merit is 0 and attention is not
(KL is infinite there, and attention to non-relevant documents is the common case); (3) it is
an f-divergence, so merging documents into groups can only lower it (the data-processing
inequality; here directly the triangle inequality), which is DistFaiR's bound of group by
individual unfairness; (4) it is the ``tvd`` ``limelight fairness`` reports.

**Four values**, two accountings × two levels:

* **query-aware** (individual): TV over (query, document) pairs,
  U_aware = ½ Σ_q Σ_d |â_qd − m̂_qd| — attention a document got for a query it had no merit
  for is not paid back by merit it had for another query;
* **query-agnostic** (individual): attention and merit summed over the log per document, without
  regard to which query each came from (amortised fairness, Biega et al. 2018),
  U_agnostic = ½ Σ_d |Σ_q (â_qd − m̂_qd)|;
* **group** values: the same with documents merged by A (â_qg = Σ_d A[d,g] â_qd): U_aware^G =
  ½ Σ_q Σ_g |Σ_d A[d,g] (â_qd − m̂_qd)| and U_agnostic^G = ½ Σ_g |Σ_q Σ_d A[d,g] (â_qd − m̂_qd)|.

Since |Σ_i x_i| ≤ Σ_i |x_i| and the rows of A sum to 1, **group ≤ individual** and **agnostic ≤
aware** hold for every data set: U_agnostic^G ≤ U_agnostic ≤ U_aware and U_agnostic^G ≤ U_aware^G
≤ U_aware. They are checked on the data anyway (``bound``: the point values and every bootstrap
resample), since a failure would mean a bug. **Fairwashing** is the part of the query-aware
unfairness that the query-agnostic accounting does not see, U_aware − U_agnostic (and its group
counterpart): attention given for the wrong queries, cancelled in the sum by merit from others.
Per document (``documents``) the same split: aware_d = ½ Σ_q |â_qd − m̂_qd|, agnostic_d =
½ |Σ_q (â_qd − m̂_qd)|, hidden_d = aware_d − agnostic_d ≥ 0; per group likewise (``groups``).

**Intervals**: one bootstrap over the queries with merit (resampled with replacement, o_q kept);
every figure is recomputed on each resample (Z included). The query-agnostic values are
absolute values of sums, which resampling inflates (on 8.9M synthetic pairs the raw 95 %
percentile interval of the individual value, [0.0944, 0.0948], lay wholly above the estimate
0.0927), so the intervals are bias-corrected percentile intervals, as ``bootstrap_gini``'s:
the percentiles (at mirrored order statistics, as ``limelight.exposure.fairness``) less the
mean resample's excess over the estimate, floored at 0; the raw ones are kept (``percentile``). **The sequence** (``sequence``): the four
values over the first n queries of the log in its order, at ``checkpoints`` evenly spaced
numbers of queries with merit (the last is the whole log). Vectorised: sparse matrices of the
pairs (queries × documents), products with the resample counts in blocks; the loops run over
blocks of resamples and over checkpoints, never over queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from limelight.data.logorder import FILE_ORDER, query_time_order
from limelight.errors import LimelightError
from limelight.evaluation.discounts import Discount
from limelight.exposure.fairness import (
    Groups,
    Merit,
    _interval,
    _query_ptr,
    _row_scale,
    _rows,
    pair_matrix,
    parse_discount,
)
from limelight.exposure.retrievability import _check_weights

VALUES = ("individual_aware", "group_aware", "individual_agnostic", "group_agnostic")
TOL = 1e-12


@dataclass
class DistFair:
    """Attention against merit over a log (see the module's docstring): ``summary`` (settings,
    the four values with intervals, fairwashing, the bound checks, assumptions), ``documents``
    and ``groups`` (one row each: attention and merit shares, gap, aware/agnostic/hidden parts)
    and ``sequence`` (the four values over growing prefixes of the log)."""

    summary: dict
    documents: pd.DataFrame
    groups: pd.DataFrame
    sequence: pd.DataFrame

    def to_dict(self, top: int = 10) -> dict:
        """JSON-ready: the summary, the sequence, every group, and the ``top`` documents with
        the most hidden (fairwashed) unfairness."""
        docs = self.documents.sort_values("hidden", ascending=False).head(top)
        return {"summary": self.summary, "sequence": self.sequence.to_dict("records"),
                "groups": self.groups.to_dict("records"), "documents": docs.to_dict("records")}


def _diff(q, d, rank, w, merit: Merit, disc: Discount, n_docs: int):
    """o_q (a_qd − τ_qd) (queries × documents CSR, rows of queries without merit or weight
    empty), the weighted attention and target matrices, and o_q E_q per query."""
    nq = len(w)
    att = pair_matrix(q, d, disc.weights(rank), nq, n_docs)
    e = _rows(att)
    mm = merit.matrix
    rq = _rows(mm)
    tgt = _row_scale(mm, np.divide(e, rq, out=np.zeros(nq), where=rq > 0))
    att_w, tgt_w = _row_scale(att, w), _row_scale(tgt, w)
    diff = (att_w - tgt_w).tocsr()
    diff.eliminate_zeros()
    return diff, att_w, tgt_w, w * e


def _half_abs_cols(m) -> np.ndarray:
    """½ Σ_rows |column sums| for each column of a dense (rows × b) array."""
    return 0.5 * np.abs(np.asarray(m)).sum(axis=0)


def _values(diff: sp.csr_matrix, grp: sp.csr_matrix, counts: np.ndarray, ew: np.ndarray,
            aware_i: np.ndarray, aware_g: np.ndarray) -> dict[str, np.ndarray]:
    """The four values for each column of ``counts`` (queries × b: how often each query is
    taken): Z = counts·o_qE_q; the aware sums linear in the counts, the agnostic ones through
    the documents' (groups') summed differences."""
    z = ew @ counts
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"individual_aware": (aware_i @ counts) / z, "group_aware": (aware_g @ counts) / z,
                "individual_agnostic": _half_abs_cols(diff.T @ counts) / z,
                "group_agnostic": _half_abs_cols(grp.T @ counts) / z}


def _bootstrap(diff, grp, ew, aware_i, aware_g, pop: np.ndarray, n_boot: int, seed: int,
               chunk: int = 50) -> dict[str, np.ndarray]:
    """The four values on ``n_boot`` resamples (with replacement) of the queries ``pop``."""
    rng = np.random.default_rng(seed)
    n, nq = len(pop), len(ew)
    chunk = int(max(1, min(chunk, (1 << 24) // max(diff.shape[1], 1))))  # documents × block held
    out: dict[str, list] = {k: [] for k in VALUES}
    for s0 in range(0, n_boot, chunk):  # blocks of resamples
        b = min(chunk, n_boot - s0)
        draw = pop[rng.integers(0, n, size=(b, n))] + (np.arange(b) * nq)[:, None]
        counts = np.bincount(draw.ravel(), minlength=b * nq).reshape(b, nq).T.astype(np.float64)
        for k, v in _values(diff, grp, counts, ew, aware_i, aware_g).items():
            out[k].append(v)
    return {k: np.concatenate(v) for k, v in out.items()}


def _sequence(diff, grp, ew, aware_i, aware_g, order: np.ndarray, checkpoints: int) -> pd.DataFrame:
    """The four values over the first n queries with merit in log ``order``, at ``checkpoints``
    evenly spaced n (a loop over checkpoints: each adds its segment's documents' sums)."""
    n = len(order)
    ends = np.unique(np.linspace(0, n, checkpoints + 1).round().astype(np.int64)[1:])
    acc_d = np.zeros(diff.shape[1])
    acc_g = np.zeros(grp.shape[1])
    rows, start = [], 0
    cum_e, cum_i, cum_g = (np.cumsum(x[order]) for x in (ew, aware_i, aware_g))
    for end in ends:  # over the checkpoints
        seg = order[start:end]
        acc_d += np.asarray(diff[seg].sum(axis=0)).ravel()
        acc_g += np.asarray(grp[seg].sum(axis=0)).ravel()
        z = cum_e[end - 1]
        rows.append({"n_queries": int(end), "attention": float(z),
                     "individual_aware": cum_i[end - 1] / z, "group_aware": cum_g[end - 1] / z,
                     "individual_agnostic": 0.5 * np.abs(acc_d).sum() / z,
                     "group_agnostic": 0.5 * np.abs(acc_g).sum() / z})
        start = end
    return pd.DataFrame(rows)


def _bound(point: dict, boot: dict | None) -> dict:
    """group ≤ individual and agnostic ≤ aware on the point values (and the share of
    resamples where they hold)."""
    pairs = {"group_le_individual_aware": ("group_aware", "individual_aware"),
             "group_le_individual_agnostic": ("group_agnostic", "individual_agnostic"),
             "agnostic_le_aware_individual": ("individual_agnostic", "individual_aware"),
             "agnostic_le_aware_group": ("group_agnostic", "group_aware")}
    out = {}
    for name, (lo, hi) in pairs.items():
        entry = {"holds": bool(point[lo] <= point[hi] + TOL), "margin": float(point[hi] - point[lo])}
        if boot is not None:
            entry["holds_in_resamples"] = float(np.mean(boot[lo] <= boot[hi] + TOL))
        out[name] = entry
    return out


def _tables(diff, att_w, tgt_w, grp, groups: Groups, z: float, doc_ids) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per document and per group: attention and merit shares, gap, aware/agnostic/hidden."""
    a = groups.matrix
    att_d, tgt_d = np.asarray(att_w.sum(axis=0)).ravel() / z, np.asarray(tgt_w.sum(axis=0)).ravel() / z
    aw_d = 0.5 * np.asarray(abs(diff).sum(axis=0)).ravel() / z
    ag_d = 0.5 * np.abs(att_d - tgt_d)
    ids = doc_ids.strings if doc_ids is not None else np.arange(len(att_d)).astype(str)
    docs = pd.DataFrame({"docid": ids, "attention_share": att_d, "merit_share": tgt_d,
                         "gap": att_d - tgt_d, "aware": aw_d, "agnostic": ag_d, "hidden": aw_d - ag_d})
    att_g, tgt_g = a.T @ att_d, a.T @ tgt_d
    aw_g = 0.5 * np.asarray(abs(grp).sum(axis=0)).ravel() / z
    ag_g = 0.5 * np.abs(att_g - tgt_g)
    grps = pd.DataFrame({"group": groups.names, "n_docs": groups.sizes(), "attention_share": att_g,
                         "merit_share": tgt_g, "gap": att_g - tgt_g, "aware": aw_g, "agnostic": ag_g,
                         "hidden": aw_g - ag_g})
    return docs, grps.sort_values("gap", ignore_index=True)


def _with_interval(value: float, samples: np.ndarray | None, alpha: float) -> dict:
    """``{"value"}`` and, with bootstrap ``samples``, the bias-corrected percentile interval
    ``[q_{α/2} − bias, q_{1−α/2} − bias]`` (bias = mean(samples) − value; as
    ``retrievability.bootstrap_gini``: a resample of the queries makes an absolute value of a
    sum larger on average, so the raw percentiles sit above the estimate), floored at 0 (every
    value here is ≥ 0), with the raw ``percentile`` interval and the ``bias``."""
    if samples is None:
        return {"value": value}
    lo, hi = _interval(samples[None, :], alpha)
    bias = float(np.nanmean(samples) - value)
    return {"value": value, "lo": max(float(lo[0]) - bias, 0.0), "hi": max(float(hi[0]) - bias, 0.0),
            "bias": bias, "percentile": [float(lo[0]), float(hi[0])]}


def _check(q, d, rank, weights, merit: Merit, groups: Groups | None, n_docs: int, order,
           n_boot: int, alpha: float, checkpoints: int):
    """The inputs checked: (weights, query offsets, groups, order)."""
    w = np.asarray(_check_weights(weights, len(weights)), dtype=np.float64)
    nq = len(w)
    if n_boot < 0 or not 0 < alpha < 1 or checkpoints < 1:
        raise LimelightError(f"n_boot must be ≥ 0 (got {n_boot}), alpha in (0, 1) (got {alpha}), "
                             f"checkpoints ≥ 1 (got {checkpoints})")
    if merit.matrix.shape != (nq, n_docs):
        raise LimelightError(f"merit is over {merit.matrix.shape} queries × documents, the pairs over {(nq, n_docs)}")
    if len(d) and (int(np.min(d)) < 0 or int(np.max(d)) >= n_docs or int(np.min(rank)) < 1):
        raise LimelightError("a pair's document code is outside the collection (or its rank < 1)")
    _, ok = _query_ptr(np.asarray(q), nq)
    if not ok:
        raise LimelightError("exposure pairs must be grouped by query (ascending codes within the query set)")
    if groups is None:
        groups = Groups.from_labels([["all"]] * n_docs, "one group of every document")
    if groups.n_docs != n_docs:
        raise LimelightError(f"the groups cover {groups.n_docs:,} documents, the pairs {n_docs:,}")
    order = np.arange(nq) if order is None else np.asarray(order, dtype=np.int64)
    if order.shape != (nq,) or not np.array_equal(np.sort(order), np.arange(nq)):
        raise LimelightError(f"order must be a permutation of the {nq:,} query codes")
    return w, groups, order


def distfair_from_pairs(q: np.ndarray, d: np.ndarray, rank: np.ndarray, weights: np.ndarray,
                        merit: Merit, groups: Groups | None = None, n_docs: int | None = None,
                        browsing: str | Discount = "dcg", order: np.ndarray | None = None,
                        n_boot: int = 200, alpha: float = 0.05, seed: int = 0,
                        checkpoints: int = 10, doc_ids=None, order_label: str | None = None) -> DistFair:
    """Attention against merit over the log from parallel pair arrays (``q`` grouped by
    ascending query code, 1-based ``rank``), o_q, a ``Merit`` and optionally ``Groups`` (default:
    one group of every document, whose values are then 0); see the module's docstring.
    ``order``: the log's order as a permutation of query codes (default: code order), named in
    the summary by ``order_label``."""
    n_docs = merit.matrix.shape[1] if n_docs is None else n_docs
    given_order, given_groups = order is not None, groups is not None
    w, groups, order = _check(q, d, rank, weights, merit, groups, n_docs, order, n_boot, alpha, checkpoints)
    w = np.where(merit.queries(), w, 0.0)
    if not (w > 0).any():
        raise LimelightError(f"{merit.source}: no query with merit has a weight > 0: no overlap")
    disc = parse_discount(browsing)
    diff, att_w, tgt_w, ew = _diff(np.asarray(q), np.asarray(d), np.asarray(rank), w, merit, disc, n_docs)
    z = float(ew.sum())
    if z <= 0:
        raise LimelightError(f"no attention under {disc.name} on the queries with merit: nothing to compare")
    grp = (diff @ groups.matrix).tocsr()
    aware_i, aware_g = 0.5 * _rows(abs(diff)), 0.5 * _rows(abs(grp))
    pop = np.flatnonzero(w > 0)
    point = {k: float(v[0]) for k, v in _values(diff, grp, (w > 0).astype(float)[:, None], ew,
                                                  aware_i, aware_g).items()}
    boot = _bootstrap(diff, grp, ew, aware_i, aware_g, pop, n_boot, seed) if n_boot else None
    docs, grps = _tables(diff, att_w, tgt_w, grp, groups, z, doc_ids)
    seq = _sequence(diff, grp, ew, aware_i, aware_g, order[w[order] > 0], checkpoints)

    fw = {lvl: _with_interval(point[f"{lvl}_aware"] - point[f"{lvl}_agnostic"],  # fairwashing
                              None if boot is None else boot[f"{lvl}_aware"] - boot[f"{lvl}_agnostic"], alpha)
          for lvl in ("individual", "group")}
    summary = {"divergence": "total variation (half the L1 distance) between the attention and "
                             "merit distributions", "browsing": disc.name, "merit": merit.source,
               "merit_normalised": "within each query: its attention owed in proportion to merit",
               "assumptions": [merit.assumption] if merit.assumption else [],
               "groups_source": groups.source, "groups_given": given_groups, "n_groups": groups.n_groups,
               "n_queries": int(len(w)), "n_queries_used": int(len(pop)),
               "order": order_label or ("given" if given_order else "query codes (a store's: first entry in the log)"),
               **{k: _with_interval(point[k], None if boot is None else boot[k], alpha) for k in VALUES},
               "fairwashing": fw, "bound": _bound(point, boot),
               "bootstrap": {"n_boot": n_boot, "alpha": alpha, "seed": seed,
                             "interval": "bias-corrected percentile (order statistics, less the mean "
                                         "resample's excess over the estimate, at least 0), queries "
                                         "resampled with replacement"}}
    return DistFair(summary, docs, grps, seq)


def distfair(store, merit: Merit, groups: Groups | None = None, browsing: str | Discount = "dcg",
             order: np.ndarray | None = None, n_boot: int = 200, alpha: float = 0.05, seed: int = 0,
             checkpoints: int = 10, log=None) -> DistFair:
    """``distfair_from_pairs`` over every pair of an ``ExposureStore`` with its o_q: in the
    order ``order`` when given; else, with the ``log`` the store was computed from, in time order
    where that log has a time column (``limelight.data.logorder.query_time_order``: by first
    issue, ties in file order) and in file order where it has none; else in the store's order
    (first entry in the file). The summary's ``order`` names the order used."""
    label = None
    if order is None:
        label = FILE_ORDER
        if log is not None:
            order, label = query_time_order(log, store.queries.ids)
    q, d, rank, _ = store.pair_arrays()
    res = distfair_from_pairs(q, d, rank, store.query_weights, merit, groups, len(store.doc_ids),
                              browsing, order, n_boot, alpha, seed, checkpoints, store.doc_ids, label)
    res.summary["store"] = str(store.path)
    return res
