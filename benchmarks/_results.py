"""The speed tables of docs/results.md, generated from docs/benchmarks.json (``make bench``).

``benchmarks/run_all.py`` keeps every recorded figure in docs/benchmarks.json and writes
docs/benchmarks.md from it; docs/results.md shows the speed figures of each capability beside its
other measurements. So that those cannot fall behind benchmarks.md, results.md holds them only
between markers, one block per section::

    <!-- speed:evaluation begin (generated from docs/benchmarks.json by benchmarks/_results.py) -->
    ...
    <!-- speed:evaluation end -->

and this module writes each block from the rows of the benchmarks that ``SECTIONS`` names (every
row those benchmarks record, in the order of the JSON). ``run_all.py`` calls
:func:`update_results` after every benchmark; by hand (no benchmark runs)::

    .venv/bin/python benchmarks/_results.py [--json docs/benchmarks.json] [--results docs/results.md]

``tests/test_results_speed.py`` checks that the blocks in docs/results.md are what this module
generates from docs/benchmarks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results.md"
BENCH_JSON = ROOT / "docs" / "benchmarks.json"

#: section name (as in the markers) → the benchmark scripts whose rows its table shows
SECTIONS: dict[str, tuple[str, ...]] = {
    "bm25-dense": ("bm25_batch.py", "dense.py"),
    "evaluation": ("evaluation.py", "evaluate_end_to_end.py"),
    "exposure": ("exact_exposure.py", "expected_exposure.py", "topic_retrievability.py"),
    "eqi": ("eqi.py",),
    "rerank": ("rerank.py",),
    "scale-serve": ("scale.py", "serve.py"),
}

#: rows the JSON holds that no longer describe the code: (benchmark, figure prefix) → (the date
#: from which a row is current, why the older one is stale). A row recorded before that date is
#: shown as pending, its value withheld, with the command that refreshes it; the next run of its
#: benchmark makes it current again (nothing to edit here).
STALE: dict[tuple[str, str], tuple[str, str]] = {
    ("serve.py", "limelight serve resident memory after start-up"): (
        "2026-11-28", "recorded before the later changes to the server's start-up, and not "
                      "re-measured by make bench since"),
}

#: figures the docs and notes rely on that the JSON does not hold yet: (benchmark, figure prefix,
#: what, the command that records it). Shown as pending rows of docs/benchmarks.md until a row
#: of that benchmark whose figure starts with the prefix is recorded.
PENDING: list[tuple[str, str, str, str]] = [
    ("evaluate_end_to_end.py", "`limelight evaluate` end to end (npl, tab-separated",
     "`limelight evaluate` end to end, npl, tab-separated gzipped runs (long float scores), vs "
     "ir_measures", "`.venv/bin/python benchmarks/run_all.py --only evaluate_end_to_end` (~5 min)"),
    ("evaluate_end_to_end.py", "`limelight evaluate` end to end (cranfield, tab-separated",
     "`limelight evaluate` end to end, cranfield, tab-separated gzipped runs, vs ir_measures",
     "`.venv/bin/python benchmarks/run_all.py --only evaluate_end_to_end` (~5 min)"),
    ("run_kind.py", "run kind: a 10M-line TREC run",
     "run kind: a 10M-line TREC run → exposure store, speed ratio to evaluate's reader",
     "`.venv/bin/python benchmarks/run_all.py --only run_kind` (~3 min; ~2 min more the first "
     "time, to write the run)"),
    ("scale_build.py", "index build peak RSS, 1,000,000 generated documents",
     "index build peak RSS, 1,000,000 generated documents",
     "`.venv/bin/python benchmarks/run_all.py --only scale_build` (~6 min)"),
    ("topic_retrievability.py", "retrievability --topics 20, Debian × log store",
     "`limelight retrievability --topics 20` against plain `limelight retrievability` on the demo "
     "audit's BM25 store (issue 56: ≤ 2×)",
     "`make demo`, then `.venv/bin/python benchmarks/run_all.py --only topic_retrievability` (~3 min)"),
    ("import_time.py", "import limelight (Python 3.13",
     "`import limelight` and `limelight --help`, core install on Python 3.13",
     "`.venv/bin/python benchmarks/run_all.py --only import_time` (~3 min; the 3.13 core venv is "
     "built the first time)"),
]


def refresh_command(benchmark: str) -> str:
    """The command that re-records a benchmark's rows."""
    return f"`.venv/bin/python benchmarks/run_all.py --only {benchmark.removesuffix('.py')}`"


