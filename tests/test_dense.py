"""Dense retrieval with the real MiniLM model, real FAISS and the real adi collection."""

from __future__ import annotations

import json
import os

import ir_measures
import numpy as np
import pytest
from ir_measures import nDCG

from limelight._io import OWNER_FILE
from limelight.errors import IndexMismatchError, LimelightError
from limelight.retrieval.dense import (
    DenseIndex,
    DenseRetriever,
    Encoder,
    collection_fingerprint,
    default_model_path,
)


@pytest.fixture(scope="module")
def encoder():
    return Encoder(variant="torch-fp32")  # the reference path (fast variants: test_dense_fast.py)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emb-cache")


@pytest.fixture(scope="module")
def flat(adi, encoder, cache_dir):
    return DenseIndex.build(adi.collection, encoder, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def qvecs(adi, encoder):
    return encoder.encode(adi.queries.texts.tolist())


def test_encoder_offline_unit_vectors(encoder):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert encoder.dim == 384 and encoder.max_seq_length == 256
    texts = ["information retrieval", "a much longer text about indexing documents " * 5, "", "x"]
    emb = encoder.encode(texts)
    assert emb.shape == (4, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb[[0, 1, 3]], axis=1), 1.0, atol=1e-5)
    # length-sorted batching returns rows in input order
    single = np.vstack([encoder.encode([t]) for t in texts])
    np.testing.assert_allclose(emb, single, atol=1e-5)
    # the same vectors as sentence-transformers itself
    st = encoder.model.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(emb, st, atol=1e-5)


def test_model_by_path_is_compatible_and_bad_path_is_one_line(encoder, tmp_path):
    by_path = Encoder(str(default_model_path()), variant="torch-fp32")
    assert by_path.compatible_with(encoder.identity())
    with pytest.raises(LimelightError) as e:
        Encoder(str(tmp_path / "nope.bin"))
    assert "\n" not in str(e.value)


def test_flat_equals_numpy_brute_force(adi, flat, encoder, qvecs):
    retr = DenseRetriever(flat, encoder)
    k = 10
    docs, scores = retr.search_batch(adi.queries.texts.tolist(), k)
    full = qvecs @ flat.embeddings.T
    expect = -np.sort(-full, axis=1)[:, :k]
    np.testing.assert_allclose(scores, expect, atol=1e-5)
    np.testing.assert_allclose(np.take_along_axis(full, docs.astype(np.int64), 1), scores, atol=1e-5)
    # same document sets wherever the k-th score is not tied with the (k+1)-th
    kth = -np.sort(-full, axis=1)[:, k - 1:k + 1]
    clear = kth[:, 0] - kth[:, 1] > 1e-5
    brute = np.argsort(-full, axis=1, kind="stable")[:, :k]
    for row in np.flatnonzero(clear):
        assert set(docs[row]) == set(brute[row])
    # search_vectors on pre-computed embeddings gives the same answer
    d2, s2 = retr.search_vectors(qvecs, k)
    np.testing.assert_array_equal(d2, docs)


def test_retrieve_run_and_effectiveness(adi, flat, encoder):
    run = DenseRetriever(flat, encoder).retrieve(adi.queries, 100)
    assert run.n_queries == len(adi.queries) and (run.depths() == 82).all()  # k > n docs
    res = ir_measures.calc_aggregate([nDCG @ 10], adi.qrels.to_ir_measures(), run.to_ir_measures())
    assert res[nDCG @ 10] > 0.4  # 0.497 measured; BM25 is 0.422


def test_hnsw_recall_against_flat(adi, encoder, cache_dir, flat, qvecs):
    n0 = encoder.n_encoded
    hnsw = DenseIndex.build(adi.collection, encoder, hnsw=True, m=8, ef_construction=40,
                            ef_search=16, cache_dir=cache_dir)
    assert encoder.n_encoded == n0  # embeddings came from the cache
    fd, _ = flat.search(qvecs, 10)
    hd, hs = hnsw.search(qvecs, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(fd, hd, strict=True)])
    assert recall >= 0.95
    assert (np.diff(hs, axis=1) <= 1e-6).all()


def test_float16_storage_close_to_float32(adi, encoder, cache_dir, flat, qvecs):
    half = DenseIndex.build(adi.collection, encoder, dtype="float16", cache_dir=cache_dir)
    assert half.embeddings.dtype == np.float16
    assert half.memory_bytes() * 2 == flat.memory_bytes()
    fd, fs = flat.search(qvecs, 10)
    hd, hs = half.search(qvecs, 10)
    full_h = qvecs @ half.embeddings.astype(np.float32).T
    np.testing.assert_allclose(np.take_along_axis(full_h, hd.astype(np.int64), 1), hs, atol=1e-3)
    np.testing.assert_allclose(hs, fs, atol=2e-3)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(fd, hd, strict=True)])
    assert overlap >= 0.95


