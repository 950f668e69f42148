"""End-to-end tests of ``limelight serve`` in headless Chromium (Debian's ``chromium``, driven by
Playwright for Python): every page loads without console errors, a search, a document and its
exposing queries, a query, the retrievability dashboard, and a pasted document — each checked
against what the JSON API (itself checked against the library in test_serve.py) answers.

Chromium is installed by the project's setup (``make browser``: Debian's package); these tests
fail, never skip, when it is missing.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
import test_serve_support as support

from limelight.service.fmt import num

audit_dir, service, live_server = support.audit_dir, support.service, support.live_server

def api(base: str, path: str, **params) -> dict:
    r = httpx.get(base + path, params=params, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_every_page_loads_from_the_navigation(page, live_server):
    page.goto(live_server + "/")
    for link, heading in [("#nav-queries", "Queries of the log"), ("#nav-retrievability", "Retrievability"),
                          ("#nav-groups", "Who gets the attention: groups of documents"),
                          ("#nav-topics", "Inequality within the topics of the searches"),
                          ("#nav-eqi", "Which searches show my page?"), ("#nav-glossary", "Glossary"),
                          ("#nav-api", "JSON API"), ("#nav-search", None)]:
        page.click(link)
        page.wait_for_load_state()
        if heading:
            assert page.locator("h1").first.inner_text() == heading
    assert page.locator("#q").is_visible()
    page.goto(live_server + "/api")
    spec = api(live_server, "/openapi.json")
    assert page.locator("section.op h2").count() == sum(len(m) for m in spec["paths"].values()) >= 9
    page.goto(live_server + "/documents/no-such-document")
    assert "unknown document id 'no-such-document'" in page.locator("#error-message").inner_text()
    assert [p for p in page.problems if "404" not in p] == []


def test_search_document_and_query_pages(page, live_server):
    page.goto(live_server + "/")
    page.fill("#q", "star wars")
    page.press("#q", "Enter")
    page.wait_for_selector("#results")
    truth = api(live_server, "/api/search", q="star wars", limit=10)
    shown = page.locator("#results li.result").evaluate_all("els => els.map(e => e.dataset.docid)")
    assert shown == [r["docid"] for r in truth["results"]]
    assert page.locator("#results li.result").first.locator("mark").count() >= 1

    page.locator("#results li.result a.title").first.click()
    page.wait_for_selector("#doc-title")
    docid = truth["results"][0]["docid"]
    doc = api(live_server, f"/api/documents/{quote(docid)}", limit=50)
    assert page.locator("#docid").inner_text() == docid
    assert page.locator("#n-exposing").inner_text() == num(doc["n_exposing"])
    rows = page.locator("#exposing-queries tbody tr")
    assert rows.count() == min(50, doc["n_exposing"])
    bars = page.locator("#fig-top-searches svg.hbars rect.bar")
    assert bars.count() == len(doc["top_searches"]) == min(10, doc["n_exposing"])
    assert bars.locator("title").all_text_contents() == [t["query"] for t in doc["top_searches"]]
    assert [t.strip() for t in rows.locator("td:nth-child(2)").all_inner_texts()] == [q["query"] for q in doc["queries"]]

    # a different browsing model changes the exposure shown
    page.select_option("#browsing", "cutoff:10")
    page.click("form.controls button")
    page.wait_for_load_state()
    doc10 = api(live_server, f"/api/documents/{quote(docid)}", browsing="cutoff:10")
    assert page.locator("#exposure").inner_text() == num(doc10["exposure"])
    assert "first page only" in page.locator("#exposure-summary").inner_text()

    page.locator("#exposing-queries tbody tr a").first.click()
    page.wait_for_selector("#exposed-documents")
    docs = page.locator("#exposed-documents tbody tr td:nth-child(2) a").all_inner_texts()
    assert truth["results"][0]["title"] in [d.strip() for d in docs]
    assert page.problems == []


def test_retrievability_dashboard(page, live_server):
    page.goto(live_server + "/retrievability")
    info = api(live_server, "/api/info")
    names = [s["name"] for s in info["systems"]]
    assert page.locator("svg.lorenz polyline.curve").count() == len(names)
    for name in names:
        g = api(live_server, "/api/retrievability", system=name)["gini"]
        assert page.locator(f"#gini-table tr[data-system='{name}'] td.gini").inner_text() == num(g)
    most = api(live_server, "/api/retrievability/documents", limit=20)
    assert page.locator("#most-retrievable tbody tr td:nth-child(2)").all_inner_texts()[0].strip() == \
        most["documents"][0]["title"]
    page.select_option("select[name=field]", "MPAA Rating")
    page.select_option("select[name=system]", "bm25-classic")
    page.fill("input[name=c]", "10")
    page.click("form.controls button")
    page.wait_for_selector("#groups")
    groups = api(live_server, "/api/retrievability/groups", field="MPAA Rating", system="bm25-classic", c=10)
    assert page.locator("#groups tbody tr td:first-child").all_inner_texts() == [g["group"] for g in groups["groups"]]
    assert page.problems == []


def test_paste_a_document_with_a_script_in_it(page, live_server, service):
    docid = api(live_server, "/api/retrievability/documents", limit=1)["documents"][0]["docid"]
    text = service.docs.texts[service.doc_row(docid)]
    payload = '<script>alert("pwned")</script><img src=x onerror="alert(2)"> '
    page.goto(live_server + "/eqi")
    page.fill("#eqi-text", payload + text)
    page.click("#eqi-form button")
    page.wait_for_selector("#eqi-results")
    truth = httpx.post(live_server + "/api/eqi", json={"text": payload + text, "k": 20}, timeout=120).json()
    exact = page.locator("#panel-exact")
    assert int(exact.locator(".n-exposing").inner_text()) == truth["exact"]["n_exposing"] > 0
    assert [t.strip() for t in exact.locator("td.eqi-query").all_inner_texts()] == \
        [q["query"] for q in truth["exact"]["queries"]]
    assert "no learned EQI model" in page.locator("#eqi-note").inner_text()
    # the script is shown as text, never run
    assert page.locator("#eqi-text").input_value().startswith('<script>alert("pwned")</script>')
    assert page.locator("main script").count() == 0 and page.locator("main img").count() == 0
    assert page.problems == []
