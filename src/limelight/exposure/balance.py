"""A deterministic exposure-balancing re-ranker: each query's top n re-ordered, greedily, toward a
target share of exposure per group of documents (issue 45, item 5).

For one query with candidates in the ranker's order, a group assignment with one group per
document, a target distribution τ over groups (by default each group's share of the collection,
renormalized over the groups among the query's candidates, so that it can be met), position
weights μ(k) (a browsing model; 1-based k) and a strength λ ∈ [0, 1]:

at position k, with M_k = Σ_{i≤k} μ(i) and E(g) the exposure group g holds from positions 1..k−1,
group g is *owed* o(g) = λ τ(g) M_k − E(g). If some group with candidates left is owed at least
a whole position (o(g) > 0 and o(g) ≥ μ(k)), position k goes to the best-placed remaining
candidate of the group owed most (ties: the group whose candidate the ranker placed first);
otherwise it goes to the ranker's best remaining candidate.

So λ = 0 is the ranker; λ reserves a share λ of each prefix's exposure for the target and leaves
the rest to the ranker's order (the greedy rule of Geyik et al., KDD 2019, DetGreedy, in
exposure rather than counts; FA*IR, Zehlike et al. 2017, is its two-group, significance-tested
special case). A group's documents keep their relative order (a group is always served by its
best remaining candidate, and so is the ranker), a ranking already at its target at every prefix
is left as it is, and nothing is sampled: the same inputs give the same ranking.

``balance_ranks`` re-ranks parallel pair arrays (an exposure store's); ``balance_curve`` is the
intervention's curve: per strength, the largest group deficit against the merit target (the same
figures as ``fairness.policy_curve``) and nDCG@10 and R@100 over the queries with merit.

A deeper candidate pool. Re-ordering what is shown cannot give exposure to a group the shown
list lacks; both take ``pool`` (the candidates: each query's top ``pool`` of the ranker) and
``k`` (what is shown and measured: the re-ranked top k), so that a top k can be chosen from a
pool of, say, 1,000. ``top_k_target`` (the merit target of a top k, per grouping),
``ranking_figures`` (a deterministic ranking's figures) and ``pool_policy_figures`` (the
Plackett-Luce policy over the pool, its sampled rankings shown down to k) compute the figures of
``fairness.policy_curve`` for several groupings at once, from the documents' exposure (tests
hold them equal to ``fairness_from_pairs`` and ``policy_curve``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp

from limelight.errors import LimelightError
from limelight.evaluation.discounts import Discount
from limelight.exposure.fairness import (
    Groups,
    Merit,
    _Dcg10,
    _merit_at,
    _query_ptr,
    _row_scale,
    _rows,
    fairness_from_pairs,
    ideal_exposure,
    parse_discount,
    ranking_effectiveness,
)


@numba.njit(cache=True, nogil=True)
def _balance_kernel(ptr, gcode, tau, mu, strength, n_groups, kmax):  # pragma: no cover - numba
    """The new 1-based rank of every pair (pairs grouped by query, each query's in the ranker's
    order; ``gcode`` the pair's group): the greedy rule of the module's docstring for positions
    1..``kmax``, the ranker's order of the remaining candidates below, per query with a linked
    list of each group's remaining candidates."""
    out = np.zeros(len(gcode), np.int64)
    head = np.full(n_groups, -1, np.int64)
    last = np.full(n_groups, -1, np.int64)
    nxt = np.full(len(gcode), -1, np.int64)
    held = np.zeros(n_groups)
    present = np.empty(n_groups, np.int64)
    for i in range(len(ptr) - 1):
        lo, hi = ptr[i], ptr[i + 1]
        n_present = 0
        for j in range(lo, hi):  # each group's candidates, in the ranker's order
            g = gcode[j]
            if head[g] < 0:
                head[g] = j
                present[n_present] = g
                n_present += 1
            else:
                nxt[last[g]] = j
            last[g] = j
        tsum = 0.0
        for m in range(n_present):
            tsum += tau[present[m]]
        taken = np.zeros(hi - lo, np.bool_)
        r = lo  # the ranker's best remaining candidate
        cum = 0.0
        for k in range(1, hi - lo + 1):
            mk = mu[k] if k < len(mu) else 0.0
            cum += mk
            best = -1
            owed_best = 0.0
            if strength > 0.0 and tsum > 0.0 and k <= kmax:
                for m in range(n_present):
                    g = present[m]
                    if head[g] < 0:
                        continue
                    owed = strength * tau[g] / tsum * cum - held[g]
                    if owed > 0.0 and owed >= mk and (
                            best < 0 or owed > owed_best or (owed == owed_best and head[g] < head[best])):
                        best = g
                        owed_best = owed
            j = head[best] if best >= 0 else r
            g = gcode[j]
            out[j] = k
            taken[j - lo] = True
            held[g] += mk
            head[g] = nxt[j]
            while r < hi and taken[r - lo]:
                r += 1
        for m in range(n_present):  # clear the scratch of this query's groups
            g = present[m]
            head[g] = -1
            last[g] = -1
            held[g] = 0.0
    return out


def _group_codes(groups: Groups) -> np.ndarray:
    """Each document's one group (the re-ranker needs one group per document)."""
    a = groups.matrix
    if not (np.diff(a.indptr) == 1).all() or not (a.data == 1.0).all():
        raise LimelightError(f"the exposure-balancing re-ranker needs one group per document; "
                             f"{groups.source} gives some documents several")
    return a.indices.astype(np.int64)


def _pool_mask(rank: np.ndarray, pool: int | None) -> np.ndarray | None:
    """The pairs among each query's top ``pool`` of the ranker (None: every pair)."""
    if pool is None:
        return None
    if int(pool) < 1:
        raise LimelightError(f"the candidate pool must hold at least 1 document, got {pool}")
    return np.asarray(rank) <= int(pool)


def balance_ranks(q: np.ndarray, d: np.ndarray, rank: np.ndarray, groups: Groups, strength: float,
                  target: np.ndarray | None = None, browsing: str | Discount = "dcg",
                  pool: int | None = None, k: int | None = None) -> np.ndarray:
    """The re-ranked 1-based rank of every pair (``q`` grouped by ascending query code, 1-based
    ``rank`` of the ranker): each query's documents re-ordered toward ``target`` (a share per
    group, default the groups' shares of the collection) at ``strength`` λ ∈ [0, 1] under the
    browsing model ``browsing``; see the module's docstring.

    ``pool``: the candidates are each query's top ``pool`` of the ranker (default: every pair
    given); pairs below it keep their rank, after the pool. ``k``: the greedy rule fills
    positions 1..k only (default: the whole pool) and the remaining candidates follow in the
    ranker's order — the same top k, less work when only the top k is shown. A group absent
    from a query's top k can enter it only from a pool deeper than k."""
    if not 0.0 <= strength <= 1.0:
        raise LimelightError(f"the strength must lie in [0, 1], got {strength}")
    if k is not None and int(k) < 1:
        raise LimelightError(f"k must be ≥ 1, got {k}")
    q, d, rank = np.asarray(q), np.asarray(d), np.asarray(rank)
    gcode = _group_codes(groups)
    tau = groups.sizes() / groups.n_docs if target is None else np.asarray(target, dtype=np.float64)
    if tau.shape != (groups.n_groups,) or (tau < 0).any() or not tau.sum() > 0:
        raise LimelightError(f"the target needs one share ≥ 0 per group ({groups.n_groups}), not all 0")
    if len(q) and (np.diff(q) < 0).any():
        raise LimelightError("exposure pairs must be grouped by query (ascending codes)")
    keep = _pool_mask(rank, pool)
    if keep is not None:
        out = rank.astype(np.int64).copy()
        if keep.any():
            out[keep] = balance_ranks(q[keep], d[keep], rank[keep], groups, strength, tau, browsing,
                                      None, k)
        return out
    nq = int(q.max()) + 1 if len(q) else 0
    ptr = np.zeros(nq + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=nq), out=ptr[1:])
    # the kernel reads each query's pairs in the ranker's order
    order = None if not len(q) or (np.diff(rank)[np.diff(q) == 0] > 0).all() else np.lexsort((rank, q))
    dd = d if order is None else d[order]
    top = int(np.diff(ptr).max(initial=0))
    mu = np.concatenate([[0.0], parse_discount(browsing).weights(np.arange(1, top + 1))])
    kmax = top if k is None else int(k)
    new = _balance_kernel(ptr, gcode[dd], tau, mu, float(strength), groups.n_groups, kmax)
    if order is None:
        return new
    out = np.empty_like(new)
    out[order] = new
    return out


