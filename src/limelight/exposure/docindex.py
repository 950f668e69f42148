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
     rows (n_rows),                                the shard's row numbers grouped by document,
                                                   query order within one
     scores (n_rows, float32 bits)]                each of those rows' score (the pieces of
                                                   this format's first weeks lack it: rebuilt)

The shard writer's thread writes a shard's piece as it writes the shard (``IndexWriter``, a
``ShardSink``), so that the index costs nothing at the end of a job; pieces of shards written
elsewhere (the Ray engine, a resumed job, a store of the first layout) are built from their
shard files when the store is completed (``complete_index``), which also writes the query
statistics (``query_stats.parquet``). A document's exposing pairs are its rows in each piece,
memory-mapped: a few slices per shard, no pass over the pairs.
"""

from __future__ import annotations

import os
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
def _group(d, score, counts, docs, offs, rows, gscore):  # pragma: no cover - numba
    """A stable counting sort of the rows by document (``counts`` becomes the write positions),
    each row's ``score`` beside it in ``gscore``."""
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
        gscore[counts[x]] = score[i]
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
    out = np.empty(_piece_len(n_queries, k, m), dtype=it)
    out[:_HEADER] = (n_queries, k, m)
    p = _HEADER
    out[p:p + n_queries] = n_ret
    out[p + n_queries:p + 2 * n_queries] = thr.view(it)
    p += 2 * n_queries
    r = p + 2 * k + 1
    _group(d, np.asarray(score, dtype=ft), counts, out[p:p + k], out[p + k:r], out[r:r + m],
           out[r + m:r + 2 * m].view(ft))
    return out


def _piece_len(n_queries: int, k: int, m: int) -> int:
    """The length of a piece of ``n_queries`` queries, ``k`` documents and ``m`` rows."""
    return _HEADER + 2 * n_queries + 2 * k + 1 + 2 * m


def write_piece(store: Path, i: int, piece: np.ndarray) -> None:
    with atomic_path(piece_path(store, i)) as tmp, open(tmp, "wb") as f:
        np.save(f, piece, allow_pickle=False)


class Piece:
    """One shard's index piece (views of the array): ``n_ret``, ``thr`` (per query of the
    shard), ``docs``, ``offs``, ``rows``, ``scores`` (None in a piece of the first weeks; see
    the module docstring) and ``start``, the shard's first row among the store's pairs."""

    __slots__ = ("docs", "n_ret", "offs", "rows", "scores", "start", "thr")

    def __init__(self, a: np.ndarray, start: int = 0):
        nq, k, m = (int(x) for x in a[:_HEADER])
        p = _HEADER
        ft = np.float32 if a.dtype == np.int32 else np.float64
        self.n_ret = a[p:p + nq]
        self.thr = a[p + nq:p + 2 * nq].view(ft)
        p += 2 * nq
        r = p + 2 * k + 1
        self.docs, self.offs, self.rows = a[p:p + k], a[p + k:r], a[r:r + m]
        self.scores = a[r + m:r + 2 * m].view(ft) if len(a) == _piece_len(nq, k, m) else None
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
        a = np.load(p, mmap_mode="r")
        nq, k, m = (int(x) for x in a[:_HEADER])
        return nq == n_queries and len(a) == _piece_len(nq, k, m) and \
            m == pq.read_metadata(shard_path(store, i)).num_rows
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
    """Give every shard of ``store`` its piece (those missing or stale built from the shard),
    write ``query_stats.parquet`` (``q, n_retrieved, threshold``) from the pieces, then the
    document table and the query table (``write_lookup_tables``)."""
    n_shards = (n_queries + shard_size - 1) // shard_size
    (store / INDEX_DIR).mkdir(exist_ok=True)
    for i in range(n_shards):
        s, e = i * shard_size, min(n_queries, (i + 1) * shard_size)
        if not _piece_ok(store, i, e - s):
            write_piece(store, i, _piece_from_shard(store, i, s, e - s, n_docs, depth))
    pieces = load_pieces(store, n_shards)
    _write_query_stats(store, n_shards)
    write_lookup_tables(store, pieces, n_docs, depth)


