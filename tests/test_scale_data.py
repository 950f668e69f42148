"""The generator of scale test data (benchmarks/scale_data.py, issue 44 item 1): seeded, in the
shared formats, with the shared data's statistics."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from limelight.data import load_catalog, load_query_log
from limelight.data.loaders import load_collection
from limelight.retrieval.bm25 import BM25Index

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import scale_data  # noqa: E402


@pytest.fixture(scope="module")
def model() -> scale_data.Model:
    """The model fitted to the shared data, as scale_curve.py gets it: fitted once in the suite
    (~15 CPU s; whichever of this file and tests/test_scale_curve.py comes first) and read back
    from limelight's cache by the other (``scale_data.fitted``)."""
    return scale_data.fitted(seed=0)


def test_a_kept_model_reads_back_as_fitted(tmp_path):
    """What ``fitted`` keeps is the model ``fit`` returned: every array and number, the words
    in their order (a word of non-ASCII letters included)."""
    m = scale_data.Model(doc_lens=np.array([3, 58, 7]), words=["the", "kernel", "façade", "zz"],
                         doc_cum=np.array([0.5, 0.75, 0.875, 1.0]), query_lens=np.array([2, 1]),
                         query_cum=np.array([0.1, 0.2, 0.3, 1.0]), p_new_query=0.123456789,
                         zipf_tail=1.8181818181818181, p_new=0.00693, copy=0.23796,
                         stop=np.array([True, False, False, False]), target_tf=1.4142135623730951,
                         target_vocab=134_391)
    scale_data.save_model(m, tmp_path / "m.npz")
    back = scale_data.load_model(tmp_path / "m.npz")
    assert back.words == m.words
    for f in ("doc_lens", "doc_cum", "query_lens", "query_cum", "stop"):
        assert getattr(back, f).dtype == getattr(m, f).dtype
        assert (getattr(back, f) == getattr(m, f)).all()
    for f in ("p_new_query", "zipf_tail", "p_new", "copy", "target_tf", "target_vocab"):
        assert getattr(back, f) == getattr(m, f) and type(getattr(back, f)) is type(getattr(m, f))
    assert list(tmp_path.iterdir()) == [tmp_path / "m.npz"]  # nothing left beside it
    # kept per seed (and per input: the data's files, this source, the stopwords, numpy)
    assert scale_data._fit_key(0) == scale_data._fit_key(0) != scale_data._fit_key(1)


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
    cat = load_catalog("debian")
    deb = BM25Index.build(cat)
    assert gen.avgdl == pytest.approx(deb.avgdl, rel=0.05)
    assert np.median(gen.doc_len) == pytest.approx(np.median(deb.doc_len), rel=0.1)
    assert gen.tf.mean() == pytest.approx(deb.tf.mean(), rel=0.05)
    assert len(gen.docs) / n == pytest.approx(len(deb.docs) / deb.n_docs, rel=0.05)
    # vocabulary: the generated corpus at 20k documents against 20k random catalog documents,
    # the terms of the catalog's index that have a posting in one of them (an index of those
    # documents alone has these terms: analysis is per document)
    pick = np.random.default_rng(0).choice(len(cat), n, replace=False)
    assert (deb.doc_ids.strings == cat.ids.strings).all()  # index codes are catalog rows
    term_of = np.repeat(np.arange(deb.n_terms), np.diff(deb.indptr))
    in_sample = np.zeros(deb.n_docs, dtype=bool)
    in_sample[pick] = True
    sample_terms = len(np.unique(term_of[in_sample[deb.docs]]))
    assert gen.n_terms == pytest.approx(sample_terms, rel=0.1)
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