@dataclass
class TopK:
    """What the measured top ``k`` of every query is judged against: per query the total exposure
    E_q = Σ_{i ≤ min(k, n_q)} μ(i) a ranking of its ``n_q`` candidates hands out over the top k,
    the merit target share of every grouping (each query's E_q spread over its documents with
    merit, by merit: ``fairness``'s ``merit`` target), the query weights (o_q where the query has
    merit, else 0), and the tables of nDCG@10 and R@100."""

    k: int
    weights: np.ndarray
    mu: np.ndarray
    target_share: dict[str, np.ndarray]
    merit: Merit
    idcg: np.ndarray
    n_rel: np.ndarray
    #: per query, the exposure E_q its top k hands out (None: not recorded)
    etot: np.ndarray | None = None


def top_k_target(q: np.ndarray, weights: np.ndarray, merit: Merit, groupings: dict[str, Groups],
                 k: int, browsing: str | Discount = "dcg") -> TopK:
    """The merit target of the top ``k`` of each query's candidates (``q``: the query code of
    each pair of the candidate pool; a query hands out the exposure of its first
    ``min(k, candidates)`` ranks) for every grouping of ``groupings``; see ``TopK``."""
    mm = merit.matrix
    nq = mm.shape[0]
    w = np.where(merit.queries(), np.asarray(weights, dtype=np.float64), 0.0)
    if not (w > 0).any():
        raise LimelightError(f"{merit.source}: no query with merit has a weight > 0: no overlap")
    mu = np.concatenate([[0.0], parse_discount(browsing).weights(np.arange(1, int(k) + 1))])
    n_cand = np.minimum(np.bincount(np.asarray(q), minlength=nq), int(k))
    etot = np.cumsum(mu)[n_cand]
    mtot = _rows(mm)
    tq = np.asarray(_row_scale(mm, np.divide(w * etot, mtot, out=np.zeros(nq), where=mtot > 0))
                    .sum(axis=0)).ravel()
    shares = {}
    for name, g in groupings.items():
        t = tq @ g.matrix
        shares[name] = t / t.sum()
    idcg = _rows(ideal_exposure(mm, _Dcg10()).multiply(mm))
    return TopK(int(k), w, mu, shares, merit, idcg, np.diff(mm.indptr).astype(np.float64), etot)


