"""System: one description of a retriever, opened and fingerprinted as before."""

from __future__ import annotations

import hashlib
import json
import pickle

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
    spec = System.from_model("bm25", k1, b)
    settings = {"model": "bm25", "k1": k1, "b": b}
    assert spec.store_settings() == settings
    assert spec.fingerprint(index) == _legacy_fingerprint(index, settings)
    r, fp, st = open_fingerprinted(index, "bm25", k1=k1, b=b)
    assert (fp, st) == (spec.fingerprint(index), settings)
    assert System.from_store_settings({**st, "index": str(index)}) == spec
    assert System.from_model("dense").store_settings() == {"model": "dense"}


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
