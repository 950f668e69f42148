"""The exposure store's per-document index: one piece per shard, written beside the shard.

A store's pairs are its Parquet shards (``limelight.exposure.shards``), rows in query order and,
within a query, in rank order (1..n). Row ``i`` of the pairs (the shards concatenated) is
therefore query ``q`` at rank ``i - query_offsets[q] + 1``: the query offsets (the cumulated
number of documents per query) turn a row number into its query and rank.

Each shard ``i`` gets an index piece ``DIR/doc_index/part-NNNNN.npy``: a flat int32 array (int64
for a shard of 2^31 rows or more)::

    [n_queries, n_docs_present, n_rows,            the header (the shard's queries s:e)
     n_retrieved (n_queries),                      documents per query
     threshold (n_queries, float32 bits),          score at rank n (NaN when fewer)
     docs (n_docs_present, ascending),             the documents the shard's pairs hold
     offsets (n_docs_present + 1),                 where each one's rows begin in rows
     rows (n_rows)]                                the shard's row numbers grouped by document,
                                                   query order within one

The shard writer's thread writes a shard's piece as it writes the shard (``IndexWriter``, a
``ShardSink``), so that the index costs nothing at the end of a job; pieces of shards written
elsewhere (the Ray engine, a resumed job, a store of the first layout) are built from their
shard files when the store is completed (``complete_index``), which also writes the query
statistics (``query_stats.parquet``). A document's exposing pairs are its rows in each piece,
memory-mapped: a few slices per shard, no pass over the pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from limelight._io import atomic_path
from limelight.errors import IndexMismatchError
from limelight.exposure.shards import shard_path, write_shard

INDEX_DIR = "doc_index"
QUERY_STATS = "query_stats.parquet"
_HEADER = 3


def piece_path(store: Path, i: int) -> Path:
    return store / INDEX_DIR / f"part-{i:05d}.npy"


# ---- building one piece ---------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _count(q, d, rank, score, q0, n_docs, depth, counts, n_ret, thr):  # pragma: no cover - numba
    """Count each document's rows into ``counts`` and fill each query's ``n_ret`` and ``thr``
    (queries ``q0..q0 + len(n_ret) - 1``); returns the first row that breaks the layout (query
    order, ranks 1..n within a query, codes in range), else -1."""
    nq = len(n_ret)
    for i in range(len(d)):
        qi, di, ri = q[i] - q0, d[i], rank[i]
        if i == 0:
            ok = ri == 1
        else:
            ok = (q[i] == q[i - 1] and ri == rank[i - 1] + 1) or (q[i] > q[i - 1] and ri == 1)
        if not ok or di < 0 or di >= n_docs or qi < 0 or qi >= nq or ri > depth:
            return i
        counts[di] += 1
        n_ret[qi] = ri
        if ri == depth:
            thr[qi] = score[i]
    return -1


@numba.njit(cache=True, nogil=True)
def _group(d, counts, docs, offs, rows):  # pragma: no cover - numba
    """A stable counting sort of the rows by document (``counts`` becomes the write positions)."""
    k = 0
    pos = 0
    for x in range(len(counts)):
        c = counts[x]
        if c:
            docs[k] = x
            offs[k] = pos
            counts[x] = pos
            pos += c
            k += 1
    offs[k] = pos
    for i in range(len(d)):
        x = d[i]
        rows[counts[x]] = i
        counts[x] += 1


def build_piece(q: np.ndarray, d: np.ndarray, rank: np.ndarray, score: np.ndarray, q0: int,
                n_queries: int, n_docs: int, depth: int) -> np.ndarray | int:
    """The index piece of one shard's rows ``(q, d, rank, score)`` (queries ``q0..q0 +
    n_queries - 1``), or the first row that breaks the layout."""
    m = len(d)
    wide = m >= 2**31 - 1 or n_docs >= 2**31 - 1
    it, ft = (np.int64, np.float64) if wide else (np.int32, np.float32)
    counts = np.zeros(n_docs, dtype=it)
    n_ret = np.zeros(n_queries, dtype=it)
    thr = np.full(n_queries, np.nan, dtype=ft)
    bad = _count(q, d, rank, score, q0, n_docs, depth, counts, n_ret, thr)
    if bad >= 0:
        return int(bad)
    k = int(np.count_nonzero(counts))
    out = np.empty(_HEADER + 2 * n_queries + 2 * k + 1 + m, dtype=it)
    out[:_HEADER] = (n_queries, k, m)
    p = _HEADER
    out[p:p + n_queries] = n_ret
    out[p + n_queries:p + 2 * n_queries] = thr.view(it)
    p += 2 * n_queries
    _group(d, counts, out[p:p + k], out[p + k:p + 2 * k + 1], out[p + 2 * k + 1:])
    return out


def write_piece(store: Path, i: int, piece: np.ndarray) -> None:
    with atomic_path(piece_path(store, i)) as tmp, open(tmp, "wb") as f:
        np.save(f, piece, allow_pickle=False)


class Piece:
    """One shard's index piece (views of the array): ``n_ret``, ``thr`` (per query of the
    shard), ``docs``, ``offs``, ``rows`` (see the module docstring) and ``start``, the shard's
    first row among the store's pairs."""

    __slots__ = ("docs", "n_ret", "offs", "rows", "start", "thr")

    def __init__(self, a: np.ndarray, start: int = 0):
        nq, k, m = (int(x) for x in a[:_HEADER])
        p = _HEADER
        self.n_ret = a[p:p + nq]
        self.thr = a[p + nq:p + 2 * nq].view(np.float32 if a.dtype == np.int32 else np.float64)
        p += 2 * nq
        self.docs, self.offs, self.rows = a[p:p + k], a[p + k:p + 2 * k + 1], a[p + 2 * k + 1:p + 2 * k + 1 + m]
        self.start = start

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    def rows_of(self, d: int) -> np.ndarray:
        """Document ``d``'s rows among the store's pairs (int64, ascending)."""
        j = int(np.searchsorted(self.docs, d))
        if j == len(self.docs) or self.docs[j] != d:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.rows[self.offs[j]:self.offs[j + 1]], dtype=np.int64) + self.start


