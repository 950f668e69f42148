"""The exposure engine interface (limelight.exposure.engine) and ExposureOptions: an engine object
computes exactly the shards a store lacks, options equal their keywords, and limelight.exposure
never imports limelight.scale (the Ray engine registers itself; tests/test_scale.py runs it)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from limelight.data import load_dataset
from limelight.errors import LimelightError
from limelight.exposure import ExposureOptions, ExposureStore, LocalEngine, compute_exposure
from limelight.exposure import engine as engine_mod
from limelight.exposure.shards import shard_path
from limelight.retrieval.bm25 import BM25, BM25Index


@pytest.fixture(scope="module")
def adi():
    ds = load_dataset("adi")
    return BM25(BM25Index.build(ds.collection)), ds.queries


class Recording(LocalEngine):
    """The local engine, remembering which shards it was asked for."""

    def __init__(self):
        self.calls: list[list[int]] = []

    def compute(self, job, shards):
        self.calls.append(list(shards))
        return super().compute(job, shards)


def test_engine_object_and_options_equal_the_keywords(adi, tmp_path):
    bm25, qs = adi
    ref = compute_exposure(bm25, qs, tmp_path / "ref", depth=15, shard_size=10, fingerprint="fp")
    eng = Recording()
    st = compute_exposure(bm25, qs, tmp_path / "obj", depth=15, fingerprint="fp", engine=eng,
                          options=ExposureOptions(shard_size=10))
    assert eng.calls == [[0, 1, 2, 3]] and st.manifest["complete"] and st.n_shards == 4
    for a, b in zip(ref.pair_arrays(), ExposureStore.open(st.path).pair_arrays(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert ref.exposed_documents(qs.ids[3]) == ExposureStore.open(st.path).exposed_documents(qs.ids[3])
    # a resumed job hands the engine only the missing shards; keywords override options
    (tmp_path / "obj" / "query_stats.parquet").unlink()  # as if killed before the index was complete
    shard_path(tmp_path / "obj", 2).unlink()
    compute_exposure(bm25, qs, tmp_path / "obj", depth=15, fingerprint="fp", engine=eng,
                     options=ExposureOptions(shard_size=99), shard_size=10)
    assert eng.calls[1:] == [[2]]
    for a, b in zip(ref.pair_arrays(), ExposureStore.open(tmp_path / "obj").pair_arrays(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_engine_names_and_keywords_are_checked(adi, tmp_path, monkeypatch):
    bm25, qs = adi
    with pytest.raises(TypeError, match="shardsize"):
        compute_exposure(bm25, qs, tmp_path / "a", shardsize=10)
    with pytest.raises(LimelightError, match="address and engine_options go with an engine name"):
        compute_exposure(bm25, qs, tmp_path / "b", engine=LocalEngine(), address="127.0.0.1:6379")
    with pytest.raises(LimelightError, match="engine must be a name or have compute"):
        compute_exposure(bm25, qs, tmp_path / "c", engine=object())
    with pytest.raises(LimelightError, match="shard size must be ≥ 1"):
        ExposureOptions(shard_size=0)
    monkeypatch.delitem(engine_mod._ENGINES, "ray", raising=False)  # limelight.scale not imported
    with pytest.raises(LimelightError, match="comes with limelight.scale"):
        compute_exposure(bm25, qs, tmp_path / "d", engine="ray")
    assert not (tmp_path / "a").exists() and not (tmp_path / "d").exists()


def test_exposure_never_imports_scale():
    code = ("import sys, limelight.exposure.store, limelight.exposure.compute; "
            "from limelight.exposure import compute_exposure, ExposureStore; "
            "assert not [m for m in sys.modules if m.startswith('limelight.scale')], sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
