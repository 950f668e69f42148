"""Exact exposure: every (query, document, rank, score) of every query's top-n, stored once.

``compute_exposure`` runs a retriever over a query collection in batches, streams each shard of
queries to a Parquet file (int32 codes, written atomically in a background thread while the next
shard is retrieved) and, in a fresh job, appends it and its queries in the background to the
DuckDB database being built (a resumed job loads all shards in one statement instead); the
database appears, complete, only at the end. A store directory looks like::

    DIR/manifest.json     format, retriever fingerprint and settings, query/doc fingerprints
    DIR/queries.parquet   q, qid, text, weight          (the query set, o_q = weight)
    DIR/documents.parquet d, docid                      (every document of the collection)
    DIR/shards/part-NNNNN.parquet   q int32, d int32, rank int16 (1-based), score float32
    DIR/exposure.duckdb   tables queries (+ n_retrieved, threshold), documents, exposure

Interrupting the job loses at most the shards being written; running it again with the same
retriever and queries skips the finished shards. A store computed with another retriever, depth
or query set is an ``IndexMismatchError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from limelight._io import atomic_path
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import IndexMismatchError, LimelightError, UnknownIdError
from limelight.exposure.retrievability import Retrievability, analyse_pairs, rank_matrix

FORMAT = "limelight-exposure/1"
DB_NAME = "exposure.duckdb"
BUILDING_DB = f".{DB_NAME}.building.tmp"  # filled by the shard writer during a fresh job
SHARD_GLOB = "part-*.parquet"

# ---- fingerprints -------------------------------------------------------------------------------


def _sha(parts: Sequence[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:32]


def ids_fingerprint(ids: IdMap) -> str:
    """A fingerprint of an ordered id set."""
    return _sha(["\x1f".join(ids.strings.tolist()).encode("utf-8")])


def queries_fingerprint(queries: Queries) -> str:
    """A fingerprint of a query set: ids, texts and weights, in order."""
    return _sha([
        "\x1f".join(queries.ids.strings.tolist()).encode("utf-8"),
        "\x1f".join(queries.texts.tolist()).encode("utf-8"),
        np.ascontiguousarray(queries.weights, dtype="<f8").tobytes(),
    ])


def retriever_fingerprint(retriever, doc_ids: IdMap) -> str:
    """A retriever's ``fingerprint`` attribute (or method) when it has one; otherwise its class,
    name, simple settings (numbers, strings) and the fingerprint of its documents."""
    fp = getattr(retriever, "fingerprint", None)
    if callable(fp):
        fp = fp()
    if isinstance(fp, str) and fp:
        return fp
    settings = {}
    with contextlib.suppress(TypeError):
        settings = {k: v for k, v in sorted(vars(retriever).items())
                    if not k.startswith("_") and isinstance(v, int | float | str | bool)}
    cls = type(retriever)
    desc = json.dumps({"class": f"{cls.__module__}.{cls.__qualname__}",
                       "name": str(getattr(retriever, "name", "")), "settings": settings,
                       "docs": ids_fingerprint(doc_ids)}, sort_keys=True, default=str)
    return _sha([desc.encode("utf-8")])


# ---- input validation ---------------------------------------------------------------------------


def validate_queries(queries: Queries) -> None:
    """Raise a one-line ``LimelightError`` for an empty query set, an empty query text or a
    weight that is missing, negative or not finite (duplicate ids cannot exist in an IdMap)."""
    if len(queries) == 0:
        raise LimelightError("the query set is empty")
    queries.check_nonempty()
    w = np.asarray(queries.weights, dtype=np.float64)
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise LimelightError(f"query {queries.ids[i]!r}: weight must be a finite number ≥ 0, got {w[i]}")


# ---- shards -------------------------------------------------------------------------------------


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


class _PairBuffer:
    """Exposure pairs of one job, filled batch by batch in query order (no per-shard copies or
    final concatenation); sized for ``n_queries × depth`` rows, which costs nothing until
    written (the pages are only touched when filled)."""

    def __init__(self, n_queries: int, depth: int, n_total: int, n_docs: int | None = None):
        # a query's top-n holds at most every document: depth beyond that costs nothing
        cap = n_queries * (depth if n_docs is None else min(depth, n_docs))
        self.q = np.empty(cap, np.int32)
        self.d = np.empty(cap, np.int32)
        self.rank = np.empty(cap, _rank_type(depth).to_pandas_dtype())
        self.score = np.empty(cap, np.float32)
        self.pos = 0
        self.depth = depth
        self.n_retrieved = np.zeros(n_total, np.int32)
        self.threshold = np.full(n_total, np.nan)

    def add_topk(self, docs: np.ndarray, scores: np.ndarray, q0: int, lex: np.ndarray) -> None:
        docs, scores, lex, off = _topk_inputs(docs, scores, lex, self.pos)
        n = len(docs)
        # first touch of the new pages in one sequential pass: 2-3x cheaper than the kernel's
        # scattered parallel first writes (measured: ~0.1 s over the Debian log's 9M pairs)
        for a in (self.q, self.d, self.rank, self.score):
            a[self.pos:off[-1]] = 0
        _fill_topk(docs, scores, lex, q0, off, self.q, self.d, self.rank, self.score,
                   self.n_retrieved[q0:q0 + n], self.threshold[q0:q0 + n], self.depth)
        self.pos = int(off[-1])

    def add_rows(self, rows, q0: int, n: int) -> None:
        q, d, rank, score = rows
        e = self.pos + len(q)
        self.q[self.pos:e], self.d[self.pos:e], self.rank[self.pos:e], self.score[self.pos:e] = rows
        self.pos = e
        self.n_retrieved[q0:q0 + n], self.threshold[q0:q0 + n] = _query_info(
            np.asarray(q) - q0, np.asarray(rank), np.asarray(score), n, self.depth)

    def rows(self, start: int = 0, end: int | None = None) -> tuple:
        end = self.pos if end is None else end
        return self.q[start:end], self.d[start:end], self.rank[start:end], self.score[start:end]


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
    return (qpos + q0).astype(np.int32), run.d, run.ranks(), run.score.astype(np.float32)


def write_shard(path: Path, rows, depth: int) -> None:
    """Write one shard's rows ``(q, d, rank, score)`` (or their Arrow table) atomically (a
    temporary file renamed onto ``path``): writing the same shard again replaces it whole."""
    table = rows if isinstance(rows, pa.Table) else _shard_table(*rows, depth)
    with atomic_path(path) as tmp:
        # no dictionary pages: 4-5x faster to write for these int columns
        pq.write_table(table, tmp, compression="lz4", use_dictionary=False)


def _search_topk(retriever, queries: Queries, b: int, be: int, depth: int, doc_ids: IdMap
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``search_batch`` over queries ``b:be``, checked: ``(docs, scores)`` with ≤ ``depth`` columns
    (the retriever is asked for at most as many documents as the collection has)."""
    docs, scores = retriever.search_batch(queries.texts[b:be].tolist(), min(depth, len(doc_ids)))
    docs = np.asarray(docs)
    if docs.shape[0] != be - b:
        raise LimelightError(f"retriever returned {docs.shape[0]} rows for {be - b} queries")
    if docs.shape[1] > depth:
        docs, scores = docs[:, :depth], np.asarray(scores)[:, :depth]
    if docs.size and int(docs.max()) >= len(doc_ids):
        raise LimelightError("retriever returned a document code outside its collection")
    return docs, np.asarray(scores)


