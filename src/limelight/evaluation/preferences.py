"""Lexicographic preferences between rankings (sections 5.2 and 7.3 of the lexirecall paper).

Preferences are ``+1`` (the first ranking is preferred), ``-1`` (the second) or ``0`` (tie).
All functions take relevance positions (sorted 1-based ranks of the relevant documents,
unretrieved ones imputed pessimistically; padding equal across the compared rankings, as
:func:`~limelight.evaluation.relpos.relevance_positions` builds them).

* lexirecall (eq. 11): compare from the lowest-ranked relevant document upwards; the ranking
  whose relevant document sits higher at the first difference wins (leximin).
* lexiprecision (section 7.3.1): the same from the highest-ranked relevant document down
  (leximax).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.evaluation.kernels import exposure as _exposure
from limelight.evaluation.relpos import QrelsIndex, RelPositions, default_n_docs, stack_positions

if TYPE_CHECKING:  # pandas is imported where used (it costs 0.2 s at start-up)
    import pandas as pd


def _first_difference(p: Sequence[int], q: Sequence[int], last: bool) -> int:
    """+1 if ``p`` ranks better at the first (or ``last``) index where the sorted position
    vectors differ, -1 if worse, 0 if they are equal."""
    a, b = np.sort(np.asarray(p)), np.sort(np.asarray(q))
    if a.shape != b.shape:
        raise ValueError("rankings of one query have the same number of relevant documents")
    diff = np.flatnonzero(a != b)
    if len(diff) == 0:
        return 0
    i = diff[-1] if last else diff[0]
    return 1 if a[i] < b[i] else -1


def lexirecall(p: Sequence[int], q: Sequence[int]) -> int:
    """Lexirecall preference between two relevance-position vectors of one query (eq. 11).

    ``+1`` if ``p`` is preferred: at the largest index ``i`` where they differ, ``p_i < q_i``.
    """
    return _first_difference(p, q, last=True)


def lexiprecision(p: Sequence[int], q: Sequence[int]) -> int:
    """Lexiprecision preference (section 7.3.1): first difference from the top decides."""
    return _first_difference(p, q, last=False)


def pairwise(pos_a: np.ndarray, pos_b: np.ndarray, kind: str = "recall") -> np.ndarray:
    """Per-query preferences (int8) between two padded position arrays of the same queries."""
    if pos_a.shape != pos_b.shape:
        width = max(pos_a.shape[1], pos_b.shape[1])
        pad = max(int(pos_a.max(initial=0)), int(pos_b.max(initial=0)))
        pos_a, pos_b = (np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=pad)
                        for x in (pos_a, pos_b))
    diff = pos_a != pos_b
    anyd = diff.any(axis=1)
    rows = np.arange(len(pos_a))
    if kind == "recall":
        col = pos_a.shape[1] - 1 - np.argmax(diff[:, ::-1], axis=1)
    elif kind == "precision":
        col = np.argmax(diff, axis=1)
    else:
        raise ValueError(f"kind must be 'recall' or 'precision', got {kind!r}")
    s = np.sign(pos_b[rows, col] - pos_a[rows, col])
    return np.where(anyd, s, 0).astype(np.int8)


def lexi_ranks(stack: np.ndarray, kind: str = "recall") -> np.ndarray:
    """Dense lexicographic rank (0 = best) of each of ``k`` rankings per query.

    ``stack`` is ``(k, nq, M)``; one ``lexsort`` over all (query, ranking) rows orders every
    query's rankings at once; equal position vectors share a rank.
    """
    k, nq, M = stack.shape
    flat = stack.transpose(1, 0, 2).reshape(nq * k, M)  # rows grouped by query
    qcol = np.repeat(np.arange(nq), k)
    cols = [flat[:, j] for j in range(M)]
    if kind == "recall":  # primary: query, then the bottom column, upwards
        keys = cols + [qcol]
    elif kind == "precision":  # primary: query, then the top column, downwards
        keys = cols[::-1] + [qcol]
    else:
        raise ValueError(f"kind must be 'recall' or 'precision', got {kind!r}")
    order = np.lexsort(keys)
    srt = flat[order]
    new = np.ones(len(order), dtype=np.int64)
    if len(order) > 1:
        same = (qcol[order][1:] == qcol[order][:-1]) & (srt[1:] == srt[:-1]).all(axis=1)
        new[1:] = ~same
    dense = np.cumsum(new)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = dense
    return rank.reshape(nq, k).T  # comparable within a query only


def preference_matrix(stack: np.ndarray | Sequence[RelPositions], kind: str = "recall") -> np.ndarray:
    """All-pairs per-query preferences: ``out[a, b, q]`` is +1 when run ``a`` is preferred to
    run ``b`` on query ``q`` (int8, antisymmetric)."""
    if not isinstance(stack, np.ndarray):
        stack = stack_positions(stack)
    r = lexi_ranks(stack, kind)
    return np.sign(r[None, :, :] - r[:, None, :]).astype(np.int8)


def metric_preference_matrix(values: np.ndarray) -> np.ndarray:
    """All-pairs per-query preferences from metric values ``(k, nq)``: sign of the difference."""
    v = np.asarray(values, dtype=np.float64)
    return np.sign(v[:, None, :] - v[None, :, :]).astype(np.int8)


def tse(pos: np.ndarray, m: np.ndarray, n: int, exposure: str = "rr", p: float | None = None) -> np.ndarray:
    """Total search efficiency e(p_m) (eq. 3) for an exposure model (``rr``, ``ndcg``, ``rbp``,
    ``lin``) from padded positions; 0 for queries without relevant documents."""
    pos = np.atleast_2d(pos)
    m = np.atleast_1d(np.asarray(m))
    last = pos[np.arange(len(pos)), np.maximum(m - 1, 0)]
    return np.where(m > 0, _exposure(exposure, last, n, p), 0.0)


def worst_off_provider(run: Run, qrels: Qrels, provider_of: Mapping[str, str],
                       exposure: str = "rr", n_docs: int | None = None, threshold: int = 1,
                       p: float | None = None) -> pd.DataFrame:
    """The worst-off provider per query (eq. 6): the provider whose relevant documents get the
    least cumulative positive exposure η (eq. 2) in the pessimistically imputed ranking.

    ``provider_of`` maps document ids to providers; relevant documents without a provider are
    their own provider. Unretrieved relevant documents take the imputed positions
    ``n − u + 1 .. n`` in document-id order. Columns: ``query_id, provider, exposure``.
    """
    qi = QrelsIndex(qrels)
    n = int(n_docs) if n_docs is not None else default_n_docs(qrels, [run])
    sel = qi.rel >= threshold
    rq, rd = qi.q[sel], qi.d[sel]
    docs = qrels.docids.strings[rd]
    # rank of each relevant judgment in the run (0: not retrieved)
    runq = qi.query_recode(run.qids)[run.q]
    dcode = qi.doc_recode(run.docids)[run.d]
    ok = (runq >= 0) & (dcode >= 0)
    key_run = runq[ok] * qi.nd + dcode[ok]
    ranks_run = run.ranks()[ok]
    key_rel = rq * qi.nd + rd
    pos = np.zeros(len(key_rel), dtype=np.int64)
    if len(key_run):
        o = np.argsort(key_run)
        ks, rs = key_run[o], ranks_run[o]
        idx = np.minimum(np.searchsorted(ks, key_rel), len(ks) - 1)
        hit = ks[idx] == key_rel
        pos[hit] = rs[idx[hit]]
    import pandas as pd

    df = pd.DataFrame({"q": rq, "doc": docs, "pos": pos})
    df = df.sort_values(["q", "doc"], kind="stable")
    un = df["pos"] == 0
    cnt = un.groupby(df["q"]).transform("sum")
    order_in = un.astype(int).groupby(df["q"]).cumsum()
    df.loc[un, "pos"] = (n - cnt + order_in)[un]
    prov = df["doc"].map(dict(provider_of))
    df["provider"] = prov.where(prov.notna(), df["doc"])
    df["exposure"] = _exposure(exposure, df["pos"].to_numpy(), n, p)
    eta = df.groupby(["q", "provider"], sort=False)["exposure"].sum().reset_index()
    worst = eta.loc[eta.groupby("q")["exposure"].idxmin()]
    return pd.DataFrame({"query_id": qi.qids.strings[worst["q"].to_numpy()],
                         "provider": worst["provider"].to_numpy(),
                         "exposure": worst["exposure"].to_numpy()}).reset_index(drop=True)
