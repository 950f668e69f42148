"""An exposure store on disk and its DuckDB database.

A store directory looks like::

    DIR/manifest.json     format, retriever fingerprint and settings, query/doc fingerprints
    DIR/queries.parquet   q, qid, text, weight          (the query set, o_q = weight)
    DIR/documents.parquet d, docid                      (every document of the collection)
    DIR/shards/part-NNNNN.parquet   q int32, d int32, rank int16 (1-based), score float32
    DIR/exposure.duckdb   tables queries (+ n_retrieved, threshold), documents, exposure

``ExposureStore`` opens one and answers from it; the database is built either shard by shard
while a fresh job runs (``_DatabaseBuilder``, the shard writer's sink) or from every shard in
one statement (``_load_database``). ``limelight.exposure.compute`` writes stores.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from limelight._io import atomic_path
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import IndexMismatchError, LimelightError, UnknownIdError
from limelight.exposure.retrievability import Retrievability, analyse_pairs, rank_matrix
from limelight.exposure.shards import SHARD_GLOB, _rank_type, _shard_table, shard_path

FORMAT = "limelight-exposure/1"
DB_NAME = "exposure.duckdb"
BUILDING_DB = f".{DB_NAME}.building.tmp"  # filled by the shard writer during a fresh job


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


# ---- writing a store ----------------------------------------------------------------------------


def _write_manifest(store: Path, manifest: dict) -> None:
    with atomic_path(store / "manifest.json") as tmp:
        tmp.write_text(json.dumps(manifest, indent=1))


def _queries_table(queries: Queries) -> pa.Table:
    """The query set as the first columns of the ``queries`` table."""
    return pa.table({"q": pa.array(np.arange(len(queries), dtype=np.int32)),
                     "qid": pa.array(queries.ids.strings.tolist(), pa.string()),
                     "text": pa.array(queries.texts.tolist(), pa.string()),
                     "weight": pa.array(np.asarray(queries.weights, dtype=np.float64))})


def _write_inputs(store: Path, queries: Queries, doc_ids: IdMap) -> pa.Table:
    """Write ``queries.parquet`` and ``documents.parquet``; returns ``_queries_table(queries)``."""
    qtable = _queries_table(queries)
    with atomic_path(store / "queries.parquet") as tmp:
        pq.write_table(qtable, tmp)
    with atomic_path(store / "documents.parquet") as tmp:
        pq.write_table(pa.table({"d": pa.array(np.arange(len(doc_ids), dtype=np.int32)),
                                 "docid": pa.array(doc_ids.strings.tolist(), pa.string())}), tmp)
    return qtable


def _with_query_info(table: pa.Table, info: tuple[np.ndarray, np.ndarray]) -> pa.Table:
    """``table`` (rows of queries) with their ``n_retrieved`` and ``threshold`` (NaN: null)."""
    n_retrieved, threshold = info
    return (table.append_column("n_retrieved", pa.array(n_retrieved))
            .append_column("threshold", pa.array(threshold, from_pandas=True)))


def _documents_sql(store: Path) -> list[str]:
    """Statements creating the ``documents`` table (and its index) from ``documents.parquet``."""
    dpath = str(store / "documents.parquet").replace("'", "''")
    return [f"CREATE TABLE documents AS SELECT d, docid FROM read_parquet('{dpath}') ORDER BY d",
            "CREATE UNIQUE INDEX documents_d ON documents (d)"]


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


class _DatabaseBuilder:
    """The database of a fresh job, built at ``path`` shard by shard as the shard writer writes
    (a ``shards.ShardSink``: every method runs in the writer's thread). Each shard is appended
    to the ``exposure`` table (unless ``materialize=False``: then ``exposure`` becomes a view
    over the shards at the end), and its rows of ``qtable`` (``_queries_table``, with their
    ``n_retrieved`` and ``threshold``) to ``queries``, so that the database is complete when
    the last shard is written; ``finished`` says it is."""

    def __init__(self, store: Path, depth: int, qtable: pa.Table, materialize: bool = True):
        self.store, self.path, self.depth = store, store / BUILDING_DB, depth
        self.qtable, self.materialize = qtable, materialize
        self.con = None
        self.finished = False

    def open(self) -> None:
        import duckdb

        # one DuckDB thread: the inserts overlap the retriever, which has the other cores
        self.con = con = duckdb.connect(str(self.path), config={"threads": 1})
        if self.materialize:
            rt = "SMALLINT" if _rank_type(self.depth) == pa.int16() else "INTEGER"
            con.execute(f"CREATE TABLE exposure (q INTEGER, d INTEGER, rank {rt}, score FLOAT)")
        for sql in _documents_sql(self.store):
            con.execute(sql)
        con.execute("CREATE TABLE queries (q INTEGER, qid VARCHAR, text VARCHAR, weight DOUBLE, "
                    "n_retrieved INTEGER, threshold DOUBLE)")

    def add(self, table: pa.Table, s: int, e: int, info: tuple[np.ndarray, np.ndarray]) -> None:
        """Append a shard (queries ``s:e``; ``info``: their ``n_retrieved`` and ``threshold``)."""
        con = self.con
        if self.materialize:
            con.register("shard", table)
            con.execute("INSERT INTO exposure SELECT q, d, rank, score FROM shard")
        con.register("shard", _with_query_info(self.qtable.slice(s, e - s), info))
        con.execute("INSERT INTO queries SELECT * FROM shard")
        con.unregister("shard")

    def finish(self) -> None:
        con = self.con
        con.execute("CREATE UNIQUE INDEX queries_q ON queries (q)")
        if not self.materialize:
            _exposure_view(con, self.store)
        con.execute("CHECKPOINT")  # nothing left in a write-ahead log beside the file
        self.finished = True

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


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
                              (n_retrieved, threshold))
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
