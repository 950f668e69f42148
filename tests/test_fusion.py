"""Fusion: hand-computed formulas, ranx's fusion on real runs, stages and the hybrid retriever."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from limelight.data import Run
from limelight.errors import IndexMismatchError, LimelightError
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.fusion import (
    RRF,
    CombMNZ,
    CombSUM,
    Hybrid,
    Linear,
    combmnz,
    combsum,
    rrf,
)
from limelight.retrieval.runfusion import fuse, linear, minmax_scores

A = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d1": 1.0, "d4": 0.5}}
B = {"q1": {"d3": 10.0, "d5": 4.0}, "q3": {"d2": 7.0}}


@pytest.fixture
def ab():
    return Run.from_dict(A, "a"), Run.from_dict(B, "b")


def test_rrf_by_hand(ab):
    out = rrf(*ab).to_dict()
    f = lambda r: 1 / (60 + r)  # noqa: E731
    expect = {"q1": {"d1": f(1), "d2": f(2), "d3": f(3) + f(1), "d5": f(2)},
              "q2": {"d1": f(1), "d4": f(2)},  # b lacks q2: it contributes nothing
              "q3": {"d2": f(1)}}
    assert out.keys() == expect.keys()
    for q in expect:
        assert out[q] == pytest.approx(expect[q], rel=1e-12)
    # ranked by fused score; ties (d2, d5 at 1/62) by docid descending
    assert list(out["q1"]) == ["d3", "d1", "d5", "d2"]
    # k, weights and depth
    out = rrf(*ab, k=1, weights=[2.0, 1.0], depth=1).to_dict()
    assert out["q1"] == pytest.approx({"d1": 2 / 2, "d3": 1 / 2})
    assert rrf([ab[0], ab[1]]).to_dict() == rrf(*ab).to_dict()  # a list works too


def test_combsum_combmnz_linear_by_hand(ab):
    # min-max per query: a/q1 d1 1, d2 .5, d3 0; a/q2 d1 1, d4 0; b/q1 d3 1, d5 0; b/q3 d2 0
    s = combsum(*ab).to_dict()
    assert s["q1"] == pytest.approx({"d1": 1.0, "d2": 0.5, "d3": 1.0, "d5": 0.0})
    assert s["q2"] == pytest.approx({"d1": 1.0, "d4": 0.0})
    assert s["q3"] == pytest.approx({"d2": 0.0})  # a single score normalises to 0 (as ranx)
    m = combmnz(*ab).to_dict()
    assert m["q1"] == pytest.approx({"d1": 1.0, "d2": 0.5, "d3": 2.0, "d5": 0.0})
    raw = combsum(*ab, norm=None).to_dict()
    assert raw["q1"] == pytest.approx({"d1": 3.0, "d2": 2.0, "d3": 11.0, "d5": 4.0})
    lin = linear(*ab, alpha=0.25).to_dict()
    assert lin["q1"] == pytest.approx({"d1": 0.25, "d2": 0.125, "d3": 0.75, "d5": 0.0})
    assert fuse(list(ab), "linear", alpha=0.25).to_dict() == lin
    with pytest.raises(LimelightError):
        linear(*ab, alpha=1.5)
    with pytest.raises(LimelightError):
        fuse(list(ab), "borda")
    with pytest.raises(LimelightError):
        combsum(*ab, norm="zscore")


def test_minmax_is_per_query(ab):
    a = ab[0]
    np.testing.assert_allclose(minmax_scores(a), [1.0, 0.5, 0.0, 1.0, 0.0])


def test_different_doc_maps_are_aligned():
    a = Run.from_dict({"q": {"x": 2.0, "y": 1.0}})
    b = Run.from_dict({"q": {"z": 5.0, "x": 1.0}})
    assert a.docids != b.docids
    out = rrf(a, b).to_dict()["q"]
    assert out == pytest.approx({"x": 1 / 61 + 1 / 62, "z": 1 / 61, "y": 1 / 62})


# ---- real runs -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_runs(adi, adi_bm25, adi_dense):
    return adi_bm25.retrieve(adi.queries, 50), adi_dense.retrieve(adi.queries, 50)


def _assert_same(ours: Run, theirs, rel=1e-9):
    got, exp = ours.to_dict(), theirs.to_dict()
    assert set(got) == set(exp)
    for q in exp:
        assert got[q].keys() == exp[q].keys()
        for d, v in exp[q].items():
            assert got[q][d] == pytest.approx(v, rel=rel, abs=1e-12)


def _untie(run: Run) -> Run:
    """The run with tied scores separated (by 1e-9 per rank) in the run's own order: ranx sorts
    ties with an unstable argsort, so their ranks are arbitrary there."""
    return Run.from_codes(run.qids, run.docids, run.q, run.d,
                          run.score - 1e-9 * run.ranks(), run.name, sort=False)


#: ranx's fusion of two runs (JSON on stdin: the runs as dicts, then the (method, params) calls),
#: each result as a dict on stdout
RANX_FUSE = """
import json, sys
import ranx
runs, calls = json.load(sys.stdin)
ranx_runs = [ranx.Run(r, name=n) for n, r in zip("ab", runs)]
json.dump([ranx.fuse(ranx_runs, method=m, params=p).to_dict() for m, p in calls], sys.stdout)
"""


def ranx_fuse(a: Run, b: Run, calls: list[tuple[str, dict]]) -> list[Run]:
    """ranx's fusions of ``a`` and ``b``, computed by ranx's own code in a process of its own with
    numba's JIT off (``NUMBA_DISABLE_JIT=1``: ranx's kernels run as the Python they are written
    in, the same statements, instead of being compiled for this one comparison)."""
    r = subprocess.run([sys.executable, "-c", RANX_FUSE], input=json.dumps([[a.to_dict(), b.to_dict()], calls]),
                       env={**os.environ, "NUMBA_DISABLE_JIT": "1"}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return [Run.from_dict(d, f"ranx-{m}") for d, (m, _) in zip(json.loads(r.stdout), calls, strict=True)]


def test_against_ranx_on_real_runs(real_runs):
    """ranx's fusion of two real runs of thousands of lines is the reference: RRF (two k), CombSUM
    and CombMNZ after min-max, and the weighted sum, each one of the checks.

    ranx runs with numba's JIT off, in a process of its own: compiling its kernels (several of them
    parallel) took 33-44 CPU s on a fresh install, for runs that its Python code fuses in a
    fraction of a second; the statements, and so the reference, are ranx's either way."""
    a, b = (_untie(r) for r in real_runs)
    assert len(a) > 1000 and len(b) > 1000
    ref = ranx_fuse(a, b, [("rrf", {}), ("rrf", {"k": 10}), ("sum", {}), ("mnz", {}),
                           ("wsum", {"weights": [0.3, 0.7]})])
    _assert_same(rrf(a, b), ref[0])
    _assert_same(rrf(a, b, k=10), ref[1])
    _assert_same(combsum(a, b), ref[2])
    _assert_same(combmnz(a, b), ref[3])
    _assert_same(linear(a, b, alpha=0.3), ref[4])