def top_k_figures(tk: TopK, groupings: dict[str, Groups], doc_exposure: np.ndarray,
                  dcg: np.ndarray, hits: np.ndarray) -> dict:
    """The figures of one policy: per grouping the exposure share of every group against its
    target (``gap``), the total variation distance, the largest deficit and its group; nDCG@10 and
    R@100, o_q-weighted over the queries with merit. ``doc_exposure``: Σ_q o_q E[μ(rank)] of every
    document over the top k; ``dcg``/``hits``: each query's (expected) DCG@10 of its merit and
    number of documents with merit in the top 100."""
    out: dict = {}
    ws = tk.weights.sum()
    nq = len(tk.weights)
    out["ndcg@10"] = float(np.dot(tk.weights, np.divide(dcg, tk.idcg, out=np.zeros(nq),
                                                         where=tk.idcg > 0)) / ws)
    out["r@100"] = float(np.dot(tk.weights, np.divide(hits, tk.n_rel, out=np.zeros(nq),
                                                       where=tk.n_rel > 0)) / ws)
    for name, g in groupings.items():
        share = doc_exposure @ g.matrix
        share = share / share.sum()
        gap = share - tk.target_share[name]
        i = int(np.argmin(gap))
        out[name] = {"tvd": float(0.5 * np.abs(gap).sum()), "largest_deficit": float(gap[i]),
                     "deficit_group": g.names[i], "gap": dict(zip(g.names, map(float, gap), strict=True))}
    return out


def ranking_figures(tk: TopK, groupings: dict[str, Groups], q: np.ndarray, d: np.ndarray,
                    new: np.ndarray) -> dict:
    """``top_k_figures`` of a deterministic ranking (1-based ``new`` ranks of the candidate pairs;
    only ranks ≤ k are shown)."""
    nq = len(tk.weights)
    r = np.asarray(new, dtype=np.int64)
    shown = r <= tk.k
    e = np.bincount(d[shown], weights=tk.weights[q[shown]] * tk.mu[r[shown]],
                    minlength=tk.merit.matrix.shape[1])
    mm = tk.merit.matrix
    ptr, _ = _query_ptr(np.asarray(q), nq)
    mval = _merit_at(ptr, d, mm, mm.shape[1])
    rf = r.astype(np.float64)
    dcg = np.bincount(q, weights=mval * np.where(rf <= 10, 1.0 / np.log2(rf + 1.0), 0.0), minlength=nq)
    hits = np.bincount(q, weights=((mval > 0) & (r <= min(100, tk.k))).astype(np.float64), minlength=nq)
    return top_k_figures(tk, groupings, e, dcg, hits)


