"""The exposure store's one format (issue 20): the pairs once, as Parquet shards, with a
per-document index; its lookups against the pairs themselves; stores of the first layout
(a DuckDB copy of the pairs) migrated exactly; resumption after a kill at any point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

from limelight.data import Queries, Run, load_query_log
from limelight.errors import LimelightError
from limelight.exposure import ExposureStore, compute_exposure, exposure_from_run
from limelight.exposure import store as store_mod
from limelight.exposure.retrievability import rank_matrix
from limelight.exposure.shards import SHARD_GLOB, shard_path


def index_files(store: Path) -> dict[str, bytes]:
    """The index of a store: each shard's piece and the query statistics, by name."""
    files = sorted((store / "doc_index").glob("part-*.npy")) + [store / "query_stats.parquet"]
    return {p.name: p.read_bytes() for p in files}


@pytest.fixture(scope="module")
def movies(movies_bm25):
    """BM25 over the movies catalog's index, its fingerprint and the log's first 1500 queries."""
    return (*movies_bm25, load_query_log().head(1500))


@pytest.fixture(scope="module")
def ref(movies, tmp_path_factory):
    retriever, fp, qs = movies
    return compute_exposure(retriever, qs, tmp_path_factory.mktemp("ref") / "store", depth=20,
                            shard_size=400, fingerprint=fp)


def brute_exposing(st: ExposureStore, d: int) -> list[tuple]:
    """(qid, rank, score) of document ``d`` from the pairs, by rank then qid (Python order)."""
    q, dd, rank, score = st.pair_arrays()
    sel = np.flatnonzero(dd == d)
    rows = [(st.queries.ids[int(q[i])], int(rank[i]), float(score[i])) for i in sel]
    return sorted(rows, key=lambda r: (r[1], r[0]))


def same_store(a: Path, b: Path) -> None:
    """The same pairs (row for row), index files and DuckDB tables."""
    sa, sb = ExposureStore.open(a), ExposureStore.open(b)
    for x, y in zip(sa.pair_arrays(), sb.pair_arrays(), strict=True):
        np.testing.assert_array_equal(x, y)
    assert index_files(a) == index_files(b)
    with sa.connect() as ca, sb.connect() as cb:
        for t, o in (("exposure", "q, rank"), ("queries", "q"), ("documents", "d")):
            assert ca.execute(f"SELECT * FROM {t} ORDER BY {o}").fetchdf().equals(
                cb.execute(f"SELECT * FROM {t} ORDER BY {o}").fetchdf()), t


def test_lookups_equal_the_pairs(ref):
    st = ExposureStore.open(ref.path)  # fresh: nothing in memory, scores read from the shards
    q, d, rank, score = ref.pair_arrays()
    n_exp = np.bincount(d, minlength=len(st.doc_ids))
    np.testing.assert_array_equal(st.n_exposing(), n_exp)
    np.testing.assert_array_equal(st.n_exposing(5), np.bincount(d[rank <= 5], minlength=len(st.doc_ids)))
    busy = np.argsort(-n_exp, kind="stable")
    for dc in [*busy[:5].tolist(), *busy[n_exp[busy] == 1][:3].tolist(), int(np.flatnonzero(n_exp == 0)[0])]:
        docid = st.doc_ids[dc]
        got = [(r["qid"], r["rank"], r["score"]) for r in st.exposing_queries(docid)]
        assert got == brute_exposing(ref, dc)
        assert [r["query"] for r in st.exposing_queries(docid)] == [st.queries[g[0]] for g in got]
    assert n_exp.max() > 40 and (n_exp == 0).any()
    # what a query exposes: its rows, by rank
    qoff = np.zeros(len(st.queries) + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=len(st.queries)), out=qoff[1:])
    for qc in (0, 399, 400, 1499):
        s, e = qoff[qc], qoff[qc + 1]
        assert st.exposed_documents(st.queries.ids[qc]) == [
            {"docid": st.doc_ids[int(x)], "rank": int(r), "score": float(v)}
            for x, r, v in zip(d[s:e], rank[s:e], score[s:e], strict=True)]
    # the index is the CSR document × query matrix of ranks
    a, b = st.ranks(), rank_matrix(q, d, rank, len(st.doc_ids), len(st.queries))
    assert (a != b).nnz == 0 and a.has_sorted_indices
    assert (a.indptr.dtype, a.indices.dtype, a.data.dtype) == (b.indptr.dtype, b.indices.dtype, b.data.dtype)
    # thresholds: each query's score at rank n
    thr = st.thresholds()
    full = rank == 20
    np.testing.assert_array_equal(thr[q[full]], score[full].astype(np.float64))
    assert np.isnan(np.delete(thr, q[full])).all()


