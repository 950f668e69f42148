"""The audit's optional ``[intervention]`` stage (issue 21): Plackett-Luce policies over each
system's exposure store, on med under a sample of the real query log (BM25 only: quick)."""

from __future__ import annotations

import numpy as np
import pytest
from _audits import CORE_STAGES, audited

from limelight.audit.config import parse_config
from limelight.errors import LimelightError

CONFIG = f"""
[audit]
name = "med-intervention"
depth = 100
cutoffs = [10, 100]
seed = 0
shard_size = 512

[collection]
source = "med"

[queries]
source = "log"
sample = 1500

[[systems]]
name = "bm25"
kind = "bm25"

{CORE_STAGES}
[intervention]
temperatures = [0.5, 2]
samples = 8
c = 10
"""


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    return audited(tmp_path_factory, CONFIG, "iv")


def test_intervention_stage_table_figure_and_report(audit):
    a, res = audit
    import pandas as pd

    df = pd.read_parquet(a.table("intervention"))
    assert df["temperature"].tolist() == [0.0, 0.5, 2.0] and (df["system"] == "bm25").all()
    # T = 0 is the system itself: its Gini is the audit's deterministic Gini at c = 10
    assert df["gini"].iloc[0] == pytest.approx(res["systems"]["bm25"]["gini_c10"], abs=1e-12)
    assert (np.diff(df["gini"].to_numpy()) < 0).all()  # warmer policies spread r(d) more
    assert res["stages"]["intervention"]["status"] == "present"
    assert set(res["intervention"]["bm25"]) == {"T=0", "T=0.5", "T=2"}
    page = a.report_html.read_text()
    assert "stochastic rankings" in page.lower() and "intervention.png" not in page  # inlined
    assert (a.figures_dir / "intervention.png").exists()


def test_intervention_prices_the_policy_in_relevance_on_a_judged_collection(audit):
    """med has judgments: each temperature also gets its expected nDCG@10 and EE-L/EE-D/EE-R
    over the judged queries; at T = 0 they are the deterministic BM25 run's."""
    import pandas as pd

    from limelight.data import load_dataset
    from limelight.evaluation import evaluate
    from limelight.retrieval.bm25 import BM25, BM25Index

    a, _ = audit
    df = pd.read_parquet(a.table("intervention"))
    assert {"ndcg10", "EE-L", "EE-D", "EE-R"} <= set(df.columns)
    ds = load_dataset("med")
    run = BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, 100)
    res = evaluate(run, ds.qrels, "nDCG@10 EE-L(gamma=0.5)", n_docs=len(ds.collection))
    want = {m.name: float(v) for m, v in res.aggregate.items()}
    assert df["ndcg10"].iloc[0] == pytest.approx(want["nDCG"], abs=1e-9)
    assert df["EE-L"].iloc[0] == pytest.approx(want["EE-L"], abs=1e-9)
    # randomising lowers the exposure disparity and costs relevance
    assert df["EE-D"].iloc[-1] < df["EE-D"].iloc[0] and df["ndcg10"].iloc[-1] < df["ndcg10"].iloc[0]


def test_intervention_config_errors():
    cases = (("temperatures = [0.5, 2]", "temperatures = []", "temperatures"),
             ("temperatures = [0.5, 2]", "temperatures = [-1]", "temperatures"),
             ("samples = 8", "samples = 0", "samples"),
             ("c = 10\n", "c = 1000\n", "intervention.c"),
             ("samples = 8", "foo = 1", "foo"))
    for old, new, match in cases:
        with pytest.raises(LimelightError, match=match) as e:
            parse_config(CONFIG.replace(old, new), "x.toml")
        assert "\n" not in str(e.value)
    # no [intervention] table: the stage is skipped with its reason
    cfg = parse_config(CONFIG.split("[intervention]")[0])
    assert "intervention" not in cfg.options
