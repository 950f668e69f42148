"""An exposure store on disk: the pairs once, as Parquet shards, and a per-document index.

A store directory looks like::

    DIR/manifest.json         format, retriever fingerprint and settings, query/doc fingerprints
    DIR/queries.parquet       q, qid, text, weight          (the query set, o_q = weight)
    DIR/documents.parquet     d, docid                      (every document of the collection)
    DIR/shards/part-NNNNN.parquet   q int32, d int32, rank int16 (1-based), score float32
    DIR/query_stats.parquet   q, n_retrieved, threshold     (written when the job completes)
    DIR/doc_offsets.npy       int64 [n_docs + 1]            (written when the job completes)
    DIR/doc_index.npy         int32 [n_pairs]               (written when the job completes)

The shards are the only copy of the pairs (``limelight.exposure.shards`` writes them, one file per
shard of queries, atomically). Their rows are in query order and, within a query, in rank order
(ranks 1..n), so that row ``i`` of the pairs (the shards concatenated) is query ``q`` at rank
``i - query_offsets[q] + 1``: the query offsets (the cumulated ``n_retrieved``) turn a row number
into its query and rank without reading the shards. ``doc_index.npy`` lists the row numbers of the
pairs grouped by document (query order within a document), ``doc_offsets.npy`` where each
document's rows begin: the document × query matrix of ranks in CSR form, with the row numbers as
its entries. Both are memory-mapped, so a document's exposing queries cost a slice, and only the
score column is read from the shards. ``manifest.json`` says ``complete`` once these files are
written (it is written last, atomically).

DuckDB reads the store without a copy: ``ExposureStore.connect()`` gives an in-memory connection
whose ``exposure`` is a view over the shards and whose ``queries`` (with ``n_retrieved`` and
``threshold``) and ``documents`` are the small tables.

Stores of the first layout (``limelight-exposure/1``: the same shards plus a DuckDB copy of the
pairs in ``exposure.duckdb``) are migrated when opened: the index files are written from the
shards, the manifest is rewritten and the DuckDB copy removed (the shards, the pairs, are kept
as they are). A store that cannot be migrated (not writable) is a one-line error naming the
command that rebuilds it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from limelight._io import atomic_path
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import IndexMismatchError, LimelightError, UnknownIdError
from limelight.exposure.retrievability import Retrievability, analyse_pairs
from limelight.exposure.shards import SHARD_GLOB, _shard_table, shard_path, write_shard

FORMAT = "limelight-exposure/2"
OLD_FORMAT = "limelight-exposure/1"  # the pairs twice: Parquet shards and exposure.duckdb
DB_NAME = "exposure.duckdb"  # the first layout's DuckDB copy (removed by the migration)
BUILDING_DB = f".{DB_NAME}.building.tmp"  # what a job of the first layout left while running
QUERY_STATS = "query_stats.parquet"
DOC_OFFSETS = "doc_offsets.npy"
DOC_INDEX = "doc_index.npy"
INDEX_FILES = (QUERY_STATS, DOC_OFFSETS, DOC_INDEX)


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


def rebuild_hint(path: Path, manifest: dict) -> str:
    """The command that computes the store at ``path`` again (its index when recorded)."""
    index = (manifest.get("settings") or {}).get("index")
    return (f"`limelight exposure compute --index {index or 'INDEX'} --queries QUERIES --out {path}` "
            "after removing it, or rerun the audit that wrote it")


class ExposureStore:
    """An exposure store directory: the query set, the documents, and every exposure pair.

    ``queries`` and ``doc_ids`` are read from the store on first use when not given; the pairs
    are read from the shards on first use (``pair_arrays``) and kept.
    """

    def __init__(self, path: str | os.PathLike, manifest: dict, queries: Queries | None = None,
                 doc_ids: IdMap | None = None):
        self.path = Path(path)
        self.manifest = manifest
        self._queries = queries
        self._doc_ids = doc_ids
        self._ranks: sp.csr_matrix | None = None
        self._pairs: tuple | None = None
        self._qstats: tuple[np.ndarray, np.ndarray] | None = None
        self._qoff: np.ndarray | None = None
        self._doc_index: tuple[np.ndarray, np.ndarray] | None = None
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
        if manifest.get("format") == OLD_FORMAT and manifest.get("complete"):
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
            t = _read(self.path / f"{name}.parquet", cols)
            self._arrow[name] = t.combine_chunks()
        return self._arrow[name]

    @property
    def queries(self) -> Queries:
        if self._queries is None:
            qt = self._table("queries")
            ids = IdMap.from_arrow(qt.column("qid").chunk(0), kind="query")
            self._queries = Queries(ids, qt.column("text").to_numpy(zero_copy_only=False).astype(object),
                                    qt.column("weight").to_numpy(),
                                    name=self.manifest.get("queries_name", "queries"))
        return self._queries

    @queries.setter
    def queries(self, value: Queries) -> None:
        self._queries = value

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
        is not built: no Python object for the other queries)."""
        if self._queries is not None:
            return self._queries.ids.decode(q).tolist(), self._queries.texts[q].tolist()
        t = self._table("queries").select(["qid", "text"]).take(pa.array(q, type=pa.int64()))
        return t.column("qid").to_pylist(), t.column("text").to_pylist()

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
        if self._pairs is None:
            self._pairs = _read_pairs(self.shard_files(), self.depth)
        return self._pairs  # type: ignore[return-value]

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

    def doc_index(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, rows)``: document ``d``'s pairs are the rows ``rows[offsets[d]:offsets[d +
        1]]`` of the pairs, in query order (memory-mapped)."""
        if self._doc_index is None:
            self._doc_index = (np.load(self.path / DOC_OFFSETS, mmap_mode="r"),
                               np.load(self.path / DOC_INDEX, mmap_mode="r"))
        return self._doc_index

    def _document_rows(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Document code ``d``'s pair rows and their queries and ranks (query order)."""
        off, rows = self.doc_index()
        r = np.asarray(rows[off[d]:off[d + 1]], dtype=np.int64)
        qoff = self.query_offsets()
        q = np.searchsorted(qoff, r, side="right") - 1
        return r, q, r - qoff[q] + 1

    def document_ranks(self, d: int) -> np.ndarray:
        """The ranks (1-based) at which the queries that expose document code ``d`` put it, in
        query order."""
        return self._document_rows(d)[2]

    def document_pairs(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, rank, score)`` of the queries that expose document code ``d``, ordered by rank
        (1-based), then query id."""
        r, q, rank = self._document_rows(d)
        score = self._scores_at(r, self.query_offsets())
        order = _rank_then_id_order(rank, self._query_columns(q)[0])
        return q[order], rank[order], score[order]

    def _scores_at(self, rows: np.ndarray, qoff: np.ndarray) -> np.ndarray:
        """The score of pair rows ``rows`` (ascending): from the pairs in memory, else from the
        score column of the shards that hold them."""
        if self._pairs is not None:
            return self._pairs[3][rows]
        size = int(self.manifest["shard_size"])
        starts = qoff[np.minimum(np.arange(self.n_shards + 1) * size, len(qoff) - 1)]
        shard = np.searchsorted(starts, rows, side="right") - 1
        out = np.empty(len(rows), dtype=np.float32)

        def gather(i: int) -> None:
            sel = shard == i
            col = _read(shard_path(self.path, i), ["score"]).column("score")
            out[sel] = col.to_numpy()[rows[sel] - starts[i]]

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:  # pyarrow reads off the GIL
            list(pool.map(gather, np.unique(shard).tolist()))
        return out

    def ranks(self) -> sp.csr_matrix:
        """Documents × queries sparse matrix of 1-based ranks (0 = not in the query's top-n)."""
        if self._ranks is None:
            off, rows = self.doc_index()
            r = np.asarray(rows, dtype=np.int64)
            qoff = self.query_offsets()
            q = (np.searchsorted(qoff, r, side="right") - 1).astype(np.int32)
            rank = (r - qoff[q] + 1).astype(np.int32)
            nnz = len(r)
            idx = np.int32 if nnz < 2**31 - 1 and len(self.queries) < 2**31 - 1 else np.int64
            self._ranks = sp.csr_matrix((rank, q.astype(idx), np.asarray(off, dtype=idx)),
                                        shape=(len(self.doc_ids), len(self.queries)))
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
        if c is None or c >= self.depth:
            return np.diff(np.asarray(self.doc_index()[0])).astype(np.int64)
        _, d, rank, _ = self.pair_arrays()
        return np.bincount(d[rank <= c], minlength=len(self.doc_ids))

    # -- lookups --
    def connect(self, read_only: bool = True):
        """An in-memory DuckDB connection over the store: ``exposure`` a view over the shards
        (the pairs are not copied), ``queries`` (``q, qid, text, weight, n_retrieved,
        threshold``) and ``documents`` (``d, docid``) small tables loaded from their files.
        ``read_only`` is kept for compatibility: the store cannot be written through it."""
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

    def exposing_queries(self, docid: str) -> list[dict]:
        """The queries whose top-n contains ``docid``: ``{"qid", "query", "rank", "score"}``
        sorted by rank (1-based), then query id."""
        q, rank, score = self.document_pairs(self.doc_code(docid))
        qids, texts = self._query_columns(q)
        return [{"qid": a, "query": b, "rank": int(c), "score": float(s)} for a, b, c, s in
                zip(qids, texts, rank.tolist(), score.tolist(), strict=True)]

    def query_code(self, qid: str) -> int:
        """The code of query ``qid``: its id, or for a query-log id ``SOURCE:QID`` the bare
        ``QID`` when one source only has it (an error lists the candidates otherwise)."""
        return resolve_query_id(self.queries.ids, qid, str(self.path))

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


def _read_pairs(files: list[Path], depth: int) -> tuple[np.ndarray, ...]:
    """The pairs of the shard ``files`` as numpy arrays ``(q, d, rank, score)``, one copy each."""
    metas = [pq.read_metadata(p).num_rows for p in files]
    n = int(sum(metas))
    rt = np.int16 if depth < 32767 else np.int32
    out = (np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, rt), np.empty(n, np.float32))
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
    """Whether the store's job finished (its manifest says so and its index files exist)."""
    return bool(manifest.get("complete")) and manifest.get("format") == FORMAT and all(
        (path / f).exists() for f in INDEX_FILES)