def test_scores_of_a_few_rows_read_their_row_groups_only(movies, ref, tmp_path, monkeypatch):
    """``exposure doc`` reads a document's scores from the row groups that hold them: equal to
    the whole column, whatever row groups the shards were cut into (the store of ``ref`` has one
    per shard; this one 97 rows per group, so that groups straddle queries)."""
    from limelight.exposure import shards as shards_mod

    retriever, fp, qs = movies
    monkeypatch.setattr(shards_mod, "SHARD_ROW_GROUP", 97)
    st = compute_exposure(retriever, qs, tmp_path / "s", depth=20, shard_size=400, fingerprint=fp)
    assert pq.ParquetFile(shard_path(st.path, 0)).metadata.num_row_groups > 5
    fresh = ExposureStore.open(st.path)
    score = ref.pair_arrays()[3]
    rng = np.random.default_rng(0)
    for n in (1, 2, 50, 3000):
        rows = np.sort(rng.choice(len(score), size=n, replace=False))
        np.testing.assert_array_equal(fresh.scores_at(rows), score[rows])
        np.testing.assert_array_equal(ExposureStore.open(ref.path).scores_at(rows), score[rows])
    assert fresh._scores is None  # never the whole column
    n_exp = fresh.n_exposing()
    for dc in np.argsort(-n_exp, kind="stable")[:3].tolist():
        got = [(r["qid"], r["rank"], r["score"]) for r in ExposureStore.open(st.path).exposing_queries(
            fresh.doc_ids[dc])]
        assert got == brute_exposing(ref, dc)


def test_duckdb_reads_the_shards_in_place(ref, tmp_path, monkeypatch):
    q, d, rank, score = ref.pair_arrays()
    monkeypatch.chdir(tmp_path)  # absolute paths: the cwd does not matter
    with ExposureStore.open(ref.path).connect() as con:
        assert con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = "
                           "'exposure'").fetchone()[0] == "VIEW"
        ex = con.execute("SELECT q, d, rank, score FROM exposure ORDER BY q, rank").fetchnumpy()
        qt = con.execute("SELECT * FROM queries ORDER BY q").fetchdf()
    for x, y in zip((ex["q"], ex["d"], ex["rank"], ex["score"]), (q, d, rank, score), strict=True):
        np.testing.assert_array_equal(np.asarray(x), y)
    assert list(qt.columns) == ["q", "qid", "text", "weight", "n_retrieved", "threshold"]
    np.testing.assert_array_equal(qt["n_retrieved"], np.bincount(q, minlength=len(qt)))
    np.testing.assert_array_equal(qt["threshold"].to_numpy(dtype=float), ref.thresholds())


