"""The portal's owner tables (issue 54 items 3-4) over a tiny real audit with a generated searcher
log (tests/_portal_support.py): an owner's top searches and their CSV, the DP release served on
the pages and the API (its epsilon and delta those of OpenDP's own accounting; a search one
searcher typed never listed), and two audits side by side per document and per owner (HTML,
JSON, CSV), the privacy rules applied to both sides and the document rule to ``docid``."""

from __future__ import annotations

import csv
import html
import io
import re
from urllib.parse import quote

import _portal_support as support
import numpy as np
import pytest

DP = {"epsilon": 1.0, "delta": 1e-6, "cap": 2}


@pytest.fixture(scope="module")
def info(tmp_path_factory):
    return support.build(tmp_path_factory.mktemp("portal-adi"))


@pytest.fixture(scope="module")
def release(info):
    from limelight.service.dprelease import release_log

    return release_log(info["log"], DP["epsilon"], DP["delta"], DP["cap"])


@pytest.fixture(scope="module")
def clients(info, release, tmp_path_factory):
    """Two portals at k = 1 (so that k alone would list the lonely search): without and with
    the DP release."""
    from fastapi.testclient import TestClient

    out = {}
    for name, dp in (("plain", None), ("dp", release)):
        app, service, accounts, tokens = support.portal(info, tmp_path_factory.mktemp(name) / "p.db", k=1, dp=dp)
        out[name] = (TestClient(app).__enter__(), service, accounts, tokens)
    yield out
    for client, _, accounts, _ in out.values():
        client.__exit__(None, None, None)
        accounts.close()


def _answers(client, tokens, who, info) -> dict[str, str]:
    """Every route an owner's searches can reach, as text: the owner's tables (JSON, CSV, HTML),
    the comparison, the target document's page, its API and near misses."""
    doc = quote(info["target"], safe="")
    gets = {"queries": ("/api/performance/queries", {"limit": 1000}),
            "queries.csv": ("/api/performance/queries", {"format": "csv"}),
            "performance": ("/performance", {}),
            "compare": ("/api/compare", {"system_b": "bm25-classic"}),
            "compare.csv": ("/api/compare", {"format": "csv"}),
            "compare page": ("/compare", {}),
            "document": (f"/api/documents/{doc}", {"limit": 1000}),
            "document page": (f"/documents/{doc}", {}),
            "near misses": ("/api/near-misses", {"docid": info["target"]})}
    out = {}
    for name, (path, params) in gets.items():
        r = client.get(path, params=params, headers=tokens[who])
        assert r.status_code == 200, (name, r.text[:200])
        out[name] = r.text
    return out


def test_a_search_one_searcher_typed_never_reaches_an_owner_under_dp(clients, info, release):
    lonely = info["lonely"]
    assert lonely not in release.counts  # one searcher: below the threshold meeting delta
    plain, dp = clients["plain"], clients["dp"]
    shown = _answers(plain[0], plain[3], "alice", info)  # k = 1, no DP: the owner sees it
    assert lonely in shown["queries"] and lonely in shown["queries.csv"] and html.escape(lonely) in shown["performance"]
    for who in ("alice", "root"):
        got = _answers(dp[0], dp[3], who, info)
        if who == "root":  # the platform team sees the log as it is
            assert lonely in got["queries"]
            continue
        leaked = [name for name, text in got.items() if lonely in text or html.escape(lonely) in text]
        assert leaked == []
    mine = dp[0].get("/api/performance/queries", params={"limit": 1000}, headers=dp[3]["alice"]).json()
    released = {t for t in release.counts}
    assert mine["queries"] and all(q["query"] in released for q in mine["queries"])
    assert [q["count"] for q in mine["queries"]] == [float(release.counts[q["query"]]) for q in mine["queries"]]
    assert mine["basis"].startswith("distinct searchers, noisy") and mine["privacy"]["not_released"] > 0
    assert mine["listed"] + mine["privacy"]["hidden"] == mine["total"]  # hidden ones still counted


