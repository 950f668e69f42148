"""Fast CPU encoder variants (ONNX Runtime, int8) against the float32 torch path: real MiniLM,
real ONNX export, real query log and adi collection."""

from __future__ import annotations

import json

import numpy as np
import pytest

from limelight._io import OWNER_FILE
from limelight.data import load_dataset, load_query_log
from limelight.errors import IndexMismatchError, LimelightError
from limelight.retrieval import encoders
from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder


@pytest.fixture(scope="module")
def torch_enc():
    return Encoder(variant="torch-fp32")


@pytest.fixture(scope="module")
def int8_enc():
    return Encoder(variant="onnx-int8")  # exported once into ./.cache/models (or reused)


@pytest.fixture(scope="module")
def onnx_enc(tmp_path_factory):
    """An ``onnx`` (float32) encoder exported into an empty model cache of the module's own
    (``onnx_enc.cache``): the export test checks that export, the batch test reuses it."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    enc = Encoder(variant="onnx", model_cache=cache)
    enc.cache = cache
    return enc


@pytest.fixture(scope="module")
def log_queries():
    texts = load_query_log().texts
    rng = np.random.default_rng(7)
    return [str(t) for t in texts[np.sort(rng.choice(len(texts), 300, replace=False))]]


def test_int8_agrees_with_float32_on_shared_queries(torch_enc, int8_enc, log_queries, adi):
    ref = torch_enc.encode(log_queries)
    got = int8_enc.encode(log_queries)
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = np.einsum("ij,ij->i", ref, got)
    assert cos.mean() > 0.99 and cos.min() > 0.95
    # rows come back in input order: each vector is far closer to its own reference
    sims = got @ ref.T
    assert (sims.argmax(1) == np.arange(len(log_queries))).mean() > 0.99
    docs = adi.collection.texts.tolist()
    dcos = np.einsum("ij,ij->i", torch_enc.encode(docs), int8_enc.encode(docs))
    assert dcos.mean() > 0.99


def test_onnx_float32_export_is_exact_and_reused(torch_enc, log_queries, onnx_enc):
    enc, tmp_path = onnx_enc, onnx_enc.cache  # exported into an empty cache
    folders = list((tmp_path / "models").iterdir())
    assert len(folders) == 1 and "-onnx-" in folders[0].name
    meta = json.loads((folders[0] / "export.json").read_text())
    assert meta["variant"] == "onnx" and meta["probe_min_cosine"] >= encoders.PROBE_MIN_COSINE["onnx"]
    assert sorted(p.name for p in folders[0].iterdir()) == [OWNER_FILE, "export.json", "model.onnx"]
    texts = log_queries[:60] + ["", "x", "a much longer text about indexing documents " * 80]
    got = enc.encode(texts)
    np.testing.assert_allclose(got, torch_enc.encode(texts), atol=2e-5)
    # another batch size gives the same vectors (each text runs alone)
    np.testing.assert_array_equal(enc.encode(texts, batch_size=7), got)
    # a second encoder reuses the exported graph instead of exporting again
    stamp = (folders[0] / "model.onnx").stat().st_mtime_ns
    short = Encoder(variant="onnx", model_cache=tmp_path, max_seq_length=16)
    assert (folders[0] / "model.onnx").stat().st_mtime_ns == stamp
    assert len(list((tmp_path / "models").iterdir())) == 1
    # and truncates to its max_seq_length as sentence-transformers does
    ref = short.model.encode(texts[-3:], normalize_embeddings=True)
    np.testing.assert_allclose(short.encode(texts[-3:]), ref, atol=2e-5)
    assert np.abs(short.encode(texts[-1:]) - got[-1:]).max() > 1e-3


def test_auto_variant_and_bad_variants(int8_enc):
    assert encoders.resolve_variant("auto", "cpu") == encoders.CPU_PREFERENCE[0]
    assert encoders.resolve_variant(None, "cuda:0") == "torch-fp32"
    assert Encoder().variant == encoders.CPU_PREFERENCE[0]
    assert int8_enc.identity()["variant"] == "onnx-int8"
    for bad, device in (("onnx-fp8", "cpu"), ("onnx-int8", "cuda")):
        with pytest.raises(LimelightError) as e:
            encoders.resolve_variant(bad, device)
        assert "\n" not in str(e.value) and bad in str(e.value)


def test_cache_key_includes_variant(adi, torch_enc, int8_enc, tmp_path):
    coll = adi.collection.head(30)
    a = torch_enc.encode_collection(coll, cache_dir=tmp_path)
    b = int8_enc.encode_collection(coll, cache_dir=tmp_path)
    metas = {json.loads(p.read_text()).get("variant"): p for p in tmp_path.glob("*.json")}
    assert set(metas) == {"torch-fp32", "onnx-int8"}  # two entries, one per variant
    n = int8_enc.n_encoded
    np.testing.assert_array_equal(int8_enc.encode_collection(coll, cache_dir=tmp_path), b)
    np.testing.assert_array_equal(torch_enc.encode_collection(coll, cache_dir=tmp_path), a)
    assert int8_enc.n_encoded == n  # cache hits
    assert not np.array_equal(a, b)
    # an entry whose recorded variant is another one is refused, with a one-line error
    meta = json.loads(metas["onnx-int8"].read_text())
    metas["onnx-int8"].write_text(json.dumps({**meta, "variant": "onnx"}))
    with pytest.raises(IndexMismatchError) as e:
        int8_enc.encode_collection(coll, cache_dir=tmp_path)
    assert "variant 'onnx'" in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def real_docs():
    """40 real documents of varied lengths (cranfield abstracts and scifact abstracts): more than
    the largest batch of the test (32), so that every batch size splits them (72 took 4 CPU s a
    pass with the float32 graph, run 6 times a variant)."""
    texts = load_dataset("cranfield").collection.texts.tolist()[:24]
    return texts + load_dataset("scifact").collection.texts.tolist()[:16]


@pytest.mark.parametrize("variant", ["auto", "onnx"])
def test_vectors_do_not_depend_on_the_batch(variant, real_docs, request):
    """A text's vector is the same whatever else is encoded with it: one batch, batches of 1, 7
    and 32, reversed order, other worker counts (int8 scales are the text's own). The float32
    graph is the module's export (``onnx_enc``), made once.

    CPU: the real encoders run each text alone and in batches."""
    cache = {"model_cache": request.getfixturevalue("onnx_enc").cache} if variant == "onnx" else {}
    enc = Encoder(variant=variant, **cache)
    assert enc.identity()["onnx_run"] == encoders.ONNX_RUN
    whole = enc.encode(real_docs)
    assert len(real_docs) > 32 and whole.shape == (len(real_docs), enc.dim)
    for bs in (1, 7, 32):
        parts = np.vstack([enc.encode(real_docs[s:s + bs]) for s in range(0, len(real_docs), bs)])
        assert np.abs(parts - whole).max() <= 1e-6, bs
    assert np.abs(enc.encode(real_docs[::-1])[::-1] - whole).max() <= 1e-6
    one = Encoder(variant=variant, threads=1, **cache)
    assert np.abs(one.encode(real_docs) - whole).max() <= 1e-6


def test_batch_dependent_int8_vectors_are_refused(adi, int8_enc, tmp_path):
    """int8 vectors written before texts were run alone (no ``onnx_run``) depended on their batch:
    a cache entry or an index holding them is refused with a one-line error."""
    coll = adi.collection.head(40)
    int8_enc.encode_collection(coll, cache_dir=tmp_path)
    (meta_path,) = tmp_path.glob("*.json")
    meta = json.loads(meta_path.read_text())
    assert meta["onnx_run"] == encoders.ONNX_RUN
    old = {k: v for k, v in meta.items() if k != "onnx_run"}
    assert not int8_enc.compatible_with(old)
    meta_path.write_text(json.dumps(old))
    with pytest.raises(IndexMismatchError) as e:
        int8_enc.encode_collection(coll, cache_dir=tmp_path)
    assert "batch-dependent" in str(e.value) and "\n" not in str(e.value)
    idx = DenseIndex.build(coll, int8_enc)
    legacy = DenseIndex.from_embeddings(idx.doc_ids, idx.embeddings,
                                        {"encoder": {k: v for k, v in idx.encoder_identity.items()
                                                     if k != "onnx_run"}})
    with pytest.raises(IndexMismatchError) as e:
        DenseRetriever(legacy)
    assert "batch-dependent" in str(e.value)


def test_index_refuses_to_mix_variants(adi, torch_enc, int8_enc, tmp_path):
    idx = DenseIndex.build(adi.collection, int8_enc)
    assert idx.encoder_identity["variant"] == "onnx-int8"
    with pytest.raises(IndexMismatchError) as e:
        DenseRetriever(idx, torch_enc)
    assert "onnx-int8" in str(e.value) and "torch-fp32" in str(e.value)
    assert "\n" not in str(e.value)
    # a saved index reopens with its own variant for the queries
    loaded = DenseIndex.load(idx.save(tmp_path / "dense"))
    retr = DenseRetriever(loaded)
    assert retr.encoder.variant == "onnx-int8"
    docs, _ = retr.search_batch(adi.queries.texts.tolist()[:5], 5)
    np.testing.assert_array_equal(docs, DenseRetriever(idx, int8_enc).search_batch(
        adi.queries.texts.tolist()[:5], 5)[0])
    # an index of an earlier version (no recorded variant) is torch float32 vectors
    legacy_ident = {k: v for k, v in torch_enc.identity().items() if k != "variant"}
    legacy = DenseIndex.from_embeddings(idx.doc_ids, idx.embeddings, {"encoder": legacy_ident})
    assert DenseRetriever(legacy, torch_enc).encoder is torch_enc
    with pytest.raises(IndexMismatchError):
        DenseRetriever(legacy, int8_enc)
