"""Score interpolation of a re-ranker with its first stage, and validation-only tuning.

``s = λ·norm(first) + (1−λ)·norm(model)`` over each query's first-stage top ``depth``, where
``norm`` is a **per-query min-max normalisation** to [0, 1] of each score list over those
candidates (a query whose scores are all equal maps to 0). λ = 1 is the first stage's ranking
exactly (min-max is monotone; ties keep the run order rule), λ = 0 the model's. λ and the
re-ranking depth are chosen on **validation queries only** (:func:`tune_lambda`,
:func:`tune_depth`); interpolated runs are reported as separate rows, never instead of the
pure model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.errors import LimelightError


def _measure(run: Run, qrels: Qrels, measure: str) -> float:
    """``measure`` of ``run`` over ``qrels``' queries (run-only queries ignored silently)."""
    from limelight.evaluation.evaluate import Evaluator

    return float(Evaluator(qrels, measure).evaluate(run, warn=False)[measure])


def subset_qrels(qrels: Qrels, qids: Sequence[str]) -> Qrels:
    """The judgments of the queries ``qids`` only (evaluating a subset of queries: the other
    queries' judgments would count as queries the run scores 0 on, as trec_eval -c does)."""
    keep = np.isin(qrels.qids.decode(qrels.q), np.asarray(list(qids), dtype=object))
    return Qrels.from_arrays(qrels.qids.decode(qrels.q[keep]), qrels.docids.decode(qrels.d[keep]),
                             qrels.rel[keep], qrels.name)


def minmax_per_query(q: np.ndarray, s: np.ndarray, n_queries: int) -> np.ndarray:
    """Scores ``s`` min-max normalised within each query code ``q`` (constant lists → 0)."""
    lo = np.full(n_queries, np.inf)
    hi = np.full(n_queries, -np.inf)
    np.minimum.at(lo, q, s)
    np.maximum.at(hi, q, s)
    span = (hi - lo)[q]
    return np.where(span > 0, (s - lo[q]) / np.where(span > 0, span, 1.0), 0.0)


def model_scores_for(first: Run, reranked: Run) -> np.ndarray:
    """The ``reranked`` score of every (query, document) pair of ``first`` (vectorized join);
    a pair it lacks → :class:`LimelightError`."""
    rq = first.qids.encode(reranked.qids.strings, missing=-1)[reranked.q]
    rd = first.docids.encode(reranked.docids.strings, missing=-1)[reranked.d]
    ok = (rq >= 0) & (rd >= 0)
    n_d = np.int64(len(first.docids))
    keys = rq[ok].astype(np.int64) * n_d + rd[ok]
    order = np.argsort(keys, kind="stable")
    keys, vals = keys[order], reranked.score[ok][order]
    want = first.q.astype(np.int64) * n_d + first.d
    pos = np.searchsorted(keys, want)
    found = pos < len(keys)
    found[found] = keys[pos[found]] == want[found]
    if not found.all():
        raise LimelightError(f"the model run {reranked.name!r} lacks scores for "
                             f"{int((~found).sum())} of the first stage's candidates")
    return vals[pos]


def interpolate(first: Run, reranked: Run, lam: float, depth: int | None = None,
                name: str | None = None) -> Run:
    """``λ·minmax(first) + (1−λ)·minmax(model)`` over each query's first-stage top ``depth``
    (all of ``first`` when ``None``); documents below ``depth`` follow below every interpolated
    one in first-stage order (as :class:`~limelight.rerank.ranker.KernelReranker` places them)."""
    if not 0.0 <= lam <= 1.0:
        raise LimelightError(f"λ must be in [0, 1], got {lam}")
    if len(first) == 0:
        raise LimelightError("empty candidate list: the first-stage run has no documents")
    ranks = first.ranks()
    top = ranks <= depth if depth is not None else np.ones(len(first), dtype=bool)
    q, d = first.q[top], first.d[top]
    sub = Run.from_codes(first.qids, first.docids, q, d, first.score[top], first.name, sort=False)
    m = model_scores_for(sub, reranked)
    b = minmax_per_query(q, first.score[top], first.n_queries)
    mm = minmax_per_query(q, m, first.n_queries)
    s = np.empty(len(first), dtype=np.float64)
    s[top] = lam * b + (1.0 - lam) * mm  # in [0, 1]
    s[~top] = -ranks[~top].astype(np.float64)  # below 0, first-stage order
    return Run.from_codes(first.qids, first.docids, first.q, first.d, s,
                          name or f"{first.name}+{reranked.name}(λ={lam:g})")


def tune_lambda(first: Run, reranked: Run, qrels: Qrels, val_qids: Sequence[str], depth: int | None = None,
                grid: Sequence[float] | None = None, measure: str = "nDCG@10") -> tuple[float, dict[float, float]]:
    """λ maximising ``measure`` over the validation queries ``val_qids`` only (the first of
    the grid, ascending, among ties) and the measure at every λ of the grid (0, 0.1, …, 1)."""
    if not len(val_qids):
        raise LimelightError("λ tuning needs validation queries")
    grid = [round(float(x), 4) for x in (grid if grid is not None else np.linspace(0, 1, 11))]
    f, r, qr = first.subset(val_qids), reranked.subset(val_qids), subset_qrels(qrels, val_qids)
    table = {lam: _measure(interpolate(f, r, lam, depth), qr, measure) for lam in grid}
    best = max(grid, key=lambda lam: (table[lam], -grid.index(lam)))
    return best, table


def tune_depth(first: Run, reranked: Run, qrels: Qrels, val_qids: Sequence[str],
               depths: Sequence[int] = (10, 20, 50, 100), measure: str = "nDCG@10") -> tuple[int, dict[int, float]]:
    """Re-ranking depth maximising ``measure`` over the validation queries only (the
    shallowest among ties) and the measure at every depth."""
    from limelight.rerank.budget import rerank_at_depth

    if not len(val_qids):
        raise LimelightError("depth tuning needs validation queries")
    f, r, qr = first.subset(val_qids), reranked.subset(val_qids), subset_qrels(qrels, val_qids)
    table = {int(k): _measure(rerank_at_depth(f, r, int(k)), qr, measure) for k in depths}
    best = max(table, key=lambda k: (table[k], -k))
    return best, table
