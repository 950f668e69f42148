"""A toy browsing model added by this one module (docs/architecture.md, "Extension points"): a
``Discount`` of its own, its ``BrowsingModelDef`` (spelling, declared argument) and one
``register_browsing_model`` call; the model then parses where every browsing model does and weighs a real exposure store."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from limelight.errors import LimelightError
from limelight.evaluation import Discount, ParamInfo
from limelight.exposure import (
    BrowsingModelDef,
    compute_exposure,
    parse_browsing_model,
    register_browsing_model,
)


@dataclass(frozen=True, repr=False)
class StepDiscount(Discount):
    """μ = 1 on the first page of ``size`` results, 1/2 on the second, 0 after."""

    size: int = 10
    name = "pages"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        page = np.asarray(rho) // self.size
        return np.where(page == 0, 1.0, np.where(page == 1, 0.5, 0.0))


#: the user who reads the first page and half of the second: ``pages:size``
PAGES = BrowsingModelDef("pages", StepDiscount, ParamInfo(int, 10, valid=lambda n: n >= 1, rule="must be ≥ 1",
                                                           desc="results per page"), "size")
register_browsing_model(PAGES)


def test_a_registered_toy_browsing_model_parses_and_weighs_a_store(tmp_path):
    from limelight.data import load_dataset, load_query_log
    from limelight.exposure.diff import store_document_stats
    from limelight.retrieval.bm25 import BM25, BM25Index

    assert parse_browsing_model("pages:5") == StepDiscount(5) and parse_browsing_model("pages") == StepDiscount(10)
    for bad in ("pages:0", "pages:x"):
        with pytest.raises(LimelightError, match="bad browsing model argument"):
            parse_browsing_model(bad)
    with pytest.raises(LimelightError, match=r"pages:size\)"):  # the list of models names it
        parse_browsing_model("pareto")
    store = compute_exposure(BM25(BM25Index.build(load_dataset("adi").collection)),
                             load_query_log().head(300), tmp_path / "s", depth=20)
    got = store_document_stats(store, 10, browsing="pages:5")["exposure"]
    q, d, rank, _ = store.pair_arrays()
    o = np.asarray(store.queries.weights, dtype=np.float64)
    mu = np.select([rank <= 5, rank <= 10], [1.0, 0.5], 0.0)
    want = np.bincount(d, weights=o[q] * mu, minlength=len(store.doc_ids)) / o.sum()
    assert (mu == 0.5).any() and (mu == 0).any()
    np.testing.assert_allclose(got, want)
