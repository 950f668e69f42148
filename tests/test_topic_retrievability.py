"""Topic-aware retrievability (T-Retrievability, issue 56 item 1): per-topic r(d) and Gini by
hand on a toy log, one topic = the collection's measure, topic labels permuted = nothing
changes, topics as fairness groups, K-means topics seeded, and ``limelight retrievability
--topics`` on a small real store (adi, BM25)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import limelight.exposure.topics as T
from limelight.cli import app, main
from limelight.data.ids import IdMap
from limelight.exposure.fairness import Groups, fairness_from_pairs
from limelight.exposure.retrievability import analyse_pairs, gini
from limelight.exposure.store import ExposureStore
from limelight.exposure.topics import (
    Topics,
    store_topic_retrievability,
    topic_retrievability,
    topics_from_texts,
    topics_from_vectors,
)

runner = CliRunner()
F = [0.0] + [1.0 / math.log(1.0 + k) for k in range(1, 6)]  # the paper's f(k) = 1/ln(1 + k)

# the toy log: documents a b c e (e retrieved by no query); queries q0 (o=1), q1 (o=2) in topic 0,
# q2 (o=1) in topic 1
DOCS = IdMap(["a", "b", "c", "e"], kind="document")
Q = np.array([0, 0, 1, 2, 2])
D = np.array([0, 1, 1, 2, 0])
RANK = np.array([1, 2, 1, 1, 3])
W = np.array([1.0, 2.0, 1.0])


def test_per_topic_r_and_gini_by_hand():
    res = topic_retrievability(Q, D, RANK, DOCS, W, Topics.from_labels([0, 0, 1]), c=100)
    r0 = {"a": F[1] / 3, "b": (F[2] + 2 * F[1]) / 3}  # W_0 = 1 + 2
    r1 = {"c": F[1], "a": F[3]}  # W_1 = 1
    np.testing.assert_allclose(res.r[0], [r0["a"], r0["b"], 0, 0])
    np.testing.assert_allclose(res.r[1], [r1["a"], 0, r1["c"], 0])
    # two values x ≤ y: G = (y − x) / (2 (x + y))
    g0 = (r0["b"] - r0["a"]) / (2 * (r0["a"] + r0["b"]))
    g1 = (r1["c"] - r1["a"]) / (2 * (r1["a"] + r1["c"]))
    by = res.table.set_index("name")["gini"]
    assert by["0"] == pytest.approx(g0) and by["1"] == pytest.approx(g1)
    s = res.summary
    assert s["topic_gini_min"] == pytest.approx(min(g0, g1)) and s["topic_gini_max"] == pytest.approx(max(g0, g1))
    assert s["topic_gini_mean"] == pytest.approx((g0 + g1) / 2)
    assert s["topic_gini_mean_weighted"] == pytest.approx((3 * g0 + g1) / 4)
    assert res.table["name"].tolist()[0] == ("0" if g0 > g1 else "1")  # most unequal first
    # the cutoff: c = 2 drops a's rank-3 pair (a stays in topic 1's population, with r 0)
    res2 = topic_retrievability(Q, D, RANK, DOCS, W, Topics.from_labels([0, 0, 1]), c=2)
    assert res2.r[1, 0] == 0 and res2.table.set_index("name")["gini"]["1"] == pytest.approx(0.5)
    # the standing of a within its topics: last of 2 in topic 0, last of 2 in topic 1
    st = res.standing("a")
    assert st["topic"].tolist() == [0, 1] or st["topic"].tolist() == [1, 0]
    assert (st["rank"] == 2).all() and (st["below"] == 0).all() and (st["n_docs"] == 2).all()
    b = res.standing("b")
    assert b["rank"].tolist() == [1] and b["below"].tolist() == [0.5]
    assert b["share"].iloc[0] == pytest.approx(r0["b"] / (r0["a"] + r0["b"]))
    assert res.standing("e").empty


@pytest.mark.parametrize("weighting", ["log", "cumulative"])
def test_one_topic_is_the_collection_measure(weighting):
    rng = np.random.default_rng(3)
    nq, nd, depth = 40, 30, 8
    q = np.repeat(np.arange(nq), depth)
    d = np.concatenate([rng.choice(nd - 5, depth, replace=False) for _ in range(nq)])  # 5 never retrieved
    rank = np.tile(np.arange(1, depth + 1), nq)
    w = rng.integers(1, 5, nq).astype(float)
    ids = IdMap([f"d{i}" for i in range(nd)], kind="document")
    one = Topics.from_labels(np.zeros(nq, dtype=int))
    c = 5
    coll = analyse_pairs(q, d, rank, ids, w, c)  # limelight's collection r(d): cumulative 1[k ≤ c]
    for population, expected in (("retrieved", "gini_retrieved_only"), ("collection", "gini")):
        res = topic_retrievability(q, d, rank, ids, w, one, c=c, weighting=weighting, population=population)
        g = res.summary["topic_gini_mean"]
        assert res.summary["topic_gini_min"] == res.summary["topic_gini_max"] == g
        assert g == pytest.approx(res.summary["gini_same_weighting"])
        if weighting == "cumulative":
            assert g == pytest.approx(getattr(coll, expected))
        else:  # the same Gini as r(d) = Σ o_q / ln(1 + k) summed by hand
            r = np.zeros(nd)
            np.add.at(r, d, w[q] * np.where(rank <= c, 1 / np.log1p(rank), 0.0))
            assert g == pytest.approx(gini(r[np.unique(d)] if population == "retrieved" else r))


def _random_log(seed: int):
    rng = np.random.default_rng(seed)
    nq, nd, depth = 60, 25, 6
    q = np.repeat(np.arange(nq), depth)
    d = np.concatenate([rng.choice(nd, depth, replace=False) for _ in range(nq)])
    rank = np.tile(np.arange(1, depth + 1), nq)
    return q, d, rank, rng.integers(1, 4, nq).astype(float), rng.integers(0, 4, nq), \
        IdMap([f"d{i:02d}" for i in range(nd)], kind="document")


def test_permuting_topic_labels_changes_nothing():
    q, d, rank, w, labels, ids = _random_log(5)
    perm = np.array([2, 0, 3, 1])
    a = topic_retrievability(q, d, rank, ids, w, Topics(labels, ["A", "B", "C", "D"], "given"))
    b = topic_retrievability(q, d, rank, ids, w, Topics(perm[labels], ["B", "D", "A", "C"], "given"))
    keys = ("topic_gini_min", "topic_gini_mean", "topic_gini_max", "topic_gini_mean_weighted",
            "gini_same_weighting")
    assert {k: a.summary[k] for k in keys} == pytest.approx({k: b.summary[k] for k in keys})
    cols = ["name", "n_queries", "weight", "n_docs", "gini"]
    pd.testing.assert_frame_equal(a.table[cols], b.table[cols])
    sa = a.standings().drop(columns="topic").sort_values(["docid", "name"], ignore_index=True)
    sb = b.standings().drop(columns="topic").sort_values(["docid", "name"], ignore_index=True)
    pd.testing.assert_frame_equal(sa, sb)


def test_sparse_path_equals_dense(monkeypatch):
    q, d, rank, w, labels, ids = _random_log(7)
    topics = Topics.from_labels(labels)
    dense = topic_retrievability(q, d, rank, ids, w, topics)
    monkeypatch.setattr(T, "DENSE_CELLS", 0)
    sparse = topic_retrievability(q, d, rank, ids, w, topics)
    assert sparse.summary == pytest.approx(dense.summary)
    pd.testing.assert_frame_equal(sparse.standings(), dense.standings())
    assert (sparse.groups().matrix != dense.groups().matrix).nnz == 0


def test_topics_as_fairness_groups():
    res = topic_retrievability(Q, D, RANK, DOCS, W, Topics(np.array([0, 0, 1]), ["x", "y"], "given"))
    g = res.groups("share")
    assert isinstance(g, Groups) and g.names == ["t0: x", "t1: y", "(none)"]
    # a: retrieved by q0 (o=1, topic x) and q2 (o=1, topic y); b: x only; c: y only; e: none
    np.testing.assert_allclose(g.matrix.toarray(), [[.5, .5, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    home = res.groups("home").matrix.toarray()
    assert (home.sum(axis=1) == 1).all() and home[3, 2] == 1
    fair = fairness_from_pairs(Q, D, RANK, W, g, n_boot=0, top=0)  # usable where groups are
    assert fair.groups["group"].tolist() == g.names
    assert fair.groups["exposure_share"].sum() == pytest.approx(1.0)


def test_topic_groups_file_reads_back_as_groups(tmp_path):
    # a vector topic's name is a query text: a tab in it must not break the TSV
    res = topic_retrievability(Q, D, RANK, DOCS, W, Topics(np.array([0, 0, 1]), ["x\ty", "z"], "given"))
    path = tmp_path / "topics.tsv"
    res.write_groups_tsv(path)
    assert path.read_text().splitlines() == ["a\tt0: x y", "b\tt0: x y", "c\tt1: z"]  # a: a tie, the first
    g = Groups.from_tsv(path, DOCS)
    assert g.names == ["t0: x y", "t1: z", "(none)"] and g.matrix.toarray()[3].tolist() == [0, 0, 1]
    res.write_groups_tsv(path)  # limelight's own file is replaced; a user's is refused
    (tmp_path / "mine.tsv").write_text("keep\n")
    with pytest.raises(Exception, match="not written by limelight"):
        res.write_groups_tsv(tmp_path / "mine.tsv")
    assert (tmp_path / "mine.tsv").read_text() == "keep\n"


def test_tokens_are_limelights_analysis():
    from limelight.analysis import Analyzer
    from limelight.exposure.topics import _tokens

    texts = ["What is Debian's APT_config?", "Café crème, naïve 42 x", "", "the THE of-of a b c", "日本語 テキスト"]
    rows, codes, terms = _tokens(texts)
    mine = [[] for _ in texts]
    for r, c in zip(rows.tolist(), codes.tolist(), strict=True):
        mine[r].append(terms[c])
    assert mine == Analyzer(stopwords="en_plus").tokenize_many(texts)


def test_kmeans_topics_are_seeded_and_sensible():
    texts = ["linux kernel module", "kernel module build linux", "linux kernel driver",
             "python package install", "pip install python package", "python package wheel"]
    a = topics_from_texts(texts, 2, seed=1)
    assert a.labels.tolist() == topics_from_texts(texts, 2, seed=1).labels.tolist()
    assert len(set(a.labels[:3])) == 1 and len(set(a.labels[3:])) == 1 and a.labels[0] != a.labels[3]
    assert any("kernel" in n or "linux" in n for n in a.names)
    # through LSA (2 dimensions) and fitted on a sample of 4 queries, every query then assigned
    for lsa in (topics_from_texts(texts, 2, seed=1, dims=2), topics_from_texts(texts, 2, seed=1, fit_sample=4),
                topics_from_texts(texts, 2, seed=1, dims=None)):  # the last: raw TF-IDF, scikit-learn's K-means
        assert lsa.labels[0] == lsa.labels[1] == lsa.labels[2] != lsa.labels[3] == lsa.labels[4] == lsa.labels[5]
    assert topics_from_texts(texts, 2, seed=1, dims=2).method == "kmeans-tfidf-lsa2"
    x = np.array([[1.0, 0.1], [2.0, 0.0], [0.0, 1.0], [0.1, 3.0]])
    v = topics_from_vectors(x, 2, seed=0, texts=["a", "b", "c", "d"])
    assert v.labels[0] == v.labels[1] != v.labels[2] == v.labels[3]
    with pytest.raises(Exception, match="number of topics"):
        topics_from_texts(texts, 7)


@pytest.fixture(scope="module")
def adi_store(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("topics")
    idx, store = root / "idx", root / "store"
    r = runner.invoke(app, ["index", "--collection", "adi", "--out", str(idx)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["exposure", "compute", "--index", str(idx), "--queries",
                            str(data_dir / "collections" / "adi" / "queries.tsv"), "--out", str(store),
                            "--depth", "20"])
    assert r.exit_code == 0, r.output
    return store


def test_cli_topics_beside_the_collection_gini(adi_store, tmp_path):
    r = runner.invoke(app, ["retrievability", "--store", str(adi_store), "--c", "20", "--topics", "3",
                            "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    st = ExposureStore.open(adi_store)
    lib = store_topic_retrievability(st, topics_from_texts(st.queries.texts.tolist(), 3, 0), 20)
    assert out["collection"]["gini"] == pytest.approx(st.retrievability(c=20).gini)
    assert out["topics"]["topic_gini_mean"] == pytest.approx(lib.summary["topic_gini_mean"])
    assert out["topics"]["k"] == 3 and len(out["topics"]["most_unequal"]) == 3
    # the text view, a document's standing, the groups file, a sweep
    doc = str(lib.standings()["docid"].iloc[0])
    groups = tmp_path / "topics.tsv"
    r = runner.invoke(app, ["retrievability", "--store", str(adi_store), "--topics", "3", "--doc", doc,
                            "--groups-out", str(groups)])
    assert r.exit_code == 0, r.output
    assert "collection gini@20" in r.output and "per-topic gini over K = 3" in r.output and doc in r.output
    g = Groups.from_tsv(groups, st.doc_ids)
    assert set(g.names) - {"(none)"} <= {f"t{i}: {n}" for i, n in enumerate(lib.topics.names)}
    r = runner.invoke(app, ["retrievability", "--store", str(adi_store), "--topics", "1,2,4", "--json"])
    assert r.exit_code == 0, r.output
    assert [x["k"] for x in json.loads(r.output)["sweep"]] == [1, 2, 4]


@pytest.mark.parametrize("args, msg", [
    (["--topics", "0"], "must be ≥ 1"),
    (["--topics", "x"], "expected a number of topics"),
    (["--topics", "2", "--topic-vectors", "nope.npy"], "nope.npy: no such file"),
    (["--doc", "x"], "go with --topics"),
    (["--topics", "2", "--doc", "no-such-doc"], "'no-such-doc' is not in the collection"),
    (["--topics", "2", "--population", "all"], "unknown population"),
])
def test_cli_bad_topic_input_is_one_line(adi_store, args, msg, capsys):
    with pytest.raises(SystemExit) as e:  # the entry point, in process: one line, status 2
        main(["retrievability", "--store", str(adi_store), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and msg in err and err.count("\n") == 1, err
