"""The rows of an exposure store and the shard files that hold them.

Every (query, document, rank, score) of every query's top-n, as ``(q, d, rank, score)`` arrays:
computed batch by batch from a retriever (``batch_rows``; a top-k kernel orders tied scores as
a ``Run`` does), collected in a ``_PairBuffer`` and written as ``shards/part-NNNNN.parquet``
files (``write_shard``, atomic) by a background ``_ShardWriter``::

    shards/part-NNNNN.parquet   q int32, d int32, rank int16 (1-based), score float32

A shard file that exists is complete (``_committed_shards``). Its rows are in query order and,
within a query, in rank order (1..n): ``limelight.exposure.store`` relies on it to turn a row
number into a query and a rank. Both engines (``limelight.exposure.engine``) compute and write
shards with this code.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from limelight._io import atomic_path
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError, UnknownIdError

SHARD_GLOB = "part-*.parquet"


def shard_path(store: Path, i: int) -> Path:
    return store / "shards" / f"part-{i:05d}.parquet"


def _committed_shards(store: Path) -> list[Path]:
    """The finished shard files of a store (written atomically: a listed file is complete)."""
    return sorted((store / "shards").glob(SHARD_GLOB))


def _rank_type(depth: int) -> pa.DataType:
    return pa.int16() if depth < 32767 else pa.int32()


def _shard_table(q: np.ndarray, d: np.ndarray, rank: np.ndarray, score: np.ndarray,
                 depth: int) -> pa.Table:
    rt = _rank_type(depth)
    return pa.table({
        "q": pa.array(np.ascontiguousarray(q, dtype=np.int32)),
        "d": pa.array(np.ascontiguousarray(d, dtype=np.int32)),
        "rank": pa.array(np.ascontiguousarray(rank, dtype=rt.to_pandas_dtype())),
        "score": pa.array(np.ascontiguousarray(score, dtype=np.float32)),
    })


# q and rank repeat or count up (lz4 shrinks them ~50x); d and score barely compress (~10-20%)
# and are stored plain: half the CPU of lz4 on every column and 4x faster to read (measured on
# the Debian log's 8.9M pairs: 0.10 vs 0.19 CPU-s to write, 72 vs 60 MB). Statistics (min/max)
# for q only: a shard's rows are in query order, so a reader filtering on q (DuckDB's view of
# the shards, ExposureStore.connect) skips row groups by their q range; d, rank and score span
# their whole range in every shard.
SHARD_COMPRESSION = {"q": "lz4", "rank": "lz4", "d": "none", "score": "none"}
SHARD_STATISTICS = ["q"]
# row groups of 64k rows: a reader of a few rows (a document's scores) decodes ~256 KB of a
# column instead of the shard's whole column (~2.4 MB per 8,192 queries); no cost to write
SHARD_ROW_GROUP = 65536


def write_shard(path: Path, rows, depth: int) -> None:
    """Write one shard's rows ``(q, d, rank, score)`` (or their Arrow table) atomically (a
    temporary file renamed onto ``path``): writing the same shard again replaces it whole."""
    table = rows if isinstance(rows, pa.Table) else _shard_table(*rows, depth)
    with atomic_path(path) as tmp:
        # no dictionary pages: 4-5x faster to write for these int columns
        pq.write_table(table, tmp, compression=SHARD_COMPRESSION, use_dictionary=False,
                       write_statistics=SHARD_STATISTICS, row_group_size=SHARD_ROW_GROUP)


# ---- the top-k kernel ----------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, parallel=True)
def _fill_topk(docs, scores, lex, q0, off, out_q, out_d, out_rank, out_score, n_ret, thr,
               depth):  # pragma: no cover - numba
    """Per row ``i`` of padded top-k arrays (rows in parallel): its valid entries, ordered as a
    ``Run`` orders them (trec_eval's rule: score desc, then lexical rank of the doc id desc) by an
    insertion sort (linear unless there are ties: the rows arrive sorted by score), written at
    ``off[i]`` of the output arrays with query ``q0 + i`` and 1-based ranks; ``n_ret[i]`` gets the
    row's number of documents and ``thr[i]`` its score at rank ``depth`` (NaN when fewer)."""
    n, k = docs.shape
    for i in numba.prange(n):
        o = off[i]
        c = 0
        for j in range(k):
            dj = docs[i, j]
            if dj < 0:
                continue
            sj = np.float32(scores[i, j])
            lj = lex[dj]
            m = c - 1
            while m >= 0 and (out_score[o + m] < sj or (out_score[o + m] == sj and lex[out_d[o + m]] < lj)):
                out_d[o + m + 1] = out_d[o + m]
                out_score[o + m + 1] = out_score[o + m]
                m -= 1
            out_d[o + m + 1] = dj
            out_score[o + m + 1] = sj
            c += 1
        for j in range(c):
            out_q[o + j] = q0 + i
            out_rank[o + j] = j + 1
        n_ret[i] = c
        thr[i] = out_score[o + depth - 1] if c == depth else np.nan


def _topk_inputs(docs: np.ndarray, scores: np.ndarray, lex: np.ndarray, start: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``_fill_topk``'s inputs: contiguous docs/scores/lex and each row's output offset from ``start``."""
    docs = np.ascontiguousarray(docs, dtype=np.int32)
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    off = np.empty(len(docs) + 1, np.int64)
    off[0] = 0
    np.cumsum((docs >= 0).sum(axis=1), out=off[1:])
    off += start
    return docs, scores, np.ascontiguousarray(lex, dtype=np.int64), off


def _rows_from_topk(docs: np.ndarray, scores: np.ndarray, q0: int, lex: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows (q, d, 1-based rank, score) of padded top-k arrays whose first row is query ``q0``,
    tied scores ordered as in a ``Run`` (``lex``: the doc ids' lexical ranks)."""
    docs, scores, lex, off = _topk_inputs(docs, scores, lex, 0)
    n, k = docs.shape
    m = int(off[-1])
    rows = (np.empty(m, np.int32), np.empty(m, np.int32), np.empty(m, np.int32), np.empty(m, np.float32))
    _fill_topk(docs, scores, lex, q0, off, *rows, np.empty(n, np.int32), np.empty(n), k)
    return rows


def _query_info(q: np.ndarray, rank: np.ndarray, score: np.ndarray, nq: int,
                depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the number of documents retrieved and the score at rank ``depth`` (NaN when
    fewer were retrieved), from the exposure pairs."""
    n_retrieved = np.bincount(q, minlength=nq).astype(np.int32)
    threshold = np.full(nq, np.nan, dtype=np.float64)
    at = rank == depth
    threshold[q[at]] = score[at]
    return n_retrieved, threshold


# ---- rows of a batch of queries -------------------------------------------------------------------


def _rows_from_run(run: Run, sub: Queries, doc_ids: IdMap, q0: int, depth: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of a ``Run`` returned by a callable for the queries ``sub`` (first one is ``q0``)."""
    if not isinstance(run, Run):
        raise LimelightError(f"the retriever callable returned {type(run).__name__}, not a Run")
    run = run.with_doc_map(doc_ids).topk(depth)
    qpos = sub.ids.encode(run.qids.strings, missing=-1)[run.q]
    if (qpos < 0).any():
        bad = run.qids[int(run.q[np.flatnonzero(qpos < 0)[0]])]
        raise UnknownIdError("query", bad, "the retriever's run")
    rows = ((qpos + q0).astype(np.int32), run.d, run.ranks(), run.score.astype(np.float32))
    if len(qpos) > 1 and (np.diff(qpos) < 0).any():  # the run's queries in another order: the store's
        order = np.argsort(qpos, kind="stable")  # rank order within a query is kept
        rows = tuple(a[order] for a in rows)
    return rows


#: a batch's ``search_batch`` calls: the first is given ``CHECK_CHUNK`` queries, the next as many
#: as take about ``CHECK_SECONDS`` at the rate measured so far; a deferred Ctrl-C is tested
#: between them (``progress.check_interrupt``), so that a large batch (a shard of 8,192 queries
#: over a large index) stops within a second (a native kernel cannot be stopped midway), while a
#: fast one is cut in few calls (BM25 over the Debian catalog: 8,192 queries in 2 calls)
CHECK_CHUNK, CHECK_SECONDS = 1024, 0.5


def _search_topk(retriever, queries: Queries, b: int, be: int, depth: int, doc_ids: IdMap
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``search_batch`` over queries ``b:be`` (in chunks, a deferred Ctrl-C tested between them:
    ``CHECK_CHUNK``), checked: ``(docs, scores)`` with ≤ ``depth`` columns (the retriever is
    asked for at most as many documents as the collection has)."""
    import time

    from limelight.progress import check_interrupt

    k = min(depth, len(doc_ids))
    parts, c, n = [], b, CHECK_CHUNK
    while c < be:
        if c > b:
            check_interrupt()
        e = min(be, c + n)
        t0 = time.perf_counter()
        parts.append(retriever.search_batch(queries.texts_between(c, e), k))
        rate = (e - c) / max(time.perf_counter() - t0, 1e-6)  # queries a second
        n, c = max(64, int(rate * CHECK_SECONDS)), e
    if len(parts) <= 1:
        docs, scores = parts[0] if parts else retriever.search_batch(queries.texts_between(b, be), k)
    else:  # (the chunks' widths can differ: a retriever pads to the most any query found)
        width = max(np.asarray(d).shape[1] for d, _ in parts)
        docs = np.full((be - b, width), -1, dtype=np.asarray(parts[0][0]).dtype)
        scores = np.zeros((be - b, width), dtype=np.asarray(parts[0][1]).dtype)
        row = 0
        for d, sc in parts:
            d = np.asarray(d)
            docs[row:row + len(d), :d.shape[1]] = d
            scores[row:row + len(d), :d.shape[1]] = sc
            row += len(d)
    docs = np.asarray(docs)
    if docs.shape[0] != be - b:
        raise LimelightError(f"retriever returned {docs.shape[0]} rows for {be - b} queries")
    if docs.shape[1] > depth:
        docs, scores = docs[:, :depth], np.asarray(scores)[:, :depth]
    if docs.size and int(docs.max()) >= len(doc_ids):
        raise LimelightError("retriever returned a document code outside its collection")
    return docs, np.asarray(scores)


def _run_rows(retriever, queries: Queries, b: int, be: int, depth: int, doc_ids: IdMap
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of queries ``b:be`` under a callable retriever ``f(queries, k) -> Run``."""
    sub = queries.slice(b, be)
    return _rows_from_run(retriever(sub, min(depth, len(doc_ids))), sub, doc_ids, b, depth)


def batch_rows(retriever, queries: Queries, b: int, be: int, depth: int, doc_ids: IdMap,
                lex: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The exposure rows of queries ``b:be`` (codes ``b..be-1``) under ``retriever``."""
    if hasattr(retriever, "search_batch"):
        return _rows_from_topk(*_search_topk(retriever, queries, b, be, depth, doc_ids), b, lex)
    return _run_rows(retriever, queries, b, be, depth, doc_ids)


def _huge_empty(n: int, dtypes: list) -> list[np.ndarray]:
    """Empty arrays of ``n`` items of each of ``dtypes``, in one anonymous mapping that asks for
    transparent huge pages (``MADV_HUGEPAGE``): the first writes then fault 2 MiB at a time.
    With 4 KiB pages the first touch of the Debian log's 124 MB of pairs cost 0.1-0.35 s of
    page faults in the main thread, 12 ms with huge pages (measured). Falls back to
    ``np.empty`` where the platform lacks it; freed with the arrays."""
    import mmap

    sizes = [(n * np.dtype(t).itemsize + 63) // 64 * 64 for t in dtypes]
    if n == 0 or not hasattr(mmap, "MADV_HUGEPAGE") or not hasattr(mmap, "MAP_ANONYMOUS"):
        return [np.empty(n, t) for t in dtypes]
    try:
        m = mmap.mmap(-1, sum(sizes), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):
        return [np.empty(n, t) for t in dtypes]
    out, off = [], 0
    for t, size in zip(dtypes, sizes, strict=True):
        out.append(np.frombuffer(m, dtype=t, count=n, offset=off))
        off += size
    return out


class _PairBuffer:
    """Exposure pairs of one job, filled batch by batch in query order (no per-shard copies or
    final concatenation); sized for ``n_queries × depth`` rows, which costs nothing until
    written (the pages are only touched when filled)."""

    def __init__(self, n_queries: int, depth: int, n_total: int, n_docs: int | None = None):
        # a query's top-n holds at most every document: depth beyond that costs nothing
        cap = n_queries * (depth if n_docs is None else min(depth, n_docs))
        self.q, self.d, self.rank, self.score = _huge_empty(
            cap, [np.int32, np.int32, _rank_type(depth).to_pandas_dtype(), np.float32])
        self.pos = 0
        self.depth = depth
        # each query's n_retrieved and threshold, from query ``base`` on: the whole job's, or
        # (``restart``) one shard's at a time, so that nothing held grows with the queries
        self.base = 0
        self.n_retrieved = np.zeros(n_total, np.int32)
        self.threshold = np.full(n_total, np.nan)

    def restart(self, q0: int) -> None:
        """Empty the buffer for the rows of queries from ``q0`` on (a shard at a time)."""
        self.pos, self.base = 0, q0
        self.n_retrieved[:] = 0
        self.threshold[:] = np.nan

    def add_topk(self, docs: np.ndarray, scores: np.ndarray, q0: int, lex: np.ndarray) -> None:
        docs, scores, lex, off = _topk_inputs(docs, scores, lex, self.pos)
        n = len(docs)
        # first touch of the new pages in one sequential pass: 2-3x cheaper than the kernel's
        # scattered parallel first writes (measured: ~0.1 s over the Debian log's 9M pairs)
        for a in (self.q, self.d, self.rank, self.score):
            a[self.pos:off[-1]] = 0
        _fill_topk(docs, scores, lex, q0, off, self.q, self.d, self.rank, self.score,
                   self.n_retrieved[q0 - self.base:q0 - self.base + n],
                   self.threshold[q0 - self.base:q0 - self.base + n], self.depth)
        self.pos = int(off[-1])

    def add_rows(self, rows, q0: int, n: int) -> None:
        q, d, rank, score = rows
        e = self.pos + len(q)
        self.q[self.pos:e], self.d[self.pos:e], self.rank[self.pos:e], self.score[self.pos:e] = rows
        self.pos = e
        i = q0 - self.base
        self.n_retrieved[i:i + n], self.threshold[i:i + n] = _query_info(
            np.asarray(q) - q0, np.asarray(rank), np.asarray(score), n, self.depth)

    def rows(self, start: int = 0, end: int | None = None) -> tuple:
        end = self.pos if end is None else end
        return self.q[start:end], self.d[start:end], self.rank[start:end], self.score[start:end]

    def info(self, s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
        """``n_retrieved`` and ``threshold`` of queries ``s:e`` (filled by ``add_*``)."""
        return self.n_retrieved[s - self.base:e - self.base], self.threshold[s - self.base:e - self.base]


# ---- the writer thread ----------------------------------------------------------------------------


class ShardSink(Protocol):
    """What else receives each shard as the ``_ShardWriter`` writes it (none in the store
    itself since the pairs are stored once; kept for engines that stream shards elsewhere);
    every method runs in the writer's thread: ``open`` first, ``add`` per shard, ``finish``
    after the last shard when nothing failed, ``close`` always."""

    def open(self) -> None: ...

    def add(self, table: pa.Table, s: int, e: int, info: tuple[np.ndarray, np.ndarray]) -> None: ...

    def finish(self) -> None: ...

    def close(self) -> None: ...


class _ShardWriter:
    """Writes shards atomically in a background thread (pyarrow runs native code, but takes the
    GIL briefly and often: see ``engine._short_gil_switch``).

    With a ``sink``, each shard's Arrow table also goes to ``sink.add`` (with its queries'
    ``n_retrieved`` and ``threshold``), beside the Parquet write of the shard (a second thread),
    which shortens the tail after the last batch."""

    def __init__(self, depth: int, sink: ShardSink | None = None):
        self.depth, self.sink = depth, sink
        self.q: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.t = threading.Thread(target=self._loop, name="limelight-shard-writer", daemon=True)
        self.t.start()

    def _write(self, pool: ThreadPoolExecutor, path: Path, rows, s: int, e: int, info) -> None:
        table = _shard_table(*rows, self.depth)
        written = pool.submit(write_shard, path, table, self.depth)
        try:
            if self.sink is not None:
                self.sink.add(table, s, e, info)
        finally:
            written.result()

    def _loop(self) -> None:
        pool = ThreadPoolExecutor(1, thread_name_prefix="limelight-parquet")
        try:
            if self.sink is not None:
                self.sink.open()
        except BaseException as e:  # reported to the main thread
            self.error = e
        try:
            while True:
                item = self.q.get()
                if item is None:
                    break
                if self.error is not None:
                    continue
                try:
                    self._write(pool, *item)
                except BaseException as err:
                    self.error = err
            if self.sink is not None and self.error is None:
                self.sink.finish()
        except BaseException as e:
            self.error = self.error or e
        finally:
            pool.shutdown()
            if self.sink is not None:
                self.sink.close()

    def put(self, path: Path, rows, s: int, e: int, info: tuple[np.ndarray, np.ndarray]) -> None:
        """Queue the rows of the shard at ``path``, which holds queries ``s:e`` (``info``: their
        ``n_retrieved`` and ``threshold``, for the sink)."""
        if self.error is not None:
            raise self.error
        self.q.put((path, rows, s, e, info))

    def close(self) -> None:
        self.q.put(None)
        self.t.join()
        if self.error is not None:
            raise self.error