def test_stages_compose(adi, adi_bm25, adi_dense, real_runs):
    a, b = real_runs
    q = adi.queries
    expect = rrf(a.topk(20), b.topk(20)).to_dict()
    assert (adi_bm25 % 20 | adi_dense % 20)(q).to_dict() == expect
    assert RRF([adi_bm25 % 20, adi_dense % 20])(q).to_dict() == expect
    assert RRF(adi_bm25, adi_dense, depth=20)(q).to_dict() == rrf(adi_bm25.retrieve(q), adi_dense.retrieve(q),
                                                          depth=20).to_dict()
    three = adi_bm25 % 20 | adi_dense % 20 | adi_bm25 % 5
    assert isinstance(three, RRF) and len(three.stages) == 3
    assert three(q).to_dict() == rrf(a.topk(20), b.topk(20), a.topk(5)).to_dict()
    assert ((adi_bm25 % 20 | adi_dense % 20) % 10)(q).to_dict() == rrf(a.topk(20), b.topk(20)).topk(10).to_dict()
    assert CombSUM(adi_bm25 % 20, adi_dense % 20)(q).to_dict() == combsum(a.topk(20), b.topk(20)).to_dict()
    assert CombMNZ(adi_bm25 % 20, adi_dense % 20)(q).to_dict() == combmnz(a.topk(20), b.topk(20)).to_dict()
    assert Linear(adi_bm25 % 20, adi_dense % 20, alpha=0.7)(q).to_dict() == \
        linear(a.topk(20), b.topk(20), 0.7).to_dict()
    assert (adi_bm25 | adi_dense).name.startswith("rrf(")


def test_hybrid_retriever(adi, adi_bm25, adi_dense):
    hyb = Hybrid(adi_bm25, adi_dense, depth=30)
    q = adi.queries
    run = hyb.retrieve(q, 10)
    expect = rrf(adi_bm25.retrieve(q, 30), adi_dense.retrieve(q, 30)).topk(10)
    _assert_same(run, expect, rel=1e-6)
    assert [run.query(x)[0].tolist() for x in q.ids] == [expect.query(x)[0].tolist() for x in q.ids]
    docs, scores = hyb.search_batch(["", "computer"], 5)
    assert (docs[0] == -1).all() and (docs[1] >= 0).all()
    other = BM25(BM25Index.build(adi.collection.head(10)))
    with pytest.raises(IndexMismatchError):
        Hybrid(other, adi_dense)
