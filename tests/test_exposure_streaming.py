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

N_LINES = 20_000  # the first lines of the shared log (its popular queries repeat)


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
