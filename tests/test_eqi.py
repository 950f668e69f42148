"""EQI (limelight.exposure.eqi): exact reverse search against brute-force recomputation,
reverse baselines, metric learning, evaluation and the CLI, on real data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data import load_dataset, load_query_log
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.errors import IndexMismatchError, LimelightError, UnknownIdError
from limelight.exposure import ExposureStore, compute_exposure
from limelight.exposure.eqi import (
    BM25Reverse,
    BruteForce,
    DenseReverse,
    EQIModel,
    ExactReverse,
    evaluate_eqi,
    sample_triples,
    train_eqi,
    training_data,
    tune_bm25_reverse,
    validation_docs,
)
from limelight.exposure.eqi.exact import recompute_new_exposure
from limelight.exposure.relq import relq_many
from limelight.retrieval.bm25 import BM25, BM25Index


def _split(coll: Collection, n_new: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    new = np.sort(rng.choice(len(coll), n_new, replace=False))
    keep = np.setdiff1d(np.arange(len(coll)), new)
    base = Collection(IdMap(coll.ids.strings[keep], kind="document"), coll.texts[keep], name=coll.name)
    return base, coll.texts[new].tolist(), coll.ids.strings[new].tolist()


@pytest.fixture(scope="module")
def log() -> object:
    return load_query_log()


@pytest.fixture(scope="module")
def bm25_setup(log, tmp_path_factory):
    """cranfield minus 60 held-out documents, 4000 log queries, top 100."""
    base, new_texts, new_ids = _split(load_dataset("cranfield").collection, 60)
    ret = BM25(BM25Index.build(base), threads=2)
    qs = log.head(4000)
    st = compute_exposure(ret, qs, tmp_path_factory.mktemp("eqi") / "store", depth=100)
    return ret, qs, st, base, new_texts, new_ids


def _same(a, b, exact_scores: bool = True):
    for f in ("ptr", "q", "rank"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    if exact_scores:
        assert np.array_equal(a.score, b.score)
    else:  # FAISS's BLAS blocking may change the last bit of a dense score
        assert np.allclose(a.score, b.score, rtol=1e-6, atol=1e-7)


def test_exact_reverse_bm25_equals_recomputation(bm25_setup):
    ret, qs, st, _, texts, ids = bm25_setup
    ex = ExactReverse.build(st, ret)
    got = ex.add_documents(texts, ids)
    want = recompute_new_exposure(ret, qs, 100, texts, ids, frozen=True)
    assert len(want.q) > 100  # the held-out documents are exposed by many queries
    _same(got, want)
    # one at a time: the same as a re-run with that document alone
    one = ex.query(text=texts[7], docid=ids[7], k=1000)
    alone = recompute_new_exposure(ret, qs, 100, texts[7:8], ids[7:8], frozen=True)
    q, r, s = alone.lists(0)
    assert [x["qid"] for x in one] == qs.ids.decode(q).tolist()
    assert [x["rank"] for x in one] == r.tolist()
    assert np.allclose([x["score"] for x in one], s)


def test_exact_reverse_bm25_each_document_alone(bm25_setup):
    """20 held-out documents, each inserted alone: the exact lists equal a re-run of every query
    over the collection with that document added (frozen statistics)."""
    ret, qs, st, _, texts, ids = bm25_setup
    ex = ExactReverse.build(st, ret)
    exposed = 0
    for t, d in zip(texts[:20], ids[:20], strict=True):
        got = ex.query(text=t, docid=d, k=len(qs))
        q, r, s = recompute_new_exposure(ret, qs, 100, [t], [d], frozen=True).lists(0)
        assert [x["qid"] for x in got] == qs.ids.decode(q).tolist(), d
        assert [x["rank"] for x in got] == r.tolist(), d
        assert np.array_equal(np.float32([x["score"] for x in got]), s), d
        exposed += len(got)
    assert exposed > 200


def test_recomputed_statistics_drift_is_measured(bm25_setup):
    ret, qs, st, _, texts, ids = bm25_setup
    exact = ExactReverse.build(st, ret).add_documents(texts, ids)
    fresh = recompute_new_exposure(ret, qs, 100, texts, ids, frozen=False)
    # ground truth from the recomputed run: ranks of each new document per query
    import scipy.sparse as sp

    rows = np.repeat(np.arange(len(ids)), np.diff(fresh.ptr))
    truth = sp.csr_matrix((fresh.rank, (rows, fresh.q)), shape=(len(ids), len(qs)))
    v = relq_many(exact.ranked_codes(100), truth, "RELQ(0.5,0.9)")["RELQ(0.5,0.9)"]
    ok = ~np.isnan(v)
    assert ok.any() and 0.0 < np.nanmean(v) <= 1.0
    # frozen statistics differ from fresh ones, so some list differs
    assert not (np.array_equal(exact.q, fresh.q) and np.array_equal(exact.rank, fresh.rank))


def test_exact_reverse_stored_docid_and_errors(bm25_setup, tmp_path):
    ret, qs, st, base, texts, _ = bm25_setup
    ex = ExactReverse.build(st, ret)
    d = base.ids[int(np.argmax(st.n_exposing()))]
    assert ex.query(docid=d, k=5) == st.exposing_queries(d)[:5]
    with pytest.raises(UnknownIdError):
        ex.query(docid="no-such-doc")
    with pytest.raises(LimelightError, match="empty"):
        ex.query(text="   ")
    with pytest.raises(LimelightError):
        ex.add_documents(texts[:2], ["x", "x"])
    other = BM25(BM25Index.build(load_dataset("adi").collection))
    with pytest.raises(IndexMismatchError):
        ExactReverse.build(st, other)
    with pytest.raises(IndexMismatchError, match="k1"):
        ExactReverse.build(st, BM25(ret.index, k1=1.5))


def test_exact_reverse_unprepared_reads_the_store_and_prepares_on_first_new_document(bm25_setup):
    """``build(prepare=False)`` (what the audit's EQI stage builds): the retriever is checked
    against the store as before, a stored document's exposing queries come from the store
    without its pairs or lists being read, and the first new document prepares the engine: the
    same lists as an engine prepared when built."""
    ret, qs, st, base, texts, ids = bm25_setup
    fresh = ExposureStore.open(st.path)
    ex = ExactReverse.build(fresh, ret, prepare=False)
    d = base.ids[int(np.argmax(st.n_exposing()))]
    assert ex.query(docid=d, k=5) == st.exposing_queries(d)[:5]
    assert fresh._pairs is None and not hasattr(ex, "S") and not hasattr(ex, "qptr")
    with pytest.raises(IndexMismatchError, match="k1"):
        ExactReverse.build(fresh, BM25(ret.index, k1=1.5), prepare=False)
    _same(ex.add_documents(texts, ids), ExactReverse.build(st, ret).add_documents(texts, ids))
    assert hasattr(ex, "S") and ex._pending is None


def test_edited_document_replaces_its_old_version(bm25_setup):
    ret, qs, st, base, _, _ = bm25_setup
    ex = ExactReverse.build(st, ret)
    d = int(np.argmax(st.n_exposing()))
    docid = base.ids[d]
    same = {r["qid"]: r["rank"] for r in ex.query(text=str(base.texts[d]), docid=docid, k=1000)}
    stored = {r["qid"]: r["rank"] for r in st.exposing_queries(docid)}
    # unchanged text: the same exposure except where a tie at the threshold moves it out
    assert set(same) <= set(stored) and len(same) >= 0.95 * len(stored)
    assert all(same[q] == stored[q] for q in same)
    gone = ex.query(text="zzzz qqqq xylophone", docid=docid, k=1000)
    assert len(gone) < len(stored)


def test_reverse_baselines_and_tuning(bm25_setup):
    ret, qs, st, base, _, _ = bm25_setup
    docs = np.flatnonzero(st.n_exposing() > 0)[:80]
    texts = base.texts[docs].tolist()
    rev = BM25Reverse(qs, ret.index.analyzer)
    tuned, grid = tune_bm25_reverse(rev, st, docs, texts, k1s=(0.9, 1.5), bs=(0.4, 1.0))
    default = next(g for g in grid if g["k1"] == 0.9 and g["b"] == 0.4)["RELQ(0.5,0.9)"]
    assert max(g["RELQ(0.5,0.9)"] for g in grid) >= default
    res = evaluate_eqi(st, {"brute-force": BruteForce(st), "bm25-reverse": rev, "bm25-tuned": tuned},
                       docs, texts=texts)
    assert all(v == pytest.approx(1.0) for k, v in res["brute-force"].items() if k != "n_docs")
    assert 0 < res["bm25-reverse"]["RELQ(0.5,0.9)"] < 1
    assert res["bm25-tuned"]["RELQ(0.5,0.9)"] >= res["bm25-reverse"]["RELQ(0.5,0.9)"]
    codes, scores = rev.search(texts=texts[:3], k=10)
    assert codes.shape == (3, 10) and (np.diff(scores, axis=1) <= 0).all()


# ---- dense --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dense_setup(log, tmp_path_factory):
    """adi minus 8 held-out documents, 1000 log queries embedded once, top 20."""
    from limelight.exposure.eqi import encode_queries_cached
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

    enc = Encoder()
    coll = load_dataset("adi").collection
    base, new_texts, new_ids = _split(coll, 8, seed=1)
    ret = DenseRetriever(DenseIndex.build(base, enc), enc)
    qs = log.head(1000)
    qemb = encode_queries_cached(qs, enc, cache_dir=None)
    lookup = {t: i for i, t in enumerate(qs.texts.tolist())}

    class FromEmbeddings:  # the store is computed from the same query embeddings
        doc_ids = ret.doc_ids
        name = "dense-precomputed"

        def search_batch(self, texts, k):
            return ret.search_vectors(qemb[[lookup[t] for t in texts]], k)

    st = compute_exposure(FromEmbeddings(), qs, tmp_path_factory.mktemp("eqi") / "dense", depth=20)
    return enc, ret, qs, qemb, st, base, new_texts, new_ids


def test_exact_reverse_dense_equals_recomputation(dense_setup):
    enc, ret, qs, qemb, st, _, texts, ids = dense_setup
    ex = ExactReverse.build(st, ret, query_embeddings=qemb)
    demb = enc.encode(texts)
    got = ex.add_documents(texts, ids, embeddings=demb)
    want = recompute_new_exposure(ret, qs, 20, texts, ids, query_embeddings=qemb, doc_embeddings=demb)
    assert len(want.q) > 50
    _same(got, want, exact_scores=False)


def test_exact_reverse_dense_equals_a_rebuilt_index(log, tmp_path):
    """The default encoder end to end (no shared embeddings): a real dense store of 1,000 log
    queries over 200 cranfield abstracts minus 20 documents; each left-out document's exact
    exposing queries (its text encoded alone) equal a re-run of every query over the collection
    re-encoded with that document added. 200 of cranfield's 1,400 abstracts (400: 30 CPU s in CI,
    most of it the encoder's two passes over the documents) still leave the 20 new documents
    competing with 180 at depth 25."""
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

    enc = Encoder()
    coll = load_dataset("cranfield").collection.head(200)
    base, texts, ids = _split(coll, 20, seed=3)
    ret = DenseRetriever(DenseIndex.build(base, enc), enc)
    qs = log.head(1000)
    st = compute_exposure(ret, qs, tmp_path / "dense", depth=25)
    ex = ExactReverse.build(st, ret, cache_dir=None)  # encodes the queries again
    # the enlarged collection, encoded again in another order; the queries again, alone
    full = enc.encode(coll.texts.tolist()[::-1])[::-1]
    pos = coll.ids.encode(ids)
    keep = np.setdiff1d(np.arange(len(coll)), pos)
    assert np.array_equal(full[keep], ret.index.embeddings)
    qemb = np.vstack([enc.encode([t]) for t in qs.texts.tolist()[:50]] +
                     [enc.encode(qs.texts.tolist()[50:])])
    exposed = 0
    for t, d, p in zip(texts, ids, pos.tolist(), strict=True):
        got = ex.query(text=t, docid=d, k=len(qs))
        want = recompute_new_exposure(ret, qs, 25, [t], [d], query_embeddings=qemb,
                                      doc_embeddings=full[p:p + 1])
        q, r, _ = want.lists(0)
        assert [x["qid"] for x in got] == qs.ids.decode(q).tolist(), d
        assert [x["rank"] for x in got] == r.tolist(), d
        exposed += len(got)
    assert exposed > 100


def test_exact_reverse_refuses_another_encoder_variant(log, tmp_path):
    """A dense store records its encoder; a retriever whose encoder is another variant is refused."""
    from limelight.cli import app as cli_app
    from limelight.retrieval.dense import DenseRetriever, Encoder
    from limelight.retrieval.index_dir import open_fingerprinted

    idx = tmp_path / "idx"
    res = CliRunner().invoke(cli_app, ["index", "--collection", "adi", "--out", str(idx), "--dense"])
    assert res.exit_code == 0, res.output
    ret, fp, settings = open_fingerprinted(idx, "dense")
    assert settings["encoder"]["variant"] == ret.encoder.variant
    st = compute_exposure(ret, log.head(200), tmp_path / "st", depth=10, fingerprint=fp,
                          settings=settings)
    ExactReverse.build(st, ret, cache_dir=None)
    other = DenseRetriever.__new__(DenseRetriever)
    other.__dict__.update(ret.__dict__)
    other.encoder = Encoder(variant="torch-fp32")  # another variant, with no graph to export
    with pytest.raises(IndexMismatchError) as e:
        ExactReverse.build(st, other, cache_dir=None)
    assert "variant 'onnx-int8'" in str(e.value) and "\n" not in str(e.value)


def test_learned_models_train_save_load(dense_setup, tmp_path):
    enc, ret, qs, qemb, st, base, _, _ = dense_setup
    demb = np.asarray(ret.index.embeddings, np.float32)
    test = np.arange(0, len(base), 4)
    td_all = training_data(st, qemb, demb, n_queries=1000, n_docs=50, exclude_docs=test, n_dq=20,
                           positives="all")
    assert (np.diff(td_all.pos_ptr) >= 1).all()  # every training document has an exposing query
    td = training_data(st, qemb, demb, n_queries=1000, n_docs=50, exclude_docs=test, n_dq=20)
    assert np.array_equal(td.docs, td_all.docs) and not np.isin(td.docs, test).any()
    # Algorithm 1 as written: positives and negatives are both among the n_dq nearest queries
    # (ψ_d), so they split it, and the positives are the exposing ones among them
    n_near = np.diff(td.pos_ptr) + np.diff(td.neg_ptr)
    assert (n_near == 20).all()
    assert (np.diff(td.pos_ptr) <= np.diff(td_all.pos_ptr)).all() and len(td.pos_q) < len(td_all.pos_q)
    ranks = st.ranks()
    assert np.isin(td.pos_q, td.train_queries).all() and np.isin(td.neg_q, td.train_queries).all()
    drow = np.repeat(np.arange(len(td.docs)), np.diff(td.neg_ptr))
    assert (np.asarray(ranks[td.docs[drow], td.neg_q]).ravel() == 0).all()
    prow = np.repeat(np.arange(len(td.docs)), np.diff(td.pos_ptr))
    assert np.array_equal(np.asarray(ranks[td.docs[prow], td.pos_q]).ravel() - 1, td.pos_rho)
    # Case 1 / Case 2 triples: q+ always exposes d at a better rank than q-
    rng = np.random.default_rng(0)
    d, qp, qn = sample_triples(td, 500, 0.5, rng)
    rp = np.asarray(ranks[td.docs[d], qp]).ravel()
    rn = np.asarray(ranks[td.docs[d], qn]).ravel()
    assert (rp > 0).all() and ((rn == 0) | (rp < rn)).all()
    assert 0.3 < (rn > 0).mean() < 0.7  # α = 0.5
    model = train_eqi("residual", st, qemb, demb, data=td, steps=30, batch_size=200, encoder=enc)
    assert model.meta["loss_last_100"] < model.meta["loss_first_100"] + 1e-9
    dense = DenseReverse(qs, qemb, enc)
    a = model.search(embeddings=demb[test], k=20)
    model.save(tmp_path / "m")
    loaded = EQIModel.load(tmp_path / "m").index_queries(qs, qemb, enc)
    b = loaded.search(embeddings=demb[test], k=20)
    assert np.array_equal(a[0], b[0]) and np.allclose(a[1], b[1])
    app_model = train_eqi("append", st, qemb, demb, data=td, steps=5, batch_size=100)
    assert app_model.transform(qemb[:3], "q").shape == (3, 384 + 32)
    res = evaluate_eqi(st, {"dense-reverse": dense, "residual": loaded}, test, embeddings=demb[test])
    assert set(res) == {"dense-reverse", "residual"} and res["residual"]["n_docs"] > 0
    # a store built from other documents is refused
    loaded.check_store(st)
    other = ExposureStore(st.path, {**st.manifest, "documents": "x"}, st.queries, st.doc_ids)
    with pytest.raises(IndexMismatchError):
        loaded.check_store(other)


def test_early_stopping_keeps_the_best_checked_heads(dense_setup):
    enc, ret, qs, qemb, st, base, _, _ = dense_setup
    demb = np.asarray(ret.index.embeddings, np.float32)
    test = np.arange(0, len(base), 4)
    val = validation_docs(st, 12, exclude=test, seed=1)
    assert not np.isin(val, test).any() and (st.n_exposing()[val] > 0).all()
    m = "RELQ(0.5,0.9)"
    model = train_eqi("residual", st, qemb, demb, n_queries=1000, n_docs=50, n_dq=20,
                      exclude_docs=np.concatenate([test, val]), steps=40, batch_size=200, lr=1e-3,
                      validation_docs=val, eval_every=5)
    v = model.meta["validation"]
    assert [s for s, _ in v["curve"]] == list(range(0, 41, 5)) and v["measure"] == m
    # the zero-initialised residual starts exactly at dense-reverse
    dr = evaluate_eqi(st, {"dr": DenseReverse(qs, qemb)}, val, embeddings=demb[val], measures=[m])
    assert v["curve"][0][1] == pytest.approx(dr["dr"][m], abs=1e-5)
    # the returned heads are the best of the checked ones, not the last
    got = evaluate_eqi(st, {"model": model}, val, embeddings=demb[val], measures=[m])["model"][m]
    assert v["best"] == max(x for _, x in v["curve"]) and got == pytest.approx(v["best"], abs=1e-5)
    assert v["curve"][v["best_step"] // 5][1] == v["best"]


def test_unit_residual_heads_are_unit_norm_and_start_at_dense_reverse(dense_setup):
    """``residual-unit`` (the collapse fix): outputs of unit length after training, and the
    untrained heads give dense-reverse exactly."""
    enc, ret, qs, qemb, st, base, _, _ = dense_setup
    demb = np.asarray(ret.index.embeddings, np.float32)
    test = np.arange(0, len(base), 4)
    val = validation_docs(st, 12, exclude=test, seed=1)
    m = "RELQ(0.5,0.9)"
    model = train_eqi("residual-unit", st, qemb, demb, n_queries=1000, n_docs=50, n_dq=20,
                      exclude_docs=np.concatenate([test, val]), steps=20, batch_size=200, lr=1e-3,
                      validation_docs=val, eval_every=5)
    dr = evaluate_eqi(st, {"dr": DenseReverse(qs, qemb)}, val, embeddings=demb[val], measures=[m])
    assert model.meta["validation"]["curve"][0][1] == pytest.approx(dr["dr"][m], abs=1e-5)
    trained = train_eqi("residual-unit", st, qemb, demb, n_queries=1000, n_docs=50, n_dq=20,
                        exclude_docs=test, steps=10, batch_size=200, lr=1e-3)  # no early stopping
    for side, emb in (("d", demb[:50]), ("q", qemb[:50])):
        out = trained.transform(emb, side)
        assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
        assert not np.allclose(out, emb / np.linalg.norm(emb, axis=1, keepdims=True), atol=1e-4)  # it trained


def test_resumed_training_equals_uninterrupted(dense_setup, tmp_path):
    """A run cut by step budgets and resumed from checkpoints ends with the same heads, the same
    validation curve and the same log as the uninterrupted run (model, optimizer, both RNGs,
    sampler position and early-stopping state are all checkpointed)."""
    import torch

    enc, ret, qs, qemb, st, base, _, _ = dense_setup
    demb = np.asarray(ret.index.embeddings, np.float32)
    test = np.arange(0, len(base), 4)
    val = validation_docs(st, 12, exclude=test, seed=1)
    kw = dict(n_queries=1000, n_docs=50, n_dq=20, exclude_docs=test, steps=12, batch_size=100,
              lr=1e-3, validation_docs=val, eval_every=4, seed=3)
    full = train_eqi("residual", st, qemb, demb, log_path=tmp_path / "full.jsonl", **kw)
    ck, lg = tmp_path / "run.ckpt", tmp_path / "run.jsonl"
    part = train_eqi("residual", st, qemb, demb, checkpoint=ck, budget=5, log_path=lg, **kw)
    assert part.meta["step"] == 5 and not part.meta["finished"] and ck.is_file()
    # a stale log line past the checkpoint (a run killed between checkpoints) is dropped on resume
    with open(lg, "a") as f:
        f.write(json.dumps({"step": 6, "loss": 9.9}) + "\n")
    part = train_eqi("residual", st, qemb, demb, checkpoint=ck, resume=True, budget=4, log_path=lg,
                     checkpoint_every=2, **kw)
    assert part.meta["step"] == 9 and not part.meta["finished"]
    done = train_eqi("residual", st, qemb, demb, checkpoint=ck, resume=True, log_path=lg, **kw)
    assert done.meta["step"] == 12 and done.meta["finished"]
    for a, b in ((full.h_q, done.h_q), (full.h_d, done.h_d)):
        sa, sb = a.state_dict(), b.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert full.meta["validation"] == done.meta["validation"]
    assert full.meta["loss_last_100"] == done.meta["loss_last_100"]
    assert (tmp_path / "full.jsonl").read_text() == lg.read_text()
    assert [json.loads(x)["step"] for x in lg.read_text().splitlines()] == [0, *range(1, 13)]
    # without resume=True the checkpoint is overwritten by a fresh run, never silently continued;
    # another configuration is refused
    with pytest.raises(IndexMismatchError, match="another training run"):
        train_eqi("residual", st, qemb, demb, checkpoint=ck, resume=True, **{**kw, "lr": 1e-4})


# ---- CLI ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_store(tmp_path_factory) -> Path:
    from limelight.retrieval.index_dir import build_index

    root = tmp_path_factory.mktemp("eqicli")
    idx = build_index(load_dataset("adi").collection, root / "idx")
    qf = root / "q.tsv"
    log = load_query_log().head(800)
    qf.write_text("".join(f"{i}\t{t}\n" for i, t in zip(log.ids.strings, log.texts, strict=True)))
    runner = CliRunner()
    r = runner.invoke(app, ["exposure", "compute", "--index", str(idx), "--queries", str(qf),
                            "--out", str(root / "store"), "--depth", "10"])
    assert r.exit_code == 0, r.output
    return root / "store"


def test_cli_query_and_evaluate(cli_store):
    runner = CliRunner()
    st = ExposureStore.open(cli_store)
    d = st.doc_ids[int(np.argmax(st.n_exposing()))]
    r = runner.invoke(app, ["eqi", "query", d, "--store", str(cli_store), "--method", "exact", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert rows and set(rows[0]) == {"qid", "query", "score", "rank"}
    assert [x["qid"] for x in rows] == [x["qid"] for x in st.exposing_queries(d)]
    r = runner.invoke(app, ["eqi", "query", "--store", str(cli_store), "--method", "exact",
                            "--text", "computer information retrieval systems", "--k", "5", "--json"])
    assert r.exit_code == 0, r.output
    assert 0 < len(json.loads(r.stdout)) <= 5
    r = runner.invoke(app, ["eqi", "query", d, "--store", str(cli_store), "--method", "bm25-reverse",
                            "--k", "7", "--json"])
    out = json.loads(r.stdout)
    assert len(out) == 7 and set(out[0]) == {"qid", "query", "score"}
    r = runner.invoke(app, ["eqi", "evaluate", "--store", str(cli_store), "--methods",
                            "brute-force,bm25-reverse", "--docs", "30", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["brute-force"]["RELQ(0.5,0.9)"] == pytest.approx(1.0)
    assert 0 <= res["bm25-reverse"]["RELQ(0.5,0.9)"] <= 1


def test_cli_train_with_early_stopping_then_query(cli_store, tmp_path):
    runner = CliRunner()
    out = tmp_path / "residual"
    r = runner.invoke(app, ["eqi", "train", "--store", str(cli_store), "--method", "residual",
                            "--out", str(out), "--queries", "800", "--docs", "40", "--test-docs", "20",
                            "--validation-docs", "10", "--steps", "20", "--batch-size", "100",
                            "--eval-every", "5", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["best_step"] in (0, 5, 10, 15, 20) and 0 <= res["validation_relq"] <= 1
    meta = json.loads((out / "model.json").read_text())
    assert meta["lr"] == pytest.approx(1e-5) and meta["validation"]["docs"] == 10
    st = ExposureStore.open(cli_store)
    d = st.doc_ids[int(np.argmax(st.n_exposing()))]
    r = runner.invoke(app, ["eqi", "query", d, "--store", str(cli_store), "--method", "residual",
                            "--model", str(out), "--k", "5", "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)) == 5


def test_cli_bad_input(cli_store, monkeypatch, capsys):
    import subprocess
    import sys

    from limelight.cli import main

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["limelight", "eqi", *args])
        with pytest.raises(SystemExit) as e:
            main()
        return e.value.code, capsys.readouterr().err

    code, err = run("query", "nope", "--store", str(cli_store), "--method", "exact")
    assert code == 2 and "nope" in err
    code, err = run("query", "--store", str(cli_store), "--method", "exact", "--text", " ")
    assert code == 2 and "empty" in err
    code, err = run("query", "--store", str(cli_store), "--method", "residual", "--text", "x")
    assert code == 2 and "--model" in err
    code, err = run("evaluate", "--store", str(cli_store), "--methods", "bm25-reverse,magic")
    assert code == 2 and "magic" in err
    # the installed entry point: one line on stderr, no traceback
    r = subprocess.run([sys.executable, "-m", "limelight.cli", "eqi", "query", "nope", "--store",
                        str(cli_store)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr


# ---- issue 42: the documented calls work; stored lists come from the store ---------------------
def test_cli_exact_text_with_a_new_docid_names_the_new_document(cli_store):
    """``eqi query DOCID --text TEXT`` with a DOCID the store lacks (the help's way to name a
    new document, whose id breaks ties) failed with ``unknown document id``. A copy of a stored
    document ties with it on every query: its name decides which of the two ranks first."""
    from limelight.exposure.eqi import ExactReverse
    from limelight.retrieval.bm25 import BM25, BM25Index

    runner = CliRunner()
    st = ExposureStore.open(cli_store)
    d = st.doc_ids[int(np.argmax(st.n_exposing()))]
    text = str(load_dataset("adi").collection.doc(d)["indexed_text"])
    ex = ExactReverse.build(st, BM25(BM25Index.load(Path(st.manifest["settings"]["index"]) / "bm25")))
    got = {}
    for new_id in ("zzz-new", "000-new"):
        assert st.doc_ids.get(new_id) < 0
        r = runner.invoke(app, ["eqi", "query", new_id, "--store", str(cli_store), "--method", "exact",
                                "--text", text, "--k", "1000", "--json"])
        assert r.exit_code == 0, r.output
        got[new_id] = json.loads(r.stdout)
        assert got[new_id] == json.loads(json.dumps(ex.query(text=text, docid=new_id, k=1000)))
    # inside a list, ties rank by document id descending: "zzz-new" takes the copied document's
    # rank, "000-new" the next one (where the copy ties at the cut, the engine keeps the stored
    # document: the lower code)
    stored = {x["qid"]: x["rank"] for x in st.exposing_queries(d) if x["rank"] < st.depth}
    assert {x["qid"]: x["rank"] for x in got["zzz-new"]} == stored
    assert {x["qid"]: x["rank"] for x in got["000-new"]} == {q: r + 1 for q, r in stored.items()}


def test_cli_exact_stored_document_reads_the_store(tmp_path):
    """``eqi query DOCID --method exact`` built exact reverse search (the retriever, every
    query's embedding on a dense store: 52 s) to return what the store holds; it reads the
    store, like ``exposure doc``: it answers even with the store's index gone."""
    from limelight.cli import main

    runner = CliRunner()
    idx, st_dir = tmp_path / "idx", tmp_path / "store"
    qf = tmp_path / "q.tsv"
    log = load_query_log().head(300)
    qf.write_text("".join(f"{i}\t{t}\n" for i, t in zip(log.ids.strings, log.texts, strict=True)))
    assert runner.invoke(app, ["index", "--collection", "adi", "--out", str(idx)]).exit_code == 0
    r = runner.invoke(app, ["exposure", "compute", "--index", str(idx), "--queries", str(qf),
                            "--out", str(st_dir), "--depth", "10"])
    assert r.exit_code == 0, r.output
    st = ExposureStore.open(st_dir)
    d = st.doc_ids[int(np.argmax(st.n_exposing()))]
    idx.rename(tmp_path / "moved")
    for method in ("exact", "brute-force"):
        r = runner.invoke(app, ["eqi", "query", d, "--store", str(st_dir), "--method", method,
                                "--k", "5", "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout) == st.exposing_queries(d)[:5]
    with pytest.raises(SystemExit) as e:  # a new text needs the retriever: one line says so
        main(["eqi", "query", "--store", str(st_dir), "--text", "some new text"])
    assert e.value.code == 2


def test_cli_exact_new_text_shows_progress(cli_store, monkeypatch):
    """The steps of exact reverse search for a new text (opening the retriever, reading the
    stored lists) print progress; they used to print nothing for up to a minute."""
    from _inproc import run_cli

    monkeypatch.setenv("LIMELIGHT_PROGRESS_SECONDS", "0")
    r = run_cli("eqi", "query", "--store", cli_store, "--text", "computer information retrieval systems",
                "--k", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert "opening the store's retriever: 1/1 (100%)" in r.stderr
    assert "reading the top 10 of 800 queries: 1/1 (100%)" in r.stderr
    assert 0 < len(json.loads(r.stdout)) <= 3


@pytest.fixture(scope="module")
def sparse_store(log, tmp_path_factory) -> ExposureStore:
    """cranfield under 100 log queries, top 10: most documents have no exposing query."""
    ret = BM25(BM25Index.build(load_dataset("cranfield").collection))
    return compute_exposure(ret, log.head(100), tmp_path_factory.mktemp("sparse") / "store", depth=10)


def test_cli_evaluate_scores_exactly_the_documents_asked_for(sparse_store):
    """``eqi evaluate --docs N`` sampled N documents and dropped those without an exposing
    query (fewer than N scored); it samples N among the documents that have one, and says so
    when there are fewer."""
    exposed = int((sparse_store.n_exposing() > 0).sum())
    assert 100 < exposed < len(sparse_store.doc_ids) / 2
    runner = CliRunner()
    r = runner.invoke(app, ["eqi", "evaluate", "--store", str(sparse_store.path), "--methods",
                            "brute-force", "--docs", "100", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["brute-force"]["n_docs"] == 100
    with pytest.warns(UserWarning, match=rf"--docs 5000: the store has only {exposed} documents "
                                         rf"with an exposing query; evaluating all {exposed}"):
        r = runner.invoke(app, ["eqi", "evaluate", "--store", str(sparse_store.path), "--methods",
                                "brute-force", "--docs", "5000", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["brute-force"]["n_docs"] == exposed


def test_evaluated_documents_were_held_out_of_the_models_training(sparse_store):
    """A learned model is scored only on documents its training held out (``eqi train
    --test-docs``); a seeded sample of another size used to be mostly training documents."""
    from limelight.cli.eqi import _split, _test_docs

    n = len(sparse_store.doc_ids)
    meta = {"test_docs": 400, "test_docs_seed": 3}
    docs = _test_docs(sparse_store, 50, 0, {"m": meta})
    held = _split(n, 400, 3)
    assert len(docs) == 50 and np.isin(docs, held).all()
    assert (sparse_store.n_exposing()[docs] > 0).all()
    assert not np.isin(_split(n, 50, 0), held).all()  # what the old sampling took