def _batch_rows(retriever, queries: Queries, b: int, be: int, depth: int, doc_ids: IdMap,
                lex: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The exposure rows of queries ``b:be`` (codes ``b..be-1``) under ``retriever``."""
    if hasattr(retriever, "search_batch"):
        return _rows_from_topk(*_search_topk(retriever, queries, b, be, depth, doc_ids), b, lex)
    sub = queries.take(np.arange(b, be))
    return _rows_from_run(retriever(sub, min(depth, len(doc_ids))), sub, doc_ids, b, depth)


class _ShardWriter:
    """Writes shards atomically in a background thread (pyarrow and DuckDB run native code, but
    take the GIL briefly and often: see ``_short_gil_switch``).

    With ``db``, each shard is also appended to the ``exposure`` table of a new DuckDB file at
    that path, and its rows of ``qtable`` (``_queries_table``; with their ``n_retrieved`` and
    ``threshold`` from ``info``, filled by the caller before ``put``) to its ``queries`` table, so that the database is
    complete when the last shard is written. The Parquet write of a shard runs beside its
    DuckDB inserts (a second thread), which shortens the tail after the last batch."""

    def __init__(self, folder: Path, depth: int, db: Path | None = None,
                 qtable: pa.Table | None = None,
                 info: tuple[np.ndarray, np.ndarray] | None = None, materialize: bool = True):
        self.folder, self.depth, self.db, self.materialize = folder, depth, db, materialize
        self.qtable, self.info = qtable, info
        self.q: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.t = threading.Thread(target=self._loop, name="limelight-shard-writer", daemon=True)
        self.t.start()

    def _open_db(self):
        import duckdb

        # one DuckDB thread: the inserts overlap the retriever, which has the other cores
        con = duckdb.connect(str(self.db), config={"threads": 1})
        if self.materialize:
            rt = "SMALLINT" if _rank_type(self.depth) == pa.int16() else "INTEGER"
            con.execute(f"CREATE TABLE exposure (q INTEGER, d INTEGER, rank {rt}, score FLOAT)")
        for sql in _documents_sql(self.folder.parent):
            con.execute(sql)
        con.execute("CREATE TABLE queries (q INTEGER, qid VARCHAR, text VARCHAR, weight DOUBLE, "
                    "n_retrieved INTEGER, threshold DOUBLE)")
        return con

    def _loop(self) -> None:
        con = None
        pool = ThreadPoolExecutor(1, thread_name_prefix="limelight-parquet")
        try:
            if self.db is not None:
                con = self._open_db()
        except BaseException as e:  # reported to the main thread
            self.error = e
        try:
            while True:
                item = self.q.get()
                if item is None:
                    break
                if self.error is not None:
                    continue
                path, rows, s, e = item
                try:
                    table = _shard_table(*rows, self.depth)
                    written = pool.submit(write_shard, path, table, self.depth)
                    try:
                        if con is not None:
                            if self.materialize:
                                con.register("shard", table)
                                con.execute("INSERT INTO exposure SELECT q, d, rank, score FROM shard")
                            con.register("shard", _with_query_info(self.qtable.slice(s, e - s), self.info, s, e))
                            con.execute("INSERT INTO queries SELECT * FROM shard")
                            con.unregister("shard")
                    finally:
                        written.result()
                except BaseException as err:
                    self.error = err
            if con is not None and self.error is None:
                con.execute("CREATE UNIQUE INDEX queries_q ON queries (q)")
                if not self.materialize:
                    _exposure_view(con, self.folder.parent)
                con.execute("CHECKPOINT")  # nothing left in a write-ahead log beside the file
        except BaseException as e:
            self.error = self.error or e
        finally:
            pool.shutdown()
            if con is not None:
                con.close()

    def put(self, path: Path, rows, s: int, e: int) -> None:
        """Queue the rows of the shard at ``path``, which holds queries ``s:e``."""
        if self.error is not None:
            raise self.error
        self.q.put((path, rows, s, e))

    def close(self) -> None:
        self.q.put(None)
        self.t.join()
        if self.error is not None:
            raise self.error


class _DeferredInterrupt:
    """Within the shard loop, Ctrl-C (SIGINT) sets a flag that the loop checks between batches,
    so that an interrupt never lands inside a native kernel (numba turns it into a
    ``SystemError``); a second Ctrl-C interrupts at once. Only active in the main thread."""

    def __init__(self):
        self.hit = False
        self.prev = None

    def __enter__(self) -> _DeferredInterrupt:
        if threading.current_thread() is threading.main_thread():
            self.prev = signal.getsignal(signal.SIGINT)
            if self.prev is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._handler)
            else:
                self.prev = None
        return self

    def _handler(self, signum, frame) -> None:
        if self.hit:
            raise KeyboardInterrupt
        self.hit = True

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self.prev is not None:
            signal.signal(signal.SIGINT, self.prev)


@contextlib.contextmanager
def _short_gil_switch(seconds: float = 0.0002):
    """Lower Python's GIL switch interval (default 5 ms) for the shard loop, restoring it after.

    The main thread's query analysis (a regex pass) holds the GIL for whole switch intervals,
    and pyarrow and DuckDB's Python client, though they run native code, take the GIL briefly
    and often; with 5 ms slices the writer threads wait most of the time instead of using the
    core the analysis leaves idle (measured: DuckDB inserts beside a GIL-bound thread 3.1 s
    instead of 0.8 s; 1.3 s at 1 ms)."""
    import sys

    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def shard_path(store: Path, i: int) -> Path:
    return store / "shards" / f"part-{i:05d}.parquet"


def resolve_query_id(ids: IdMap, qid: str, where: str | None = None) -> int:
    """``ids.lookup(qid)``, else the one id ``SOURCE:QID`` whose ``QID`` is ``qid`` (query-log
    ids keep their source, as the log's qids repeat across sources)."""
    if qid in ids:
        return ids.lookup(qid)
    suffix = f":{qid}"
    cands = [s for s in ids.strings.tolist() if s.endswith(suffix) and s.count(":") == 1] \
        if ":" not in qid else []
    if len(cands) == 1:
        return ids.lookup(cands[0])
    if cands:
        shown = ", ".join(cands[:5]) + (f", … ({len(cands)} in all)" if len(cands) > 5 else "")
        raise LimelightError(f"query id {qid!r} is ambiguous{' in ' + where if where else ''}: "
                             f"{shown}; give SOURCE:QID")
    raise UnknownIdError("query", qid, where)


# ---- the store -----------------------------------------------------------------------------------


@dataclass(eq=False)
class ExposureStore:
    """An exposure store directory: the query set, the documents, and every exposure pair."""

    path: Path
    manifest: dict
    queries: Queries
    doc_ids: IdMap
    _ranks: sp.csr_matrix | None = field(default=None, repr=False)
    _pairs: tuple | None = field(default=None, repr=False)

    # -- opening --
    @classmethod
    def open(cls, path: str | os.PathLike, require_complete: bool = True) -> ExposureStore:
        """Open a store written by ``compute_exposure``."""
        path = Path(path)
        man = path / "manifest.json"
        if not man.exists():
            raise LimelightError(f"{path}: not an exposure store (no manifest.json; create one with "
                                 "`limelight exposure compute`)")
        try:
            manifest = json.loads(man.read_text())
        except json.JSONDecodeError as e:
            raise IndexMismatchError(f"{man}: corrupt manifest ({e.msg})") from None
        if manifest.get("format") != FORMAT:
            raise IndexMismatchError(f"{man}: unsupported store format {manifest.get('format')!r}")
        if require_complete and not (manifest.get("complete") and (path / DB_NAME).exists()):
            raise LimelightError(f"{path}: the exposure job has not finished (run `limelight "
                                 "exposure compute` again with the same arguments to resume)")
        qt = pq.read_table(path / "queries.parquet")
        queries = Queries(IdMap(qt.column("qid").to_pylist(), kind="query"),
                          np.asarray(qt.column("text").to_pylist(), dtype=object),
                          qt.column("weight").to_numpy(), name=manifest.get("queries_name", "queries"))
        dt = pq.read_table(path / "documents.parquet")
        docs = IdMap(dt.column("docid").to_pylist(), kind="document")
        return cls(path, manifest, queries, docs)

    @property
    def depth(self) -> int:
        return int(self.manifest["depth"])

    @property
    def n_shards(self) -> int:
        return int(self.manifest["n_shards"])

    def shard_files(self) -> list[Path]:
        return [shard_path(self.path, i) for i in range(self.n_shards)]

    # -- in-memory views --
    def pairs(self) -> pa.Table:
        """Every exposure pair (q, d, rank, score) read from the shards (columnar)."""
        tables = [pq.read_table(p) for p in self.shard_files()]
        return pa.concat_tables(tables) if tables else _shard_table(
            np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), self.depth)

    def pair_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every exposure pair as numpy arrays ``(q, d, rank, score)`` in query order."""
        if self._pairs is None:
            t = self.pairs()
            self._pairs = tuple(t.column(c).to_numpy() for c in ("q", "d", "rank", "score"))
        return self._pairs  # type: ignore[return-value]

    def ranks(self) -> sp.csr_matrix:
        """Documents × queries sparse matrix of 1-based ranks (0 = not in the query's top-n)."""
        if self._ranks is None:
            q, d, rank, _ = self.pair_arrays()
            self._ranks = rank_matrix(q, d, rank, len(self.doc_ids), len(self.queries))
        return self._ranks

    def retrievability(self, c: int = 100, beta: float | None = None,
                       weights: np.ndarray | None = None) -> Retrievability:
        """r(d) over every document with the stored o_q (or ``weights``), Gini and coverage."""
        if c > self.depth:
            raise LimelightError(f"cutoff c={c} exceeds the store's depth {self.depth}")
        q, d, rank, _ = self.pair_arrays()
        w = self.queries.weights if weights is None else weights
        return analyse_pairs(q, d, rank, self.doc_ids, w, c, beta)

    def n_exposing(self, c: int | None = None) -> np.ndarray:
        """Number of queries that expose each document (within rank ``c``, default the depth)."""
        _, d, rank, _ = self.pair_arrays()
        keep = slice(None) if c is None else rank <= c
        return np.bincount(d[keep], minlength=len(self.doc_ids))

    # -- database --
    def connect(self, read_only: bool = True):
        """A DuckDB connection to ``exposure.duckdb``."""
        import duckdb

        con = duckdb.connect(str(self.path / DB_NAME), read_only=read_only)
        # a store built with materialize=False reads its shards through a relative view
        con.execute("SET file_search_path = ?", [str(self.path.resolve())])
        return con

    def exposing_queries(self, docid: str) -> list[dict]:
        """The queries whose top-n contains ``docid``: ``{"qid", "query", "rank", "score"}``
        sorted by rank (1-based), then query id."""
        d = self.doc_ids.lookup(docid)
        with self.connect() as con:
            rows = con.execute(
                "SELECT qu.qid, qu.text, e.rank, e.score FROM exposure e JOIN queries qu USING (q) "
                "WHERE e.d = ? ORDER BY e.rank, qu.qid", [d]).fetchall()
        return [{"qid": a, "query": b, "rank": int(c), "score": float(s)} for a, b, c, s in rows]

    def query_code(self, qid: str) -> int:
        """The code of query ``qid``: its id, or for a query-log id ``SOURCE:QID`` the bare
        ``QID`` when one source only has it (an error lists the candidates otherwise)."""
        return resolve_query_id(self.queries.ids, qid, str(self.path))

    def exposed_documents(self, qid: str) -> list[dict]:
        """What query ``qid`` exposes: ``{"docid", "rank", "score"}`` sorted by rank."""
        q = self.query_code(qid)
        with self.connect() as con:
            rows = con.execute(
                "SELECT dc.docid, e.rank, e.score FROM exposure e JOIN documents dc USING (d) "
                "WHERE e.q = ? ORDER BY e.rank", [q]).fetchall()
        return [{"docid": a, "rank": int(r), "score": float(s)} for a, r, s in rows]

    def thresholds(self) -> np.ndarray:
        """Each query's score at rank n (NaN when it retrieved fewer than n documents)."""
        with self.connect() as con:
            t = con.execute("SELECT threshold FROM queries ORDER BY q").fetchnumpy()["threshold"]
        return np.asarray(np.ma.filled(np.ma.asarray(t, dtype=np.float64), np.nan))


def _query_info(q: np.ndarray, rank: np.ndarray, score: np.ndarray, nq: int,
                depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the number of documents retrieved and the score at rank ``depth`` (NaN when
    fewer were retrieved), from the exposure pairs."""
    n_retrieved = np.bincount(q, minlength=nq).astype(np.int32)
    threshold = np.full(nq, np.nan, dtype=np.float64)
    at = rank == depth
    threshold[q[at]] = score[at]
    return n_retrieved, threshold


def _queries_table(queries: Queries) -> pa.Table:
    """The query set as the first columns of the ``queries`` table."""
    return pa.table({"q": pa.array(np.arange(len(queries), dtype=np.int32)),
                     "qid": pa.array(queries.ids.strings.tolist(), pa.string()),
                     "text": pa.array(queries.texts.tolist(), pa.string()),
                     "weight": pa.array(np.asarray(queries.weights, dtype=np.float64))})


def _with_query_info(table: pa.Table, info: tuple[np.ndarray, np.ndarray], s: int, e: int
                     ) -> pa.Table:
    """``table`` (queries ``s:e``) with their ``n_retrieved`` and ``threshold`` (NaN: null)."""
    n_retrieved, threshold = info
    return (table.append_column("n_retrieved", pa.array(n_retrieved[s:e]))
            .append_column("threshold", pa.array(threshold[s:e], from_pandas=True)))


def _documents_sql(store: Path) -> list[str]:
    """Statements creating the ``documents`` table (and its index) from ``documents.parquet``."""
    dpath = str(store / "documents.parquet").replace("'", "''")
    return [f"CREATE TABLE documents AS SELECT d, docid FROM read_parquet('{dpath}') ORDER BY d",
            "CREATE UNIQUE INDEX documents_d ON documents (d)"]


def _load_database(store: Path, queries: Queries, n_retrieved: np.ndarray, threshold: np.ndarray,
                   art_indexes: bool = False, materialize: bool = True,
                   built: Path | None = None, qtable: pa.Table | None = None) -> None:
    """Build ``exposure.duckdb`` atomically: ``exposure`` from all Parquet shards in one
    statement, ``documents``, and ``queries`` (with ``n_retrieved`` and ``threshold``).

    ``materialize=False`` makes ``exposure`` a view over the shards (relative to the store;
    ``ExposureStore.connect`` sets DuckDB's ``file_search_path`` to it) instead of a copy.
    ``built``: a DuckDB file in which the shard writer already built every table (the view too,
    for ``materialize=False``); it becomes the database. ``qtable``: ``_queries_table(queries)``
    when the caller has it already.
    """
    import duckdb

    final = store / DB_NAME
    if built is not None:  # the shard writer built every table
        if art_indexes and materialize:
            con = duckdb.connect(str(built))
            try:
                _art_indexes(con)
                con.execute("CHECKPOINT")
            finally:
                con.close()
        os.replace(built, final)
        return
    qtable = _with_query_info(qtable if qtable is not None else _queries_table(queries),
                              (n_retrieved, threshold), 0, len(queries))
    with atomic_path(final) as tmp:
        tmp.unlink()  # DuckDB creates the file itself
        con = duckdb.connect(str(tmp))
        try:
            # shards are in query order, so DuckDB's per-row-group min/max (zone maps) serve
            # "what does query q expose" directly; "which queries expose d" scans (~10-20 ms for
            # 9M pairs) unless art_indexes adds ART indexes (seconds to build on 9M pairs)
            if materialize:
                glob = str(store / "shards" / SHARD_GLOB).replace("'", "''")
                con.execute(f"CREATE TABLE exposure AS SELECT q, d, rank, score FROM read_parquet('{glob}')")
            else:
                _exposure_view(con, store)
            for sql in _documents_sql(store):
                con.execute(sql)
            con.register("query_table", qtable)
            con.execute("CREATE TABLE queries AS SELECT * FROM query_table")
            con.unregister("query_table")
            con.execute("CREATE UNIQUE INDEX queries_q ON queries (q)")
            if art_indexes and materialize:
                _art_indexes(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        wal = Path(str(tmp) + ".wal")
        if wal.exists():
            wal.unlink()


def _exposure_view(con, store: Path) -> None:
    """``exposure`` as a view over the store's shards (paths relative to the store)."""
    con.execute("SET file_search_path = ?", [str(store.resolve())])
    con.execute(f"CREATE VIEW exposure AS SELECT q, d, rank, score FROM read_parquet('shards/{SHARD_GLOB}')")


def _art_indexes(con) -> None:
    con.execute("CREATE INDEX exposure_d ON exposure (d)")
    con.execute("CREATE INDEX exposure_q ON exposure (q)")


def _remove_db(path: Path) -> None:
    """Remove a DuckDB file and its write-ahead log."""
    path.unlink(missing_ok=True)
    Path(str(path) + ".wal").unlink(missing_ok=True)


def _write_manifest(store: Path, manifest: dict) -> None:
    with atomic_path(store / "manifest.json") as tmp:
        tmp.write_text(json.dumps(manifest, indent=1))


def compute_exposure(
    retriever,
    queries: Queries,
    out: str | os.PathLike,
    depth: int = 100,
    doc_ids: IdMap | None = None,
    shard_size: int = 8192,
    batch_size: int | None = None,
    fingerprint: str | None = None,
    settings: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
    load: bool = True,
    art_indexes: bool = False,
    materialize: bool = True,
    engine: str = "local",
    address: str | None = None,
    engine_options: dict | None = None,
) -> ExposureStore:
    """Compute (or resume) the exact exposure of ``queries`` under ``retriever`` into ``out``.

    ``retriever`` is anything with ``search_batch(texts, k) -> (docs, scores)`` (padded ``-1``)
    and ``doc_ids``, or a callable ``f(queries, k) -> Run`` (then ``doc_ids`` is required).
    ``progress(done, total)`` is called with numbers of queries. ``art_indexes`` adds DuckDB ART
    indexes on ``exposure(d)`` and ``exposure(q)``; ``materialize=False`` makes ``exposure`` a
    DuckDB view over the Parquet shards instead of a table (no load cost). ``fingerprint`` identifies the
    retriever (default: ``retriever_fingerprint``); ``settings`` are recorded in the manifest.
    ``engine="ray"`` computes the shards as Ray tasks (``limelight.scale``) on the cluster at
    ``address`` (a local one when ``None``); the store is the same, and either engine resumes a
    store the other started; ``engine_options`` go to ``limelight.scale.compute_shards``
    (``cpus_per_task``, ``write_on``, ``max_retries``, ``num_cpus``).
    """
    if engine not in ("local", "ray"):
        raise LimelightError(f"unknown engine {engine!r} (local or ray)")
    if address is not None and engine != "ray":
        raise LimelightError("an address goes with engine='ray'")
    if depth < 1:
        raise LimelightError(f"depth must be ≥ 1, got {depth}")
    if shard_size < 1:
        raise LimelightError(f"shard size must be ≥ 1, got {shard_size}")
    validate_queries(queries)
    has_batch = hasattr(retriever, "search_batch")
    if not has_batch and not callable(retriever):
        raise LimelightError("retriever must have search_batch(texts, k) or be a callable returning a Run")
    doc_ids = doc_ids if doc_ids is not None else getattr(retriever, "doc_ids", None)
    if doc_ids is None:
        raise LimelightError("doc_ids is required for a retriever without doc_ids")
    if len(doc_ids) == 0:
        raise LimelightError("the collection has no documents")
    store = Path(out)
    nq = len(queries)
    n_shards = (nq + shard_size - 1) // shard_size
    manifest = {
        "format": FORMAT,
        "retriever": fingerprint or retriever_fingerprint(retriever, doc_ids),
        "settings": settings or {"retriever": str(getattr(retriever, "name", type(retriever).__name__))},
        "depth": int(depth),
        "shard_size": int(shard_size),
        "n_shards": int(n_shards),
        "n_queries": nq,
        "n_docs": len(doc_ids),
        "queries": queries_fingerprint(queries),
        "queries_name": queries.name,
        "documents": ids_fingerprint(doc_ids),
    }
    keys = ("format", "retriever", "depth", "shard_size", "n_queries", "n_docs", "queries", "documents")
    man_path = store / "manifest.json"
    qtable = None  # the query set as Arrow, built once (queries.parquet and the writer's table)
    if man_path.exists():
        try:
            old = json.loads(man_path.read_text())
        except json.JSONDecodeError:
            raise IndexMismatchError(f"{man_path}: corrupt manifest; remove {store} to start over") from None
        diff = [k for k in keys if old.get(k) != manifest[k]]
        if diff and not old.get("complete") and not _committed_shards(store):
            _clear_store(store)  # an unfinished job without a finished shard: nothing to keep
        elif diff:
            raise IndexMismatchError(_mismatch_message(store, old, manifest, diff))
        elif old.get("complete") and (store / DB_NAME).exists():
            if progress:
                progress(nq, nq)
            return ExposureStore.open(store)
    created = not man_path.exists()  # a new store: removed again if the job fails before a shard
    if created:
        if store.exists() and any(store.iterdir()):
            raise LimelightError(f"{store}: exists and is not an exposure store; use an empty or new directory")
        store.mkdir(parents=True, exist_ok=True)
        # the query set and documents first, so that a partial store is self-describing
        qtable = _queries_table(queries)
        with atomic_path(store / "queries.parquet") as tmp:
            pq.write_table(qtable, tmp)
        with atomic_path(store / "documents.parquet") as tmp:
            pq.write_table(pa.table({"d": pa.array(np.arange(len(doc_ids), dtype=np.int32)),
                                     "docid": pa.array(doc_ids.strings.tolist(), pa.string())}), tmp)
        _write_manifest(store, {**manifest, "complete": False})
    try:
        return _run_job(retriever, queries, store, manifest, depth, doc_ids, shard_size, batch_size,
                        progress, load, art_indexes, materialize, engine, address, engine_options,
                        qtable)
    except BaseException:
        if created and not _committed_shards(store):
            _clear_store(store)  # nothing finished: a rerun (with other arguments too) starts afresh
        raise


def _committed_shards(store: Path) -> list[Path]:
    """The finished shard files of a store (written atomically: a listed file is complete)."""
    return sorted((store / "shards").glob(SHARD_GLOB))


def _clear_store(store: Path) -> None:
    """Remove what ``compute_exposure`` writes into a store (the directory too when left empty)."""
    import shutil

    shutil.rmtree(store / "shards", ignore_errors=True)
    for p in ("manifest.json", "queries.parquet", "documents.parquet"):
        (store / p).unlink(missing_ok=True)
    for p in store.glob(".*.tmp"):
        _remove_db(p) if p.is_file() else shutil.rmtree(p, ignore_errors=True)
    _remove_db(store / DB_NAME)
    with contextlib.suppress(OSError):
        store.rmdir()


_DIFFERENCES = {"retriever": "another index or retriever", "queries": "another query set",
                "n_queries": "another query set", "documents": "another collection",
                "n_docs": "another collection", "depth": "another depth",
                "shard_size": "another shard size", "format": "another format"}


def _mismatch_message(store: Path, old: dict, new: dict, diff: list[str]) -> str:
    """One line naming everything that differs between a store's manifest and this job."""
    what = list(dict.fromkeys(_DIFFERENCES[k] for k in diff))
    details = []
    for k in diff:
        if k == "retriever":
            so, sn = old.get("settings") or {}, new.get("settings") or {}
            changed = [f"{x} {so.get(x)!r} → {sn.get(x)!r}" for x in sorted(set(so) | set(sn))
                       if so.get(x) != sn.get(x)]
            details.append(", ".join(changed) if changed else "same settings, the index or retriever changed")
        elif k == "queries":
            if "n_queries" not in diff:
                details.append("same number of queries, other ids, texts or weights")
        elif k == "documents":
            if "n_docs" not in diff:
                details.append("other document ids")
        else:
            details.append(f"{k} {old.get(k)} → {new[k]}")
    return (f"{store}: this exposure store was computed with {' and '.join(what)} "
            f"({'; '.join(details)}); use another --out or remove it")


def _run_job(retriever, queries: Queries, store: Path, manifest: dict, depth: int, doc_ids: IdMap,
             shard_size: int, batch_size: int | None, progress, load: bool, art_indexes: bool,
             materialize: bool, engine: str, address: str | None, engine_options: dict | None,
             qtable: pa.Table | None) -> ExposureStore:
    """The shards still missing from ``store``, then its database (see ``compute_exposure``)."""
    nq = len(queries)
    n_shards = int(manifest["n_shards"])
    has_batch = hasattr(retriever, "search_batch")
    shards = store / "shards"
    shards.mkdir(exist_ok=True)
    for stale in shards.glob(".*.tmp"):  # left by a job killed mid-write
        stale.unlink(missing_ok=True)
    for stale in store.glob(f".{DB_NAME}*.tmp"):
        _remove_db(stale)
    todo = [i for i in range(n_shards) if not shard_path(store, i).exists()]
    done = nq - sum(min(shard_size, nq - i * shard_size) for i in todo)
    if progress:
        progress(done, nq)
    bs = batch_size or shard_size
    lex = doc_ids.lexical_rank() if has_batch and todo else None
    timings = {"retrieve_s": 0.0}
    if engine == "ray" and todo:
        from limelight.scale.exposure import compute_shards

        t0 = time.perf_counter()
        compute_shards(retriever, queries, store, todo, depth=depth, shard_size=shard_size,
                       batch_size=bs, doc_ids=doc_ids, lex=lex, address=address,
                       progress=progress, done=done, **(engine_options or {}))
        timings["retrieve_s"] = time.perf_counter() - t0
        todo = []
    # a fresh local job builds the DuckDB table while it retrieves (resumed jobs load the shards)
    fresh = bool(todo) and len(todo) == n_shards
    building = store / BUILDING_DB if fresh and load else None
    if building is not None and qtable is None:
        qtable = _queries_table(queries)
    buf = _PairBuffer(sum(min(shard_size, nq - i * shard_size) for i in todo), depth, nq, len(doc_ids))
    try:
        writer = _ShardWriter(shards, depth, building, qtable, (buf.n_retrieved, buf.threshold),
                              materialize)
        with _DeferredInterrupt() as intr, _short_gil_switch():
            try:
                for i in todo:
                    s, e = i * shard_size, min(nq, (i + 1) * shard_size)
                    start = buf.pos
                    for b in range(s, e, bs):
                        intr.check()
                        be = min(e, b + bs)
                        t0 = time.perf_counter()
                        if has_batch:
                            buf.add_topk(*_search_topk(retriever, queries, b, be, depth, doc_ids), b, lex)
                        else:
                            sub = queries.take(np.arange(b, be))
                            buf.add_rows(_rows_from_run(retriever(sub, min(depth, len(doc_ids))),
                                                        sub, doc_ids, b, depth),
                                         b, be - b)
                        timings["retrieve_s"] += time.perf_counter() - t0
                        if progress:
                            done += be - b
                            progress(done, nq)
                        intr.check()
                    writer.put(shard_path(store, i), buf.rows(start, buf.pos), s, e)
            finally:
                writer.close()
    except BaseException:
        if building is not None:
            _remove_db(building)
        raise
    t0 = time.perf_counter()
    st = ExposureStore(store, {**manifest, "complete": False}, queries, doc_ids)
    if fresh:  # computed in this call: keep the pairs in memory for analysis
        st._pairs = buf.rows()
    if load:
        if fresh:
            info = (buf.n_retrieved, buf.threshold)
        else:
            q, _, rank, score = st.pair_arrays()
            info = _query_info(q, rank, score, nq, depth)
        _load_database(store, queries, *info, art_indexes=art_indexes, materialize=materialize, qtable=qtable,
                       built=building)
        st.manifest["complete"] = True
        _write_manifest(store, st.manifest)
    timings["load_s"] = time.perf_counter() - t0
    st.manifest = {**st.manifest, "timings": timings}
    return st


def exposure_from_run(run: Run, queries: Queries, doc_ids: IdMap, out: str | os.PathLike,
                      depth: int | None = None, shard_size: int = 8192) -> ExposureStore:
    """A store from an existing ``Run`` (e.g. read from a TREC file) over ``doc_ids``."""
    depth = depth or int(run.depths().max(initial=1))
    by_q = run

    def fn(sub: Queries, k: int) -> Run:
        codes = by_q.qids.encode(sub.ids.strings, missing=-1)
        keep = np.isin(by_q.q, codes[codes >= 0])
        return Run.from_codes(by_q.qids, by_q.docids, by_q.q[keep], by_q.d[keep], by_q.score[keep],
                              by_q.name, sort=False)

    return compute_exposure(fn, queries, out, depth=depth, doc_ids=doc_ids, shard_size=shard_size,
                            fingerprint=f"run:{run.name}:{len(run)}")
