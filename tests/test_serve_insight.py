"""Why a search shows a document, near misses, where a document stands, and groups' fair shares,
as ``limelight serve`` answers them (issue 43; issue 41 item 5; issue 45's groups page): each
checked against the library on the real test audits (BM25 score decomposition, a direct depth-1000
BM25 search, the store's r(d), ``group_fairness``), never against numbers written here."""

from __future__ import annotations

import re
from urllib.parse import quote

import numpy as np
import pytest
import test_serve_support as support

from limelight.exposure.browsing import parse_browsing_model

audit_dir, dense_audit_dir, run_audit_dir = support.audit_dir, support.dense_audit_dir, support.run_audit_dir
service, client = support.service, support.client


def _top_doc(service, system=None, c=100) -> str:
    return service.ranked_documents(system, c, "most", 1, 0)["documents"][0]["docid"]


def test_bm25_explanation_decomposes_the_stored_score(client, service):
    """Every exposing query of the most retrievable document (first 30): the matched terms'
    contributions sum to the score the store holds (1e-6), their shares to 1, and the query and
    the document text carry a <mark> around each matched term (case and stemming as analyzed)."""
    docid = _top_doc(service)
    doc = client.get(f"/api/documents/{quote(docid)}", params={"limit": 30}).json()
    assert doc["queries"]
    analyzer = service.retriever("bm25").index.analyzer
    for q in doc["queries"]:
        j = client.get("/api/explain", params={"docid": docid, "qid": q["qid"], "system": "bm25"}).json()
        assert j["explained"] and j["reason"] is None and j["rank"] == q["rank"]
        (part,) = j["parts"]
        assert part["kind"] == "bm25"
        total = sum(t["contribution"] for t in part["terms"])
        assert total == pytest.approx(q["score"], abs=1e-6) and part["score"] == pytest.approx(q["score"], abs=1e-6)
        assert sum(t["share"] for t in part["terms"]) == pytest.approx(1.0, abs=1e-6)
        matched = {t["term"] for t in part["terms"]}
        assert matched == set(analyzer.tokenize(q["query"])) & set(analyzer.tokenize(doc["text"]))
        marked = re.findall(r'<mark data-term="([^"]*)">([^<]*)</mark>', part["query_html"])
        assert {m[0] for m in marked} == matched
        assert all(analyzer.tokenize(w) == [t] for t, w in marked)
        assert {t for t, _ in re.findall(r'<mark data-term="([^"]*)">([^<]*)</mark>', part["doc_html"])} == matched


def test_explanation_of_another_bm25_system_uses_its_own_parameters(client, service):
    """bm25-classic (k1=1.2, b=0.75) is explained with its own retriever: its contributions sum
    to its own stored score, which differs from bm25's."""
    docid = _top_doc(service, "bm25-classic")
    doc = client.get(f"/api/documents/{quote(docid)}", params={"system": "bm25-classic", "limit": 5}).json()
    for q in doc["queries"]:
        j = client.get("/api/explain", params={"docid": docid, "qid": q["qid"], "system": "bm25-classic"}).json()
        assert sum(t["contribution"] for t in j["parts"][0]["terms"]) == pytest.approx(q["score"], abs=1e-6)


def test_dense_explanation_lists_the_closest_sentences(dense_audit_dir):
    """A dense system: the document's closest sentences by cosine (those of
    ``explain_dense`` with the system's own encoder), best first."""
    from fastapi.testclient import TestClient

    from limelight.retrieval.explain import explain_dense
    from limelight.service.app import create_app
    from limelight.service.core import AuditService

    svc = AuditService(dense_audit_dir)
    with TestClient(create_app(svc)) as c:
        docid = _top_doc(svc, "dense")
        doc = c.get(f"/api/documents/{quote(docid)}", params={"system": "dense", "limit": 1}).json()
        q = doc["queries"][0]
        j = c.get("/api/explain", params={"docid": docid, "qid": q["qid"], "system": "dense"}).json()
        assert j["explained"]
        (part,) = j["parts"]
        assert part["kind"] == "dense" and part["sentences"]
        want = explain_dense(svc.retriever("dense"), q["query"], doc["text"])
        assert [s["sentence"] for s in part["sentences"]] == [s["sentence"] for s in want["sentences"]]
        assert [s["score"] for s in part["sentences"]] == pytest.approx([s["score"] for s in want["sentences"]], abs=1e-6)
        scores = [s["score"] for s in part["sentences"]]
        assert scores == sorted(scores, reverse=True) and all(-1 <= s <= 1 for s in scores)
        assert all(doc["text"][s["start"]:s["end"]] == s["sentence"] for s in part["sentences"])
        page = c.get(f"/documents/{quote(docid)}", params={"system": "dense"}).text
        assert 'id="explain-dense"' in page and 'id="no-near-misses"' in page  # near misses need BM25


