"""Exposure jobs in bounded memory (issue 44, item 3): a query log read in blocks keeping its
distinct queries only, shards computed one at a time (no pair buffer for the whole job), and
r(d) and the exposing counts read back shard by shard — each equal to the chunk-free path."""

from __future__ import annotations

import gzip
import json
import re
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest

from limelight.data import load_dataset, load_query_log
from limelight.data.formats import read_queries_tsv
from limelight.data.loaders import MAX_LOG_QUERY_CHARS, _distinct, load_queries_file
from limelight.data.querylog import distinct_log
from limelight.errors import FormatError
from limelight.exposure import ExposureStore, compute_exposure
from limelight.exposure.docindex import global_index
from limelight.retrieval.index_dir import build_index, open_fingerprinted

N_LINES = 133_000  # the first lines of the shared log: 100k+ distinct queries (popular ones repeat)


@pytest.fixture(scope="module")
def log_path(tmp_path_factory):
    from limelight.data.loaders import data_root

    out = tmp_path_factory.mktemp("log") / "log.tsv.gz"
    with gzip.open(data_root() / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f, \
            gzip.open(out, "wt", encoding="utf-8") as g:
        for i, ln in enumerate(f):
            if i > N_LINES:
                break
            g.write(ln)
    return out


@pytest.fixture(scope="module")
def npl(tmp_path_factory):
    return build_index(load_dataset("npl").collection, tmp_path_factory.mktemp("npl") / "idx")


def _whole(path) -> object:
    """The whole-file reader's distinct log (the reference)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        qs = _distinct(read_queries_tsv(path, name="querylog"), path)
    return qs, [str(x.message) for x in w]


def _same_queries(a, b) -> None:
    assert a.ids.strings.tolist() == b.ids.strings.tolist()
    assert a.texts.tolist() == b.texts.tolist()
    np.testing.assert_array_equal(a.weights, b.weights)
    assert sorted(a.fields) == sorted(b.fields)
    for k in a.fields:
        assert a.fields[k].tolist() == b.fields[k].tolist()
    assert a.name == b.name


def test_log_read_in_blocks_equals_the_whole_file_reader(log_path):
    ref, msgs = _whole(log_path)
    assert msgs == [] and len(ref) < N_LINES and ref.weights.sum() == N_LINES
    for block in (1 << 10, 1 << 20):  # blocks of 1 KB: lines cut across many block ends
        got = distinct_log(log_path, MAX_LOG_QUERY_CHARS, block_bytes=block)
        _same_queries(got, ref)
    _same_queries(load_query_log(log_path), ref)
    _same_queries(load_queries_file(log_path), ref)


def test_log_in_blocks_long_lines_and_errors(tmp_path):
    p = tmp_path / "log.tsv"
    long = "word " * (MAX_LOG_QUERY_CHARS // 4)
    p.write_text("source\tqid\tquery\r\ns\t1\tHello  World\n\ns\t2\t" + long + "\ns\t3\thello world\n"
                 "t\t1\tA\x00B\n")
    ref, msgs = _whole(p)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = load_query_log(p)
    assert [str(x.message) for x in w] == msgs and len(msgs) == 1 and "1 log line(s)" in msgs[0]
    _same_queries(got, ref)
    assert got.texts.tolist() == ["hello world", "a\x00b"] and got.weights.tolist() == [2.0, 1.0]
    # a bad line: the whole-file reader's error, naming the line
    for text, what in (("s\t1\ta\ns\t1\tb\n", "duplicate query id 's:1' (first on line 2)"),
                       ("s\t1\ta\ns\t2\n", "expected source<TAB>qid<TAB>query"),
                       ("s\t1\ta\ns\t2\t  \n", "query 's:2' is empty")):
        p.write_text("source\tqid\tquery\n" + text)
        assert distinct_log(p, MAX_LOG_QUERY_CHARS) is None
        with pytest.raises(FormatError, match=re.escape(what)) as e:
            load_query_log(p)
        assert ":3" in str(e.value)
    p.write_bytes(b"source\tqid\tquery\ns\t1\ta\ns\t2\t\xff\n")
    with pytest.raises(FormatError, match="UTF-8"):
        load_query_log(p)


def _rows(st: ExposureStore) -> list[np.ndarray]:
    t = pq.read_table(st.path / "shards")
    return [t.column(c).to_numpy() for c in ("q", "d", "rank", "score")]


def test_streamed_job_equals_the_chunk_free_run(log_path, npl, tmp_path):
    """The same store and r(d) whether the job keeps every pair in memory in one shard, or
    holds one shard of 500 queries at a time and analyses the store shard by shard."""
    qs = load_query_log(log_path)
    assert len(qs) >= 100_000  # (the acceptance line: a 100k-query subset)
    r, fp, _ = open_fingerprinted(npl)
    a = compute_exposure(r, qs, tmp_path / "a", depth=20, fingerprint=fp, shard_size=len(qs))
    assert a._pairs is not None  # chunk-free: the job's pairs in memory, one shard
    b = compute_exposure(r, qs, tmp_path / "b", depth=20, fingerprint=fp, shard_size=500,
                         pairs_in_memory=0)
    assert b._pairs is None and b.n_shards == -(-len(qs) // 500) > 10
    for x, y in zip(_rows(a), _rows(b), strict=True):
        np.testing.assert_array_equal(x, y)
    a2, b2 = ExposureStore.open(tmp_path / "a"), ExposureStore.open(tmp_path / "b")
    b2.pairs_in_memory = 0
    np.testing.assert_array_equal(a2.n_retrieved(), b2.n_retrieved())
    np.testing.assert_array_equal(a2.thresholds(), b2.thresholds())
    for x, y in zip(global_index(a2.pieces(), len(a2.doc_ids)), global_index(b2.pieces(), len(b2.doc_ids)),
                    strict=True):
        np.testing.assert_array_equal(x, y)
    ra, rb = a.retrievability(c=10), b2.retrievability(c=10)  # in memory vs shard by shard
    assert b2._pairs is None  # streamed: nothing kept
    np.testing.assert_array_equal(ra.r, rb.r)  # bit for bit
    assert ra.gini == rb.gini and ra.retrievable_fraction == rb.retrievable_fraction
    assert ra.gini_retrieved_only == rb.gini_retrieved_only and ra.r.sum() > 0
    np.testing.assert_array_equal(a2.n_exposing(5), b2.n_exposing(5))
    np.testing.assert_array_equal(a2.n_exposing(), b2.n_exposing())
    assert a2.n_pairs() == b2.n_pairs() == len(_rows(a)[0])
    d = int(np.argmax(ra.r))
    docid = a2.doc_ids[d]
    assert a2.exposing_queries(docid) == b2.exposing_queries(docid)
    # a resumed streamed job (as if killed before shard 3 was written) gives the same store
    man = tmp_path / "b" / "manifest.json"
    man.write_text(json.dumps({**json.loads(man.read_text()), "complete": False}))
    (tmp_path / "b" / "shards" / "part-00003.parquet").unlink()
    c = compute_exposure(r, qs, tmp_path / "b", depth=20, fingerprint=fp, shard_size=500,
                         pairs_in_memory=0)
    for x, y in zip(_rows(a), _rows(c), strict=True):
        np.testing.assert_array_equal(x, y)


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def test_job_over_the_query_table_equals_the_in_memory_job(log_path, npl, tmp_path):
    """``exposure compute``'s path: the log's distinct queries kept on disk (``QueryTable``) and
    read a shard at a time give the same store, file for file, as the query set in memory; the
    store the job returns reads its own query table instead of holding the queries."""
    from limelight.data.querytable import QueryTable

    qs = load_query_log(log_path)
    table = load_queries_file(log_path, on_disk=tmp_path / "table")
    assert isinstance(table, QueryTable) and table.on_disk and len(table) == len(qs)
    assert sorted(p.name for p in (tmp_path / "table").iterdir()) == ["queries.arrow"]
    r, fp, _ = open_fingerprinted(npl)
    a = compute_exposure(r, qs, tmp_path / "a", depth=20, fingerprint=fp, shard_size=500,
                         pairs_in_memory=0)
    b = compute_exposure(r, table, tmp_path / "b", depth=20, fingerprint=fp, shard_size=500,
                         pairs_in_memory=0)
    assert b._queries is None and b._pairs is None and b.n_queries == len(qs)
    fa, fb = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert sorted(fa) == sorted(fb) and "queries.arrow" in fa and "doc_table/q.npy" in fa
    assert [k for k in fa if fa[k] != fb[k]] == []
    ma = json.loads((tmp_path / "a" / "manifest.json").read_text())
    mb = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert ma == mb
    np.testing.assert_array_equal(a.retrievability(c=10).r, b.retrievability(c=10).r)
    _same_queries(ExposureStore.open(tmp_path / "b").queries, _stored(qs))


def _stored(qs):
    """``qs`` as a store keeps it (ids, texts, weights; no fields)."""
    from limelight.data.queries import Queries

    return Queries(qs.ids, qs.texts, qs.weights, name=qs.name)


def test_query_table_rows_equal_the_query_set(log_path, tmp_path):
    """Every way the job reads a ``QueryTable`` (rows, texts, Arrow rows, columns in batches,
    positions in any order, the fingerprint, a copy shipped to a task) equals the in-memory set;
    the whole columns, built on demand, too."""
    import pickle

    from limelight.data.querytable import QueryTable, write_query_table
    from limelight.exposure.fingerprints import queries_fingerprint, validate_queries

    qs = load_query_log(log_path)
    t = QueryTable(write_query_table(qs, tmp_path / "q.arrow", batch=700), name="querylog")
    assert t._file.num_record_batches > 3 and len(t) == len(qs)
    validate_queries(t)
    assert queries_fingerprint(t) == queries_fingerprint(qs)
    for s, e in ((0, 1), (650, 1500), (len(qs) - 3, len(qs) + 5), (5, 5)):
        assert t.texts_between(s, e) == qs.texts_between(s, e)
        assert t.arrow_rows(s, e).equals(qs.arrow_rows(s, e))
        _same_queries(t.slice(s, e), qs.slice(s, e))
    idx = np.array([len(qs) - 1, 3, 701, 2, 0, 1400])
    _same_queries(t.take(idx), qs.take(idx))
    for col in ("qid", "text", "weight"):
        a = [x for b in t.column_batches(col) for x in list(b)]
        assert a == [x for b in qs.column_batches(col, 999) for x in list(b)]
        for size in (999, 700, len(qs) + 1):  # across the file's batches of 700, in step, all at once
            got, want = list(t.column_batches(col, size)), list(qs.column_batches(col, size))
            assert [len(b) for b in got] == [len(b) for b in want]
            assert [x for b in got for x in list(b)] == [x for b in want for x in list(b)]
            assert all(isinstance(b, np.ndarray if col == "weight" else list) for b in got)
    _same_queries(pickle.loads(pickle.dumps(t)), qs)
    _same_queries(t, qs)  # the whole columns


def test_query_table_bad_weight_names_the_query(tmp_path):
    from limelight.data.queries import Queries
    from limelight.data.querytable import QueryTable, write_query_table
    from limelight.errors import LimelightError
    from limelight.exposure.fingerprints import validate_queries

    qs = Queries.from_lists(["a", "b", "c"], ["x", "y", "z"], [1.0, 2.0, 3.0])
    qs.weights[2] = -1.0  # (a table written by another tool)
    t = QueryTable(write_query_table(qs, tmp_path / "q.arrow", batch=2))
    with pytest.raises(LimelightError, match="query 'c': weight must be a finite number ≥ 0, got -1.0"):
        validate_queries(t)
    qs.weights[2], qs.texts[1] = 3.0, "  "
    t = QueryTable(write_query_table(qs, tmp_path / "q2.arrow", batch=2))
    with pytest.raises(LimelightError, match="query 'b' is empty"):
        validate_queries(t)
    (tmp_path / "junk.arrow").write_text("not arrow")
    with pytest.raises(LimelightError, match="junk.arrow: not a query table"):
        QueryTable(tmp_path / "junk.arrow")


def test_lexical_ranks_by_sorted_runs_equal_one_sort(tmp_path):
    """The document table's tie order: query ids ranked in code-point order a row group at a
    time, merged, equal to one sort of every id (non-ASCII ids and shared prefixes included)."""
    import pyarrow as pa

    from limelight.exposure.docindex import _query_lexical_ranks

    rng = np.random.default_rng(0)
    words = ["aol:1", "aol:10", "aol:2", "é", "e", "z", "Z", "aol:1\u00e9", "日本", "ab", ""]
    ids = list(dict.fromkeys(f"{rng.choice(words)}{i}" for i in rng.permutation(5000)))
    t = pa.table({"q": pa.array(np.arange(len(ids), dtype=np.int32)), "qid": pa.array(ids, pa.string())})
    for rows in (len(ids), 1000, 333):  # one row group (one sort), then several runs
        pq.write_table(t, tmp_path / "queries.parquet", row_group_size=rows)
        assert pq.ParquetFile(tmp_path / "queries.parquet").metadata.num_row_groups == -(-len(ids) // rows)
        lex = _query_lexical_ranks(tmp_path)
        expected = np.empty(len(ids), dtype=np.int64)
        expected[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
        np.testing.assert_array_equal(lex, expected)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["queries.parquet"]  # runs removed