def test_cache_hit_and_mismatch(adi, encoder, tmp_path):
    coll = adi.collection.head(20)
    n0 = encoder.n_encoded
    a = encoder.encode_collection(coll, cache_dir=tmp_path)
    assert encoder.n_encoded == n0 + 20
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and files[0].startswith("adi-")
    b = encoder.encode_collection(coll, cache_dir=tmp_path)
    assert encoder.n_encoded == n0 + 20  # a hit: nothing encoded
    np.testing.assert_array_equal(a, b)
    # float16 storage is a separate cache entry, close to float32
    c = encoder.encode_collection(coll, cache_dir=tmp_path, cache_dtype="float16")
    assert np.abs(c - a).max() < 1e-3
    assert np.load(next(tmp_path.glob("*.npy")), mmap_mode="r").dtype in (np.float32, np.float16)
    # another collection (one text changed) is another key
    other = adi.collection.head(20)
    other.texts = other.texts.copy()
    other.texts[0] = other.texts[0] + " changed"
    assert collection_fingerprint(other) != collection_fingerprint(coll)
    # a cache entry whose recorded model differs is refused with one line
    meta_path = next(p for p in tmp_path.glob("*.json") if json.loads(p.read_text())["dtype"] == "float32")
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "fingerprint": "another-model", "model": "other"}))
    with pytest.raises(IndexMismatchError) as e:
        encoder.encode_collection(coll, cache_dir=tmp_path)
    assert "other" in str(e.value) and "\n" not in str(e.value)


def test_model_and_dimension_mismatch(flat, encoder, qvecs):
    small = Encoder(str(default_model_path()), truncate_dim=128)
    assert small.dim == 128
    with pytest.raises(IndexMismatchError, match=r"dim 384.*dim 128"):
        DenseRetriever(flat, small)
    with pytest.raises(IndexMismatchError, match="128 dimensions"):
        flat.search(qvecs[:, :128], 5)
    # other weights of the same model (a fine-tuned copy): the message says the weights differ
    ident = {**encoder.identity(), "fingerprint": "0123456789abcdef"}
    other = DenseIndex.from_embeddings(flat.doc_ids, flat.embeddings, {"encoder": ident})
    with pytest.raises(IndexMismatchError, match="fingerprint '0123456789abcdef'") as e:
        DenseRetriever(other, encoder)
    assert encoder.fingerprint in str(e.value) and "\n" not in str(e.value)
    # an index built with normalize=False lives in another space too
    ident = {**encoder.identity(), "normalize": False}
    other = DenseIndex.from_embeddings(flat.doc_ids, flat.embeddings, {"encoder": ident})
    with pytest.raises(IndexMismatchError):
        DenseRetriever(other, encoder)


def test_save_load_roundtrip(adi, flat, encoder, cache_dir, tmp_path, qvecs):
    out = flat.save(tmp_path / "dense")
    assert sorted(p.name for p in out.iterdir()) == [OWNER_FILE, "doc_ids.json", "embeddings.npy", "meta.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left behind
    loaded = DenseIndex.load(out)
    assert loaded.doc_ids == flat.doc_ids and loaded.meta == flat.meta
    np.testing.assert_array_equal(loaded.search(qvecs, 5)[0], flat.search(qvecs, 5)[0])
    # DenseRetriever with no encoder reloads the index's model
    retr = DenseRetriever(loaded)
    assert retr.encoder.compatible_with(flat.encoder_identity)

    hnsw = DenseIndex.build(adi.collection, encoder, hnsw=True, dtype="float16", cache_dir=cache_dir)
    hl = DenseIndex.load(hnsw.save(tmp_path / "hnsw"))
    assert (tmp_path / "hnsw" / "faiss.index").exists()
    assert hl.embeddings.dtype == np.float16 and hl.hnsw
    np.testing.assert_array_equal(hl.search(qvecs, 5)[0], hnsw.search(qvecs, 5)[0])

    with pytest.raises(LimelightError, match="not a dense index"):
        DenseIndex.load(tmp_path / "missing")


def test_blank_queries_and_padding(flat, encoder):
    retr = DenseRetriever(flat, encoder)
    docs, scores = retr.search_batch(["", "computer indexing", "   "], 100)
    assert docs.shape == (3, 100)
    assert (docs[0] == -1).all() and (docs[2] == -1).all()
    assert (docs[1, :82] >= 0).all() and (docs[1, 82:] == -1).all()
    assert np.isneginf(scores[1, 82:]).all()
    with pytest.raises(LimelightError):
        retr.search_batch(["x"], 0)


def test_model_fingerprint_hashes_weight_contents(tmp_path):
    """Fine-tuned copies of one model have weight files of equal size: they must not collide."""
    from limelight.retrieval.dense import _folder_fingerprint

    a, b = tmp_path / "a", tmp_path / "b"
    for folder, byte in ((a, b"\x00"), (b, b"\x01")):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(byte * 1000)
    assert _folder_fingerprint(a) != _folder_fingerprint(b)
    c = tmp_path / "c"
    c.mkdir()
    (c / "config.json").write_text("{}")
    (c / "model.safetensors").write_bytes(b"\x00" * 1000)
    assert _folder_fingerprint(a) == _folder_fingerprint(c)
