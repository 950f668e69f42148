"""The audit's ``topics`` stage, its report section and the web app's topics view (issue 56 item
1): topic-aware retrievability per system beside the collection's Gini, each document's standing
within its topics, and topics as groups in the fairness module — on adi under 400 log queries
(two BM25 systems, a few seconds), every figure checked against the library computed
independently."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _audits import CORE_STAGES

from limelight.audit.config import parse_config
from limelight.audit.layout import AuditDir
from limelight.exposure.fairness import group_fairness
from limelight.exposure.topics import store_topic_retrievability, topics_from_texts
from limelight.report import run_audit

CONFIG = f"""
[audit]
name = "adi-topics"
depth = 20
cutoffs = [10]
seed = 3

[collection]
source = "adi"

[queries]
source = "log"
sample = 400

[[systems]]
name = "bm25"
kind = "bm25"

[[systems]]
name = "classic"
kind = "bm25"
k1 = 1.2
b = 0.75

{CORE_STAGES}
[topics]
k = 4
"""


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("topics") / "audit"
    run_audit(parse_config(CONFIG), out)
    return AuditDir(out)


def _lib(a: AuditDir, system: str):
    st = a.store(system)
    topics = topics_from_texts(st.queries_table().column("text"), 4, 3)
    return st, topics, store_topic_retrievability(st, topics, 10)


def test_stage_tables_equal_the_library(audit):
    rec = next(s for s in audit.manifest["stages"] if s["name"] == "topics")
    assert rec["status"] == "done", rec
    res = rec["result"]
    assert res["k"] == 4 and res["c"] == 10 and res["seed"] == 3
    table = pd.read_parquet(audit.table("topics"))
    groups = None
    for n in ("bm25", "classic"):
        st, topics, lib = _lib(audit, n)
        mine = table[table["system"] == n].drop(columns="system").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, lib.table)
        s = res["systems"][n]
        assert s["topic_gini_mean"] == pytest.approx(lib.summary["topic_gini_mean"])
        assert s["gini"] == pytest.approx(st.retrievability(c=10).gini)
        stand = pd.read_parquet(audit.table(f"topic_standings_{n}"))
        pd.testing.assert_frame_equal(stand, lib.standings())
        # topics as groups: the first system's assignment for both, shares of attention sum to 1
        groups = groups or lib.groups("share")
        fair = pd.read_parquet(audit.table("topic_fairness"))
        f = fair[fair["system"] == n]
        expect = group_fairness(st, groups, None, "size", n_boot=0).groups
        np.testing.assert_allclose(f["exposure_share"].to_numpy(),
                                   expect.set_index("group").loc[f["group"], "exposure_share"].to_numpy())
        assert f["exposure_share"].sum() == pytest.approx(1.0)


def test_report_section(audit):
    page = audit.report_html.read_text(encoding="utf-8")
    assert "Inequality within the topics of the searches" in page
    res = next(s for s in audit.manifest["stages"] if s["name"] == "topics")["result"]["systems"]
    assert f"the collection&#x27;s inequality is {res['bm25']['gini']:.3f}" in page
    order = sorted(res, key=lambda n: res[n]["gini"])
    assert f"From most even to least: {', '.join(order)} by the collection" in page
    assert "Topics as groups under bm25" in page


@pytest.mark.parametrize("change, reason", [
    (("compare = false", "compare = false\ntopics = false"), "switched off"),
    (("k = 4", 'k = 4\nmodel = "vectors"'), "needs the audit's query vectors"),
])
def test_skipped_with_its_reason(tmp_path, change, reason):
    cfg = parse_config(CONFIG.replace(*change).replace("sample = 400", "sample = 50"))
    run_audit(cfg, tmp_path / "a")
    a = AuditDir(tmp_path / "a")
    rec = next(s for s in a.manifest["stages"] if s["name"] == "topics")
    assert rec["status"] == "skipped" and reason in rec["reason"]
    assert not a.table("topics").exists()


def test_web_view_equals_the_library(audit):
    from fastapi.testclient import TestClient

    from limelight.service.app import create_app
    from limelight.service.core import AuditService

    svc = AuditService(audit.path)
    st, topics, lib = _lib(audit, "classic")
    doc = str(lib.standings()["docid"].iloc[0])
    with TestClient(create_app(svc)) as c:
        j = c.get("/api/topics", params={"system": "classic", "docid": doc}).json()
        assert j["k"] == 4 and j["c"] == 10  # the audit's stage's settings
        assert j["collection_gini"] == pytest.approx(st.retrievability(c=10).gini)
        assert j["topic_gini_mean"] == pytest.approx(lib.summary["topic_gini_mean"])
        assert [t["name"] for t in j["topics"]] == lib.table["name"].tolist()
        want = lib.standing(doc)
        assert [s["rank"] for s in j["standing"]] == want["rank"].tolist()
        assert [s["below"] for s in j["standing"]] == pytest.approx(want["below"].tolist())
        assert c.get("/api/topics", params={"k": 2}).json()["k"] == 2
        assert c.get("/api/topics", params={"docid": "no-such-doc"}).status_code == 404
        assert c.get("/api/topics", params={"k": 0}).status_code == 422
        assert c.get("/api/topics", params={"kk": 2}).status_code == 422  # unknown parameter named
        r = c.get("/topics", params={"system": "classic", "doc": doc})
        assert r.status_code == 200
        assert f"{j['collection_gini']:.3f}"[:4] in r.text and "standing-table" in r.text
        assert 'href="/topics?system=bm25' in r.text  # the other system, on the same topics
        page = c.get(f"/documents/{doc}", params={"system": "classic"}).text  # linked from its page
        assert f'href="/topics?system=classic&doc={doc}"' in page
