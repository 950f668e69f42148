"""An optional differentially private release of a query log's searches (Korolova, Kenthapadi,
Mishra, Ntoulas, "Releasing search queries and clicks privately", WWW 2009), through OpenDP.

The steps of the paper: each searcher contributes at most ``cap`` distinct queries (their first
``cap``, once each: a per-searcher contribution limit); each query's count of contributing
searchers gets Laplace noise; a query is released only when its noisy count clears a threshold
(the noisy threshold that keeps the release of a query only one searcher typed unlikely).

The mechanism is OpenDP's ``make_laplace_threshold`` over the counts under the l0/l1/l∞ distance
(one searcher changes at most ``cap`` counts, each by at most 1): scale ``cap / epsilon``, and the
smallest threshold whose delta (the library's own privacy map) is at most the asked delta. The
epsilon and delta a release states are the library's map of that neighbouring distance, not a
figure computed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from limelight.errors import LimelightError


@dataclass(frozen=True)
class DPRelease:
    """The released searches (normalised text -> noisy count of searchers), and what it
    promises: (epsilon, delta)-DP for each searcher, given at most ``cap`` queries each."""

    counts: dict[str, int]
    epsilon: float
    delta: float
    cap: int
    scale: float
    threshold: int

    def statement(self) -> str:
        """The promise in words, as the pages show it."""
        return (f"Differentially private release (Korolova et al. 2009, OpenDP): epsilon = "
                f"{self.epsilon:g}, delta = {self.delta:.2g} per searcher, each searcher's first "
                f"{self.cap:,} distinct searches counted once; a search is listed when its noisy "
                f"count of searchers reaches {self.threshold:,}.")

    def describe(self) -> dict:
        """What the pages and the API state: epsilon, delta (OpenDP's map), the cap, the
        threshold, how many searches were released, and the statement."""
        return {"epsilon": self.epsilon, "delta": self.delta, "cap": self.cap, "threshold": self.threshold,
                "scale": self.scale, "n_released": len(self.counts), "statement": self.statement()}


def _opendp():
    try:
        import opendp.prelude as dp
    except ImportError:
        raise LimelightError("a DP release needs OpenDP: pip install 'limelight[serve]'") from None
    dp.enable_features("contrib")
    return dp


def capped_counts(searchers, texts, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct texts and, per text, the number of searchers counting it, each searcher counting
    only its first ``cap`` distinct texts (in log order), once each."""
    s = np.asarray(searchers, dtype=object).astype(str)
    t = np.asarray(texts, dtype=object).astype(str)
    _, s_code = np.unique(s, return_inverse=True)
    uniq, t_code = np.unique(t, return_inverse=True)
    pair = s_code.astype(np.int64) * len(uniq) + t_code
    _, first = np.unique(pair, return_index=True)
    first.sort()  # each (searcher, text) once, in log order
    who = s_code[first]
    order = np.argsort(who, kind="stable")
    sorted_who = who[order]
    start = np.r_[0, np.flatnonzero(np.diff(sorted_who)) + 1]
    rank = np.arange(len(order)) - np.repeat(start, np.diff(np.r_[start, len(order)]))
    kept = first[order[rank < cap]]
    counts = np.bincount(t_code[kept], minlength=len(uniq))
    return uniq, counts


def measurement(cap: int, epsilon: float, delta: float):
    """OpenDP's Laplace-threshold measurement over query counts for a searcher bounded to ``cap``
    queries: scale ``cap / epsilon``, the smallest threshold whose delta is at most ``delta``."""
    if cap < 1 or not epsilon > 0 or not 0 < delta < 1:
        raise LimelightError(f"a DP release needs cap >= 1, epsilon > 0, 0 < delta < 1 "
                             f"(got {cap}, {epsilon}, {delta})")
    dp = _opendp()
    space = (dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int)),
             dp.l01inf_distance(dp.absolute_distance(T=int)))
    scale = cap / epsilon
    lo, hi = 1, 2
    def delta_at(t):
        return dp.m.make_laplace_threshold(*space, scale=scale, threshold=t).map((cap, cap, 1))[1]
    while delta_at(hi) > delta:
        lo, hi = hi, hi * 2
    while lo < hi:  # the smallest threshold meeting delta
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if delta_at(mid) <= delta else (mid + 1, hi)
    return dp.m.make_laplace_threshold(*space, scale=scale, threshold=hi), scale, hi


def dp_release(searchers, texts, epsilon: float = 1.0, delta: float = 1e-6, cap: int = 4) -> DPRelease:
    """The DP release of a log's (searcher, normalised text) lines (see the module)."""
    meas, scale, threshold = measurement(cap, epsilon, delta)
    uniq, counts = capped_counts(searchers, texts, cap)
    keep = counts > 0
    released = meas(dict(zip(uniq[keep].tolist(), counts[keep].tolist(), strict=True)))
    eps, dlt = meas.map((cap, cap, 1))
    return DPRelease({k: int(v) for k, v in released.items()}, float(eps), float(dlt), cap, scale,
                     threshold)


def release_log(path, epsilon: float, delta: float = 1e-6, cap: int = 4, since: str | None = None,
                until: str | None = None) -> DPRelease:
    """The DP release of a searcher log file (``limelight.data.searcherlog``: a searcher or
    session column; one period of it with ``since``/``until``), drawn once: the portal serves
    the same noisy counts to every request (drawing anew per request would let repeated asks
    average the noise away)."""
    from limelight.data.searcherlog import searcher_lines

    who, texts = searcher_lines(path, since, until)
    if not len(who):
        raise LimelightError(f"{path}: no search to release")
    return dp_release(who, texts, epsilon, delta, cap)


def release_for_audit(manifest: dict, log: str | None, epsilon: float, delta: float = 1e-6,
                      cap: int = 4) -> DPRelease:
    """``serve --dp-epsilon``: the release of ``log``, by default the audit's own query log when
    its manifest names a file that says who searched (one-line errors otherwise)."""
    from pathlib import Path

    from limelight.data.searcherlog import log_columns

    if log is None:
        source = (manifest.get("queries") or {}).get("source")
        if not source or not Path(str(source)).is_file():
            raise LimelightError("--dp-epsilon needs the searcher log the release counts: give --dp-log FILE "
                                 f"(the audit's query source {source!r} is not a file)")
        log = str(source)
    if not Path(log).is_file():
        raise LimelightError(f"--dp-log {log}: no such file")
    if log_columns(log) is None:
        raise LimelightError(f"{log}:1: a DP release counts searchers, and this log has no searcher or "
                             "session column (e.g. the AOL layout AnonID, Query, QueryTime)")
    return release_log(log, epsilon, delta, cap)