def test_an_external_system_says_where_its_results_came_from(run_audit_dir):
    """A system read from a run file: no explanation, the sentence saying so; no near misses;
    the document page's picture and table compare it with the BM25 systems (issue 41 item 5)."""
    from fastapi.testclient import TestClient

    from limelight.service.app import create_app
    from limelight.service.core import AuditService

    svc = AuditService(run_audit_dir)
    assert list(svc.systems) == ["bm25", "bm25-classic", "external"]
    with TestClient(create_app(svc)) as c:
        docid = _top_doc(svc, "external")
        doc = c.get(f"/api/documents/{quote(docid)}", params={"system": "external", "limit": 1}).json()
        j = c.get("/api/explain", params={"docid": docid, "qid": doc["queries"][0]["qid"], "system": "external"}).json()
        assert not j["explained"] and j["parts"] == []
        assert j["reason"] == "no explanation: results came from a run file"
        nm = c.get("/api/near-misses", params={"docid": docid, "system": "external"}).json()
        assert not nm["available"] and nm["queries"] == []
        # the run file is the classic BM25 store: the same exposure, system by system
        by = {s["system"]: s for s in doc["systems"]}
        assert by["external"]["r"] == by["bm25-classic"]["r"] and by["external"]["n_exposing"] == by["bm25-classic"]["n_exposing"]
        page = c.get(f"/documents/{quote(docid)}", params={"system": "external"}).text
        assert "no explanation: results came from a run file" in page
        fig = re.search(r'<figure id="fig-systems">(.*?)</figure>', page, re.S).group(1)
        assert re.findall(r'<text class="bar-label"[^>]*>([^<]*)</text>', fig) == ["bm25", "bm25-classic", "external"]
        assert 'class="bar current"' in fig


def _rank_at_1000(service, query: str, docid: str) -> int | None:
    r = service.retriever("bm25")
    docs, _ = r.search_batch([query], 1000)
    hit = np.flatnonzero(np.asarray(docs[0]) == r.doc_ids.lookup(docid))
    return int(hit[0]) + 1 if len(hit) else None


def test_near_misses_rank_the_document_between_101_and_1000(client, service):
    """Documents with little exposure (the least retrievable above zero): each near miss ranks
    the document where a direct depth-1000 BM25 search puts it, between 101 and 1,000; its shared
    terms are the analyzed terms it has in common with the document; at least one document of the
    audit has near misses."""
    r = service._served_r(service.system("bm25"), 100)
    order = np.lexsort((service.doc_ids.strings, r))
    candidates = [str(service.doc_ids[i]) for i in order[np.asarray(r)[order] > 0][:15]]
    analyzer = service.retriever("bm25").index.analyzer
    seen = 0
    for docid in candidates:
        j = client.get("/api/near-misses", params={"docid": docid, "system": "bm25"}).json()
        assert j["available"] and (j["first_rank"], j["last_rank"]) == (101, 1000)
        text = service.docs.texts[service.doc_row(docid)]
        for m in j["queries"]:
            assert 101 <= m["rank"] <= 1000
            assert _rank_at_1000(service, m["query"], docid) == m["rank"]
            assert set(m["shared_terms"]) == set(analyzer.tokenize(m["query"])) & set(analyzer.tokenize(text))
        assert [(m["rank"], m["qid"]) for m in j["queries"]] == sorted((m["rank"], m["qid"]) for m in j["queries"])
        seen += len(j["queries"])
    assert seen > 0


def test_standing_and_top_searches_follow_the_store(client, service):
    """The document's r(d) at the audit's smallest cutoff, the median, the count at zero and the
    histogram are those of the store's r(d); the top searches are its exposing queries ordered
    by o_q · μ."""
    sysm = service.system("bm25")
    docid = _top_doc(service)
    row = service.doc_row(docid)
    j = client.get(f"/api/documents/{quote(docid)}", params={"browsing": "rbp:0.5"}).json()
    st = j["standing"]
    assert st["c"] == 10
    res = sysm.store.retrievability(c=10)
    r = np.zeros(len(service.doc_ids))
    r[sysm.doc_rows] = res.r
    assert st["r"] == r[row] and st["median"] == float(np.median(r)) and st["n_zero"] == int((r == 0).sum())
    assert sum(b["n"] for b in st["bins"]) == len(r) and sum(b["here"] for b in st["bins"]) == 1
    assert st["total_weight"] == pytest.approx(float(np.sum(sysm.store.queries.weights)))
    q, rank, _ = sysm.store.document_pairs(int(sysm.store_d[row]))
    w = np.asarray(sysm.store.queries.weights, dtype=np.float64)[q]
    att = w * parse_browsing_model("rbp:0.5").weights(np.asarray(rank, dtype=np.int64))
    got = [t["attention"] for t in j["top_searches"]]
    assert got == pytest.approx(sorted(att.tolist(), reverse=True)[:len(got)]) and len(got) == min(10, len(q))


