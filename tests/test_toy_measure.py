"""A toy measure added by this one module (docs/architecture.md, "Extension points"): one small
``MeasureDef`` with a parameter of its own and one ``register_measure`` call, and the measure
parses, prints, evaluates and reaches ``limelight evaluate`` with no other file touched."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data import read_trec_qrels, read_trec_run
from limelight.evaluation import (
    MeasureDef,
    ParamInfo,
    RelPositions,
    evaluate,
    parse_measure,
    register_measure,
)
from limelight.evaluation.kernels import seen_mask


class _WeightedHits(MeasureDef):
    """``Hits(w=2)@5``: w times the number of relevant documents in the top k (no division)."""

    NAME = "Hits"
    SUPPORTED_PARAMS = {
        "cutoff": ParamInfo(int, valid=lambda c: c >= 1, rule="must be a positive integer"),
        "w": ParamInfo(float, 1.0, shown=False, valid=lambda w: w > 0, rule="must be > 0",
                       desc="the weight of a hit"),
        "rel": ParamInfo(int, 1, shown=False, valid=lambda r: r >= 1, rule="must be ≥ 1"),
    }
    CUTOFF_REQUIRED = True
    ALIASES = ("hits",)

    def compute(self, measure: Any, rp: RelPositions) -> np.ndarray:
        return measure.w * seen_mask(rp, measure.cutoff).sum(axis=1)


register_measure(_WeightedHits())


def test_a_registered_toy_measure_parses_evaluates_and_reaches_the_cli(trec_eval_dir):
    m = parse_measure("hits(w=2,rel=2)@5")
    assert str(m) == "Hits(w=2,rel=2)@5" and parse_measure(str(m)) == m and m.threshold == 2
    assert str(parse_measure("Hits(w=1)@5")) == "Hits@5"  # the default is not written
    for bad in ("Hits", "Hits(w=0)@5", "Hits(p=0.5)@5"):
        try:
            parse_measure(bad)
        except Exception as e:  # noqa: BLE001 - a one-line MeasureError naming the measure
            assert bad in str(e) and "\n" not in str(e)
        else:
            raise AssertionError(bad)
    qrels = read_trec_qrels(trec_eval_dir / "qrels.test")
    run = read_trec_run(trec_eval_dir / "results.test")
    res = evaluate(run, qrels, "Hits(w=2)@5 P@5 Hits@20 P@20")
    vals = {str(k): v for k, v in res.per_query.items()}
    assert vals["P@5"].sum() > 0 and vals["P@20"].sum() > vals["P@5"].sum()
    np.testing.assert_allclose(vals["Hits(w=2)@5"], 2 * 5 * vals["P@5"])  # P's kernel input, its own formula
    np.testing.assert_allclose(vals["Hits@20"], 20 * vals["P@20"])
    out = CliRunner().invoke(app, ["evaluate", "--qrels", str(trec_eval_dir / "qrels.test"),
                                   str(trec_eval_dir / "results.test"), "-m", "Hits(w=2)@5", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"results.test": {"Hits(w=2)@5": float(vals["Hits(w=2)@5"].mean())}}
