"""``make bench``: every benchmark under benchmarks/, one at a time, then one summary table.

    .venv/bin/python benchmarks/run_all.py [--only NAME,...] [--skip NAME,...] [--out docs/benchmarks.md]

Each benchmark runs in its own process with its default (acceptance) settings, one after the
other, never two at once (the machine has two cores); its output goes to
``.cache/bench/<name>.log``. Every figure a benchmark records with ``_summary.record`` becomes a
row of the table written atomically to ``--out``: figure, value, anchor, ratio, target,
met / not met, the load average when it was measured, and the benchmark's wall time. A benchmark
that fails or records nothing is listed as such, never dropped. The rows of the benchmarks not
run this time (``--only``/``--skip``) are kept from the previous table's JSON sidecar. The speed
tables of docs/results.md are regenerated from that JSON too (``_results.py``), when ``--out`` is
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _results import pending_rows, stale_reason, update_results

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCH = ".cache/bench"
# the order: cheap first; each entry is (script, extra arguments): the acceptance settings of the
# issues and docs pages (a script's defaults where they are those). Raw JSON that a docs page
# cites as its evidence is not overwritten: those scripts write theirs under .cache/bench/.
# Estimated wall time on the idle 2-core machine, from the docs' runs (warm caches; the first
# run adds ~15 min in dense.py, which encodes scifact and npl with three encoders): ~1 hour.
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("import_time.py", []),  # ~1 min (the first time ~1 min more: the core venv); issue 46
    ("import_time.py", ["--base", "3.13"]),  # ~1 min more: the core install on Python 3.13
    ("evaluation.py", []),  # ~3 min
    ("evaluate_end_to_end.py", ["--collections", "npl", "cranfield"]),  # ~4 min
    ("bm25_batch.py", []),  # ~4 min
    ("bm25_effectiveness.py", []),  # ~1.5 min
    ("dense.py", []),  # ~6 min (~20 min with cold embedding caches)
    ("dense_effectiveness.py", []),  # ~1.5 min (scifact npl)
    ("encoder_load.py", []),  # ~2 min; issue 53: a fresh encoder process, light vs full path
    # dense half: the catalog embeddings `make demo` cached
    ("exact_exposure.py", ["--out", f"{BENCH}/exact_exposure.json"]),  # ~15 min
    ("expected_exposure.py", ["--out", f"{BENCH}/expected_exposure.json"]),  # ~2 min
    ("hybrid_exposure.py", []),  # ~2 min; issue 53: the hybrid's dense half from the dense store
    ("fairness.py", ["--out", f"{BENCH}/fairness.json"]),  # ~2 min; issue 45 (`make demo` first)
    # ~2 min; issue 56: retrievability --topics 20 vs plain (the demo store, else it builds one)
    ("topic_retrievability.py", ["--out", f"{BENCH}/topic_retrievability.json"]),
    ("retrievability_debian.py", ["bm25"]),  # ~3 min
    ("run_kind.py", []),  # ~3 min (the first run writes the 10M-line run: ~2 min more); issue 41
    ("pyterrier_kind.py", []),  # ~2 min; issue 41: PISA through kind pyterrier vs BM25
    ("replay.py", []),  # ~6 min; issue 41: kind http's client (queries/s, rate limit, whole-log RSS)
    ("eqi.py", ["--dataset", "debian", "--dense", "--from-audit", "demo-out"]),  # ~5 min; issue 20:
    # 1,000 new Debian documents, BM25 and dense (the demo audit's vectors)
    ("rerank.py", ["--threads", "1", "--out", f"{BENCH}/rerank.json"]),  # ~1.5 min
    ("querygen.py", []),  # ~3.5 min
    ("variations.py", []),  # ~1 min
    ("scale.py", []),  # ~6 min
    ("scale_build.py", []),  # ~6 min; issue 44: 1M generated documents, build and open vs today's
    ("scale_curve.py", []),  # ~20 min (first run; cached points after); issue 44: exposure growth exponents
    # ~8 min (scale_curve.py's 10M-line log and Debian index); issue 55: an audit of the log in
    # exposure compute's memory, both measured side by side
    ("audit_memory.py", ["--out", f"{BENCH}/audit_memory.json"]),
    # issues 20 and 24: the Debian demo audit (`make demo` first)
    ("serve.py", ["--audit", "demo-out", "--clients", "8,30", "--seconds", "40"]),  # ~4 min
    # issue 54: the portal, logged in as owners and an admin, document pages 30 % of the mix
    ("serve_portal.py", ["--audit", "demo-out", "--clients", "8,30", "--seconds", "30"]),  # ~4 min
    # issue 54 acceptance: k = 2, no query issued once reaches an owner by any route, totals equal
    ("portal_privacy.py", ["--audit", "demo-out"]),  # ~2-4 min; its JSON: docs/portal_privacy.json
    ("explain.py", ["--audit", "demo-out"]),  # ~0.5 min; issue 43: explanations, near misses
]


def _table(rows: list[dict], runs: dict[str, dict]) -> str:
    out = ["# Benchmarks", "",
           "Written by `make bench` (`benchmarks/run_all.py`): every benchmark under `benchmarks/`, "
           "one at a time, each figure beside its anchor measured in the same run. `load` is the "
           "1/5/15-minute load average when the figure was recorded (2-core machine).", "",
           "| benchmark | figure | value | anchor | ratio | target | met | load | when |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        met = "" if r["met"] is None else ("met" if r["met"] else "**not met**")
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        val = f"{r['value']:.4g}{(' ' + r['unit']) if r['unit'] else ''}"
        load = "/".join(f"{x:.1f}" for x in r["load"])
        fig = r["figure"] + (f" ({r['note']})" if r.get("note") else "")
        if (stale := stale_reason(r)) is not None:  # not today's figure: withheld (_results.STALE)
            val, ratio, met, fig = stale, "", "", r["figure"]
        out.append(f"| {r['benchmark']} | {fig} | {val} | {r['anchor']} | {ratio} | {r['target']} | "
                   f"{met} | {load} | {r['when']} |")
    if pending := pending_rows(rows):
        out += ["", "Figures quoted in the docs or notes that no `make bench` run has recorded yet "
                "(each becomes a row of the table above once its command has run):", "",
                "| benchmark | figure | status |", "|---|---|---|"]
        out += [f"| {bench} | {what} | pending: {cmd} |" for bench, what, cmd in pending]
    out += ["", "| benchmark | status | wall time |", "|---|---|---|"]
    for name, run in runs.items():
        out.append(f"| {name} | {run['status']} | {run['seconds'] / 60:.1f} min |")
    return "\n".join(out) + "\n"


def _write(out: Path, sidecar: Path, state: dict) -> None:
    """The JSON sidecar and the table, atomically; docs/results.md's speed tables when ``out`` is
    docs/benchmarks.md."""
    for path, text in ((sidecar, json.dumps(state, indent=1)), (out, _table(state["rows"], state["runs"]))):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    if out.resolve() == (ROOT / "docs" / "benchmarks.md").resolve():
        update_results(ROOT / "docs" / "results.md", sidecar)  # its speed tables, from the JSON


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated benchmark names (e.g. eqi,serve)")
    ap.add_argument("--skip", default="", help="comma-separated benchmark names to leave out")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--render", action="store_true",
                    help="run nothing: rewrite --out (and docs/results.md) from its JSON sidecar")
    args = ap.parse_args(argv)
    only = {n.removesuffix(".py") for n in args.only.split(",") if n}
    skip = {n.removesuffix(".py") for n in args.skip.split(",") if n}
    out = Path(args.out)
    sidecar = out.with_suffix(".json")
    state = json.loads(sidecar.read_text()) if sidecar.exists() else {"rows": [], "runs": {}}
    logs = ROOT / ".cache" / "bench"
    logs.mkdir(parents=True, exist_ok=True)
    order = {s: i for i, (s, _) in enumerate(BENCHMARKS)}
    if args.render:
        _write(out, sidecar, state)
        print(f"wrote {out} from {sidecar}")
        return 0
    ran: dict[str, list[dict]] = {}  # a script listed twice (import_time.py) keeps both runs' rows
    for i, (script, extra) in enumerate(BENCHMARKS):
        name = script.removesuffix(".py")
        if (only and name not in only) or name in skip:
            continue
        part = "" if script not in ran else f".{i}"
        summary = logs / f"{name}{part}.summary.jsonl"
        summary.unlink(missing_ok=True)
        env = {**os.environ, "LIMELIGHT_BENCH_SUMMARY": str(summary), "HF_HUB_OFFLINE": "1"}
        print(f"== {script} {' '.join(extra)}", flush=True)
        t0 = time.perf_counter()
        with open(logs / f"{name}{part}.log", "w") as log:
            rc = subprocess.call([sys.executable, str(HERE / script), *extra], cwd=ROOT, env=env,
                                 stdout=log, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - t0
        rows = [json.loads(line) for line in summary.read_text().splitlines()] if summary.exists() else []
        status = "ok" if rc == 0 and rows else (f"failed (exit {rc}; .cache/bench/{name}{part}.log)"
                                               if rc else "ran, recorded no figure")
        if state["runs"].get(script, {}).get("status", "ok") != "ok" and part:
            status = state["runs"][script]["status"]  # the script's earlier run this time failed
        print(f"   {status}, {len(rows)} figures, {seconds / 60:.1f} min", flush=True)
        rows = ran.setdefault(script, []) + rows
        ran[script] = rows
        state["rows"] = sorted([r for r in state["rows"] if r["benchmark"] != script] + rows,
                               key=lambda r: order.get(r["benchmark"], len(order)))
        state["runs"][script] = {"status": status, "seconds": seconds}
        _write(out, sidecar, state)  # after every benchmark: an interrupted `make bench` keeps what ran
    bad = [s for s, r in state["runs"].items() if r["status"] != "ok"]
    print(f"wrote {out}" + (f"; not ok: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
