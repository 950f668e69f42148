"""The order in which ``make test``'s workers take the test files: the longest first (LPT).

pytest-xdist's ``--dist loadfile`` hands whole files to the workers in the order of the workers'
collection (``tests/conftest.py`` turns its own reordering by number of tests off:
``loadscopereorder``): a worker takes the next file of the queue once two or fewer of its own
tests are left, and nothing is taken back. A file that starts late and runs long leaves the other
worker idle at the end; ordered longest first, the end of the run is many short files that the
workers share (longest processing time first: the makespan is within 4/3 of the best).

How long a file takes comes from a committed table, ``tests/file_times.json``, written at the end
of a run by ``tests/_cpu_budget.py`` when ``LIMELIGHT_TEST_TIMES`` names it (docs/testing.md):
for each file its CPU seconds (what the budget counts: the test process and the commands it waited
for) and its wall seconds (what a worker is busy: a loopback Ray cluster's daemons, a server's
start, a browser count there and not in the CPU time), and its number of tests. A file's cost is
the larger of the two. A file the table does not hold (a new one) is costed at the table's
seconds per test times its number of tests.

Files that share a worker-wide resource go together, in the place of their summed cost
(``GROUPS``), never first: the Ray files share one loopback cluster per worker
(``tests/conftest.py``: ``cluster``), which stops once the next test does not use it. A worker
takes the next file as soon as two of its tests are left, so the group's first files have few
tests: the worker that takes the first one takes the others before the other worker, busy with
the file before the group, needs one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

TABLE = Path(__file__).resolve().with_name("file_times.json")

#: files kept next to each other, in this order (their shared loopback Ray cluster: the file
#: whose first test needs none of its own first, then the files of few tests, so that the worker
#: that takes the first file takes the others before the other worker asks for a file)
GROUPS: tuple[tuple[str, ...], ...] = (("test_ray_cluster.py", "test_ray_jobs.py", "test_scale.py"),)

#: a file's seconds per test when the table gives none (an empty or missing table)
FALLBACK_S_PER_TEST = 1.0


def load_table(path: Path = TABLE) -> dict:
    """The table (``{"files": {name: {"cpu_s", "wall_s", "tests"}}, "s_per_test": ...}``); an
    empty one when the file is missing."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"files": {}}


def cost(name: str, n_tests: int, table: Mapping) -> float:
    """A file's expected seconds on a worker: the larger of its CPU and wall seconds in the table;
    for a file the table does not hold, its number of tests times the table's seconds per test."""
    row = table.get("files", {}).get(name)
    if row:
        return max(float(row.get("cpu_s", 0.0)), float(row.get("wall_s", 0.0)))
    return n_tests * float(table.get("s_per_test") or FALLBACK_S_PER_TEST)


def order(files: Mapping[str, int], table: Mapping,
          groups: Iterable[tuple[str, ...]] = GROUPS) -> list[str]:
    """The file names of ``files`` (name -> number of tests), the costliest first; the files of a
    group together, in the group's order, where their summed cost puts them, but not first (the
    first two files go to the two workers at once: the group would be split). Ties by name."""
    units: list[tuple[float, str, list[str]]] = []
    grouped: set[str] = set()
    for group in groups:
        members = [f for f in group if f in files]
        if members:
            grouped.update(members)
            units.append((sum(cost(f, files[f], table) for f in members), members[0], members))
    units += [(cost(f, n, table), f, [f]) for f, n in files.items() if f not in grouped]
    units.sort(key=lambda u: (-u[0], u[1]))
    if len(units) > 1 and len(units[0][2]) > 1:  # the first two files go to the two workers at once
        units[0], units[1] = units[1], units[0]
    return [f for _, _, members in units for f in members]


def reorder(items: list, table: Mapping | None = None) -> None:
    """Reorder pytest's ``items`` in place: whole files by ``order`` of ``table`` (the committed
    one by default), each file's tests in their own order."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.path.name, []).append(item)
    names = order({f: len(v) for f, v in by_file.items()}, load_table() if table is None else table)
    items[:] = [item for f in names for item in by_file[f]]


def _tenths(seconds: float) -> float:
    """``seconds`` rounded up to a tenth (0.03 -> 0.1; 0 stays 0)."""
    return math.ceil(round(seconds * 10, 6)) / 10


def write_table(path: Path, cpu: Mapping[str, float], wall: Mapping[str, float],
                tests: Mapping[str, int], whole_suite: bool, when: str) -> dict:
    """Write the per-file table measured by a run into ``path``: the files the run measured
    replace their rows; when the run was the whole suite, it replaces the table (and its seconds
    per test), otherwise the other rows are kept (a file that no longer exists is dropped)."""
    old = load_table(path) if path.exists() and not whole_suite else {"files": {}}
    rows = {f: r for f, r in old.get("files", {}).items() if (path.parent / f).exists()}
    for f in tests:
        # tenths of a second, rounded up: a file that ran costs at least 0.1 s (a table check)
        rows[f] = {"cpu_s": _tenths(cpu.get(f, 0.0)), "wall_s": _tenths(wall.get(f, 0.0)), "tests": tests[f]}
    n = sum(r["tests"] for r in rows.values())
    per_test = (round(sum(max(r["cpu_s"], r["wall_s"]) for r in rows.values()) / n, 3) if whole_suite and n
                else old.get("s_per_test", FALLBACK_S_PER_TEST))
    blob = {"about": "seconds per test file (tests/_file_order.py orders make test's files by it; "
                     "LIMELIGHT_TEST_TIMES=tests/file_times.json make test rewrites it: docs/testing.md)",
            "measured": when if whole_suite else f"{old.get('measured', '')}; some files {when}".lstrip("; "),
            "s_per_test": per_test,
            "files": dict(sorted(rows.items(), key=lambda kv: (-max(kv[1]["cpu_s"], kv[1]["wall_s"]), kv[0])))}
    path.write_text(dumps(blob), encoding="utf-8")
    return blob


def dumps(blob: Mapping) -> str:
    """The table as JSON, one line per file (a regenerated table's diff reads file by file)."""
    head = {k: v for k, v in blob.items() if k != "files"}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    rows = [f"  {json.dumps(f)}: {json.dumps(r)}" for f, r in blob["files"].items()]
    return "{\n" + "\n".join(lines) + '\n "files": {\n' + ",\n".join(rows) + "\n }\n}\n"