def test_the_page_states_the_librarys_epsilon_and_delta(clients, release, info):
    import opendp.prelude as dp

    from limelight.service.dprelease import measurement

    dp.enable_features("contrib")
    meas, scale, threshold = measurement(DP["cap"], DP["epsilon"], DP["delta"])
    eps, delta = meas.map((DP["cap"], DP["cap"], 1))  # OpenDP's own accounting
    assert delta <= DP["delta"] and (release.epsilon, release.delta, release.threshold) == (eps, delta, threshold)
    client, _, _, tokens = clients["dp"]
    stated = client.get("/api/performance/queries", headers=tokens["alice"]).json()["dp"]
    assert (stated["epsilon"], stated["delta"], stated["cap"], stated["threshold"]) == (eps, delta, DP["cap"], threshold)
    page = client.get("/performance", headers=tokens["alice"]).text
    assert float(re.search(r'id="dp-epsilon" data-value="([^"]+)"', page).group(1)) == eps
    assert float(re.search(r'id="dp-delta" data-value="([^"]+)"', page).group(1)) == delta
    assert f"epsilon = {eps:g}, delta = {delta:.2g}" in page
    assert "noisy count of distinct searchers" in page
    doc = client.get(f"/documents/{quote(info['target'], safe='')}", headers=tokens["alice"]).text  # its privacy note
    note = re.search(r'<p class="note" id="privacy-note">([^<]+)</p>', doc).group(1)
    assert f"differentially private release (epsilon = {eps:g}, delta = {delta:.2g}) does not list" in html.unescape(note)
    # the plain portal states no DP, and ranks by one named count
    plain, _, _, ptokens = clients["plain"]
    assert plain.get("/api/performance/queries", headers=ptokens["alice"]).json()["dp"] is None
    assert 'id="dp-statement"' not in plain.get("/performance", headers=ptokens["alice"]).text


def test_two_audits_side_by_side_per_document_and_per_owner(clients, info):
    """Side A bm25, side B bm25-classic of the --compare audit: each side's figures are those of
    /api/performance for that system, the difference B − A; the CSV holds the same rows."""
    client, service, _, tokens = clients["plain"]
    res = client.get("/api/compare", params={"system": "bm25", "system_b": "bm25-classic", "limit": 1000},
                     headers=tokens["alice"]).json()
    assert not res["same_audit"] and res["owner"] == "a" and res["a"]["system"] == "bm25"
    for side, system in (("a", "bm25"), ("b", "bm25-classic")):
        perf = client.get("/api/performance", params={"system": system, "limit": 1000},
                          headers=tokens["alice"]).json()
        for f in ("impressions", "average_position", "attention", "n_shown"):
            assert res[side][f] == pytest.approx(perf[f]), (side, f)
        by_id = {d["docid"]: d for d in perf["documents"]}
        for d in res["documents"]:
            for f in ("impressions", "searches", "average_position", "attention"):
                assert d[side][f] == pytest.approx(by_id[d["docid"]][f]), (side, f, d["docid"])
    assert res["n_documents"] == len(res["documents"]) == res["n_in_b"] > 0
    for d in res["documents"]:
        assert d["diff"]["impressions"] == pytest.approx(d["b"]["impressions"] - d["a"]["impressions"])
    assert res["diff"]["attention"] == pytest.approx(res["b"]["attention"] - res["a"]["attention"])
    assert any(d["diff"]["impressions"] != 0 for d in res["documents"])  # the two systems differ
    table = list(csv.DictReader(io.StringIO(client.get("/api/compare", params={"system_b": "bm25-classic", "format": "csv"},
                                                       headers=tokens["alice"]).text)))
    assert len(table) == len(res["documents"]) and {t["owner"] for t in table} == {"a"}
    assert sum(float(t["impressions_diff"]) for t in table) == pytest.approx(res["diff"]["impressions"])
    # the admin: every document, or one owner's (the same answer as the owner's)
    admin = client.get("/api/compare", params={"system_b": "bm25-classic", "owner": "a", "limit": 1000},
                       headers=tokens["root"]).json()
    for side in ("a", "b"):  # the same figures; the searches listed differ (the admin's unscreened)
        assert admin[side].pop("top_queries")["privacy"] is None and res[side].pop("top_queries")["privacy"]
    assert admin == res
    every = client.get("/api/compare", params={"system_b": "bm25-classic", "limit": 1}, headers=tokens["root"])
    assert every.json()["n_documents"] == len(service.doc_ids)
    page = client.get("/compare", params={"system_b": "bm25-classic"}, headers=tokens["alice"]).text
    assert 'id="compare-table"' in page and 'id="impressions-diff"' in page and "B − A" in page
    # the same system on both sides: called equal
    same = client.get("/compare", params={"system": "bm25", "system_b": "bm25"}, headers=tokens["alice"]).text
    assert "(equal)" in same and 'id="impressions-diff"' not in same


def test_compare_applies_the_document_rule_and_the_privacy_rules_to_both_sides(clients, info):
    from markupsafe import escape

    client, service, _, tokens = clients["dp"]
    mine, other, unknown = info["target"], str(service.doc_ids[0]), "no-such-document"  # row 0: b's
    one = client.get("/api/compare", params={"docid": mine, "system_b": "bm25-classic"}, headers=tokens["alice"]).json()
    assert one["n_documents"] == 1 and one["documents"][0]["docid"] == mine
    for path in ("/api/compare", "/compare"):
        answers = [client.get(path, params={"docid": d}, headers=tokens["alice"]) for d in (other, unknown)]
        assert [a.status_code for a in answers] == [404, 404]
        same = [a.text.replace(str(escape(repr(x))), "ID").replace(repr(x), "ID")
                for a, x in zip(answers, (other, unknown), strict=True)]
        assert same[0] == same[1] and "ID" in same[0]
    assert client.get("/api/compare", params={"owner": "b"}, headers=tokens["alice"]).status_code == 404
    assert client.get("/api/compare", params={"docid": other}, headers=tokens["bob"]).status_code == 200
    for side in ("a", "b"):
        t = one[side]["top_queries"]
        assert t["dp"] is not None and t["privacy"]["hidden"] > 0
        assert info["lonely"] not in [q["query"] for q in t["queries"]]
    admin = client.get("/api/compare", params={"docid": mine}, headers=tokens["root"]).json()
    assert admin["a"]["top_queries"]["privacy"] is None
    assert info["lonely"] in [q["query"] for q in admin["a"]["top_queries"]["queries"]]


