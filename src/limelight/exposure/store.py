"""An exposure store on disk: the pairs once, as Parquet shards, and a per-document index.

A store directory looks like::

    DIR/manifest.json         format, retriever fingerprint and settings, query/doc fingerprints
    DIR/queries.parquet       q, qid, text, weight          (the query set, o_q = weight)
    DIR/documents.parquet     d, docid                      (every document of the collection)
    DIR/shards/part-NNNNN.parquet      q int32, d int32, rank int16 (1-based), score float32
    DIR/doc_index/part-NNNNN.npy       the shard's rows grouped by document (and its queries'
                                       number of documents and threshold)
    DIR/query_stats.parquet   q, n_retrieved, threshold     (written when the job completes)
    DIR/doc_table/*.npy       every pair again, grouped by document and ordered as a lookup
                              shows them (rank, then query id): q, rank, score and offsets
    DIR/queries.arrow         the query set as Arrow IPC (memory-mapped: a row costs a slice)

The shards are the only copy of the pairs (``limelight.exposure.shards`` writes them, one file per
shard of queries, atomically), their rows in query order and, within a query, in rank order, so
that a row number is a query and a rank (``limelight.exposure.docindex``). Each shard's index
piece lists its row numbers grouped by document; the pieces are memory-mapped, so a document's
exposing queries cost a few slices and a read of the score column, never a pass over the pairs.
``manifest.json`` says ``complete`` once every piece and ``query_stats.parquet`` are written (it
is written last, atomically). The document table and ``queries.arrow`` (``docindex.
write_lookup_tables``) make a document's lookup one slice of four memory-mapped files and a
gather of its queries' rows: its cost is the document's number of exposing queries, not the
store's size (no column of the store is read to open it or to look a document up). Stores
written before they existed are read through the pieces and the shards, as before.

DuckDB reads the store without a copy: ``ExposureStore.connect()`` gives an in-memory connection
whose ``exposure`` is a view over the shards and whose ``queries`` (with ``n_retrieved`` and
``threshold``) and ``documents`` are the small tables.

Stores of the first layout (``limelight-exposure/1``: the same shards plus a DuckDB copy of the
pairs in ``exposure.duckdb``) are migrated when opened: their files re-encoded as this layout
writes them (the same rows), the index built from the shards, the manifest rewritten and the
DuckDB copy removed. A store that cannot be migrated (not writable) is a one-line error naming
the command that rebuilds it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from limelight._io import atomic_path
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import IndexMismatchError, LimelightError, UnknownIdError
from limelight.exposure.docindex import (
    DOC_TABLE,
    INDEX_DIR,
    QUERY_STATS,
    QUERY_TABLE,
    Piece,
    complete_index,
    document_counts,
    global_index,
    load_pieces,
    remove_index,
)
from limelight.exposure.retrievability import Retrievability, analyse_pair_chunks, analyse_pairs
from limelight.exposure.shards import SHARD_GLOB, _huge_empty, _shard_table, shard_path, write_shard

FORMAT = "limelight-exposure/2"
OLD_FORMAT = "limelight-exposure/1"  # the pairs twice: Parquet shards and exposure.duckdb
DB_NAME = "exposure.duckdb"  # the first layout's DuckDB copy (removed by the migration)
BUILDING_DB = f".{DB_NAME}.building.tmp"  # what a job of the first layout left while running


def resolve_query_id(ids: IdMap | pa.Array | pa.ChunkedArray, qid: str, where: str | None = None) -> int:
    """The code of query ``qid`` among ``ids`` (an ``IdMap``, or the store's Arrow column of
    query ids: searched without a Python object per id), else of the one id ``SOURCE:QID``
    whose ``QID`` is ``qid`` (query-log ids keep their source, as the log's qids repeat across
    sources)."""
    import pyarrow.compute as pc

    if isinstance(ids, IdMap):
        if qid in ids:
            return ids.lookup(qid)
        col = ids.to_arrow()
    else:
        col = ids
        i = pc.index(col, pa.scalar(qid, pa.string())).as_py()
        if i >= 0:
            return int(i)
    cands: list[tuple[int, str]] = []
    if ":" not in qid:
        hit = pc.and_(pc.ends_with(col, f":{qid}"), pc.equal(pc.count_substring(col, ":"), 1))
        pos = np.flatnonzero(np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool))
        cands = list(zip(pos.tolist(), col.take(pa.array(pos)).to_pylist(), strict=True))
    if len(cands) == 1:
        return cands[0][0]
    if cands:
        shown = ", ".join(c for _, c in cands[:5]) + (f", … ({len(cands)} in all)" if len(cands) > 5 else "")
        raise LimelightError(f"query id {qid!r} is ambiguous{' in ' + where if where else ''}: "
                             f"{shown}; give SOURCE:QID")
    raise UnknownIdError("query", qid, where)


def rebuild_hint(path: Path, manifest: dict) -> str:
    """The command that computes the store at ``path`` again (its index when recorded)."""
    index = (manifest.get("settings") or {}).get("index")
    return (f"`limelight exposure compute --index {index or 'INDEX'} --queries QUERIES --out {path}` "
            "after removing it, or rerun the audit that wrote it")


class ExposureStore:
    """An exposure store directory: the query set, the documents, and every exposure pair.

    ``queries`` and ``doc_ids`` are read from the store on first use when not given; the pairs
    are read from the shards on first use (``pair_arrays``) and kept, unless ``keep_pairs`` is
    set to False (a server holding many stores: each call then reads them again, and lookups
    keep the score column only, 4 bytes a pair instead of 14).
    """

    keep_pairs: bool = True
    # a store of more pairs is analysed shard by shard (r(d), n_exposing): bounded memory
    pairs_in_memory: int = 1 << 25

    def __init__(self, path: str | os.PathLike, manifest: dict, queries: Queries | None = None,
                 doc_ids: IdMap | None = None):
        self.path = Path(path)
        self.manifest = manifest
        self._queries = queries
        self._doc_ids = doc_ids
        self._ranks: sp.csr_matrix | None = None
        self._pairs: tuple | None = None
        self._scores: np.ndarray | None = None
        self._qstats: tuple[np.ndarray, np.ndarray] | None = None
        self._qoff: np.ndarray | None = None
        self._pieces: list[Piece] | None = None
        self._lookup: dict[str, np.ndarray] | None = None
        self._qtable: tuple | None = None  # queries.arrow opened, and its batches' first rows
        self._arrow: dict[str, pa.Table] = {}  # queries.parquet / documents.parquet as read

    def __repr__(self) -> str:
        return f"ExposureStore({str(self.path)!r})"

    # -- opening --
    @classmethod
    def open(cls, path: str | os.PathLike, require_complete: bool = True) -> ExposureStore:
        """Open a store written by ``compute_exposure`` (a store of the first layout is migrated:
        see the module's docstring)."""
        path = Path(path)
        manifest = read_manifest(path)
        if manifest.get("complete") and (manifest.get("format") == OLD_FORMAT or (
                manifest.get("format") == FORMAT and not (path / INDEX_DIR).is_dir()
                and (path / _GLOBAL_INDEX[0]).exists())):
            manifest = _migrate(path, manifest)
        if manifest.get("format") not in (FORMAT, OLD_FORMAT):
            raise IndexMismatchError(f"{path / 'manifest.json'}: unsupported store format "
                                     f"{manifest.get('format')!r}")
        if require_complete and not is_complete(path, manifest):
            raise LimelightError(f"{path}: the exposure job has not finished (run `limelight "
                                 "exposure compute` again with the same arguments to resume)")
        return cls(path, manifest)

    def _table(self, name: str) -> pa.Table:
        """``queries.parquet`` (qid, text, weight) or ``documents.parquet`` (docid), read once."""
        if name not in self._arrow:
            cols = ["qid", "text", "weight"] if name == "queries" else ["docid"]
            if name == "queries" and SEARCHERS in pq.ParquetFile(self.path / "queries.parquet").schema_arrow.names:
                cols.append(SEARCHERS)
            t = _read(self.path / f"{name}.parquet", cols)
            self._arrow[name] = t.combine_chunks()
        return self._arrow[name]

    @property
    def queries(self) -> Queries:
        if self._queries is None:
            qt = self._table("queries")
            ids = IdMap.from_arrow(qt.column("qid").chunk(0), kind="query")
            fields = ({SEARCHERS: qt.column(SEARCHERS).to_numpy()} if SEARCHERS in qt.column_names
                      else {})
            self._queries = Queries(ids, qt.column("text").to_numpy(zero_copy_only=False).astype(object),
                                    qt.column("weight").to_numpy(), fields=fields,
                                    name=self.manifest.get("queries_name", "queries"))
        return self._queries

    @queries.setter
    def queries(self, value: Queries) -> None:
        self._queries = value

    @property
    def n_queries(self) -> int:
        """The number of queries (from the manifest: nothing read)."""
        return int(self.manifest["n_queries"]) if self._queries is None else len(self._queries)

    @property
    def query_weights(self) -> np.ndarray:
        """Each query's weight o_q (the weight column alone is read while the query set is not
        built)."""
        if self._queries is not None:
            return self._queries.weights
        if "queries" in self._arrow:
            return self._arrow["queries"].column("weight").to_numpy()
        return _read(self.path / "queries.parquet", ["weight"]).column("weight").to_numpy()

    @property
    def doc_ids(self) -> IdMap:
        if self._doc_ids is None:
            self._doc_ids = IdMap.from_arrow(self._table("documents").column("docid").chunk(0), kind="document")
        return self._doc_ids

    def doc_code(self, docid: str) -> int:
        """The code of document ``docid`` (``UnknownIdError`` if absent). Before ``doc_ids`` is
        used, one search of the id column (no id dictionary built: what a one-off lookup needs)."""
        if self._doc_ids is not None:
            return self._doc_ids.lookup(docid)
        import pyarrow.compute as pc

        i = pc.index(self._table("documents").column("docid"), pa.scalar(docid, pa.string())).as_py()
        if i < 0:
            raise UnknownIdError("document", docid)
        return int(i)

    def _query_columns(self, q: np.ndarray) -> tuple[list[str], list[str]]:
        """The ids and texts of query codes ``q`` (from the Arrow columns while the query set
        is not built: no Python object for the other queries; from the memory-mapped query
        table when the store has one: only those rows are read)."""
        if self._queries is not None:
            return self._queries.ids.decode(q).tolist(), self._queries.texts[q].tolist()
        if self._query_file() is None:
            t = self._table("queries").select(["qid", "text"]).take(pa.array(np.asarray(q, dtype=np.int64)))
            return t.column("qid").to_pylist(), t.column("text").to_pylist()
        return self.query_rows(q, ["qid", "text"])  # type: ignore[return-value]

    def _query_file(self):
        """``queries.arrow`` opened (memory-mapped; its batches' first rows), or None."""
        if self._qtable is None and (self.path / QUERY_TABLE).exists():
            import pyarrow.ipc as ipc

            f = ipc.open_file(pa.memory_map(str(self.path / QUERY_TABLE)))
            starts = np.zeros(f.num_record_batches + 1, dtype=np.int64)
            np.cumsum([f.get_batch(i).num_rows for i in range(f.num_record_batches)], out=starts[1:])
            self._qtable = (f, starts)
        return self._qtable

    def query_rows(self, q: np.ndarray, columns: list[str]) -> list[list]:
        """``columns`` (of ``qid, text, weight``) of query codes ``q`` as Python lists, read from
        the memory-mapped ``queries.arrow``: only the record batches that hold them, and of
        those only the rows (no column is read whole). The store must have the table."""
        f, starts = self._query_file()
        q = np.asarray(q, dtype=np.int64)
        out = [np.empty(len(q), dtype=object) for _ in columns]
        b = np.searchsorted(starts, q, side="right") - 1
        order = np.argsort(b, kind="stable")
        bs = b[order]
        cuts = np.flatnonzero(np.diff(bs)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(q)], strict=True):
            if lo == hi:
                continue
            i = int(bs[lo])
            idx = order[lo:hi]
            part = f.get_batch(i).select(columns).take(pa.array(q[idx] - starts[i]))
            for o, c in zip(out, columns, strict=True):
                o[idx] = part.column(c).to_pylist()
        return [o.tolist() for o in out]

    def query_table(self) -> pa.Table | None:
        """``qid, text, weight`` of every query, memory-mapped from ``queries.arrow`` (None for a
        store without it): zero-copy, its batches as chunks."""
        qf = self._query_file()
        return None if qf is None else qf[0].read_all()

    def lookup_tables(self) -> dict[str, np.ndarray] | None:
        """The document table (``offsets``, ``q``, ``rank``, ``score``, memory-mapped; see
        ``limelight.exposure.docindex``), or None for a store written without it."""
        if self._lookup is None:
            folder = self.path / DOC_TABLE
            if not (folder / "offsets.npy").exists():
                return None
            self._lookup = {c: np.load(folder / f"{c}.npy", mmap_mode="r")
                            for c in ("offsets", "q", "rank", "score")}
        return self._lookup

    @property
    def has_lookup_tables(self) -> bool:
        """Whether a document's lookup reads its own rows only (the store has a document table
        and a query table): then nothing needs to be preloaded for fast lookups."""
        return self.lookup_tables() is not None and (self.path / QUERY_TABLE).exists()

    @doc_ids.setter
    def doc_ids(self, value: IdMap) -> None:
        self._doc_ids = value

    @property
    def depth(self) -> int:
        return int(self.manifest["depth"])

    @property
    def n_shards(self) -> int:
        return int(self.manifest["n_shards"])

    def shard_files(self) -> list[Path]:
        return [shard_path(self.path, i) for i in range(self.n_shards)]

    # -- the pairs --
    def pairs(self) -> pa.Table:
        """Every exposure pair (q, d, rank, score) read from the shards (columnar)."""
        tables = [pq.read_table(p) for p in self.shard_files()]
        return pa.concat_tables(tables) if tables else _shard_table(
            np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), self.depth)

    def pair_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every exposure pair as numpy arrays ``(q, d, rank, score)`` in query order (kept)."""
        if self._pairs is not None:
            return self._pairs  # type: ignore[return-value]
        pairs = _read_pairs(self.shard_files(), self.depth)
        if self.keep_pairs:
            self._pairs = pairs
        return pairs

    def scores(self) -> np.ndarray:
        """The score of every pair (float32, row order; kept once read)."""
        if self._pairs is not None:
            return self._pairs[3]
        if self._scores is None:
            from concurrent.futures import ThreadPoolExecutor

            # pyarrow reads off the GIL: the shards in parallel
            with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
                cols = list(pool.map(lambda p: _read(p, ["score"]).column("score").to_numpy(),
                                     self.shard_files()))
            self._scores = np.concatenate(cols) if cols else np.zeros(0, dtype=np.float32)
        return self._scores

    def scores_at(self, rows: np.ndarray) -> np.ndarray:
        """The scores of the pairs ``rows`` (ascending row numbers): from memory when the
        scores are loaded, else only the row groups of the shards that hold them."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._pairs is not None or self._scores is not None or not len(rows):
            return self.scores()[rows] if len(rows) else np.zeros(0, dtype=np.float32)
        starts = np.array([p.start for p in self.pieces()], dtype=np.int64)
        shard = np.searchsorted(starts, rows, side="right") - 1
        out = np.empty(len(rows), dtype=np.float32)
        bounds = np.flatnonzero(np.diff(shard)) + 1  # rows ascending: one run per shard
        for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(rows)], strict=True):
            i = int(shard[a])
            out[a:b] = _read_rows(shard_path(self.path, i), "score", rows[a:b] - starts[i])
        return out

    # -- the index --
    def _stats(self) -> tuple[np.ndarray, np.ndarray]:
        if self._qstats is None:
            t = _read(self.path / QUERY_STATS, ["n_retrieved", "threshold"])
            thr = t.column("threshold").to_numpy(zero_copy_only=False)
            self._qstats = (t.column("n_retrieved").to_numpy(),
                            np.asarray(thr, dtype=np.float64))
        return self._qstats

    def n_retrieved(self) -> np.ndarray:
        """Each query's number of stored documents (≤ the depth)."""
        return self._stats()[0]

    def query_offsets(self) -> np.ndarray:
        """Where each query's rows begin in the pairs (int64, ``n_queries + 1``; read-only)."""
        if self._qoff is None:
            n = self.n_retrieved()
            off = np.zeros(len(n) + 1, dtype=np.int64)
            np.cumsum(n, out=off[1:])
            off.flags.writeable = False
            self._qoff = off
        return self._qoff

    def thresholds(self) -> np.ndarray:
        """Each query's score at rank n (NaN when it retrieved fewer than n documents)."""
        return self._stats()[1].copy()

    def query_threshold(self, q: int) -> float:
        """Query code ``q``'s score at rank n (NaN when it retrieved fewer than n documents)."""
        return float(self._stats()[1][q])

    def pieces(self) -> list[Piece]:
        """The per-document index, one piece per shard (memory-mapped; see
        ``limelight.exposure.docindex``)."""
        if self._pieces is None:
            self._pieces = load_pieces(self.path, self.n_shards)
        return self._pieces

    def _document_rows(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Document code ``d``'s pair rows and their queries and ranks (query order)."""
        parts = [p.rows_of(d) for p in self.pieces()]
        r = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        qoff = self.query_offsets()
        q = np.searchsorted(qoff, r, side="right") - 1
        return r, q, r - qoff[q] + 1

    def document_ranks(self, d: int) -> np.ndarray:
        """The ranks (1-based) at which the queries that expose document code ``d`` put it,
        ascending."""
        lt = self.lookup_tables()
        if lt is not None:
            s, e = int(lt["offsets"][d]), int(lt["offsets"][d + 1])
            return np.asarray(lt["rank"][s:e], dtype=np.int64)
        return np.sort(self._document_rows(d)[2])

    def document_pairs(self, d: int, start: int = 0, stop: int | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, rank, score)`` of the queries that expose document code ``d``, ordered by rank
        (1-based), then query id (``start:stop`` of them: a page)."""
        lt = self.lookup_tables()
        if lt is not None:  # one slice, already in this order
            s, e = int(lt["offsets"][d]), int(lt["offsets"][d + 1])
            a, b, _ = slice(start, stop).indices(e - s)
            a, b = s + a, s + max(a, b)
            return (np.asarray(lt["q"][a:b], dtype=np.int64), np.asarray(lt["rank"][a:b], dtype=np.int64),
                    np.array(lt["score"][a:b], dtype=np.float32))
        q, rank, score = self._document_pairs_from_pieces(d)
        return q[start:stop], rank[start:stop], score[start:stop]

    def _document_pairs_from_pieces(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``document_pairs`` of a store without a document table (from the pieces and shards)."""
        r, q, rank = self._document_rows(d)
        score = self.scores_at(r)
        order = _rank_then_id_order(rank, self._query_columns(q)[0])
        return q[order], rank[order], score[order]

    def ranks(self) -> sp.csr_matrix:
        """Documents × queries sparse matrix of 1-based ranks (0 = not in the query's top-n)."""
        if self._ranks is None:
            off, r = global_index(self.pieces(), len(self.doc_ids))
            qoff = self.query_offsets()
            q = (np.searchsorted(qoff, r, side="right") - 1).astype(np.int32)
            rank = (r - qoff[q] + 1).astype(np.int32)
            nnz = len(r)
            idx = np.int32 if nnz < 2**31 - 1 and self.n_queries < 2**31 - 1 else np.int64
            self._ranks = sp.csr_matrix((rank, q.astype(idx), np.asarray(off, dtype=idx)),
                                        shape=(len(self.doc_ids), self.n_queries))
        return self._ranks

    def retrievability(self, c: int = 100, beta: float | None = None,
                       weights: np.ndarray | None = None) -> Retrievability:
        """r(d) over every document with the stored o_q (or ``weights``), Gini and coverage."""
        if c > self.depth:
            raise LimelightError(f"cutoff c={c} exceeds the store's depth {self.depth}")
        w = self.query_weights if weights is None else weights
        if self._streamed():
            return analyse_pair_chunks(self._shard_columns(["q", "d", "rank"]), self.doc_ids, w, c, beta)
        q, d, rank, _ = self.pair_arrays()
        return analyse_pairs(q, d, rank, self.doc_ids, w, c, beta)

    def n_pairs(self) -> int:
        """The number of stored pairs (from the index: no pass over the shards)."""
        return int(sum(p.n_rows for p in self.pieces()))

    def _streamed(self) -> bool:
        """Whether analyses read the shards one by one (pairs not in memory, and possibly more
        of them than ``pairs_in_memory``: queries × depth, no I/O) instead of loading every
        pair. Both paths give the same figures."""
        m = self.manifest
        most = int(m.get("n_queries", 0)) * min(int(m.get("depth", 0)), int(m.get("n_docs", 0)))
        return self._pairs is None and most > self.pairs_in_memory

    def _shard_columns(self, columns: list[str]):
        """``columns`` of each shard in turn (numpy arrays), in row order."""
        for p in self.shard_files():
            t = _read(p, columns)
            yield tuple(t.column(c).to_numpy() for c in columns)

    def n_exposing(self, c: int | None = None) -> np.ndarray:
        """Number of queries that expose each document (within rank ``c``, default the depth).
        Within the depth: the document table's offsets, else the index pieces' document counts
        read with ``pread`` (not memory-mapped: their pages would stay resident, ~135 MB over
        the 10M-line log's 421 pieces)."""
        if c is None or c >= self.depth:
            offsets = self.path / DOC_TABLE / "offsets.npy"
            if offsets.exists():
                return np.diff(np.load(offsets)).astype(np.int64, copy=False)
            return document_counts(self.path, self.n_shards, len(self.doc_ids))
        if self._streamed():
            n = np.zeros(len(self.doc_ids), dtype=np.int64)
            for d, rank in self._shard_columns(["d", "rank"]):
                n += np.bincount(d[rank <= c], minlength=len(n))
            return n
        _, d, rank, _ = self.pair_arrays()
        return np.bincount(d[rank <= c], minlength=len(self.doc_ids))

    # -- lookups --
    def connect(self):
        """An in-memory DuckDB connection over the store: ``exposure`` a view over the shards
        (the pairs are not copied), ``queries`` (``q, qid, text, weight, n_retrieved,
        threshold``) and ``documents`` (``d, docid``) small tables loaded from their files. The
        store cannot be written through it."""
        import duckdb

        con = duckdb.connect(config={"threads": 1})
        glob = str((self.path / "shards").resolve() / SHARD_GLOB).replace("'", "''")
        con.execute(f"CREATE VIEW exposure AS SELECT q, d, rank, score FROM read_parquet('{glob}')")
        for name, table in (("queries", self.queries_table()),
                            ("documents", pq.read_table(self.path / "documents.parquet"))):
            con.register("arrow_table", table)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM arrow_table")
            con.unregister("arrow_table")
        return con

    def queries_table(self) -> pa.Table:
        """``q, qid, text, weight, n_retrieved, threshold`` (threshold null when fewer than n)."""
        qt = pq.read_table(self.path / "queries.parquet")
        st = pq.read_table(self.path / QUERY_STATS, columns=["n_retrieved", "threshold"])
        return qt.append_column("n_retrieved", st.column("n_retrieved")).append_column(
            "threshold", st.column("threshold"))

    def exposing_queries(self, docid: str, limit: int | None = None, offset: int = 0) -> list[dict]:
        """The queries whose top-n contains ``docid``: ``{"qid", "query", "rank", "score"}``
        sorted by rank (1-based), then query id (``limit`` of them from ``offset``: all by
        default)."""
        stop = None if limit is None else offset + limit
        q, rank, score = self.document_pairs(self.doc_code(docid), offset, stop)
        qids, texts = self._query_columns(q)
        return [{"qid": a, "query": b, "rank": int(c), "score": float(s)} for a, b, c, s in
                zip(qids, texts, rank.tolist(), score.tolist(), strict=True)]

    def exposing_count(self, docid: str) -> int:
        """How many queries expose ``docid`` (the length of ``exposing_queries(docid)``)."""
        d = self.doc_code(docid)
        lt = self.lookup_tables()
        if lt is not None:
            return int(lt["offsets"][d + 1] - lt["offsets"][d])
        return sum(len(p.rows_of(d)) for p in self.pieces())

    def query_code(self, qid: str) -> int:
        """The code of query ``qid``: its id, or for a query-log id ``SOURCE:QID`` the bare
        ``QID`` when one source only has it (an error lists the candidates otherwise)."""
        if self._queries is not None:
            return resolve_query_id(self._queries.ids, qid, str(self.path))
        table = self.query_table()  # (memory-mapped; else the ids of queries.parquet)
        ids = table.column("qid") if table is not None else _read(self.path / "queries.parquet", ["qid"]).column("qid")
        return resolve_query_id(ids, qid, str(self.path))

    def query_pairs(self, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(d, rank, score)`` of query code ``q``'s stored top-n, by rank."""
        qoff = self.query_offsets()
        s, e = int(qoff[q]), int(qoff[q + 1])
        if self._pairs is not None:
            _, d, rank, score = self._pairs
            return d[s:e], rank[s:e], score[s:e]
        i = q // int(self.manifest["shard_size"])
        start = int(qoff[i * int(self.manifest["shard_size"])])
        t = _read(shard_path(self.path, i), ["d", "rank", "score"]).slice(s - start, e - s)
        return tuple(t.column(c).to_numpy() for c in ("d", "rank", "score"))  # type: ignore[return-value]

    def exposed_documents(self, qid: str) -> list[dict]:
        """What query ``qid`` exposes: ``{"docid", "rank", "score"}`` sorted by rank."""
        d, rank, score = self.query_pairs(self.query_code(qid))
        return [{"docid": a, "rank": int(r), "score": float(s)} for a, r, s in
                zip(self.doc_ids.decode(d).tolist(), rank.tolist(), score.tolist(), strict=True)]


def _rank_then_id_order(rank: np.ndarray, qids: list[str]) -> np.ndarray:
    """The order of rows by rank, then query id (code-point order, as DuckDB and Python sort)."""
    if len(rank) < 2:
        return np.arange(len(rank))
    by_id = np.argsort(np.asarray(qids, dtype=str), kind="stable")
    return by_id[np.argsort(rank[by_id], kind="stable")]


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file's ``columns`` (``ParquetFile.read``: about half the fixed cost of
    ``pq.read_table``, which goes through the datasets layer: 0.7 vs 1.7 ms per score column)."""
    return pq.ParquetFile(path).read(columns=columns)


def _read_rows(path: Path, column: str, rows: np.ndarray) -> np.ndarray:
    """``column`` at ``rows`` (ascending) of a Parquet file, decoding only their row groups."""
    f = pq.ParquetFile(path)
    md = f.metadata
    rg = np.zeros(md.num_row_groups + 1, dtype=np.int64)
    np.cumsum([md.row_group(g).num_rows for g in range(md.num_row_groups)], out=rg[1:])
    g = np.searchsorted(rg, rows, side="right") - 1
    used = np.unique(g)
    col = f.read_row_groups(used.tolist(), columns=[column]).column(column).to_numpy()
    base = np.zeros(len(used), dtype=np.int64)  # where each used row group begins in ``col``
    np.cumsum((rg[used + 1] - rg[used])[:-1], out=base[1:])
    return col[base[np.searchsorted(used, g)] + rows - rg[g]]


def _read_pairs(files: list[Path], depth: int) -> tuple[np.ndarray, ...]:
    """The pairs of the shard ``files`` as numpy arrays ``(q, d, rank, score)``, one copy each."""
    metas = [pq.read_metadata(p).num_rows for p in files]
    n = int(sum(metas))
    rt = np.int16 if depth < 32767 else np.int32
    out = tuple(_huge_empty(n, [np.int32, np.int32, rt, np.float32]))
    pos = 0
    for p, m in zip(files, metas, strict=True):
        t = _read(p)
        for a, c in zip(out, ("q", "d", "rank", "score"), strict=True):
            a[pos:pos + m] = t.column(c).to_numpy()
        pos += m
    return out


def read_manifest(path: Path) -> dict:
    """``path/manifest.json`` (one-line errors for a missing or corrupt one)."""
    man = path / "manifest.json"
    if not man.exists():
        raise LimelightError(f"{path}: not an exposure store (no manifest.json; create one with "
                             "`limelight exposure compute`)")
    try:
        return json.loads(man.read_text())
    except json.JSONDecodeError as e:
        raise IndexMismatchError(f"{man}: corrupt manifest ({e.msg})") from None


def is_complete(path: Path, manifest: dict) -> bool:
    """Whether the store's job finished (its manifest says so and its index exists)."""
    return bool(manifest.get("complete")) and manifest.get("format") == FORMAT and (
        path / QUERY_STATS).exists() and (path / INDEX_DIR).is_dir()


# ---- writing a store ----------------------------------------------------------------------------


def _write_manifest(store: Path, manifest: dict) -> None:
    with atomic_path(store / "manifest.json") as tmp:
        tmp.write_text(json.dumps(manifest, indent=1))


#: the optional queries.parquet column of a log with a searcher column: distinct searchers per
#: query (``limelight.data.searcherlog``; the portal's k rule counts them when present)
SEARCHERS = "n_searchers"
_QUERY_BATCH = 1 << 18  # queries written to queries.parquet at a time (one row group each)


def _queries_table(queries: Queries, start: int = 0, stop: int | None = None) -> pa.Table:
    """Queries ``start:stop`` of the query set as rows of the ``queries.parquet`` table."""
    rows = queries.arrow_rows(start, stop)
    # asked first: a set read from disk builds no whole column to answer
    searchers = queries.fields.get(SEARCHERS) if queries.has_field(SEARCHERS) else None
    if searchers is not None and SEARCHERS not in rows.column_names:
        stop = len(queries) if stop is None else min(stop, len(queries))
        rows = rows.append_column(SEARCHERS, pa.array(np.asarray(searchers[start:stop], dtype=np.float64)))
    return rows.add_column(0, "q", pa.array(np.arange(start, start + rows.num_rows, dtype=np.int32)))


def _write_small(table: pa.Table, path: Path) -> None:
    """Write one of the store's small tables atomically, plain (no dictionary, no compression:
    read in a few milliseconds by a one-off lookup)."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="none", use_dictionary=False)


def _write_inputs(store: Path, queries: Queries, doc_ids: IdMap) -> None:
    """Write ``queries.parquet`` (``_QUERY_BATCH`` queries at a time: one batch's Arrow copy
    held, not the whole query set's) and ``documents.parquet``."""
    n = len(queries)
    with atomic_path(store / "queries.parquet") as tmp:
        with pq.ParquetWriter(tmp, _queries_table(queries, 0, 0).schema, compression="none",
                              use_dictionary=False) as w:
            for s in range(0, max(n, 1), _QUERY_BATCH):
                w.write_table(_queries_table(queries, s, min(n, s + _QUERY_BATCH)))
    _write_small(pa.table({"d": pa.array(np.arange(len(doc_ids), dtype=np.int32)),
                           "docid": pa.array(doc_ids.strings.tolist(), pa.string())}),
                 store / "documents.parquet")


# the one-file document index of this format's first weeks (commit caa4a2c): replaced by pieces
_GLOBAL_INDEX = ("doc_offsets.npy", "doc_index.npy")


def _migrate(path: Path, manifest: dict) -> dict:
    """A complete store of the first layout in this one: its files re-encoded as this layout
    writes them (the same rows: the score column plain for fast lookups, the small tables
    plain), the index built from its shards, the manifest (format 2), then the DuckDB copy
    removed; returns the new manifest. Every step replaces whole files atomically and the
    manifest comes last, so an interrupted migration runs again on the next open. A store of
    this format with the one-file index of its first weeks gets its pieces the same way."""
    new = {**manifest, "format": FORMAT}
    old = manifest.get("format") == OLD_FORMAT
    try:
        depth = int(manifest["depth"])
        if old:
            for p in ExposureStore(path, manifest).shard_files():
                write_shard(p, _read(p), depth)
            for name in ("queries", "documents"):
                _write_small(_read(path / f"{name}.parquet"), path / f"{name}.parquet")
        complete_index(path, int(manifest["n_queries"]), int(manifest["n_docs"]), depth,
                       int(manifest["shard_size"]))
        if old:
            _write_manifest(path, new)
    except OSError as e:
        what = f"of the old layout ({OLD_FORMAT}, with {DB_NAME})" if old else "with an old index"
        raise LimelightError(f"{path}: an exposure store {what} that cannot be migrated here "
                             f"({e.strerror or e}); rebuild it with {rebuild_hint(path, manifest)}") from None
    _remove_db(path / DB_NAME)
    for f in _GLOBAL_INDEX:
        (path / f).unlink(missing_ok=True)
    return new


def _remove_db(path: Path) -> None:
    """Remove a DuckDB file and its write-ahead log."""
    path.unlink(missing_ok=True)
    Path(str(path) + ".wal").unlink(missing_ok=True)


def _clear_store(store: Path) -> None:
    """Remove what ``compute_exposure`` writes into a store (the directory too when left empty)."""
    import shutil

    shutil.rmtree(store / "shards", ignore_errors=True)
    for p in ("manifest.json", "queries.parquet", "documents.parquet"):
        (store / p).unlink(missing_ok=True)
    remove_index(store)
    for p in store.glob(".*.tmp"):
        _remove_db(p) if p.is_file() else shutil.rmtree(p, ignore_errors=True)
    _remove_db(store / DB_NAME)
    with contextlib.suppress(OSError):
        store.rmdir()