def _write_query_stats(store: Path, n_shards: int) -> None:
    """``query_stats.parquet`` from the pieces' query sections, read a piece at a time with
    ``pread`` (the memory-mapped pieces' pages would stay resident: 12 bytes a query)."""
    schema = pa.schema([("q", pa.int32()), ("n_retrieved", pa.int32()), ("threshold", pa.float64())])
    with atomic_path(store / QUERY_STATS) as tmp, \
            pq.ParquetWriter(tmp, schema, compression="none", use_dictionary=False) as w:
        q0, rows = 0, []  # a row group per ~2^20 queries
        for i in range(n_shards):
            pf = _PieceFile(piece_path(store, i))
            try:
                n_ret = pf.read(0, pf.nq, "n_ret").astype(np.int32)
                thr = pf.read(pf.nq, 2 * pf.nq, "n_ret").view(
                    np.float32 if pf.dtype == np.int32 else np.float64).astype(np.float64)
            finally:
                pf.close()
            rows.append(pa.record_batch([pa.array(np.arange(q0, q0 + pf.nq, dtype=np.int32)),
                                         pa.array(n_ret), pa.array(thr, from_pandas=True)], schema=schema))
            q0 += pf.nq
            if sum(len(r) for r in rows) >= 1 << 20 or i == n_shards - 1:
                w.write_table(pa.Table.from_batches(rows, schema).combine_chunks())
                rows = []
        if not n_shards:
            w.write_table(schema.empty_table())


# ---- the lookup tables: a document's exposing pairs in one slice, a query's row in O(1) ----------
#
#   DIR/doc_table/offsets.npy   int64 (n_docs + 1): document d's pairs are rows offsets[d]:offsets[d+1]
#   DIR/doc_table/q.npy         int32   the query of each pair        (grouped by document and,
#   DIR/doc_table/rank.npy      int16   its rank (1-based; int32 for   within one, by rank, then
#                                       a depth ≥ 32767)                query id in code-point
#   DIR/doc_table/score.npy     float32 its score                      order: what a lookup shows)
#   DIR/queries.arrow           qid, text, weight (Arrow IPC, uncompressed: memory-mapped, a row
#                               read without reading the columns)
#
# Written from the pieces at the end of a job, a block of documents at a time (bounded memory);
# a store without them (written before they existed) is read through the pieces and the shards.

DOC_TABLE = "doc_table"
QUERY_TABLE = "queries.arrow"
_BLOCK_PAIRS = 1 << 21  # pairs merged at a time (~40 bytes of buffers each: ~80 MB)
_BLOCK_KEYS = 1 << 20  # (document, rank) groups at a time (8 bytes each)


@numba.njit(cache=True, nogil=True)
def _order_block(dl, rank, lexq, n_keys, depth, out):  # pragma: no cover - numba
    """``out``: the rows ordered by (document, rank, ``lexq``) where ``dl`` is the document
    within the block and ``rank`` 1-based (a counting sort on (document, rank), then each group
    of equal (document, rank) sorted by ``lexq``, the queries' code-point order)."""
    cnt = np.zeros(n_keys + 1, np.int64)
    for i in range(len(dl)):
        cnt[dl[i] * depth + rank[i]] += 1  # key + 1 = dl * depth + rank
    for k in range(n_keys):
        cnt[k + 1] += cnt[k]
    pos = cnt[:-1].copy()
    for i in range(len(dl)):
        k = dl[i] * depth + rank[i] - 1
        out[pos[k]] = i
        pos[k] += 1
    for k in range(n_keys):
        a, b = cnt[k], cnt[k + 1]
        if b - a > 1:
            seg = out[a:b].copy()
            o = np.argsort(lexq[seg])
            for t in range(b - a):
                out[a + t] = seg[o[t]]


def _npy_file(path: Path, dtype, n: int):
    """An open ``.npy`` file of ``n`` items of ``dtype`` whose header is written (the items
    follow, appended by the caller)."""
    f = open(path, "wb")
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                            "fortran_order": False, "shape": (int(n),)})
    return f


