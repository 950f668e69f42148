"""Expected exposure (Diaz, Mitra, Ekstrand, Biega, Carterette, CIKM 2020): EE-D, EE-R, EE-L.

A ranking policy π (a distribution over rankings for each query) gives each document ``d`` the
expected exposure ε_d = E_π[γ^(rank(d) − 1)] under the RBP / cascade browsing model with patience
γ (1-based ranks; documents a ranking does not return get 0). The *equal expected exposure*
principle makes the target ε* that of the ideal policy which ranks the documents by grade,
descending, and shuffles uniformly within each grade: a grade with ``m`` documents that occupies
the 0-based positions ``b .. b+m−1`` gives each of them

    ε*_g = (γ^b − γ^(b+m)) / (m (1 − γ))

(the official ``expeval`` tool of the TREC Fair Ranking track computes the same per-grade
value). Every non-relevant document of the candidate set — judged non-relevant or unjudged,
``n − R`` of them for ``R`` relevant documents in a collection of ``n`` — shares the exposure
of the remaining positions ``R .. n−1`` equally: ε*_0 = (γ^R − γ^n) / ((n − R)(1 − γ)).
Per query (the paper's Eq. 3-5, without normalisation):

    EE-D = ||ε||²   (disparity, lower is better)
    EE-R = ε·ε*     (relevance, higher is better)
    EE-L = ||ε − ε*||² = EE-D − 2·EE-R + ||ε*||²   (loss, lower is better; 0 for the ideal)

Values are per query and averaged over the qrels' queries with a relevant document, as every
other measure of ``limelight.evaluation``. None of this enumerates the non-relevant documents:
the sums over them follow from the total exposure Σ_d ε_d, the relevant documents' ε_d and
``n``. A deterministic ``Run`` is the policy that always returns it (``Measure("EE-L")`` in
``evaluate``); a stochastic policy is given by its expected exposures, as a ``Run`` whose
scores are ε_d (``expected_exposure_run`` turns sampled rankings into one;
``limelight.exposure.stochastic`` computes it for Plackett-Luce policies without keeping them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.evaluation.discounts import GeometricDiscount
from limelight.evaluation.evaluate import EvalResult
from limelight.evaluation.kernels import (  # noqa: F401  (re-exported: the EE formulas live in kernels)
    _check_gamma,
    deterministic_ee,
    ee_from_parts,
    ideal_dcg,
    target_exposure,
)
from limelight.evaluation.measures import Measure, parse_measures
from limelight.evaluation.relpos import QrelsIndex, RelPositions, relevance_positions


def _check_exposure_run(run: Run) -> None:
    s = run.score
    if len(s) and (not np.isfinite(s).all() or float(s.min()) < 0):
        raise LimelightError(f"{run.name}: expected exposures must be finite and ≥ 0")


def _relevant_values(values: Run, qrels: Qrels | QrelsIndex, n_docs: int | None
                     ) -> tuple[QrelsIndex, RelPositions, np.ndarray, np.ndarray, np.ndarray]:
    """For a ``Run`` of per-document values (expected exposures or discounts): the relevance
    positions (threshold 1), the values of each query's relevant documents aligned with
    ``rp.grade`` (0 where absent), and per query Σ_d value and Σ_d value²."""
    qi = qrels if isinstance(qrels, QrelsIndex) else QrelsIndex(qrels)
    rp = relevance_positions(values, qi, 1, n_docs)
    # run rows of the relevant retrieved documents: offset of the query + position − 1
    runq = values.qids.encode(qi.qids.strings, missing=-1).astype(np.int64)
    has = runq >= 0
    start = np.where(has, values.offsets[np.maximum(runq, 0)], 0)
    row = np.where(rp.retrieved, start[:, None] + rp.pos - 1, 0)
    rel = np.where(rp.retrieved, values.score[row] if len(values.score) else 0.0, 0.0)
    v = values.score.astype(np.float64)
    tot_run = np.bincount(values.q, weights=v, minlength=values.n_queries)
    sq_run = np.bincount(values.q, weights=v * v, minlength=values.n_queries)
    total = np.where(has, tot_run[np.maximum(runq, 0)] if len(tot_run) else 0.0, 0.0)
    norm2 = np.where(has, sq_run[np.maximum(runq, 0)] if len(sq_run) else 0.0, 0.0)
    return qi, rp, rel, total, norm2


def expected_ndcg(discounts: Run, qrels: Qrels | QrelsIndex, k: int | None = 10,
                  n_docs: int | None = None) -> tuple[IdMap, np.ndarray]:
    """Expected nDCG@k of a stochastic policy from a ``Run`` whose scores are each document's
    expected nDCG@k discount E[1[rank ≤ k] / log2(rank + 1)] (DCG is linear in the discounts,
    so E[DCG] = Σ_d gain_d · E[discount_d]); trec_eval's gains (the grades) and ideal DCG.
    Returns the query set and the per-query values."""
    qi, rp, rel, _, _ = _relevant_values(discounts, qrels, n_docs)
    dcg = (np.where(rp.valid, rp.grade, 0) * rel).sum(axis=1)
    idcg = ideal_dcg(rp, k)
    return qi.qids, np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)


def stochastic_ee(exposure: Run, qrels: Qrels | QrelsIndex, gamma: float = 0.5,
                  n_docs: int | None = None) -> tuple[IdMap, dict[str, np.ndarray]]:
    """Per-query EE-D/EE-R/EE-L of a stochastic policy given as a ``Run`` of expected
    exposures ε_d (scores; documents absent from a query's rows have ε_d = 0).

    ``n_docs`` is the collection size ``n`` (default: the documents of qrels and run). The
    exposures must have been computed with the same ``gamma``. Returns the query set (qrels
    queries with a relevant document) and the three arrays aligned with it.
    """
    _check_exposure_run(exposure)
    qi, rp, rel, total, norm2 = _relevant_values(exposure, qrels, n_docs)
    return qi.qids, ee_from_parts(rel, rp, total, norm2, gamma)


def evaluate_exposure(exposure: Run, qrels: Qrels,
                      measures: str | Iterable[str | Measure] = "EE-L EE-D EE-R",
                      n_docs: int | None = None):
    """An ``EvalResult`` of expected-exposure measures for a stochastic policy given by its
    expected exposures (a ``Run`` of ε_d); every measure must be EE-L/EE-D/EE-R, possibly with
    different ``gamma`` — the exposures must match it, so one ``gamma`` only."""
    ms = parse_measures(measures)
    bad = [str(m) for m in ms if not m.is_expected_exposure]
    if bad:
        raise LimelightError(f"not an expected-exposure measure: {bad[0]} (EE-L, EE-D, EE-R)")
    gammas = sorted({m.gamma for m in ms})
    if len(gammas) > 1:
        raise LimelightError(f"one gamma per set of expected exposures, got {gammas}")
    qids, vals = stochastic_ee(exposure, qrels, gammas[0], n_docs)
    return EvalResult(exposure.name, qids, {m: vals[m.name] for m in ms})


def expected_exposure_run(rankings: Sequence[Run], gamma: float = 0.5,
                          probabilities: Sequence[float] | None = None,
                          name: str = "policy") -> Run:
    """The expected exposures of a policy given as a few rankings (``Run`` objects over the
    same queries and documents) with their probabilities (default uniform): a ``Run`` whose
    score of ``(q, d)`` is Σ_k p_k γ^(rank_k(d) − 1). For enumerated or sampled rankings;
    ``limelight.exposure.stochastic`` handles Plackett-Luce policies at scale."""
    if not rankings:
        raise LimelightError("no rankings")
    g = _check_gamma(gamma)
    p = (np.full(len(rankings), 1.0 / len(rankings)) if probabilities is None
         else np.asarray(probabilities, dtype=np.float64))
    if p.shape != (len(rankings),) or (p < 0).any() or not np.isclose(p.sum(), 1.0):
        raise LimelightError("probabilities must be one non-negative number per ranking, summing to 1")
    qids, docids = rankings[0].qids, rankings[0].docids
    qs, ds, ws = [], [], []
    for r, pk in zip(rankings, p, strict=True):
        rr = r.with_doc_map(docids) if r.docids is not docids else r
        qcode = qids.encode(rr.qids.strings, missing=-1)
        if (qcode < 0).any():
            raise LimelightError(f"{r.name}: query {rr.qids[int(np.flatnonzero(qcode < 0)[0])]!r} "
                                 "is not in the first ranking")
        qs.append(qcode[rr.q].astype(np.int64))
        ds.append(rr.d.astype(np.int64))
        ws.append(pk * GeometricDiscount(g).weights(rr.ranks()))
    q, d, w = np.concatenate(qs), np.concatenate(ds), np.concatenate(ws)
    key = q * max(len(docids), 1) + d
    uniq, inv = np.unique(key, return_inverse=True)
    eps = np.bincount(inv, weights=w, minlength=len(uniq))
    return Run.from_codes(qids, docids, (uniq // max(len(docids), 1)).astype(np.int32),
                          (uniq % max(len(docids), 1)).astype(np.int32), eps, name)