def test_fairness_is_group_fairness_of_the_store(client, service):
    """/api/fairness: the library's group_fairness over the system's store, groups from the
    audit's group field in the store's document order; the merit target takes another system's
    scores as an assumption it states; a field with too many values is a 422."""
    from limelight.exposure.fairness import Groups, Merit, group_fairness

    sysm = service.system("bm25")
    field = service.group_field
    assert field == "Major Genre"
    values = np.asarray(service.docs.fields[field], dtype=object)[sysm.doc_rows]
    want = group_fairness(sysm.store, Groups.from_values(values), n_boot=0).groups
    j = client.get("/api/fairness", params={"field": field, "system": "bm25"}).json()
    got = {g["group"]: g for g in j["groups"]}
    for row in want.itertuples():
        assert got[row.group]["exposure_share"] == pytest.approx(row.exposure_share, abs=1e-12)
        assert got[row.group]["target_share"] == pytest.approx(row.size_share, abs=1e-12)
        lo, hi = got[row.group]["exposure_share_lo"], got[row.group]["exposure_share_hi"]
        assert lo <= row.exposure_share <= hi
    m = client.get("/api/fairness", params={"field": field, "system": "bm25", "target": "merit",
                                            "merit": "bm25-classic"}).json()
    merit = Merit.from_reference(service.system("bm25-classic").store, sysm.store, "bm25-classic")
    want_m = group_fairness(sysm.store, Groups.from_values(values), merit, target="merit", n_boot=0).groups
    assert [g["target_share"] for g in m["groups"]] == pytest.approx(want_m["target_share"].tolist(), abs=1e-12)
    assert any("bm25-classic" in a for a in m["summary"]["assumptions"])
    assert client.get("/api/fairness", params={"field": "Title"}).status_code == 422
    assert client.get("/api/fairness", params={"field": "no such field"}).status_code == 404
    assert client.get("/api/fairness", params={"field": field, "target": "merit"}).status_code == 422


def test_pages_speak_in_words(client, service):
    """The document, retrievability and groups pages lead with a sentence; the retrievability
    page names how many documents are at zero and labels both Lorenz axes; the document page
    offers the browsing models as a list."""
    docid = _top_doc(service)
    page = client.get(f"/documents/{quote(docid)}").text
    lead = re.search(r'<p class="lead" id="lead">(.*?)</p>', page, re.S).group(1)
    st = client.get(f"/api/documents/{quote(docid)}").json()["standing"]
    assert f"appears in the top {st['c']} for" in lead and f"{int(st['r']):,}" in lead
    # one count basis per sentence, named (issue 54 item 6); no "100 %" short of all
    assert "counting every time a search was issued" in lead and "distinct" not in lead
    summary = re.search(r'<p class="summary" id="exposure-summary">(.*?)</p>', page, re.S).group(1)
    issued, distinct = summary.split("Counting each distinct search once")
    assert "Counting every time a search was issued" in issued and "distinct" not in issued
    from limelight.service.fmt import pct

    assert (pct(0.99998), pct(1.0), pct(0.999999999999), pct(0.5)) == (
        "99.998 %", "100 %", "more than 99.99999 %", "50 %")
    assert '<select name="browsing" id="browsing">' in page and 'name="browsing" value=' not in page
    assert "<mark" in page
    retr = client.get("/retrievability", params={"c": 10}).text
    n_zero = int((service._served_r(service.system(None), 10) == 0).sum())
    assert n_zero > 0 and f'<strong id="n-zero">{n_zero:,}</strong>' in retr
    assert re.search(r'class="axis-label y-label"[^>]*>share of all appearances', retr)
    groups = client.get("/groups").text
    assert 'id="lead"' in groups and 'id="fairness-table"' in groups
    gl = client.get("/glossary").text
    for key in re.findall(r'href="/glossary#(glossary-[a-z_]+)"', page + retr + groups):
        assert f'id="{key}"' in gl
