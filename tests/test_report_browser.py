"""The audit report as a reader sees it, in headless Chromium (Debian's ``chromium`` driven by the
pinned ``playwright`` package; issue 43 item 5): the report of a small Debian audit with a group
field (BM25 twice, so that the report diffs them and shows group fairness) has no console error,
no figure without a caption, no visible scientific notation, no raw field name and no Greek symbol
outside a glossary link (:func:`limelight.report.browser.check_page`), and the checker itself
finds each of those problems on a page that has them. The fairness section's figures are
``limelight.exposure.fairness.group_fairness``'s over the audit's own store. The quick audit's
report (``configs/quick.toml`` under ``--quick``) is read the same way in ``tests/test_audit.py``
(``test_quick_audit_report_reads_cleanly``), over that file's own quick audit (issue 53: one
quick audit of med for both files instead of two).

These tests fail, never skip, when Chromium is missing (``make browser``).
"""

from __future__ import annotations

import pandas as pd
import pytest
from _audits import CORE_STAGES

from limelight.audit.config import parse_config
from limelight.audit.layout import AuditDir
from limelight.report import run_audit
from limelight.report.browser import check_page

DEBIAN = f"""
[audit]
name = "debian-groups"
depth = 100
cutoffs = [10, 100]
group_field = "section"
seed = 0

[collection]
source = "debian"

[queries]
source = "log"
sample = 3000

[[systems]]
name = "bm25"
kind = "bm25"

[[systems]]
name = "bm25_flat"
kind = "bm25"
k1 = 1.2
b = 0.0

{CORE_STAGES}"""


@pytest.fixture(scope="module")
def debian_audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("debian") / "audit"
    run_audit(parse_config(DEBIAN), out)
    return AuditDir(out)


def _open(page, audit: AuditDir) -> None:
    page.goto(audit.report_html.resolve().as_uri(), wait_until="load")


def test_checker_finds_each_problem(page, tmp_path):
    """Each kind of problem on a page is found, and a clean page has none: the checks can fail."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!doctype html><html><head><meta charset=utf-8><title>t</title></head><body>"
        "<p>Gini 8.379e-04 of all documents</p>"
        "<table><tr><th>gini_retrieved_only</th></tr></table>"
        "<p>exposure μ of the document</p>"
        "<img alt=x src='data:image/gif;base64,R0lGODlhAQABAAAAACw='>"
        "<p><code>tables/diff_movers.parquet</code> <a href='#glossary-exposure'>μ</a></p>"
        "<script>console.error('boom')</script></body></html>", encoding="utf-8")
    page.goto(bad.as_uri(), wait_until="load")
    problems = check_page(page)
    assert any("console error: boom" in p for p in problems), problems
    assert any("scientific notation '9e-04'" in p for p in problems), problems
    assert any("raw field name 'gini_retrieved_only'" in p for p in problems), problems
    assert any("Greek symbol 'μ'" in p and "exposure μ of" in p for p in problems), problems
    assert any(p.startswith("figure without a caption") for p in problems), problems
    assert len(problems) == 5, problems  # code and a glossary link are not problems
    good = tmp_path / "good.html"
    good.write_text("<!doctype html><html><head><meta charset=utf-8><title>t</title></head><body>"
                    "<p>Gini 0.000838 (<a href='#glossary-gini'>G</a>); field "
                    "<code>r_share</code></p></body></html>", encoding="utf-8")
    page.goto(good.as_uri(), wait_until="load")
    assert check_page(page) == []


def test_debian_report_shows_group_fairness(page, debian_audit):
    """The fairness section of an audit with a group field: each group's share of attention and
    share of documents equal ``group_fairness`` over the audit's store (size target)."""
    from limelight.exposure.fairness import Groups, group_fairness

    a = debian_audit
    _open(page, a)
    assert check_page(page) == []  # bm25_flat: a system name the page declares, not a field
    assert page.locator("h2", has_text="Is attention fair across sections?").count() == 1
    table = pd.read_parquet(a.table("fairness"))
    st = a.store("bm25")
    want = group_fairness(st, Groups.from_field(st, "section", a.index_dir), None, "size",
                          n_boot=0).groups.set_index("group")
    got = table[table["system"] == "bm25"].set_index("group")
    assert set(got.index) == set(want.index)
    for col in ("size_share", "exposure_share", "gap"):
        pd.testing.assert_series_equal(got[col].sort_index(), want[col].sort_index(), check_names=False,
                                       rtol=1e-12, atol=1e-15)
    assert (got["exposure_share_lo"] <= got["exposure_share"] + 1e-12).all()
    assert (got["exposure_share"] <= got["exposure_share_hi"] + 1e-12).all()
    worst = got["gap"].idxmin()
    text = page.locator("#is-attention-fair-across-sections").locator("xpath=following-sibling::p[1]").inner_text()
    assert f"section {worst} holds {100 * got.loc[worst, 'size_share']:.1f} %" in text, text
    # the documents behind the largest deficit, as the library lists them
    contrib = pd.read_parquet(a.table("fairness_contributors"))
    docs = contrib[(contrib["system"] == "bm25") & (contrib["group"] == worst)]["docid"].tolist()
    assert docs and all(page.locator("code", has_text=d).count() >= 1 for d in docs)
    # the two systems differ, and the report says how in words on its first screen
    assert "bm25_flat" in page.locator(".summary .answers").inner_text()
