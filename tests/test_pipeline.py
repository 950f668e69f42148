"""Pipeline operators (``%``, ``>>``, ``|``) on real retrievers, and the PyTerrier adapter: frame
conversions, a limelight stage run inside PyTerrier, and the missing-dependency error (PyTerrier's
import blocked in a fresh interpreter)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from limelight.data import Queries, Run
from limelight.errors import FormatError, LimelightError
from limelight.retrieval.base import Cutoff, Stage, Then
from limelight.retrieval.dense import DenseRescorer
from limelight.retrieval.fusion import RRF, rrf
from limelight.retrieval.pyterrier import (
    INSTALL_HINT,
    queries_from_frame,
    queries_to_frame,
    run_from_frame,
    run_to_frame,
    to_pyterrier,
)


class Negate(Stage):
    """A toy re-ranker: reverses the input ranking."""

    name = "negate"

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        assert run is not None
        return Run.from_codes(run.qids, run.docids, run.q, run.d, -run.score, self.name)


def test_cutoff_and_then(adi, adi_bm25):
    q = adi.queries
    full = adi_bm25.retrieve(q)
    cut = (adi_bm25 % 5)(q)
    assert isinstance(adi_bm25 % 5, Cutoff) and (cut.depths() <= 5).all()
    assert cut.to_dict() == full.topk(5).to_dict()
    pipe = adi_bm25 % 5 >> Negate()
    assert isinstance(pipe, Then) and pipe.name == f"{adi_bm25.name}%5>>negate"
    out = pipe(q)
    for qid in ["1", "7"]:
        docs, _ = out.query(qid)
        ref, _ = full.topk(5).query(qid)
        assert set(docs) == set(ref)
    # cut after re-ranking keeps the re-ranker's top
    assert ((adi_bm25 % 5 >> Negate()) % 2)(q).to_dict() == out.topk(2).to_dict()


def test_dense_rescorer_pipeline(adi, adi_bm25, adi_dense):
    q = adi.queries
    out = (adi_bm25 % 10 >> DenseRescorer(adi_dense))(q)
    first = adi_bm25.retrieve(q, 10)
    assert len(out) == len(first)
    # the re-scored values are the dense inner products of the same pairs
    qv = adi_dense.encode_queries(q.texts.tolist())
    d = out.with_doc_map(adi_dense.doc_ids)
    expect = np.einsum("ij,ij->i", qv[q.ids.encode(d.qids.decode(d.q))],
                       adi_dense.index.embeddings[d.d])
    np.testing.assert_allclose(d.score, expect, atol=1e-5)
    with pytest.raises(LimelightError, match="first stage"):
        DenseRescorer(adi_dense)(q)


def test_fusion_of_pipelines(adi, adi_bm25, adi_dense):
    q = adi.queries
    hybrid = (adi_bm25 % 20 >> DenseRescorer(adi_dense)) | adi_dense % 20
    assert isinstance(hybrid, RRF)
    expect = rrf((adi_bm25 % 20 >> DenseRescorer(adi_dense))(q), adi_dense.retrieve(q, 20))
    assert hybrid(q).to_dict() == expect.to_dict()


# ---- PyTerrier frames ------------------------------------------------------------------------
def test_pyterrier_missing_is_one_line_error():
    code = ("import sys\nsys.modules['pyterrier'] = None  # as if not installed\n"
            "from limelight.data import load_dataset\n"
            "from limelight.errors import LimelightError\n"
            "from limelight.retrieval.bm25 import BM25, BM25Index\n"
            "from limelight.retrieval.pyterrier import to_pyterrier\n"
            "bm25 = BM25(BM25Index.build(load_dataset('adi').collection))\n"
            "try:\n    to_pyterrier(bm25 % 10)\nexcept LimelightError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == INSTALL_HINT and "\n" not in INSTALL_HINT


def test_limelight_stage_runs_inside_pyterrier(adi, adi_bm25):
    assert importlib.util.find_spec("pyterrier") is not None  # the terrier extra is installed
    frame = queries_to_frame(adi.queries)
    pipe = to_pyterrier(adi_bm25 % 10)
    assert repr(pipe) == f"LimelightTransformer({adi_bm25.name}%10)"
    got = run_from_frame(pipe.transform(frame))
    assert got.to_dict() == adi_bm25.retrieve(adi.queries, 10).to_dict()
    # PyTerrier's own operators over it: its rank cutoff keeps limelight's top 3
    top3 = (pipe % 3).transform(frame)
    assert run_from_frame(top3).to_dict() == adi_bm25.retrieve(adi.queries, 3).to_dict()


def test_queries_frames_roundtrip(adi):
    df = queries_to_frame(adi.queries)
    assert list(df.columns) == ["qid", "query"] and len(df) == 35
    back = queries_from_frame(df)
    assert back.ids == adi.queries.ids and back.texts.tolist() == adi.queries.texts.tolist()
    # a results frame (qid repeated) yields each query once
    res = pd.DataFrame({"qid": ["1", "1", "2"], "query": ["a", "a", "b"], "docno": ["x", "y", "x"],
                        "score": [1.0, 0.5, 2.0], "rank": [0, 1, 0]})
    q = queries_from_frame(res)
    assert list(q.ids) == ["1", "2"] and q.texts.tolist() == ["a", "b"]
    with pytest.raises(FormatError, match="query"):
        queries_from_frame(pd.DataFrame({"qid": ["1"]}))


def test_run_frames_roundtrip(adi, adi_bm25):
    run = adi_bm25.retrieve(adi.queries, 10)
    df = run_to_frame(run, adi.queries)
    assert list(df.columns) == ["qid", "query", "docno", "score", "rank"]
    assert df.groupby("qid")["rank"].min().eq(0).all()  # PyTerrier ranks are 0-based
    assert df["query"].iloc[0] == adi.queries[df["qid"].iloc[0]]
    back = run_from_frame(df, name=run.name)
    assert back.to_dict() == run.to_dict()
    # the rank column is ignored: ranks come from scores
    shuffled = df.sample(frac=1.0, random_state=0).assign(rank=0)
    assert run_from_frame(shuffled).to_dict() == run.to_dict()
    assert (run_to_frame(run, rank_base=1)["rank"] >= 1).all()
    # a query kept with no result (docno NaN) stays, with no documents
    empty = pd.DataFrame({"qid": ["1", "2"], "docno": ["d", None], "score": [1.0, np.nan]})
    r = run_from_frame(empty)
    assert r.n_queries == 2 and len(r) == 1
    with pytest.raises(FormatError, match="docno"):
        run_from_frame(pd.DataFrame({"qid": ["1"], "score": [1.0]}))
