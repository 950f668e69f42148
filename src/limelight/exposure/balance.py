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
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
import pandas as pd

from limelight.errors import LimelightError
from limelight.evaluation.discounts import Discount
from limelight.exposure.fairness import (
    Groups,
    Merit,
    fairness_from_pairs,
    parse_discount,
    ranking_effectiveness,
)


@numba.njit(cache=True, nogil=True)
def _balance_kernel(ptr, gcode, tau, mu, strength, n_groups):  # pragma: no cover - numba
    """The new 1-based rank of every pair (pairs grouped by query, each query's in the ranker's
    order; ``gcode`` the pair's group): the greedy rule of the module's docstring, per query
    with a linked list of each group's remaining candidates."""
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
            if strength > 0.0 and tsum > 0.0:
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


def balance_ranks(q: np.ndarray, d: np.ndarray, rank: np.ndarray, groups: Groups, strength: float,
                  target: np.ndarray | None = None, browsing: str | Discount = "dcg") -> np.ndarray:
    """The re-ranked 1-based rank of every pair (``q`` grouped by ascending query code, 1-based
    ``rank`` of the ranker): each query's documents re-ordered toward ``target`` (a share per
    group, default the groups' shares of the collection) at ``strength`` λ ∈ [0, 1] under the
    browsing model ``browsing``; see the module's docstring."""
    if not 0.0 <= strength <= 1.0:
        raise LimelightError(f"the strength must lie in [0, 1], got {strength}")
    q, d, rank = np.asarray(q), np.asarray(d), np.asarray(rank)
    gcode = _group_codes(groups)
    tau = groups.sizes() / groups.n_docs if target is None else np.asarray(target, dtype=np.float64)
    if tau.shape != (groups.n_groups,) or (tau < 0).any() or not tau.sum() > 0:
        raise LimelightError(f"the target needs one share ≥ 0 per group ({groups.n_groups}), not all 0")
    if len(q) and (np.diff(q) < 0).any():
        raise LimelightError("exposure pairs must be grouped by query (ascending codes)")
    nq = int(q.max()) + 1 if len(q) else 0
    ptr = np.zeros(nq + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=nq), out=ptr[1:])
    # the kernel reads each query's pairs in the ranker's order
    order = None if not len(q) or (np.diff(rank)[np.diff(q) == 0] > 0).all() else np.lexsort((rank, q))
    dd = d if order is None else d[order]
    top = int(np.diff(ptr).max(initial=0))
    mu = np.concatenate([[0.0], parse_discount(browsing).weights(np.arange(1, top + 1))])
    new = _balance_kernel(ptr, gcode[dd], tau, mu, float(strength), groups.n_groups)
    if order is None:
        return new
    out = np.empty_like(new)
    out[order] = new
    return out


def balance_curve(store, groups: Groups, merit: Merit, strengths: Sequence[float],
                  target: np.ndarray | None = None, browsing: str | Discount = "dcg") -> pd.DataFrame:
    """Group fairness against effectiveness for the re-ranker over each query's stored top n at
    a grid of strengths (0: the ranker): per strength, the exposure share of every group against
    the merit target, the total variation distance, the largest deficit and its group (as
    ``fairness_from_pairs`` computes them), and nDCG@10 (trec_eval's linear gains) and R@100 over
    the queries with merit, o_q-weighted — the columns of ``fairness.policy_curve``. The
    re-ranker aims at ``target`` (default: the groups' shares of the collection), never at the
    merit it is judged by."""
    q, d, rank, _ = store.pair_arrays()
    w = store.queries.weights
    rows = []
    for lam in strengths:
        new = balance_ranks(q, d, rank, groups, float(lam), target, browsing)
        res = fairness_from_pairs(q, d, new, w, groups, merit, "merit", browsing, n_boot=0, top=0)
        gap = res.groups["gap"].to_numpy()
        g = int(np.argmin(gap))
        eff = ranking_effectiveness(q, d, new, w, merit)
        rows.append({"strength": float(lam), "tvd": res.summary["tvd"]["value"],
                     "largest_deficit": float(gap[g]), "deficit_group": groups.names[g], **eff,
                     "moved": float(np.mean(new != rank)) if len(rank) else 0.0,
                     **{f"gap:{name}": float(x) for name, x in zip(groups.names, gap, strict=True)}})
    return pd.DataFrame(rows)
