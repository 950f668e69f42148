"""The generator of scale test data (benchmarks/scale_data.py, issue 44 item 1): seeded, in the
shared formats, with the shared data's statistics."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from limelight.data import load_catalog, load_query_log
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.loaders import load_collection
from limelight.retrieval.bm25 import BM25Index

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import scale_data  # noqa: E402


@pytest.fixture(scope="module")
def model() -> scale_data.Model:
    return scale_data.fit(seed=0)


def test_same_seed_same_bytes_and_shared_formats(tmp_path, model):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, seed in ((a, 0), (b, 0), (c, 1)):
        d.mkdir()
        scale_data.write_docs(model, 3000, d / "docs.jsonl", seed)
        scale_data.write_queries(model, 5000, d / "queries.tsv.gz", seed)
    # the gzip header's time of writing is 0 (else the same seed's bytes differed across a second)
    assert (a / "queries.tsv.gz").read_bytes()[4:8] == b"\0\0\0\0"
    for name in ("docs.jsonl", "queries.tsv.gz"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
        assert (a / name).read_bytes() != (c / name).read_bytes()
    coll = load_collection(a / "docs.jsonl")
    assert len(coll) == 3000 and coll.ids[0] == "g00000000"
    log = load_query_log(a / "queries.tsv.gz")
    assert log.weights.sum() == 5000 and len(log) < 5000  # popular queries repeat


def test_statistics_follow_the_shared_data(tmp_path, model):
    """A Debian-sized generated corpus: document lengths, postings, term frequencies and
    vocabulary within a few per cent of the catalog's; query lengths as the log's."""
    n = 20_000
    scale_data.write_docs(model, n, tmp_path / "docs.jsonl", 0)
    gen = BM25Index.build(load_collection(tmp_path / "docs.jsonl"))
    deb = BM25Index.build(load_catalog("debian"))
    assert gen.avgdl == pytest.approx(deb.avgdl, rel=0.05)
    assert np.median(gen.doc_len) == pytest.approx(np.median(deb.doc_len), rel=0.1)
    assert gen.tf.mean() == pytest.approx(deb.tf.mean(), rel=0.05)
    assert len(gen.docs) / n == pytest.approx(len(deb.docs) / deb.n_docs, rel=0.05)
    # vocabulary: the generated corpus at 20k documents against 20k random catalog documents
    cat = load_catalog("debian")
    pick = np.random.default_rng(0).choice(len(cat), n, replace=False)
    sample = Collection(IdMap(cat.ids.strings[pick].tolist(), kind="document"), cat.texts[pick])
    assert gen.n_terms == pytest.approx(BM25Index.build(sample).n_terms, rel=0.1)
    st = scale_data.write_queries(model, 50_000, tmp_path / "q.tsv.gz", 0)
    assert st["tokens_per_query"] == pytest.approx(model.query_lens.mean(), rel=0.05)


def test_zipf_ranks():
    rng = np.random.default_rng(0)
    r = scale_data.zipf_ranks(400_000, 1000, 1.0, rng)
    assert r.min() == 0 and r.max() == 999
    c = np.bincount(r, minlength=1000)
    # P(r) ∝ 1 / (r + 1): counts of ranks 10..99 fall as 1/r (slope -1 in log-log)
    slope = np.polyfit(np.log(np.arange(11, 101)), np.log(c[10:100]), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.1)
    assert scale_data.tail_word(1) == "qzc" and len({scale_data.tail_word(i) for i in range(1, 5000)}) == 4999
