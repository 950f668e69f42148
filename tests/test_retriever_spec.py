"""System: one description of a retriever, opened and fingerprinted as before."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from limelight.audit.cache import stable_hash
from limelight.audit.config import parse_config
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.errors import LimelightError
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1
from limelight.retrieval.index_dir import build_index, open_fingerprinted, open_retriever
from limelight.retrieval.spec import System
from limelight.scale.exposure import IndexRetriever

TEXTS = ["the quick brown fox", "a lazy dog sleeps", "quick dogs and foxes", "brown bread recipe",
         "the dog and the fox are friends", "recipe for a quick lunch"]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    coll = Collection(IdMap([f"d{i}" for i in range(len(TEXTS))], kind="document"),
                      np.array(TEXTS, dtype=object), {}, "tiny")
    return build_index(coll, tmp_path_factory.mktemp("idx") / "tiny")


def _legacy_fingerprint(index_dir, settings: dict) -> str:
    """The recipe ``open_fingerprinted`` used before the spec (index metadata files + settings)."""
    h = hashlib.sha256()
    files = [index_dir / "meta.json", *index_dir.glob("bm25/*.json"), *index_dir.glob("dense/*.json")]
    for p in sorted(files):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()[:32]


def test_defaults_filled_frozen_and_picklable():
    spec = System.of("hybrid", rrf_k=30)
    assert dict(spec.params) == {"k1": DEFAULT_K1, "b": DEFAULT_B, "rrf_k": 30, "fusion_depth": 100}
    assert spec == System("hybrid", {"rrf_k": 30}) and hash(spec) == hash(System.of("hybrid", rrf_k=30))
    with pytest.raises(AttributeError):
        spec.kind = "bm25"  # type: ignore[misc]
    reranked = System.of("reranked", first=System.of("bm25", k1=1.2), checkpoint="x.pt",
                                checkpoint_sha256="ab", depth=50)
    assert pickle.loads(pickle.dumps(reranked)) == reranked
    assert not reranked.needs_dense and System.of("reranked", first=spec).needs_dense


def test_bad_specs_are_one_line_errors():
    with pytest.raises(LimelightError, match="unknown model 'bm26'"):
        System.from_model("bm26")
    with pytest.raises(LimelightError, match="unknown system kind"):
        System.of("tfidf")
    with pytest.raises(LimelightError, match="no parameter 'rrf_k'"):
        System.of("bm25", rrf_k=3)
    with pytest.raises(LimelightError, match="first stage"):
        System.of("reranked", first=System.of("reranked"))


@pytest.mark.parametrize("kind,params", [("bm25", {}), ("bm25", {"k1": 1, "b": 0.75}), ("dense", {}),
                                         ("dense", {"model": "m", "max_seq_length": 64}),
                                         ("hybrid", {"rrf_k": 10}), ("hybrid", {})])
def test_settings_and_audit_key_as_the_audit_computes_them(kind, params):
    system = parse_config(f'[collection]\nsource = "adi"\n[[systems]]\nname = "s"\nkind = "{kind}"\n'
                          + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in params.items())).system("s")
    assert system == System.of(kind, name="s", **params) and system.name == "s"
    spec = System.from_settings(system.settings())
    assert spec.settings() == system.settings()
    deps = ["0123abcd", "4567ef01"]
    assert spec.fingerprint(index_key=deps) == stable_hash("retriever", deps, system.settings())


def test_reranked_settings_as_the_audit_computes_them():
    first = System.of("bm25", name="bm25", k1=1.2)
    system = System("reranked", {"first": "bm25", "checkpoint": "tk.pt"}, first, "/abs/tk.pt", "f" * 64, "tk")
    spec = System.from_settings(system.settings(), checkpoint=system.checkpoint)
    assert spec.settings() == system.settings()
    assert spec.first == System.of("bm25", k1=1.2) and spec.checkpoint == "/abs/tk.pt"
    assert spec.fingerprint(index_key=["k"]) == stable_hash("retriever", ["k"], system.settings())


@pytest.mark.parametrize("k1,b", [(DEFAULT_K1, DEFAULT_B), (1.2, 0.75), (1, 0.5)])
def test_index_fingerprint_unchanged(index, k1, b):
    """The fingerprint over an index hashes the settings as stores recorded them before the one
    form (``model``); the settings recorded now are the one form, and both read back."""
    spec = System.from_model("bm25", k1, b)
    earlier = {"model": "bm25", "k1": k1, "b": b}
    assert spec.fingerprint(index) == _legacy_fingerprint(index, earlier)
    r, fp, st = open_fingerprinted(index, "bm25", k1=k1, b=b)
    assert (fp, st) == (spec.fingerprint(index), {"kind": "bm25", "k1": k1, "b": b})
    assert System.from_recorded({**st, "index": str(index)}) == spec
    assert System.from_recorded({**earlier, "index": str(index)}) == spec
    assert System.from_model("dense").fingerprint(index) == _legacy_fingerprint(index, {"model": "dense"})


# the model form stores of earlier code recorded, and the system it reads back to
EARLIER = [({"model": "dense"}, System.of("dense")),
           ({"model": "dense", "dense_model": "m", "max_seq_length": 64, "encoder": {"model": "m"}},
            System.of("dense", model="m", max_seq_length=64)),
           ({"model": "hybrid", "k1": 1.2, "b": 0.4, "rrf_k": 30}, System.of("hybrid", k1=1.2, rrf_k=30)),
           ({"model": "hybrid", "k1": 0.9, "b": 0.4, "dense_model": "m"}, System.of("hybrid", model="m")),
           ({"model": "reranked", "first": {"model": "bm25", "k1": 1.2, "b": 0.4}, "depth": 50,
             "checkpoint_sha256": "ab"},
            System.of("reranked", first=System.of("bm25", k1=1.2), checkpoint_sha256="ab", depth=50)),
           ({"model": "run", "format": "auto", "match": "id", "path": "r.run", "unknown_docs": "error",
             "sha256": "cd", "collection": "adi"}, System.of("run", path="r.run", sha256="cd")),
           ({}, System.of("bm25"))]  # (no model: bm25, as it always was)


@pytest.mark.parametrize("earlier,system", EARLIER)
def test_settings_of_earlier_stores_read_back_with_their_fingerprints(index, earlier, system):
    """The one migration (``System.from_recorded`` of settings without ``kind``): a store of
    earlier code opens as the system it was computed with, and that system's fingerprint over the
    index is the one the store recorded (the settings it recorded hashed, less the encoder's
    identity and the index's path, which the fingerprint never held)."""
    got = System.from_recorded(earlier)
    assert got == system
    assert System.from_recorded(got.settings()) == got
    if earlier and got.registered.needs_index:  # (a run's store is known by its documents' ids)
        hashed = {k: v for k, v in earlier.items() if k not in ("encoder", "index")}
        assert got.fingerprint(index) == _legacy_fingerprint(index, hashed)


def test_store_settings_is_deprecated():
    """``store_settings`` and ``from_store_settings`` (the model form's, public in 0.2.0) still
    work, warn, and name what replaces them; nothing of the library calls them."""
    spec = System.of("hybrid", rrf_k=30, model="m")
    with pytest.warns(DeprecationWarning, match="store_settings is deprecated: use System.settings"):
        assert spec.store_settings() == {"model": "hybrid", "k1": 0.9, "b": 0.4, "rrf_k": 30,
                                         "dense_model": "m"}
    with pytest.warns(DeprecationWarning, match="use System.from_recorded"):
        assert System.from_store_settings({"model": "hybrid", "rrf_k": 30, "dense_model": "m"}) == spec
    src = Path(__file__).resolve().parents[1] / "src" / "limelight"
    users = [str(p.relative_to(src)) for p in src.rglob("*.py")
             if "store_settings" in p.read_text(encoding="utf-8") and p.name != "spec.py"]
    assert users == []


def test_open_is_the_retriever_of_before(index):
    spec = System.of("bm25", k1=1.2, b=0.5)
    r = spec.open(index, threads=1)
    ref = BM25(BM25Index.load(index / "bm25"), k1=1.2, b=0.5)
    got, want = r.search_batch(["quick fox", "dog"], 4), ref.search_batch(["quick fox", "dog"], 4)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert r.name == ref.name and r.threads == 1
    assert spec.open(index, name="mine").name == "mine"
    assert vars(open_retriever(index, "bm25", k1=1.2, b=0.5)).keys() == vars(r).keys()
    with pytest.raises(LimelightError, match="has no dense index"):
        System.of("hybrid").open(index)


def test_index_retriever_travels_as_its_spec(index):
    spec = System.of("bm25", k1=1.2)
    ir = IndexRetriever(index, spec=spec)
    assert (ir.model, ir.k1, ir.b) == ("bm25", 1.2, DEFAULT_B)
    back = pickle.loads(pickle.dumps(ir))
    assert back.spec == spec and back._retriever is None
    assert np.array_equal(back.search_batch(["quick"], 3)[0], spec.open(index).search_batch(["quick"], 3)[0])
    assert IndexRetriever(index).spec == System.of("bm25")