def pool_policy_figures(tk: TopK, groupings: dict[str, Groups], q: np.ndarray, d: np.ndarray,
                        rank: np.ndarray, score: np.ndarray, temperature: float,
                        n_samples: int = 32, seed: int = 0, block: int = 4096,
                        per_query: bool = False) -> dict:
    """``top_k_figures`` of the Plackett-Luce policy over each query's candidate pairs (``q``
    grouped by ascending code, ranks 1..n_q contiguous; temperature relative to the spread of
    the query's candidate scores, ``limelight.exposure.stochastic``) whose sampled rankings are
    shown down to rank k: expected exposure of the top k, expected nDCG@10 and R@100. Seeded:
    the noise depends on the query, the sample and the position only. ``per_query``: also
    ``out["per_query"]`` = each query's expected DCG@10 (``dcg``), documents with merit in its
    top 100 (``hits``) and, per grouping, its expected exposure to each group (``exposure``:
    queries × groups, unweighted), what ``bootstrap_top_k`` resamples."""
    from limelight.exposure.stochastic import expected_weights

    mm = tk.merit.matrix
    nq, n = mm.shape
    depth = int(np.max(rank)) if len(rank) else 1
    pos = np.arange(1, depth + 1)
    k = tk.k
    mu = np.concatenate([tk.mu[1:], np.zeros(max(0, depth - k))])[:depth]
    tables = np.stack([mu, np.where(pos <= 10, 1.0 / np.log2(pos + 1.0), 0.0),
                       (pos <= min(100, k)).astype(float)])
    ptr, _ = _query_ptr(np.asarray(q), nq)
    mval = _merit_at(ptr, d, mm, n)
    e_doc, dcg, hits = np.zeros(n), np.zeros(nq), np.zeros(nq)
    e_q = {name: np.zeros((nq, g.n_groups)) for name, g in groupings.items()} if per_query else {}
    for b0 in range(0, nq, block):
        b1 = min(nq, b0 + block)
        lo, hi = ptr[b0], ptr[b1]
        if lo == hi:
            continue
        qb, rb = q[lo:hi] - b0, np.asarray(rank[lo:hi], np.int64) - 1
        docs = np.full((b1 - b0, depth), -1, dtype=np.int32)
        sc = np.full((b1 - b0, depth), -np.inf)
        docs[qb, rb], sc[qb, rb] = d[lo:hi], score[lo:hi]
        ex = expected_weights(docs, sc, temperature, tables, n_samples, seed, np.arange(b0, b1))[:, qb, rb]
        e_doc += np.bincount(d[lo:hi], weights=tk.weights[q[lo:hi]] * ex[0], minlength=n)
        dcg[b0:b1] = np.bincount(qb, weights=mval[lo:hi] * ex[1], minlength=b1 - b0)
        hits[b0:b1] = np.bincount(qb, weights=(mval[lo:hi] > 0) * ex[2], minlength=b1 - b0)
        if per_query:  # the block's queries × documents expected exposure, by group
            m = sp.csr_matrix((ex[0], (qb, d[lo:hi])), shape=(b1 - b0, n))
            for name, g in groupings.items():
                e_q[name][b0:b1] = np.asarray((m @ g.matrix).todense())
    out = top_k_figures(tk, groupings, e_doc, dcg, hits)
    if per_query:
        out["per_query"] = {"dcg": dcg, "hits": hits, "exposure": e_q}
    return out


def top_k_resamples(tk: TopK, per_query: dict, groupings: dict[str, Groups],
                    counts: np.ndarray) -> dict[str, np.ndarray]:
    """``top_k_figures`` for each row of ``counts`` (resamples × queries: how often each query
    is taken; its weight becomes o_q × count), from ``pool_policy_figures(..., per_query=True)``'s
    ``per_query``: nDCG@10, R@100 and per grouping the largest deficit (the most negative gap,
    whichever group holds it) and the total variation, the target shares recomputed too (each
    query's E_q spread over its documents by merit). Keys ``ndcg@10``, ``r@100``,
    ``<grouping>.largest_deficit``, ``<grouping>.tvd``; one value per row."""
    if tk.etot is None:
        raise LimelightError("the TopK has no per-query exposure totals: make it with top_k_target")
    w = tk.weights
    nq = len(w)
    cw = np.atleast_2d(np.asarray(counts, dtype=np.float64)) * w
    if cw.shape[1] != nq:
        raise LimelightError(f"counts cover {cw.shape[1]:,} queries, the figures {nq:,}")
    tot = cw.sum(axis=1)
    nd = np.divide(per_query["dcg"], tk.idcg, out=np.zeros(nq), where=tk.idcg > 0)
    rc = np.divide(per_query["hits"], tk.n_rel, out=np.zeros(nq), where=tk.n_rel > 0)
    vals = {"ndcg@10": cw @ nd / tot, "r@100": cw @ rc / tot}
    mm = tk.merit.matrix
    mtot = _rows(mm)
    per_doc = _row_scale(mm, np.divide(tk.etot, mtot, out=np.zeros(nq), where=mtot > 0))
    for name, g in groupings.items():
        e = cw @ per_query["exposure"][name]
        t = cw @ np.asarray((per_doc @ g.matrix).todense())
        gap = e / e.sum(axis=1, keepdims=True) - t / t.sum(axis=1, keepdims=True)
        vals[f"{name}.largest_deficit"] = gap.min(axis=1)
        vals[f"{name}.tvd"] = 0.5 * np.abs(gap).sum(axis=1)
    return vals


