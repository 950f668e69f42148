"""The pre-registered tests of the issue-26 study (PLAN.md, "Analysis").

Gini differences: a two-level bootstrap that resamples the queries (shared by all systems in a
replicate, as the paired bootstrap of ``limelight.exposure.retrievability``) and, independently
for each system, its training seeds (with replacement): the statistic is the difference of the
seed-averaged Gini, so the interval carries both query sampling and training variance. The
interval is bias-corrected like the library's (``[q_lo − bias, q_hi − bias]``); the two-sided
p-value comes from the bootstrap distribution shifted to the null. R@100: the paper's paired
Student t-test over queries of the seed-averaged recall, plus the same two-level bootstrap
interval. Bonferroni: p × m (capped at 1), m = the number of comparisons in the metric's family.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from limelight.exposure.retrievability import f_matrix, gini, gini_columns, rank_matrix


def f_from_topk(top: np.ndarray, n_docs: int, c: int) -> sp.csr_matrix:
    """Entities × queries 0/1 matrix: entity in the query's top ``c`` (``top``: (n_q, k) entity
    indices, best first, -1 padding)."""
    nq, k = top.shape
    q = np.repeat(np.arange(nq), k)
    r = np.tile(np.arange(1, k + 1), nq)
    d = top.ravel()
    keep = d >= 0
    return f_matrix(rank_matrix(q[keep], d[keep], r[keep], n_docs, nq), c=c)


def recall_at(top: np.ndarray, rel: np.ndarray, k: int = 100) -> np.ndarray:
    """1.0 where the query's relevant entity is in its top ``k``."""
    return (top[:, :k] == np.asarray(rel)[:, None]).any(axis=1).astype(np.float64)


def _resample(rng: np.random.Generator, n: int, b: int) -> np.ndarray:
    return rng.multinomial(n, np.full(n, 1.0 / n), size=b).T.astype(np.float64)


def boot_gini(fs: dict[str, list[sp.csr_matrix]], n_boot: int, seed: int,
              base_w: np.ndarray | None = None, chunk: int = 25) -> dict[str, np.ndarray]:
    """(seeds × n_boot) Gini replicates per system under shared query resamples."""
    nq = next(iter(fs.values()))[0].shape[1]
    w0 = np.ones(nq) if base_w is None else np.asarray(base_w, dtype=np.float64)
    rng = np.random.default_rng(seed)
    out = {m: np.empty((len(v), n_boot)) for m, v in fs.items()}
    for s in range(0, n_boot, chunk):
        b = min(chunk, n_boot - s)
        w = _resample(rng, nq, b) * w0[:, None]
        for m, mats in fs.items():
            for j, f in enumerate(mats):
                out[m][j, s:s + b] = gini_columns(np.asarray(f @ w))
    return out


def boot_gini_blocks(fs: dict[str, list[sp.csr_matrix]], n_base: int, n_boot: int, seed: int,
                     chunk: int = 25) -> dict[str, np.ndarray]:
    """Like ``boot_gini`` for matrices whose columns are ``n_base`` shared queries followed by
    a block of added queries (of any length per system): the shared block is resampled once per
    replicate for every system, each added block on its own (stratified resampling). Systems
    with the same number of added columns (S and C of one system) share their added resample."""
    rng = np.random.default_rng(seed)
    out = {m: np.empty((len(v), n_boot)) for m, v in fs.items()}
    sizes = sorted({v[0].shape[1] - n_base for v in fs.values()})
    for s in range(0, n_boot, chunk):
        b = min(chunk, n_boot - s)
        wq = _resample(rng, n_base, b)
        wa = {k: _resample(rng, k, b) if k else np.zeros((0, b)) for k in sizes}
        for m, mats in fs.items():
            w = np.vstack([wq, wa[mats[0].shape[1] - n_base]])
            for j, f in enumerate(mats):
                out[m][j, s:s + b] = gini_columns(np.asarray(f @ w))
    return out


def seed_average(reps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Seed-averaged replicate per bootstrap column, seeds drawn with replacement."""
    n_seeds, n_boot = reps.shape
    pick = rng.integers(n_seeds, size=(n_boot, n_seeds))
    return reps[pick, np.arange(n_boot)[:, None]].mean(axis=1)


def diff_summary(obs: float, diffs: np.ndarray, alpha: float = 0.05) -> dict:
    """Bias-corrected interval and shifted-null two-sided p of a bootstrap difference."""
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    bias = float(diffs.mean() - obs)
    p = (1 + int(np.sum(np.abs(diffs - diffs.mean()) >= abs(obs)))) / (len(diffs) + 1)
    return {"diff": float(obs), "low": float(lo - bias), "high": float(hi - bias),
            "bias": bias, "p": float(p)}


def gini_tests(fs: dict[str, list[sp.csr_matrix]], pairs: Sequence[tuple[str, str]],
               n_boot: int, seed: int, alpha: float = 0.05,
               base_w: np.ndarray | None = None) -> dict:
    """Point Gini (mean over seeds, with the per-seed values) per system and the two-level
    bootstrap test of every pair ``(a, b)``: Gini(a) − Gini(b)."""
    nq = next(iter(fs.values()))[0].shape[1]
    w0 = np.ones(nq) if base_w is None else np.asarray(base_w, dtype=np.float64)
    per_seed = {m: [gini(np.asarray(f @ w0)) for f in v] for m, v in fs.items()}
    reps = boot_gini(fs, n_boot, seed, w0)
    rng = np.random.default_rng(seed + 1)
    avg = {m: seed_average(reps[m], rng) for m in fs}
    systems = {m: {"gini": float(np.mean(v)), "per_seed": v,
                   "seed_sd": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0}
               for m, v in per_seed.items()}
    tests = {f"{a} vs {b}": diff_summary(systems[a]["gini"] - systems[b]["gini"],
                                         avg[a] - avg[b], alpha) for a, b in pairs}
    return {"systems": systems, "tests": tests}


def recall_tests(rec: dict[str, np.ndarray], pairs: Sequence[tuple[str, str]], n_boot: int,
                 seed: int, alpha: float = 0.05) -> dict:
    """R@100 per system (``rec[m]``: seeds × queries) and, per pair, the paired t-test over
    queries of the seed-averaged recall and the two-level bootstrap interval."""
    from scipy import stats

    nq = next(iter(rec.values())).shape[1]
    rng = np.random.default_rng(seed)
    w = _resample(rng, nq, n_boot) / nq
    avg = {m: seed_average(r @ w, rng) for m, r in rec.items()}
    systems = {m: {"R@100": float(r.mean()), "per_seed": r.mean(axis=1).tolist()}
               for m, r in rec.items()}
    tests = {}
    for a, b in pairs:
        ra, rb = rec[a].mean(axis=0), rec[b].mean(axis=0)
        d = ra - rb
        p_t = 1.0 if not d.any() else float(stats.ttest_rel(ra, rb).pvalue)
        s = diff_summary(float(d.mean()), avg[a] - avg[b], alpha)
        tests[f"{a} vs {b}"] = {**s, "p": p_t, "p_bootstrap": s["p"]}
    return {"systems": systems, "tests": tests}


def bonferroni(tests: dict, m: int) -> None:
    """Add ``p_bonf`` = min(1, p × m) to every test."""
    for t in tests.values():
        t["p_bonf"] = min(1.0, t["p"] * m)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of k successes in n trials."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, float(c - h)), min(1.0, float(c + h))