# ---- writing a store ----------------------------------------------------------------------------


def _write_manifest(store: Path, manifest: dict) -> None:
    with atomic_path(store / "manifest.json") as tmp:
        tmp.write_text(json.dumps(manifest, indent=1))


def _queries_table(queries: Queries) -> pa.Table:
    """The query set as the ``queries.parquet`` table."""
    return pa.table({"q": pa.array(np.arange(len(queries), dtype=np.int32)),
                     "qid": pa.array(queries.ids.strings.tolist(), pa.string()),
                     "text": pa.array(queries.texts.tolist(), pa.string()),
                     "weight": pa.array(np.asarray(queries.weights, dtype=np.float64))})


def _write_small(table: pa.Table, path: Path) -> None:
    """Write one of the store's small tables atomically, plain (no dictionary, no compression:
    read in a few milliseconds by a one-off lookup)."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="none", use_dictionary=False)


def _write_inputs(store: Path, queries: Queries, doc_ids: IdMap) -> pa.Table:
    """Write ``queries.parquet`` and ``documents.parquet``; returns ``_queries_table(queries)``."""
    qtable = _queries_table(queries)
    _write_small(qtable, store / "queries.parquet")
    _write_small(pa.table({"d": pa.array(np.arange(len(doc_ids), dtype=np.int32)),
                           "docid": pa.array(doc_ids.strings.tolist(), pa.string())}),
                 store / "documents.parquet")
    return qtable


@numba.njit(cache=True, nogil=True, parallel=True)
def _index_pass(q, d, rank, score, bounds, n_docs, depth, counts, n_ret, thr,
                bad):  # pragma: no cover - numba
    """Over chunk ``t`` (rows ``bounds[t]:bounds[t+1]``, chunks in parallel): count each
    document's rows into ``counts[t]``, and for the last row of each query its number of rows
    (``n_ret``) and for the row at rank ``depth`` its score (``thr``). ``bad[t]``: the first row
    that breaks the layout (query order, ranks 1..n within a query, codes in range), else -1."""
    nq = len(n_ret)
    for t in numba.prange(len(bounds) - 1):
        for i in range(bounds[t], bounds[t + 1]):
            qi, di, ri = q[i], d[i], rank[i]
            if i == 0:
                ok = ri == 1
            else:
                ok = (qi == q[i - 1] and ri == rank[i - 1] + 1) or (qi > q[i - 1] and ri == 1)
            if not ok or di < 0 or di >= n_docs or qi < 0 or qi >= nq or ri > depth:
                bad[t] = i
                break
            counts[t, di] += 1
            if i == len(q) - 1 or q[i + 1] != qi:
                n_ret[qi] = ri
            if ri == depth:
                thr[qi] = score[i]


@numba.njit(cache=True, nogil=True, parallel=True)
def _index_scatter(d, bounds, start, rows):  # pragma: no cover - numba
    """Rows grouped by document, query order within one: chunk ``t`` writes its rows from
    ``start[t, doc]`` on (the positions before it are the earlier chunks' rows of ``doc``)."""
    for t in numba.prange(len(bounds) - 1):
        pos = start[t].copy()
        for i in range(bounds[t], bounds[t + 1]):
            di = d[i]
            rows[pos[di]] = i
            pos[di] += 1


def build_index(q: np.ndarray, d: np.ndarray, rank: np.ndarray, score: np.ndarray, n_queries: int,
                n_docs: int, depth: int) -> dict[str, np.ndarray] | int:
    """The store's index from its pairs in row order: ``n_retrieved``, ``threshold`` (per
    query), ``doc_offsets`` and ``doc_index`` (a stable counting sort of the rows by document,
    in parallel chunks). Returns the first row that breaks the layout (rows in query order, ranks
    1..n within a query) instead when there is one."""
    n = len(d)
    chunks = max(1, min(numba.get_num_threads(), 8, n // 65536, (1 << 25) // max(n_docs, 1)))
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)
    counts = np.zeros((chunks, n_docs), dtype=np.int64)
    n_ret = np.zeros(n_queries, dtype=np.int32)
    thr = np.full(n_queries, np.nan)
    bad = np.full(chunks, -1, dtype=np.int64)
    _index_pass(q, d, rank, score, bounds, n_docs, depth, counts, n_ret, thr, bad)
    # chunk boundaries: the first row of chunk t continues chunk t-1's query (checked in _index_pass)
    if (bad >= 0).any():
        return int(bad[bad >= 0].min())
    total = counts.sum(axis=0)
    off = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(total, out=off[1:])
    start = np.cumsum(counts, axis=0) - counts + off[:-1]
    rows = np.empty(n, dtype=np.int32 if n < 2**31 - 1 else np.int64)
    _index_scatter(d, bounds, start, rows)
    return {"n_retrieved": n_ret, "threshold": thr, "doc_offsets": off, "doc_index": rows}


def _save_npy(path: Path, a: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, a, allow_pickle=False)


def write_index(store: Path, pairs: tuple, n_queries: int, n_docs: int, depth: int,
                shard_size: int) -> tuple:
    """Write the index files of ``store`` from its ``pairs`` (``(q, d, rank, score)`` in row
    order), each atomically; returns the pairs (re-ordered, and the shards rewritten, when a
    shard's rows were out of query order: a callable retriever's run of the first layout)."""
    idx = build_index(*pairs, n_queries, n_docs, depth)
    if isinstance(idx, int):
        pairs = _reorder_shards(store, pairs, n_queries, depth, shard_size)
        idx = build_index(*pairs, n_queries, n_docs, depth)
        if isinstance(idx, int):
            raise IndexMismatchError(f"{store}: pair row {idx} is not a query's next rank; "
                                     f"the shards are damaged: {rebuild_hint(store, {})}")
    _write_small(pa.table({"q": pa.array(np.arange(n_queries, dtype=np.int32)),
                           "n_retrieved": pa.array(idx["n_retrieved"]),
                           "threshold": pa.array(idx["threshold"], from_pandas=True)}),
                 store / QUERY_STATS)
    _save_npy(store / DOC_OFFSETS, idx["doc_offsets"])
    _save_npy(store / DOC_INDEX, idx["doc_index"])
    return pairs


def _reorder_shards(store: Path, pairs: tuple, n_queries: int, depth: int, shard_size: int) -> tuple:
    """Sort the pairs by (query, rank) and rewrite every shard whose rows change (same rows)."""
    q, d, rank, score = pairs
    order = np.lexsort((rank, q))
    pairs = (q[order], d[order], rank[order], score[order])
    n_shards = (n_queries + shard_size - 1) // shard_size
    bounds = np.searchsorted(pairs[0], np.arange(n_shards + 1) * shard_size, side="left")
    for i in range(n_shards):
        s, e = int(bounds[i]), int(bounds[i + 1])
        if not np.array_equal(order[s:e], np.arange(s, e)):
            write_shard(shard_path(store, i), tuple(a[s:e] for a in pairs), depth)
    return pairs


def _migrate(path: Path, manifest: dict) -> dict:
    """A complete store of the first layout in this one: its files re-encoded as this layout
    writes them (the same rows: the score column plain for fast lookups, the small tables
    plain), the index files from its shards, the manifest (format 2), then the DuckDB copy
    removed; returns the new manifest. Every step replaces whole files atomically and the
    manifest comes last, so an interrupted migration runs again on the next open."""
    new = {**manifest, "format": FORMAT}
    try:
        st = ExposureStore(path, manifest)
        depth = int(manifest["depth"])
        for p in st.shard_files():
            write_shard(p, _read(p), depth)
        for name in ("queries", "documents"):
            _write_small(_read(path / f"{name}.parquet"), path / f"{name}.parquet")
        nq, nd = int(manifest["n_queries"]), int(manifest["n_docs"])
        write_index(path, st.pair_arrays(), nq, nd, depth, int(manifest["shard_size"]))
        _write_manifest(path, new)
    except OSError as e:
        raise LimelightError(f"{path}: an exposure store of the old layout ({OLD_FORMAT}, with "
                             f"{DB_NAME}) that cannot be migrated here ({e.strerror or e}); "
                             f"rebuild it with {rebuild_hint(path, manifest)}") from None
    _remove_db(path / DB_NAME)
    return new


def _remove_db(path: Path) -> None:
    """Remove a DuckDB file and its write-ahead log."""
    path.unlink(missing_ok=True)
    Path(str(path) + ".wal").unlink(missing_ok=True)


def _remove_index(store: Path) -> None:
    for f in INDEX_FILES:
        (store / f).unlink(missing_ok=True)


def _clear_store(store: Path) -> None:
    """Remove what ``compute_exposure`` writes into a store (the directory too when left empty)."""
    import shutil

    shutil.rmtree(store / "shards", ignore_errors=True)
    for p in ("manifest.json", "queries.parquet", "documents.parquet"):
        (store / p).unlink(missing_ok=True)
    _remove_index(store)
    for p in store.glob(".*.tmp"):
        _remove_db(p) if p.is_file() else shutil.rmtree(p, ignore_errors=True)
    _remove_db(store / DB_NAME)
    with contextlib.suppress(OSError):
        store.rmdir()
