"""The order of ``make test``'s files (tests/_file_order.py): longest first, from the committed
per-file table, which a run rewrites; and pytest-xdist's ``--dist loadfile`` really hands the files
out in that order (the controller's queue is the workers' collection order once
``loadscopereorder`` is off, as ``tests/conftest.py`` sets it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import _file_order
from _file_order import TABLE, cost, load_table, order
from test_cpu_budget import CONFTEST as BUDGET_CONFTEST  # the budget plugin alone

TESTS = Path(__file__).resolve().parent


def test_longest_first_unknown_files_costed_and_groups_kept_together():
    table = {"s_per_test": 0.5, "files": {
        "test_a.py": {"cpu_s": 10.0, "wall_s": 12.0, "tests": 40},
        "test_b.py": {"cpu_s": 90.0, "wall_s": 60.0, "tests": 3},     # CPU over wall: CPU counts
        "test_r1.py": {"cpu_s": 5.0, "wall_s": 30.0, "tests": 2},    # little CPU, long wall
        "test_r2.py": {"cpu_s": 5.0, "wall_s": 25.0, "tests": 2},
        "test_c.py": {"cpu_s": 1.0, "wall_s": 2.0, "tests": 9}}}
    assert cost("test_b.py", 3, table) == 90.0 and cost("test_r1.py", 2, table) == 30.0
    assert cost("test_new.py", 100, table) == 50.0  # not in the table: 100 tests at 0.5 s
    files = {"test_a.py": 40, "test_b.py": 3, "test_c.py": 9, "test_new.py": 100, "test_r1.py": 2,
             "test_r2.py": 2}
    assert order(files, table, groups=()) == ["test_b.py", "test_new.py", "test_r1.py", "test_r2.py",
                                              "test_a.py", "test_c.py"]
    # a group goes where its sum puts it (55 s: before the new file), its files in the group's order
    assert order(files, table, groups=[("test_r2.py", "test_r1.py")]) == [
        "test_b.py", "test_r2.py", "test_r1.py", "test_new.py", "test_a.py", "test_c.py"]
    # neither xdist's default (most tests first) nor the names' order
    assert order(files, table)[0] == "test_b.py" != max(files, key=files.get)
    # a group never first (the first two files go to the two workers at once): second instead
    table["files"]["test_r1.py"]["wall_s"] = 300.0
    assert order(files, table, groups=[("test_r1.py", "test_r2.py")])[:3] == ["test_b.py", "test_r1.py",
                                                                          "test_r2.py"]


def test_the_committed_table_orders_the_suite():
    """The table names existing files only, with positive costs; the suite's costliest files by it
    (the manual, the audit, the interrupts, the engines walk-through) come first and the Ray files
    stay together."""
    table = load_table()
    rows = table["files"]
    assert rows and table["s_per_test"] > 0
    assert [f for f in rows if not (TESTS / f).is_file()] == []
    assert all(r["tests"] > 0 and max(r["cpu_s"], r["wall_s"]) > 0 for r in rows.values())
    files = {f.name: rows.get(f.name, {}).get("tests", 1) for f in TESTS.glob("test_*.py")}
    got = order(files, table)
    assert sorted(got) == sorted(files)
    for group in _file_order.GROUPS:
        at = [got.index(f) for f in group]
        assert at == list(range(at[0], at[0] + len(group))) and at[0] > 0, at
    # unit by unit (a group one unit), the costs fall, but for a group swapped out of first place
    grouped = {f: g for g in _file_order.GROUPS for f in g}
    units = []
    for f in got:
        if f not in grouped or f == grouped[f][0]:
            units.append(sum(cost(x, files[x], table) for x in grouped.get(f, (f,))))
    assert units[2:] == sorted(units[2:], reverse=True) and min(units[:2]) >= units[2]
    top = [f for f in sorted(rows, key=lambda f: -cost(f, 0, table)) if f not in grouped][:4]
    assert got[0] == top[0] and set(got[:4 + 3]) >= set(top), (got[:7], top)


INNER_CONFTEST = """
import importlib.util, os, sys
sys.path.insert(0, {tests!r})
spec = importlib.util.spec_from_file_location("limelight_conftest", {conftest!r})
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
pytest_configure = real.pytest_configure                           # loadscopereorder off
pytest_collection_modifyitems = real.pytest_collection_modifyitems  # the committed table's order
"""
INNER_TEST = """
import os