def _query_lexical_ranks(store: Path) -> np.ndarray:
    """Each query's position among the store's query ids in code-point order (int32 below 2^31
    queries). A query set of one row group is sorted at once; a larger one a row group at a time
    into sorted runs (files in a temporary folder of the store), merged: what is held besides
    the result is one row group's ids and the merge's order (4 or 8 bytes a query)."""
    import heapq
    import shutil

    import pyarrow.compute as pc
    import pyarrow.ipc as ipc

    f = pq.ParquetFile(store / "queries.parquet")
    n, groups = f.metadata.num_rows, f.metadata.num_row_groups
    it = np.int32 if n < 2**31 else np.int64
    lex = np.empty(n, dtype=it)
    if groups <= 1:
        order = pc.sort_indices(f.read(columns=["qid"]).column("qid")).to_numpy()
        lex[order] = np.arange(n, dtype=it)
        return lex
    tmp = store / ".lex.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        runs, start = [], 0
        for g in range(groups):
            qid = f.read_row_group(g, columns=["qid"]).column("qid")
            order = pc.sort_indices(qid)
            run = pa.table({"qid": qid.take(order), "q": pa.array(order.to_numpy().astype(np.int64) + start)})
            runs.append(tmp / f"{g}.arrow")
            with ipc.new_file(str(runs[-1]), run.schema) as w:
                w.write_table(run, max_chunksize=1 << 13)
            start += len(qid)
            del qid, order, run

        def rows(path: Path):
            with pa.OSFile(str(path)) as src:
                r = ipc.open_file(src)
                for i in range(r.num_record_batches):
                    b = r.get_batch(i)
                    yield from zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)

        merged = np.fromiter((q for _, q in heapq.merge(*map(rows, runs))), dtype=it, count=n)
        lex[merged] = np.arange(n, dtype=it)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lex


class _PieceFile:
    """A piece's sections read with ``pread`` (not memory-mapped: the pages read stay in the
    page cache, not in the process's resident memory, so that merging every piece of a large
    store holds one block of rows at a time)."""

    def __init__(self, path: Path):
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            _, _, self.dtype = read(f)
            self.base = f.tell()
        self.fd = os.open(path, os.O_RDONLY)
        nq, k, m = (int(x) for x in self.read(0, _HEADER))
        self.nq, self.k, self.m = nq, k, m
        self.at = {"n_ret": _HEADER, "docs": _HEADER + 2 * nq, "offs": _HEADER + 2 * nq + k,
                   "rows": _HEADER + 2 * nq + 2 * k + 1, "scores": _HEADER + 2 * nq + 2 * k + 1 + m}

    def read(self, start: int, stop: int, section: str | None = None) -> np.ndarray:
        """Items ``start:stop`` of ``section`` (of the whole array without one)."""
        o = self.at[section] if section else 0
        size = self.dtype.itemsize
        buf = os.pread(self.fd, (stop - start) * size, self.base + (o + start) * size)
        return np.frombuffer(buf, dtype=self.dtype)

    def close(self) -> None:
        os.close(self.fd)


def document_counts(store: Path, n_shards: int, n_docs: int) -> np.ndarray:
    """Each document's number of pairs (of exposing queries) over the store's pieces, read a
    piece at a time with ``pread`` (their memory-mapped pages would stay resident)."""
    counts = np.zeros(n_docs, dtype=np.int64)
    for i in range(n_shards):
        pf = _PieceFile(piece_path(store, i))
        try:
            _add_counts(counts, pf)
        finally:
            pf.close()
    return counts


def _add_counts(counts: np.ndarray, pf: _PieceFile) -> None:
    counts[pf.read(0, pf.k, "docs")] += np.diff(pf.read(0, pf.k + 1, "offs"))


