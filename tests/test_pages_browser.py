"""Every page of ``limelight serve`` as a content owner reads it, in headless Chromium (issue 43
item 5): over the quick test audits (movies × 3,000 log queries with two BM25 systems; 500
queries with an external ``run`` system beside them; adi with a dense system), each page has no
console error, no chart without an axis label, no figure without a caption, no visible
scientific notation, no raw field name and no Greek symbol outside a glossary link
(``tests/_page_checks.py``: the report's ``check_page`` plus the charts' axis labels); the
highlighted words, the groups table and the glossary links are those the JSON API and the
glossary answer. The checker is shown to find each problem on a page that has it.

Chromium is Debian's (``make browser``); these tests fail, never skip, when it is missing.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
import test_serve_support as support
from _page_checks import audit_pages, chart_problems, page_problems, serve_pages

from limelight.report.browser import watch
from limelight.service.fmt import pct

audit_dir, dense_audit_dir, run_audit_dir = support.audit_dir, support.dense_audit_dir, support.run_audit_dir
service, live_server = support.service, support.live_server


@pytest.mark.parametrize("which", ["audit_dir", "run_audit_dir", "dense_audit_dir"])
def test_every_page_reads_in_words(browser, request, which):
    """No page of the three quick audits has a problem the checker finds (the /api page, which
    documents the JSON fields by their names, is the one page left out).

    CPU: every page of a served audit rendered in headless Chromium."""
    base, svc, stop = serve_pages(request.getfixturevalue(which))
    try:
        found = []
        for url in audit_pages(svc):
            pg = browser.new_page()
            pg.set_default_timeout(120_000)
            watch(pg)
            r = pg.goto(base + url, wait_until="load")
            assert r is not None and r.status == 200, url
            found += page_problems(pg)
            pg.close()
        assert found == []
    finally:
        stop()


def test_matched_words_are_marked_as_the_api_explains_them(page, live_server, service):
    """The document page's explanation: the words marked in the query and in the document are
    the BM25 matched terms of /api/explain, with the shares it gives; a "why?" link explains
    another search."""
    docid = service.ranked_documents("bm25", 100, "most", 1, 0)["documents"][0]["docid"]
    doc = httpx.get(f"{live_server}/api/documents/{quote(docid)}", timeout=60).json()
    page.goto(f"{live_server}/documents/{quote(docid)}")
    first = doc["top_searches"][0]["qid"]
    j = httpx.get(f"{live_server}/api/explain", params={"docid": docid, "qid": first}, timeout=60).json()
    terms = j["parts"][0]["terms"]
    marks = page.locator("#explain-bm25 .query-marked mark")
    assert marks.count() >= 1
    assert set(marks.evaluate_all("els => els.map(e => e.dataset.term)")) == {t["term"] for t in terms}
    assert set(page.locator("#explain-bm25 .doctext mark").evaluate_all("els => els.map(e => e.dataset.term)")) == \
        {t["term"] for t in terms}
    assert page.locator("#matched-terms td.share").all_inner_texts() == [pct(t["share"]) for t in terms]
    # another search, through its "why?" link
    row = page.locator("#exposing-queries tbody tr").nth(1)
    other = doc["queries"][1]
    row.locator("a.why").click()
    page.wait_for_load_state()
    assert page.locator("#why h2").inner_text() == f"Why does “{other['query']}” show it?"
    assert page.locator("#exposing-queries").count() == 1 and check_clean(page)


def check_clean(page) -> bool:
    problems = page_problems(page)
    assert problems == []
    return True


def test_groups_page_shows_the_api_figures(page, live_server, service):
    """The groups table and picture: the shares of /api/fairness, the largest shortfall named in
    the lead sentence."""
    page.goto(f"{live_server}/groups")
    j = httpx.get(f"{live_server}/api/fairness", params={"field": service.group_field}, timeout=60).json()
    rows = page.locator("#fairness-table tbody tr")
    assert rows.count() == len(j["groups"])
    for g in j["groups"]:
        cells = page.locator(f"#fairness-table tr[data-group='{g['group']}'] td")
        assert cells.nth(2).inner_text() == pct(g["size_share"])
        assert cells.nth(3).inner_text().startswith(pct(g["exposure_share"]))
    worst = min(j["groups"], key=lambda g: g["gap"])
    assert f"“{worst['group']}” get {pct(worst['exposure_share'])}" in page.locator("#lead").inner_text()
    assert page.locator("#fig-groups svg line.ref").count() == page.locator("#fig-groups svg rect.bar").count() > 0
    assert check_clean(page)


def test_glossary_links_lead_to_their_entries(page, live_server, service):
    """Each glossary link of the document and retrievability pages leads to an entry of the
    glossary page that says what it means."""
    docid = service.ranked_documents("bm25", 100, "most", 1, 0)["documents"][0]["docid"]
    hrefs = set()
    for url in [f"/documents/{quote(docid)}", "/retrievability", "/groups"]:
        page.goto(live_server + url)
        hrefs |= set(page.locator("a[href*='/glossary#']").evaluate_all("els => els.map(e => e.getAttribute('href'))"))
    assert len(hrefs) >= 10
    for href in sorted(hrefs):
        page.goto(live_server + href)
        entry = page.locator(href[href.index("#"):])
        assert entry.count() == 1 and entry.is_visible(), href
        assert page.locator(f"{href[href.index('#'):]} + dd").inner_text().strip()


def test_the_checker_finds_each_problem(page):
    """A page with an unlabelled chart, scientific notation, a raw field name and a bare symbol
    gives one problem each; labelled, formatted and linked, none."""
    bad = ("<main><p>Gini 8.379e-04</p><p>gini_retrieved_only</p><p>exposure μ</p>"
           "<figure><svg class='chart' aria-label='x'><rect/></svg><figcaption>c</figcaption></figure></main>")
    page.set_content(bad)
    got = page_problems(page)
    assert len(got) == 4
    assert [p for p in got if "no axis label" in p] and [p for p in got if "8.379e-04" in p]
    assert [p for p in got if "gini_retrieved_only" in p] and [p for p in got if "'μ'" in p]
    good = ("<main><p>Gini 0.000838</p><p>inequality</p><p>attention <a href='/glossary#glossary-exposure'>μ</a></p>"
            "<figure><svg class='chart' aria-label='x'><text class='axis-label'>documents</text></svg>"
            "<figcaption>c</figcaption></figure></main>")
    page.set_content(good)
    assert page_problems(page) == [] and chart_problems(page) == []