def test_callable_retriever_in_another_query_order(movies, ref, tmp_path):
    """A run listing the queries in another order than the store's: the shards still hold the
    rows in the store's query order, and the store equals the one from search_batch."""
    retriever, _, qs = movies
    run = retriever.retrieve(qs, 20)
    rev = Queries.from_lists(qs.ids.strings[::-1].tolist(), qs.texts[::-1].tolist())
    shuffled = Run.from_codes(rev.ids, run.docids, len(qs) - 1 - run.q, run.d, run.score, "bm25")
    st = exposure_from_run(shuffled, qs, retriever.doc_ids, tmp_path / "fromrun", depth=20, shard_size=400)
    for a, b in zip(st.pair_arrays(), ref.pair_arrays(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert index_files(st.path) == index_files(ref.path)


def test_a_writer_killed_mid_shard_leaves_no_temporary_file(movies, ref, tmp_path):
    """A shard's writer killed while writing it, its task run again (what Ray does when it loses a
    worker): the half-written temporary file it left beside the shard is gone once the job ends,
    and the store is the one of a job that lost nothing."""
    retriever, fp, qs = movies
    store = tmp_path / "store"
    left = []

    class KilledOnce:  # the second shard's first writer dies after writing part of its file
        doc_ids = retriever.doc_ids

        def search_batch(self, texts, k):
            if not left and (store / "shards").is_dir():
                tmp = store / "shards" / ".part-00001.parquet.0b1c2d3e.tmp"
                tmp.write_bytes(b"PAR1 half a shard")
                left.append(tmp)
            return retriever.search_batch(texts, k)

    st = compute_exposure(KilledOnce(), qs, store, depth=20, shard_size=400, fingerprint=fp)
    assert left and not left[0].exists()
    assert sorted(p.name for p in (store / "shards").iterdir()) == \
        sorted(p.name for p in (ref.path / "shards").iterdir())
    same_store(st.path, ref.path)


# ---- the first layout ------------------------------------------------------------------------------


def make_old_layout(src: Path, dst: Path, *, scramble_shard: int | None = None) -> Path:
    """The store at ``src`` as the first layout wrote it: the same shards (lz4 on every column),
    ``exposure.duckdb`` with the pairs, queries and documents tables, no index files, format 1.
    ``scramble_shard``: that shard's queries in reverse order (a callable retriever's run)."""
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "doc_index")
    (dst / "query_stats.parquet").unlink()
    for p in sorted((dst / "shards").glob(SHARD_GLOB)):
        t = pq.read_table(p)
        if scramble_shard is not None and p == shard_path(dst, scramble_shard):
            qcol = t.column("q").to_numpy()
            t = t.take(np.lexsort((t.column("rank").to_numpy(), -qcol)))
        pq.write_table(t, p, compression="lz4", use_dictionary=False)
    st = ExposureStore.open(src)
    qtable = st.queries_table()
    con = duckdb.connect(str(dst / "exposure.duckdb"))
    glob = str(dst / "shards" / SHARD_GLOB)
    con.execute(f"CREATE TABLE exposure AS SELECT q, d, rank, score FROM read_parquet('{glob}')")
    con.execute(f"CREATE TABLE documents AS SELECT d, docid FROM read_parquet('{dst / 'documents.parquet'}') ORDER BY d")
    con.execute("CREATE UNIQUE INDEX documents_d ON documents (d)")
    con.register("query_table", qtable)
    con.execute("CREATE TABLE queries AS SELECT * FROM query_table")
    con.execute("CREATE UNIQUE INDEX queries_q ON queries (q)")
    con.execute("CHECKPOINT")
    con.close()
    man = json.loads((dst / "manifest.json").read_text())
    man.pop("n_pairs")
    (dst / "manifest.json").write_text(json.dumps({**man, "format": "limelight-exposure/1"}, indent=1))
    return dst


def old_answers(store: Path, docids: list[str]) -> list[list[tuple]]:
    """The first layout's own answer (its SQL) to 'which queries expose d'."""
    with duckdb.connect(str(store / "exposure.duckdb"), read_only=True) as con:
        out = []
        for docid in docids:
            d = con.execute("SELECT d FROM documents WHERE docid = ?", [docid]).fetchone()[0]
            out.append(con.execute(
                "SELECT qu.qid, e.rank, e.score FROM exposure e JOIN queries qu USING (q) "
                "WHERE e.d = ? ORDER BY e.rank, qu.qid", [d]).fetchall())
    return out


@pytest.mark.parametrize("scramble", [None, 1])
def test_old_layout_is_migrated_exactly(ref, tmp_path, scramble):
    old = make_old_layout(ref.path, tmp_path / "old", scramble_shard=scramble)
    n_exp = ref.n_exposing()
    docids = ref.doc_ids.decode(np.argsort(-n_exp, kind="stable")[:8]).tolist()
    truth = old_answers(old, docids)
    before = {p.name: sorted_rows(p) for p in (old / "shards").glob(SHARD_GLOB)}
    st = ExposureStore.open(old)  # migrates
    assert st.manifest["format"] == "limelight-exposure/2" and st.manifest["complete"]
    assert json.loads((old / "manifest.json").read_text())["format"] == "limelight-exposure/2"
    assert not list(old.glob("*.duckdb*")) and len(index_files(old)) == ref.n_shards + 1
    for docid, want in zip(docids, truth, strict=True):
        assert [(r["qid"], r["rank"], r["score"]) for r in st.exposing_queries(docid)] == \
            [(a, int(b), float(c)) for a, b, c in want]
    same_store(old, ref.path)
    # each shard holds the same rows (re-encoded as this layout writes them: the score plain)
    after = {p.name: sorted_rows(p) for p in (old / "shards").glob(SHARD_GLOB)}
    assert before.keys() == after.keys() and all(before[k].equals(after[k]) for k in before)
    meta = pq.ParquetFile(shard_path(old, 0)).metadata.row_group(0)
    assert [meta.column(i).compression for i in range(4)] == ["LZ4", "UNCOMPRESSED", "LZ4", "UNCOMPRESSED"]


def sorted_rows(path: Path):
    t = pq.read_table(path)
    return t.take(np.lexsort((t.column("rank").to_numpy(), t.column("q").to_numpy())))


def test_old_layout_that_cannot_be_migrated_is_one_line(ref, tmp_path, monkeypatch):
    old = make_old_layout(ref.path, tmp_path / "old")

    def read_only(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(store_mod, "complete_index", read_only)
    with pytest.raises(LimelightError) as e:
        ExposureStore.open(old)
    msg = str(e.value)
    assert "\n" not in msg and str(old) in msg and "old layout" in msg
    assert "limelight exposure compute" in msg and "Permission denied" in msg
    assert (old / "exposure.duckdb").exists()  # nothing removed


def test_unfinished_old_layout_resumes(movies, ref, tmp_path):
    """A job of the first layout killed part-way (its partial database beside the shards)
    resumes into this layout, keeping its finished shards."""
    retriever, fp, qs = movies
    old = make_old_layout(ref.path, tmp_path / "old")
    man = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps({**man, "complete": False}))
    (old / "exposure.duckdb").rename(old / ".exposure.duckdb.building.tmp")
    shard_path(old, 2).unlink()
    kept = shard_path(old, 0).stat().st_mtime_ns
    compute_exposure(retriever, qs, old, depth=20, shard_size=400, fingerprint=fp)
    assert shard_path(old, 0).stat().st_mtime_ns == kept and not list(old.glob("*duckdb*"))
    same_store(old, ref.path)


# ---- kills after the last shard -------------------------------------------------------------------


def test_killed_while_writing_the_index_resumes(movies, ref, tmp_path):
    """Killed after the shards, while the index files were written: the manifest does not say
    complete, so the store does not open; the rerun writes the index and equals the reference."""
    retriever, fp, qs = movies
    out = tmp_path / "store"
    shutil.copytree(ref.path, out)
    man = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**man, "complete": False}))
    (out / "doc_index" / "part-00002.npy").unlink()
    (out / "doc_index" / ".part-00003.npy.k1ll3d.tmp").write_bytes(b"\x93NUMPY half")  # an interrupted write
    (out / "query_stats.parquet").unlink()
    with pytest.raises(LimelightError, match="not finished"):
        ExposureStore.open(out)
    compute_exposure(retriever, qs, out, depth=20, shard_size=400, fingerprint=fp)
    assert not list(out.rglob(".*.tmp"))
    same_store(out, ref.path)