def write_doc_table(store: Path, pieces: list[Piece], n_docs: int, depth: int) -> None:
    """``DIR/doc_table`` from the pieces (which must hold their scores), a block of documents at
    a time (at most ``_BLOCK_PAIRS`` pairs, unless one document has more), then renamed into
    place (an interrupted write leaves no table). The pieces are read with ``pread``: besides a
    block's buffers, what it holds per query is the query ids' order (8 bytes a query)."""
    import shutil

    files = [_PieceFile(piece_path(store, i)) for i in range(len(pieces))]
    tmp = store / f".{DOC_TABLE}.tmp"
    out = {}
    try:
        counts = np.zeros(n_docs, dtype=np.int64)
        for pf in files:
            _add_counts(counts, pf)
        off = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        del counts
        kd = max(1, min(depth, n_docs))  # the largest rank a pair can have
        max_docs = max(1, _BLOCK_KEYS // kd)
        bounds = [0]
        while bounds[-1] < n_docs:
            d0 = bounds[-1]
            d1 = int(np.searchsorted(off, off[d0] + _BLOCK_PAIRS, side="right")) - 1
            bounds.append(min(max(d1, d0 + 1), d0 + max_docs, n_docs))
        bounds_a = np.asarray(bounds, dtype=np.int64)
        # each piece's documents at the block bounds (its rows of block t: js[t]:js[t + 1])
        js = [np.searchsorted(pf.read(0, pf.k, "docs"), bounds_a) for pf in files]
        lex = _query_lexical_ranks(store)
        qt = np.int32 if len(lex) < 2**31 else np.int64
        rt = np.int16 if depth < 32767 else np.int32
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        out = {c: _npy_file(tmp / f"{c}.npy", t, off[-1])
               for c, t in (("q", np.int32), ("rank", rt), ("score", np.float32))}
        for t in range(len(bounds) - 1):
            d0, d1 = bounds[t], bounds[t + 1]
            parts = []
            s0 = 0
            for pf, j in zip(files, js, strict=True):
                j0, j1 = int(j[t]), int(j[t + 1])
                if j0 < j1:
                    qo = np.zeros(pf.nq + 1, dtype=np.int64)
                    np.cumsum(pf.read(0, pf.nq, "n_ret"), out=qo[1:])
                    offs = pf.read(j0, j1 + 1, "offs").astype(np.int64)
                    a, b = int(offs[0]), int(offs[-1])
                    r = pf.read(a, b, "rows").astype(np.int64)
                    ql = np.searchsorted(qo, r, side="right") - 1
                    dl = np.repeat((pf.read(j0, j1, "docs") - d0).astype(np.int32), np.diff(offs))
                    sc = pf.read(a, b, "scores").view(np.float32 if pf.dtype == np.int32 else np.float64)
                    parts.append((dl, (ql + s0).astype(qt), (r - qo[ql] + 1).astype(np.int32),
                                  sc.astype(np.float32)))
                    del r, ql
                s0 += pf.nq
            if parts:
                dl, q, rank, score = (np.concatenate(c) for c in zip(*parts, strict=True))
                del parts
                order = np.empty(len(q), dtype=np.int64)
                _order_block(dl, rank, lex[q], (d1 - d0) * kd, kd, order)
                q[order].astype(np.int32, copy=False).tofile(out["q"])
                rank[order].astype(rt).tofile(out["rank"])
                score[order].tofile(out["score"])
                del dl, q, rank, score, order
    finally:
        for f in out.values():
            f.close()
        for pf in files:
            pf.close()
    with open(tmp / "offsets.npy", "wb") as f:
        np.save(f, off, allow_pickle=False)
    shutil.rmtree(store / DOC_TABLE, ignore_errors=True)
    tmp.rename(store / DOC_TABLE)


def write_query_table(store: Path) -> None:
    """``DIR/queries.arrow`` from ``queries.parquet`` (qid, text, weight), a row group at a time."""
    import pyarrow.ipc as ipc

    f = pq.ParquetFile(store / "queries.parquet")
    schema = f.schema_arrow
    cols = ["qid", "text", "weight"]
    # a row group at a time (``iter_batches`` reads ahead and held ~200 MB more at 3.4M queries)
    with atomic_path(store / QUERY_TABLE) as tmp, \
            ipc.new_file(str(tmp), pa.schema([schema.field(c) for c in cols])) as w:
        for g in range(f.metadata.num_row_groups):
            w.write_table(f.read_row_group(g, columns=cols), max_chunksize=1 << 18)


def write_lookup_tables(store: Path, pieces: list[Piece], n_docs: int, depth: int) -> None:
    """The document table and the query table (see above), unless they exist; pieces without
    their scores (a store of this format's first weeks) get neither."""
    if any(p.scores is None for p in pieces):
        return
    if not (store / DOC_TABLE / "offsets.npy").exists():
        write_doc_table(store, pieces, n_docs, depth)
    if not (store / QUERY_TABLE).exists():
        write_query_table(store)


def remove_piece(store: Path, i: int) -> None:
    piece_path(store, i).unlink(missing_ok=True)


def remove_lookup_tables(store: Path) -> None:
    """The document table (and a half-written one) and the query table of ``store``."""
    import shutil

    shutil.rmtree(store / DOC_TABLE, ignore_errors=True)
    shutil.rmtree(store / f".{DOC_TABLE}.tmp", ignore_errors=True)
    (store / QUERY_TABLE).unlink(missing_ok=True)


def remove_index(store: Path) -> None:
    """The index of ``store`` (pieces, half-written ones, query statistics, lookup tables)."""
    import shutil

    shutil.rmtree(store / INDEX_DIR, ignore_errors=True)
    (store / QUERY_STATS).unlink(missing_ok=True)
    remove_lookup_tables(store)