def load_pieces(store: Path, n_shards: int) -> list[Piece]:
    """Every shard's piece, memory-mapped, with its first row."""
    out, start = [], 0
    for i in range(n_shards):
        p = Piece(np.load(piece_path(store, i), mmap_mode="r"), start)
        start += p.n_rows
        out.append(p)
    return out


@numba.njit(cache=True, nogil=True)
def _merge(docs, offs, rows, start, pos, out):  # pragma: no cover - numba
    for j in range(len(docs)):
        x = docs[j]
        p = pos[x]
        for t in range(offs[j], offs[j + 1]):
            out[p] = rows[t] + start
            p += 1
        pos[x] = p


def global_index(pieces: list[Piece], n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, rows)`` over the whole store: document ``d``'s rows are ``rows[offsets[d]:
    offsets[d + 1]]`` (query order), the documents × queries matrix in CSR form."""
    counts = np.zeros(n_docs, dtype=np.int64)
    for p in pieces:
        counts[np.asarray(p.docs)] += np.diff(np.asarray(p.offs))
    off = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    rows = np.empty(int(off[-1]), dtype=np.int64)
    pos = off[:-1].copy()
    for p in pieces:
        _merge(np.asarray(p.docs), np.asarray(p.offs), np.asarray(p.rows), p.start, pos, rows)
    return off, rows


# ---- writing pieces -------------------------------------------------------------------------------


class IndexWriter:
    """The index pieces of a job's shards, written by the shard writer's thread as it writes each
    shard (a ``limelight.exposure.shards.ShardSink``); ``first``: what that thread does before
    the first shard (the store's query and document tables, off the main thread)."""

    def __init__(self, store: Path, n_docs: int, depth: int, shard_size: int,
                 first: Callable[[], None] | None = None):
        self.store, self.n_docs, self.depth, self.shard_size = store, n_docs, depth, shard_size
        self.first = first

    def open(self) -> None:
        (self.store / INDEX_DIR).mkdir(exist_ok=True)
        if self.first is not None:
            self.first()

    def add(self, table: pa.Table, s: int, e: int, info) -> None:
        cols = [table.column(c).to_numpy() for c in ("q", "d", "rank", "score")]
        piece = build_piece(*cols, s, e - s, self.n_docs, self.depth)
        if isinstance(piece, int):  # the writer's own rows: a bug, never data
            raise IndexMismatchError(f"{shard_path(self.store, s // self.shard_size)}: row {piece} "
                                     "is not its query's next rank")
        write_piece(self.store, s // self.shard_size, piece)

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


def _piece_ok(store: Path, i: int, n_queries: int) -> bool:
    """Whether shard ``i`` has a piece that matches it (its queries and its number of rows)."""
    p = piece_path(store, i)
    if not p.exists():
        return False
    try:
        head = np.load(p, mmap_mode="r")[:_HEADER]
        return int(head[0]) == n_queries and int(head[2]) == pq.read_metadata(shard_path(store, i)).num_rows
    except (OSError, ValueError):
        return False


def _piece_from_shard(store: Path, i: int, s: int, n_queries: int, n_docs: int, depth: int) -> np.ndarray:
    """Shard ``i``'s piece from its file; a shard whose rows are not in (query, rank) order (a
    callable retriever's run under the first layout) is first rewritten in that order."""
    path = shard_path(store, i)
    t = pq.ParquetFile(path).read()
    cols = [t.column(c).to_numpy() for c in ("q", "d", "rank", "score")]
    piece = build_piece(*cols, s, n_queries, n_docs, depth)
    if isinstance(piece, int):
        order = np.lexsort((cols[2], cols[0]))
        cols = [c[order] for c in cols]
        piece = build_piece(*cols, s, n_queries, n_docs, depth)
        if isinstance(piece, int):
            raise IndexMismatchError(f"{path}: row {piece} is not its query's next rank (the shard "
                                     "is damaged); remove the store and compute it again")
        write_shard(path, tuple(cols), depth)
    return piece


def complete_index(store: Path, n_queries: int, n_docs: int, depth: int, shard_size: int) -> None:
    """Give every shard of ``store`` its piece (those missing or stale built from the shard) and
    write ``query_stats.parquet`` (``q, n_retrieved, threshold``) from the pieces."""
    n_shards = (n_queries + shard_size - 1) // shard_size
    (store / INDEX_DIR).mkdir(exist_ok=True)
    for i in range(n_shards):
        s, e = i * shard_size, min(n_queries, (i + 1) * shard_size)
        if not _piece_ok(store, i, e - s):
            write_piece(store, i, _piece_from_shard(store, i, s, e - s, n_docs, depth))
    pieces = load_pieces(store, n_shards)
    n_ret = np.concatenate([np.asarray(p.n_ret) for p in pieces]).astype(np.int32)
    thr = np.concatenate([np.asarray(p.thr) for p in pieces]).astype(np.float64)
    table = pa.table({"q": pa.array(np.arange(n_queries, dtype=np.int32)), "n_retrieved": pa.array(n_ret),
                      "threshold": pa.array(thr, from_pandas=True)})
    with atomic_path(store / QUERY_STATS) as tmp:
        pq.write_table(table, tmp, compression="none", use_dictionary=False)


def remove_piece(store: Path, i: int) -> None:
    piece_path(store, i).unlink(missing_ok=True)


def remove_index(store: Path) -> None:
    """The index of ``store`` (pieces, half-written ones, query statistics)."""
    import shutil

    shutil.rmtree(store / INDEX_DIR, ignore_errors=True)
    (store / QUERY_STATS).unlink(missing_ok=True)
