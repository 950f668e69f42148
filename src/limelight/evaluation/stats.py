"""Comparing systems: sign test, paired t-test, Wilcoxon, Holm-Bonferroni, Tukey HSD,
discriminative power, MC4 rank aggregation and Kendall's τ (section 6.2 of the lexirecall
paper)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class _LazyStats:
    """``scipy.stats`` imported on first use (it costs about a second at import)."""

    def __getattr__(self, name: str):
        from scipy import stats

        return getattr(stats, name)


_st = _LazyStats()


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial sign test of ``wins`` vs ``losses`` (ties dropped)."""
    n = int(wins) + int(losses)
    if n == 0:
        return 1.0
    return float(_st.binomtest(int(wins), n, 0.5).pvalue)


def paired_t(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided paired Student's t-test p-value (1.0 when the differences are all zero)."""
    d = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    if len(d) < 2 or np.all(d == d[0]):
        return 1.0 if np.all(d == 0) or len(d) < 2 else 0.0
    return float(_st.ttest_rel(x, y).pvalue)


def wilcoxon(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value (zero differences dropped; 1.0 if none left)."""
    d = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    if not np.any(d != 0):
        return 1.0
    return float(_st.wilcoxon(d, zero_method="wilcox").pvalue)


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (same order as the input)."""
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    k = len(p)
    if k == 0:
        return p
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate((k - np.arange(k)) * p[order])
    out = np.empty(k)
    out[order] = np.minimum(adj, 1.0)
    return out


def tukey_hsd(scores: np.ndarray) -> np.ndarray:
    """Tukey's HSD for ``k`` systems × ``n`` queries (Carterette 2012): two-way ANOVA without
    interaction (system and topic effects), studentized range on the system means. Returns a
    symmetric ``(k, k)`` p-value matrix (1 on the diagonal)."""
    x = np.asarray(scores, dtype=np.float64)
    k, n = x.shape
    out = np.ones((k, k))
    if k < 2 or n < 2:
        return out
    grand = x.mean()
    sys_m = x.mean(axis=1)
    top_m = x.mean(axis=0)
    resid = x - sys_m[:, None] - top_m[None, :] + grand
    df = (k - 1) * (n - 1)
    mse = (resid ** 2).sum() / df
    diff = np.abs(sys_m[:, None] - sys_m[None, :])
    if mse <= 0:
        return np.where(diff > 0, 0.0, 1.0)
    qstat = diff / np.sqrt(mse / n)
    iu = np.triu_indices(k, 1)
    p = _st.studentized_range.sf(qstat[iu], k, df)
    out[iu] = p
    out[(iu[1], iu[0])] = p
    return out


def discriminative_power(pvalues: np.ndarray, alpha: float = 0.05) -> float:
    """Fraction of run pairs (upper triangle of a ``(k, k)`` matrix) with p < ``alpha``."""
    p = np.asarray(pvalues)
    iu = np.triu_indices(p.shape[0], 1)
    return float((p[iu] < alpha).mean()) if len(iu[0]) else 0.0


@dataclass
class PairOutcome:
    """Wins, ties and losses of run ``a`` against run ``b`` over queries, and the sign test."""

    a: int
    b: int
    wins: int
    ties: int
    losses: int
    p_value: float


def win_tie_loss(prefs: np.ndarray) -> list[PairOutcome]:
    """For every ordered pair ``a != b`` of a ``(k, k, nq)`` preference array."""
    k = prefs.shape[0]
    wins = (prefs > 0).sum(axis=2)
    losses = (prefs < 0).sum(axis=2)
    ties = prefs.shape[2] - wins - losses
    return [PairOutcome(a, b, int(wins[a, b]), int(ties[a, b]), int(losses[a, b]),
                        sign_test(wins[a, b], losses[a, b]))
            for a in range(k) for b in range(k) if a != b]


def sign_test_matrix(prefs: np.ndarray) -> np.ndarray:
    """``(k, k)`` sign-test p-values from per-query preferences."""
    k = prefs.shape[0]
    wins = (prefs > 0).sum(axis=2)
    losses = (prefs < 0).sum(axis=2)
    out = np.ones((k, k))
    for a in range(k):
        for b in range(a + 1, k):
            out[a, b] = out[b, a] = sign_test(wins[a, b], losses[a, b])
    return out


def _betacf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """Continued fraction of the regularized incomplete beta function (modified Lentz),
    vectorized over ``x``; converges fast for ``x < (a + 1) / (a + b + 2)``."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < tiny, tiny, d)
    d = 1.0 / d
    h = d.copy()
    for m in range(1, int(200 + 20 * np.sqrt(max(a, b))) + 1):  # O(sqrt(max(a, b))) needed
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + aa / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            d = 1.0 / d
            delta = d * c
            h = h * delta
        if np.all(np.abs(delta - 1.0) < 1e-15):
            break
    return h


def t_two_sided(t: np.ndarray, df: float) -> np.ndarray:
    """Two-sided p-value ``P(|T| ≥ |t|)`` of Student's t with ``df`` degrees of freedom:
    the regularized incomplete beta ``I_{df/(df+t²)}(df/2, 1/2)``, in numpy (importing
    ``scipy.special`` for ``stdtr`` costs 0.2-0.3 s of a command's start-up)."""
    import math

    t = np.abs(np.asarray(t, dtype=np.float64))
    a, b = df / 2.0, 0.5
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = df / (df + t * t)
        lnx = -np.log1p(t * t / df)  # log x and log(1 - x) without cancellation
        ln1x = np.log(t * t) - np.log(df + t * t)
        front = np.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * lnx + b * ln1x)
        direct = x < (a + 1.0) / (a + b + 2.0)
        xd = np.where(direct, x, 0.0)
        xs = np.where(direct, 1.0, 1.0 - x)
        p = np.where(direct, front * _betacf(xd, a, b) / a, 1.0 - front * _betacf(xs, b, a) / b)
    p = np.where(t == 0, 1.0, np.where(np.isinf(t), 0.0, p))
    return np.clip(p, 0.0, 1.0)


def paired_t_matrix(values: np.ndarray) -> np.ndarray:
    """``(k, k)`` two-sided paired t-test p-values of every pair of rows of ``(k, nq)`` values,
    vectorized (the same values as ``paired_t`` pair by pair, to ~1e-14)."""
    x = np.asarray(values, dtype=np.float64)
    k, n = x.shape
    out = np.ones((k, k))
    if k < 2 or n < 2:
        return out
    a, b = np.triu_indices(k, 1)
    d = x[a] - x[b]  # (pairs, nq)
    sd = d.std(axis=1, ddof=1)
    constant = np.all(d == d[:, :1], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d.mean(axis=1) / (sd / np.sqrt(n))
        p = t_two_sided(np.where(constant, 0.0, t), n - 1)
    p = np.where(constant, np.where(np.all(d == 0, axis=1), 1.0, 0.0), np.minimum(p, 1.0))
    out[a, b] = out[b, a] = p
    return out


def paired_test_matrix(values: np.ndarray, test: str = "t") -> np.ndarray:
    """``(k, k)`` p-values of a paired test (``t`` or ``wilcoxon``) on ``(k, nq)`` values."""
    if test == "t":
        return paired_t_matrix(values)
    fn = paired_t if test == "t" else wilcoxon
    k = values.shape[0]
    out = np.ones((k, k))
    for a in range(k):
        for b in range(a + 1, k):
            out[a, b] = out[b, a] = fn(values[a], values[b])
    return out


def holm_matrix(pvalues: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni over the upper triangle of a symmetric p-value matrix."""
    p = np.array(pvalues, dtype=np.float64)
    iu = np.triu_indices(p.shape[0], 1)
    adj = holm(p[iu])
    out = np.ones_like(p)
    out[iu] = adj
    out[(iu[1], iu[0])] = adj
    return out


def mc4(prefs: np.ndarray, teleport: float = 0.05, tol: float = 1e-12) -> tuple[list[int], np.ndarray]:
    """MC4 rank aggregation (Dwork et al. 2001) of per-query preferences ``(k, k, nq)``.

    From system ``i`` a walker picks ``j`` uniformly; it moves when a majority of the queries
    that separate them prefer ``j`` to ``i``. With teleportation ``teleport`` for ergodicity,
    systems are ordered by their stationary probability (highest first; ties by net wins).
    Returns (order of system indices, stationary distribution).
    """
    k = prefs.shape[0]
    if k == 1:
        return [0], np.ones(1)
    wins = (prefs > 0).sum(axis=2)  # wins[a, b]: queries preferring a to b
    beats = (wins.T > wins).astype(np.float64)  # beats[i, j]: j preferred to i by majority
    np.fill_diagonal(beats, 0.0)
    T = beats / k
    T[np.diag_indices(k)] = 1.0 - T.sum(axis=1)
    T = (1.0 - teleport) * T + teleport / k
    pi = np.full(k, 1.0 / k)
    for _ in range(100000):
        nxt = pi @ T
        if np.abs(nxt - pi).sum() < tol:
            pi = nxt
            break
        pi = nxt
    net = (wins - wins.T).sum(axis=1)
    order = sorted(range(k), key=lambda i: (-round(float(pi[i]), 12), -int(net[i]), i))
    return order, pi


def kendall_tau(order_a: Sequence, order_b: Sequence) -> float:
    """Kendall's τ (tau-b) between two orderings of the same items (best first)."""
    items = list(order_a)
    if sorted(map(str, items)) != sorted(map(str, order_b)):
        raise ValueError("orderings of different items")
    pos_b = {x: i for i, x in enumerate(order_b)}
    ra = np.arange(len(items))
    rb = np.array([pos_b[x] for x in items])
    if len(items) < 2:
        return 1.0
    return float(_st.kendalltau(ra, rb).statistic)


def order_by_values(values: np.ndarray) -> list[int]:
    """Systems ordered by mean value (best first; stable)."""
    v = np.asarray(values, dtype=np.float64)
    means = v.mean(axis=1) if v.ndim == 2 else v
    return [int(i) for i in np.argsort(-means, kind="stable")]