def stale_reason(r: dict) -> str | None:
    """Why row ``r`` is stale (``STALE``), or None when it is current."""
    for (bench, prefix), (since, why) in STALE.items():
        if r["benchmark"] == bench and r["figure"].startswith(prefix) and r["when"] < since:
            return f"pending: the {r['when'][:10]} figure is stale ({why}); refresh with " \
                   f"{refresh_command(bench)}"
    return None


def pending_rows(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(benchmark, what, command) of each ``PENDING`` figure no row of ``rows`` records yet."""
    return [(bench, what, cmd) for bench, prefix, what, cmd in PENDING
            if not any(r["benchmark"] == bench and r["figure"].startswith(prefix) for r in rows)]


HEADER = ("| measurement | anchor | target | limelight | status | measured (load 1/5/15 min) "
          "| evidence |\n|---|---|---|---|---|---|---|")


def begin_marker(section: str) -> str:
    """The line that opens a generated block."""
    return (f"<!-- speed:{section} begin (generated from docs/benchmarks.json by "
            "benchmarks/_results.py; do not edit) -->")


def end_marker(section: str) -> str:
    """The line that closes a generated block."""
    return f"<!-- speed:{section} end -->"


def _cell(text: str) -> str:
    """A Markdown table cell: one line, literal bars escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def row(r: dict) -> str:
    """One benchmark figure as a row of a speed table."""
    unit = f" {r['unit']}" if r.get("unit") else ""
    value = f"{r['value']:.4g}{unit}"
    if r.get("ratio") is not None:
        value += f" ({r['ratio']:.2f}×)"
    status = "" if r.get("met") is None else ("met" if r["met"] else "**not met**")
    figure = r["figure"] + (f" ({r['note']})" if r.get("note") else "")
    if (stale := stale_reason(r)) is not None:  # the value (and its note) withheld: not today's
        value, status, figure = "pending", stale, r["figure"]
    when = r["when"] + " (" + "/".join(f"{x:.1f}" for x in r["load"]) + ")"
    command = refresh_command(r["benchmark"])
    cells = [figure, r.get("anchor", ""), r.get("target", ""), value, status, when, command]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def block(section: str, rows: list[dict]) -> str:
    """The generated block of a section, markers included: a sentence and the table."""
    scripts = SECTIONS[section]
    mine = [r for r in rows if r["benchmark"] in scripts]
    names = ", ".join(f"`{s}`" for s in scripts)
    lines = [begin_marker(section),
             f"Speed, from the last `make bench` ({names}; every figure in "
             "[benchmarks.md](benchmarks.md)):", "", HEADER]
    lines += [row(r) for r in mine] or ["| (not measured yet) | | | | | | |"]
    lines.append(end_marker(section))
    return "\n".join(lines)


def render(text: str, rows: list[dict]) -> str:
    """``text`` (docs/results.md) with every marked block regenerated from ``rows``; a section
    of ``SECTIONS`` without its markers, or markers of an unknown section, is a ValueError."""
    found = set(re.findall(r"<!-- speed:([\w-]+) begin", text))
    if found != set(SECTIONS):
        raise ValueError(f"speed markers in results.md: {sorted(found)}, expected {sorted(SECTIONS)}")
    for section in SECTIONS:
        pattern = re.compile(re.escape(f"<!-- speed:{section} begin") + r".*?"
                             + re.escape(end_marker(section)), re.S)
        text, n = pattern.subn(lambda _m, s=section: block(s, rows), text)
        if n != 1:
            raise ValueError(f"results.md: {n} blocks for speed:{section}, expected one")
    return text


def update_results(results: Path = RESULTS, bench_json: Path = BENCH_JSON) -> bool:
    """Regenerate the speed blocks of ``results`` from ``bench_json`` (atomically); True when the
    file changed."""
    rows = json.loads(bench_json.read_text(encoding="utf-8"))["rows"]
    old = results.read_text(encoding="utf-8")
    new = render(old, rows)
    if new == old:
        return False
    tmp = results.with_name(f".{results.name}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, results)
    return True


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate docs/results.md's speed blocks from docs/benchmarks.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=BENCH_JSON, help="benchmarks.json to read")
    ap.add_argument("--results", type=Path, default=RESULTS, help="results.md to update")
    args = ap.parse_args(argv)
    changed = update_results(args.results, args.json)
    print(f"{'updated' if changed else 'unchanged'}: {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
