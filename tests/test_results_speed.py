"""docs/results.md's speed tables are generated from docs/benchmarks.json (issue 42).

They were written by hand and fell behind docs/benchmarks.md (BM25 2.72× there, 2.83× in the
benchmark table; Ray 1.34× vs 1.55×). ``benchmarks/_results.py`` now writes them between markers;
this checks that the file holds exactly what it generates, and that the generator follows the
JSON and keeps the rest of the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _results  # noqa: E402


def _rows() -> list[dict]:
    return json.loads((REPO / "docs" / "benchmarks.json").read_text(encoding="utf-8"))["rows"]


def test_results_md_speed_rows_are_the_generated_ones():
    """Regenerating the blocks from docs/benchmarks.json changes nothing in docs/results.md (if
    this fails: ``.venv/bin/python benchmarks/_results.py``)."""
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    assert _results.render(text, _rows()) == text


def test_every_row_of_the_sections_benchmarks_is_shown_once():
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    rows = _rows()
    for section, scripts in _results.SECTIONS.items():
        block = text.split(_results.begin_marker(section))[1].split(_results.end_marker(section))[0]
        mine = [r for r in rows if r["benchmark"] in scripts]
        assert mine, section
        for r in mine:
            assert block.count(_results.row(r)) == 1, (section, r["figure"])
    # the figures the issue found stale are the benchmark's own
    bm25 = next(r for r in rows if r["figure"].startswith("BM25 end to end, 1 thread / bm25s"))
    assert f"({bm25['ratio']:.2f}×)" in text and "2.72×" not in text


def test_render_follows_the_json_and_keeps_the_rest(tmp_path):
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    rows = _rows()
    changed = [dict(r) for r in rows]
    i = next(i for i, r in enumerate(changed) if r["benchmark"] == "scale.py")
    changed[i]["ratio"], changed[i]["met"] = 9.87, False
    new = _results.render(text, changed)
    assert "(9.87×)" in new and "(9.87×)" not in text
    # outside the blocks nothing moves: the lines that differ are rows of the scale block
    diff = [(a, b) for a, b in zip(text.splitlines(), new.splitlines(), strict=True) if a != b]
    assert len(diff) == 1 and "benchmarks/run_all.py --only scale" in diff[0][1]
    # update_results writes the file (atomically) and says whether it changed
    res, js = tmp_path / "results.md", tmp_path / "benchmarks.json"
    res.write_text(text, encoding="utf-8")
    js.write_text(json.dumps({"rows": changed, "runs": {}}), encoding="utf-8")
    assert _results.update_results(res, js) and res.read_text(encoding="utf-8") == new
    assert not _results.update_results(res, js)
    # a section whose markers are missing is an error, not a silent skip
    with pytest.raises(ValueError, match="speed:eqi"):
        _results.render(text.replace(_results.end_marker("eqi"), ""), rows)


def test_stale_and_missing_figures_are_shown_as_pending():
    """Issue 52 item 20: docs/benchmarks.md is what ``run_all.py`` renders from the JSON; the
    server's start-up RSS recorded before its start-up changed (2325 MiB) is in no page as a
    current value (shown as pending, with the command that refreshes it), and each figure the
    docs rely on that no bench run recorded yet (tab-separated evaluate rows, the 10M-line run
    file, the 1M-document build RSS, import time on 3.13) is listed with its command."""
    import run_all

    state = json.loads((REPO / "docs" / "benchmarks.json").read_text(encoding="utf-8"))
    page = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert page == run_all._table(state["rows"], state["runs"])
    results = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    rss = next(r for r in state["rows"] if r["figure"].startswith("limelight serve resident memory"))
    if _results.stale_reason(rss) is not None:
        for text in (page, results):
            assert f"{rss['value']:.4g} MiB" not in text and "refresh with" in text
    for bench, what, cmd in _results.pending_rows(state["rows"]):
        assert f"| {bench} | {what} | pending: {cmd} |" in page
    stale = dict(rss, when="2026-11-25 00:03")
    assert _results.stale_reason(stale) and not _results.stale_reason(dict(rss, when="2026-11-29 10:00"))
    assert {b for b, *_ in _results.PENDING} >= {"evaluate_end_to_end.py", "run_kind.py",
                                                  "scale_build.py", "import_time.py"}
