"""The growth-curve benchmark (benchmarks/scale_curve.py, issue 44 item 7) at its --quick
size: every point measured and cached, the exponents fitted, the summary rows written; a rerun
measures nothing again. The figures themselves are not checked (they are timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import scale_curve  # noqa: E402


def test_fit_is_the_log_log_slope():
    x = [1e3, 1e4, 1e5, 1e6]
    assert abs(scale_curve.fit(x, [3 * v ** 0.9 for v in x]) - 0.9) < 1e-9
    assert abs(scale_curve.fit(x, [5.0] * 4)) < 1e-12


def test_quick_curve_writes_every_point_and_the_exponents(tmp_path):
    """CPU: the benchmark's --quick curve runs every point in its own process, as make bench does
    (~30 s: 4 index builds, 6 exposure jobs, 3 index openings, a server for the latency); the
    data generator's model is fitted on the whole Debian catalog and query log once in the suite
    (~15 s more in this test or in tests/test_scale_data.py, whichever comes first) and kept in
    limelight's cache (scale_data.fitted)."""
    summary = tmp_path / "summary.jsonl"
    env = {**os.environ, "LIMELIGHT_BENCH_SUMMARY": str(summary), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "scale_curve.py"), "--quick", "--work", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "quick" / "curve.json").read_text())
    cfg = scale_curve.QUICK
    assert set(res["points"]) == {f"queries-{n}" for n in cfg["queries"]} | {f"docs-{n}" for n in cfg["docs"]}
    for pt in res["points"].values():
        assert pt["seconds"] > 0 and pt["peak_rss"] > 0 and pt["summary"]["pairs"] > 0
    for axis, keys in (("queries", {"seconds", "peak_rss", "distinct_queries"}),
                       ("docs", {"seconds", "peak_rss", "peak_rss_in_index_bytes"})):
        assert set(res["exponents"][axis]) == keys
        assert all(np.isfinite(v) for v in res["exponents"][axis].values())
    # each point's job answered its whole log: distinct queries ≤ lines, the weights sum to them
    q = [res["points"][f"queries-{n}"]["summary"]["queries"] for n in cfg["queries"]]
    assert all(0 < a <= n for a, n in zip(q, cfg["queries"], strict=True)) and q == sorted(q)
    # the two largest stores kept, the others removed
    assert sorted(x.name for x in tmp_path.joinpath("quick").glob("store-*")) == sorted(
        [f"store-idx-{cfg['catalog']}-log-{cfg['queries'][-1]}",
         f"store-idx-gen-{cfg['docs'][-1]}-log-{cfg['doc_axis_queries']}"])
    lat = res["latency"]  # exposure doc and the web app's document endpoint on the largest store
    assert lat["store"] == f"store-idx-{cfg['catalog']}-log-{cfg['queries'][-1]}"
    assert lat["exposure_doc"]["n"] == lat["endpoint"]["n"] > 0
    rows = [json.loads(ln) for ln in summary.read_text().splitlines()]
    assert len(rows) == 9 and all(r["met"] in (True, False) for r in rows)
    assert rows[0]["value"] == res["exponents"]["queries"]["seconds"]
    # a rerun measures nothing again (every point cached) and reports the same exponents
    before = (tmp_path / "quick" / "curve.json").read_text()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0 and "…\n" not in p.stdout
    assert json.loads((tmp_path / "quick" / "curve.json").read_text()) == json.loads(before)