def bootstrap_top_k(tk: TopK, per_query: dict, groupings: dict[str, Groups], n_boot: int = 200,
                    alpha: float = 0.05, seed: int = 0) -> dict:
    """Bootstrap intervals of ``top_k_figures`` (``top_k_resamples`` over ``n_boot`` resamples of
    the queries with merit, with replacement, o_q kept): ``{figure: {"value", "lo", "hi"}}``.
    The intervals are percentile intervals less the mean resample's excess over the estimate (as
    ``retrievability.bootstrap_gini``'s: a minimum or an absolute value of resampled sums is
    biased by the resampling itself)."""
    w = tk.weights
    nq = len(w)
    pop = np.flatnonzero(w > 0)
    rng = np.random.default_rng(seed)
    counts = np.zeros((n_boot + 1, nq))
    counts[0, pop] = 1.0  # row 0: the estimate itself
    for b in range(n_boot):  # one resample of the queries a row
        counts[b + 1] = np.bincount(pop[rng.integers(0, len(pop), len(pop))], minlength=nq)
    out = {}
    for key, v in top_k_resamples(tk, per_query, groupings, counts).items():
        est, boot = float(v[0]), v[1:]
        if not len(boot):
            out[key] = {"value": est}
            continue
        lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
        bias = float(boot.mean() - est)
        out[key] = {"value": est, "lo": float(lo - bias), "hi": float(hi - bias)}
    return out


def balance_curve(store, groups: Groups, merit: Merit, strengths: Sequence[float],
                  target: np.ndarray | None = None, browsing: str | Discount = "dcg",
                  pool: int | None = None, k: int | None = None) -> pd.DataFrame:
    """Group fairness against effectiveness for the re-ranker over each query's stored top n at
    a grid of strengths (0: the ranker): per strength, the exposure share of every group against
    the merit target, the total variation distance, the largest deficit and its group (as
    ``fairness_from_pairs`` computes them), and nDCG@10 (trec_eval's linear gains) and R@100 over
    the queries with merit, o_q-weighted — the columns of ``fairness.policy_curve``. The
    re-ranker aims at ``target`` (default: the groups' shares of the collection), never at the
    merit it is judged by.

    ``pool``: the candidates are each query's top ``pool`` of the store (default: all it holds);
    ``k``: only the re-ranked top k is shown and measured (default: the whole pool). With
    ``k`` < ``pool`` the re-ranker can bring into the top k documents (and groups) the ranker
    left below it — the only way a group absent from the top k can gain exposure."""
    q, d, rank, _ = store.pair_arrays()
    keep = _pool_mask(rank, pool)
    if keep is not None:
        q, d, rank = q[keep], d[keep], rank[keep]
    w = store.queries.weights
    rows = []
    for lam in strengths:
        new = balance_ranks(q, d, rank, groups, float(lam), target, browsing, None, k)
        shown = slice(None) if k is None else new <= int(k)
        qs, ds, ns = q[shown], d[shown], new[shown]
        res = fairness_from_pairs(qs, ds, ns, w, groups, merit, "merit", browsing, n_boot=0, top=0)
        gap = res.groups["gap"].to_numpy()
        g = int(np.argmin(gap))
        eff = ranking_effectiveness(qs, ds, ns, w, merit)
        rows.append({"strength": float(lam), "tvd": res.summary["tvd"]["value"],
                     "largest_deficit": float(gap[g]), "deficit_group": groups.names[g], **eff,
                     "moved": float(np.mean(new != rank)) if len(rank) else 0.0,
                     **{f"gap:{name}": float(x) for name, x in zip(groups.names, gap, strict=True)}})
    return pd.DataFrame(rows)