def test_compare_without_a_second_audit_names_another_system(info, tmp_path):
    from fastapi.testclient import TestClient

    app, _, accounts, tokens = support.portal(info, tmp_path / "p.db", compare=False)
    with TestClient(app) as client:
        r = client.get("/api/compare", headers=tokens["alice"])  # side B: the other system, by default
        assert r.status_code == 200 and r.json()["same_audit"] and r.json()["b"]["system"] == "bm25-classic"
        r = client.get("/api/compare", params={"system": "bm25-classic"}, headers=tokens["alice"])
        assert r.status_code == 200 and r.json()["b"]["system"] == "bm25"
        assert client.get("/api/compare", params={"system_b": "nope"}, headers=tokens["alice"]).status_code == 404
        page = client.get("/compare", headers=tokens["alice"])  # the page picks the other system
        assert page.status_code == 200 and "bm25-classic" in page.text
    accounts.close()


def test_the_release_is_drawn_once_and_reads_the_searcher_log(info, release):
    """The served counts are one draw (the same on every request); the lines a release counts
    are the log's normalised texts (the audit's query texts)."""
    from limelight.data.searcherlog import searcher_lines
    from limelight.service.core import AuditService

    who, texts = searcher_lines(info["log"])
    assert len(who) == len(texts) and (who == support.LONELY_SEARCHER).sum() == 8
    store_texts = set(AuditService(info["audit"]).system("bm25").store.queries.texts.tolist())
    assert set(texts.tolist()) == store_texts and set(release.counts) <= store_texts
    assert np.isfinite(release.epsilon) and release.cap == DP["cap"]


def test_serve_dp_options_say_what_is_wrong_in_one_line(info, tmp_path):
    """``serve --dp-epsilon``: the release needs the portal and a log that says who searched; by
    default the audit's own query log (its manifest's source)."""
    from typer.testing import CliRunner

    from limelight.cli import app
    from limelight.cli.serve import dp_release_of
    from limelight.errors import LimelightError

    plain = tmp_path / "plain.tsv"
    plain.write_text("source\tqid\tquery\nweb\t1\ta b\n")
    db = ["--db", f"sqlite:///{tmp_path / 'p.db'}", "--port", "0", "--no-preload"]
    for args, message in [([], "--dp-epsilon takes effect with --auth password or proxy"),
                          ([*db, "--dp-log", str(tmp_path / "none.tsv")], "none.tsv: no such file"),
                          ([*db, "--dp-log", str(plain)], "plain.tsv:1: a DP release counts searchers")]:
        r = CliRunner().invoke(app, ["serve", "--audit", str(info["audit"]), "--dp-epsilon", "1", *args])
        assert isinstance(r.exception, LimelightError) and message in str(r.exception), (args, r.output)
    release = dp_release_of(info["audit"], "password", None, 1.0, 1e-6, 2)  # the manifest's log
    assert release.cap == 2 and release.epsilon == 1.0 and info["lonely"] not in release.counts
    assert dp_release_of(info["audit"], "password", None, None, 1e-6, 2) is None


def test_the_compare_page_of_one_system_without_a_second_audit_says_so(info, tmp_path):
    """An audit of one system served without --compare: the page says there is nothing to
    compare (a link in every page's navigation must not lead to an error), the API a 404."""
    import json
    import shutil

    from fastapi.testclient import TestClient

    one = tmp_path / "one"
    shutil.copytree(info["audit"], one, ignore=shutil.ignore_patterns("bm25-classic"))
    manifest = json.loads((one / "audit.json").read_text())
    manifest["systems"] = manifest["systems"][:1]
    (one / "audit.json").write_text(json.dumps(manifest))
    app, _, accounts, tokens = support.portal({**info, "audit": one}, tmp_path / "p.db", compare=False)
    with TestClient(app) as client:
        page = client.get("/compare", headers=tokens["alice"])
        assert page.status_code == 200 and 'id="nothing-to-compare"' in page.text and "--compare DIR" in page.text
        r = client.get("/api/compare", headers=tokens["alice"])
        assert r.status_code == 404 and "nothing to compare" in r.json()["detail"]
    accounts.close()