def test_one_file_index_of_the_first_weeks_gets_pieces(ref, tmp_path):
    """This format's first weeks kept the document index in two global files (doc_offsets.npy,
    doc_index.npy): such a store opens with pieces built from its shards, the files removed."""
    out = tmp_path / "store"
    shutil.copytree(ref.path, out)
    shutil.rmtree(out / "doc_index")
    off, rows = np.zeros(len(ref.doc_ids) + 1, dtype=np.int64), np.zeros(len(ref.pair_arrays()[0]), np.int32)
    np.save(out / "doc_offsets.npy", off)
    np.save(out / "doc_index.npy", rows)
    st = ExposureStore.open(out)
    assert not (out / "doc_offsets.npy").exists() and not (out / "doc_index.npy").exists()
    same_store(out, ref.path)
    docid = ref.doc_ids[int(np.argmax(ref.n_exposing()))]
    assert st.exposing_queries(docid) == ref.exposing_queries(docid)


def test_query_ids_resolve_the_same_from_an_id_map_and_an_arrow_column():
    """``exposure query ID``: a store opened from disk searches its Arrow column of ids (no
    Python object per id); a store holding its queries, their ``IdMap``: the same answers."""
    import pyarrow as pa

    from limelight.data.ids import IdMap
    from limelight.errors import LimelightError, UnknownIdError
    from limelight.exposure.store import resolve_query_id

    ids = ["aol:7", "msn:7", "aol:12", "trec:x:12", "q3", "msn:8"]
    for form in (IdMap(ids, kind="query"), pa.chunked_array([ids[:2], ids[2:]], pa.string())):
        assert [resolve_query_id(form, q) for q in ("aol:12", "q3", "8", "12")] == [2, 4, 5, 2]
        with pytest.raises(LimelightError, match="query id '7' is ambiguous in st: aol:7, msn:7; give SOURCE:QID"):
            resolve_query_id(form, "7", "st")
        for q in ("9", "x:9", "aol"):
            with pytest.raises(UnknownIdError):
                resolve_query_id(form, q, "st")
