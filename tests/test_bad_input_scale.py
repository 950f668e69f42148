"""Bad input at scale (issue 44): a log line with a NUL byte, a 1 MB query, a document with 10M
tokens — each processed, or skipped and counted in one warning line; never a crash of the job."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from limelight.data import load_dataset, load_query_log
from limelight.data.loaders import MAX_LOG_QUERY_CHARS, load_collection
from limelight.exposure import compute_exposure
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.index_dir import build_index, build_index_from, open_fingerprinted


@pytest.fixture(scope="module")
def adi_dir(tmp_path_factory):
    return build_index(load_dataset("adi").collection, tmp_path_factory.mktemp("adi") / "idx")


def _write_log(path, texts: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("source\tqid\tquery\n")
        f.writelines(f"test\t{i}\t{t}\n" for i, t in enumerate(texts))


def test_a_log_line_with_a_nul_byte_is_a_query_like_any(tmp_path, adi_dir):
    """A NUL is neither a word character nor a separator of anything: the query retrieves what
    the same text with a space does, through the job end to end."""
    texts = ["information retrieval", "computer\x00science", "computer science", "\x00"]
    _write_log(tmp_path / "log.tsv.gz", texts)
    log = load_query_log(tmp_path / "log.tsv.gz")
    assert log.texts.tolist() == texts
    r, fp, _ = open_fingerprinted(adi_dir)
    store = compute_exposure(r, log, tmp_path / "store", depth=10, fingerprint=fp)
    docs, scores = r.search_batch(texts, 10)
    np.testing.assert_array_equal(docs[1], docs[2])
    np.testing.assert_array_equal(scores[1], scores[2])
    assert (docs[1] >= 0).any() and (docs[3] == -1).all()
    assert store.manifest["n_queries"] == 4
    # the compiled analysis (large batches) and the reference agree on it
    many = texts * 300
    a = r._encode(many)
    b = r._encode_reference(many)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_1mb_log_line_is_skipped_and_counted(tmp_path, adi_dir):
    rng = np.random.default_rng(0)
    vocab = BM25Index.load(adi_dir / "bm25").vocabulary.strings
    huge = " ".join(vocab[rng.integers(0, len(vocab), 200_000)].tolist())[:1 << 20].strip()
    texts = ["information retrieval", huge, "indexing", "linux " * 20_000]
    _write_log(tmp_path / "log.tsv.gz", texts)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        log = load_query_log(tmp_path / "log.tsv.gz")
    msgs = [str(x.message) for x in w]
    assert msgs == [f"{tmp_path / 'log.tsv.gz'}: 2 log line(s) longer than {MAX_LOG_QUERY_CHARS:,} "
                    f"characters skipped (first: query 'test:1', {len(huge):,} characters)"]
    assert log.texts.tolist() == ["information retrieval", "indexing"]
    # the CLI: the job runs, the skip is one warning line
    p = subprocess.run([sys.executable, "-m", "limelight.cli", "exposure", "compute", "--index",
                        str(adi_dir), "--queries", str(tmp_path / "log.tsv.gz"), "--out",
                        str(tmp_path / "store"), "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert [ln for ln in p.stderr.splitlines() if "skipped" in ln] == [f"warning: {msgs[0]}"]
    assert json.loads(p.stdout)["queries"] == 2
    # retrieval itself takes such a query (exact, only slower): no crash, no error
    d, s = BM25(BM25Index.load(adi_dir / "bm25")).search_batch([huge], 5)
    assert (d[0] >= 0).all() and np.all(np.diff(s[0]) <= 0)


def test_a_document_of_10m_tokens_is_indexed_in_bounded_pieces(tmp_path):
    """Streamed from a JSONL file whose one line holds 10M tokens (~60 MB): its length and term
    frequencies are exact, it is retrieved, and its neighbours are indexed as usual."""
    words = ["alpha", "beta", "gamma", "delta"]
    n = 10_000_000
    big = " ".join(words * (n // 4))
    f = tmp_path / "docs.jsonl"
    with open(f, "w", encoding="utf-8") as out:
        out.write(json.dumps({"id": "small1", "text": "alpha omega"}) + "\n")
        out.write(json.dumps({"id": "huge", "text": big}) + "\n")
        out.write(json.dumps({"id": "small2", "text": "beta beta omega"}) + "\n")
    del big
    idx = build_index_from(f, tmp_path / "idx", memory_gb=0.5)  # batches of ~5.6M characters
    ix = BM25Index.load(idx / "bm25")
    assert ix.doc_len.tolist() == [2, n, 3]
    t = ix.vocabulary.lookup("gamma")
    assert ix.docs[ix.indptr[t]:ix.indptr[t + 1]].tolist() == [1]
    assert ix.tf[ix.indptr[t]:ix.indptr[t + 1]].tolist() == [n // 4]
    d, _ = BM25(ix).search_batch(["gamma", "omega beta"], 3)
    assert d[0].tolist() == [1, -1, -1] and d[1].tolist() == [2, 1, 0]  # tf saturates: huge beats small1
    assert load_collection(f).ids.strings.tolist() == ["small1", "huge", "small2"]