def test_{i}(request):
    with open(os.environ["ORDER_LOG"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + " " + request.path.name + "\\n")
"""


def test_xdist_loadfile_hands_out_the_files_in_this_order(tmp_path):
    """An inner suite under ``-n 2 --dist loadfile`` with the real ``tests/conftest.py`` hooks and
    the committed table, of files named as the suite's (one test each, a new file with many): the
    two workers start with the table's two costliest files, and each worker takes its files in the
    table's order; xdist's own order (most tests first) would have started with the new file."""
    table = load_table()
    names = sorted(table["files"], key=lambda f: -cost(f, 0, table))
    picked = [names[0], names[1], names[len(names) // 2], names[-1]]  # costliest, middle, cheapest
    counts = {f: 1 for f in picked} | {"test_zz_new_file.py": 12}
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST.format(tests=str(TESTS),
                                                                conftest=str(TESTS / "conftest.py")))
    for f, n in counts.items():
        (tmp_path / f).write_text("".join(INNER_TEST.format(i=i) for i in range(n)))
    log = tmp_path / "order.log"
    expected = order(counts, table)
    assert expected[0] != "test_zz_new_file.py" and expected != sorted(counts)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LIMELIGHT_TEST_TIMES"))}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist.plugin",
                        "-n", "2", "--dist", "loadfile", "--rootdir", str(tmp_path), str(tmp_path)],
                       cwd=tmp_path, env={**env, "ORDER_LOG": str(log), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        worker, name = line.split()
        if name not in runs.setdefault(worker, []):
            runs[worker].append(name)
    assert sorted(runs) == ["gw0", "gw1"] and sorted(sum(runs.values(), [])) == sorted(counts)
    assert {w[0] for w in runs.values()} == set(expected[:2]), runs
    for files in runs.values():
        assert files == sorted(files, key=expected.index), (runs, expected)


BURN = """
import time

def test_{i}():
    t0 = time.process_time()
    while time.process_time() - t0 < {secs}:
        pass
"""


def test_a_run_writes_the_table(tmp_path):
    """``LIMELIGHT_TEST_TIMES``: the whole suite writes every file's CPU and wall seconds and its
    tests; a run of one file replaces that file's row only; a selection within files (``-k``)
    and a path outside the repository write nothing."""
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(BUDGET_CONFTEST)
    (tmp_path / "tests" / "test_heavy.py").write_text(BURN.format(i=0, secs=0.4))
    (tmp_path / "tests" / "test_light.py").write_text(BURN.format(i=0, secs=0.0) + BURN.format(i=1, secs=0.0))
    table = tmp_path / "tests" / "file_times.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LIMELIGHT_CPU_BUDGET"))}

    def run(*args: str, target: str = "tests/file_times.json") -> None:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=tmp_path,
                           env={**env, "LIMELIGHT_TEST_TIMES": target, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    run()
    blob = json.loads(table.read_text())
    rows = blob["files"]
    assert list(rows) == ["test_heavy.py", "test_light.py"]  # costliest first
    assert (rows["test_heavy.py"]["tests"], rows["test_light.py"]["tests"]) == (1, 2)
    assert rows["test_heavy.py"]["cpu_s"] >= 0.3 and rows["test_heavy.py"]["wall_s"] >= 0.3
    assert rows["test_light.py"]["cpu_s"] < 0.3 and blob["s_per_test"] > 0.1
    assert order({"test_light.py": 2, "test_heavy.py": 1}, blob) == ["test_heavy.py", "test_light.py"]
    (tmp_path / "tests" / "test_light.py").write_text(BURN.format(i=0, secs=0.9))
    run("tests/test_light.py")
    again = json.loads(table.read_text())
    assert again["files"]["test_heavy.py"] == rows["test_heavy.py"]
    assert again["files"]["test_light.py"]["tests"] == 1 and again["files"]["test_light.py"]["cpu_s"] >= 0.8
    assert list(again["files"]) == ["test_light.py", "test_heavy.py"]
    before = table.read_text()
    run("-k", "test_0")
    run(target=str(TABLE.parent / "never-written.json"))  # not inside this run's repository
    assert table.read_text() == before and not (TABLE.parent / "never-written.json").exists()


def test_a_file_that_ran_costs_at_least_a_tenth(tmp_path):
    """The table is written in tenths of a second rounded up, so a file of quick tests that ran
    is not written as free (the committed table's check above refused a table a full run wrote
    with 0.0 for nine such files)."""
    (tmp_path / "test_a.py").write_text("")
    (tmp_path / "test_b.py").write_text("")
    blob = _file_order.write_table(tmp_path / "t.json", {"test_a.py": 0.01, "test_b.py": 2.34},
                                   {"test_a.py": 0.03, "test_b.py": 2.31}, {"test_a.py": 3, "test_b.py": 1},
                                   True, "now")
    assert blob["files"] == {"test_b.py": {"cpu_s": 2.4, "wall_s": 2.4, "tests": 1},
                             "test_a.py": {"cpu_s": 0.1, "wall_s": 0.1, "tests": 3}}
    assert load_table(tmp_path / "t.json")["files"] == blob["files"]
