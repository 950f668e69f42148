"""The suite's CPU-time budget (issue 53): a pytest plugin, loaded by ``tests/conftest.py``.

Every test's setup, call and teardown are timed in CPU seconds (``os.times``: user + system of
the pytest process and of the child processes it has waited for), so that a busy machine slows
the suite without flipping the check. At the end of a run the 20 most expensive tests are printed,
then the 12 most expensive test files, with the total. When the whole suite ran (no paths, ``-k``
or ``-m`` given) and its CPU time passes the budget, the run fails. When ``LIMELIGHT_TEST_TIMES``
names a file inside the repository (``tests/file_times.json``), every file's CPU and wall seconds
are written there: the table ``tests/_file_order.py`` orders the workers' files by.

The budget is ``[tool.limelight.test-budget] cpu_seconds`` in ``pyproject.toml``; the environment
variable ``LIMELIGHT_CPU_BUDGET`` overrides it (seconds) and ``LIMELIGHT_CPU_BUDGET_ALWAYS=1``
applies it to any selection (the check's own test uses both). Raising the budget is a reviewed
change of that line, with the reason in the commit message (docs/testing.md).

A test whose CPU time (setup, call and teardown together: the fixtures first built for it count)
passes ``LONG_TEST_S`` must say why, in a sentence that starts with ``CPU:``, in its own docstring
or in the docstring of a fixture it uses (a module fixture that builds an audit says why once,
whichever of its tests comes first); the run fails otherwise, naming it. A new test or fixture that
adds 60 s of CPU time therefore fails the run unless it says why. Works under pytest-xdist: the
workers measure, the controller adds up.
"""

from __future__ import annotations

import os
import time
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

LONG_TEST_S = float(os.environ.get("LIMELIGHT_LONG_TEST_S", "30"))
TOP = 20
TOP_FILES = 12
_KEY = "cpu_s"


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def configured_budget(root: Path) -> float | None:
    """The suite's budget in CPU seconds: ``LIMELIGHT_CPU_BUDGET``, else ``pyproject.toml``'s
    ``[tool.limelight.test-budget] cpu_seconds``, else ``None``."""
    env = os.environ.get("LIMELIGHT_CPU_BUDGET")
    if env:
        return float(env)
    try:
        blob = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    value = blob.get("tool", {}).get("limelight", {}).get("test-budget", {}).get("cpu_seconds")
    return float(value) if value is not None else None


def _explains_cpu(item: pytest.Item) -> bool:
    """True when the test's docstring, or the docstring of a fixture it uses, has a ``CPU:``
    sentence."""
    docs = [getattr(getattr(item, "function", None), "__doc__", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        docs += [getattr(d.func, "__doc__", None) for d in defs]
    return any("CPU:" in (doc or "") for doc in docs)


class CpuBudget:
    """The plugin object: per-test CPU seconds, the top list and the budget check."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.per_test: dict[str, float] = defaultdict(float)
        self.per_test_wall: dict[str, float] = defaultdict(float)
        self.unexplained: set[str] = set()
        self.budget = configured_budget(Path(str(config.rootpath)))
        self.failed_budget = False

    # -- measuring (in each process that runs tests) --------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        phases = item.stash.get(_PHASE_CPU, {})
        spent = phases.get(call.when)
        if spent is not None:
            report.user_properties.append((_KEY, spent))
            # judged once, on the last phase: the test's setup, call and teardown together
            if call.when == "teardown" and sum(phases.values()) > LONG_TEST_S and not _explains_cpu(item):
                report.user_properties.append(("cpu_unexplained", True))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        yield from _timed(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from _timed(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield from _timed(item, "teardown")

    # -- adding up (in the controller) ----------------------------------------------------------
    def pytest_runtest_logreport(self, report):
        self.per_test_wall[report.nodeid] += report.duration
        for key, value in report.user_properties:
            if key == _KEY:
                self.per_test[report.nodeid] += value
            elif key == "cpu_unexplained":
                self.unexplained.add(report.nodeid)

    def _whole_suite(self) -> bool:
        """True when the run is the whole suite: no paths but the configured ones, no selection."""
        if os.environ.get("LIMELIGHT_CPU_BUDGET_ALWAYS") == "1":
            return True
        root = Path(str(self.config.rootpath))
        suite = {(root / p).resolve() for p in self.config.getini("testpaths")} or {root}
        return {Path(a).resolve() for a in self.config.args} <= suite and not self._selected()

    def _selected(self) -> bool:
        """True when tests were selected within the files (``-k``, ``-m``, ``--deselect``, ...)."""
        opt = self.config.option
        return any(getattr(opt, name, None) for name in ("keyword", "markexpr", "deselect", "lf", "maxfail"))

    def total(self) -> float:
        return sum(self.per_test.values())

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if hasattr(self.config, "workerinput") or not self.per_test:
            return
        if self._whole_suite():
            over = self.budget is not None and self.total() > self.budget
            if (over or self.unexplained) and session.exitstatus == 0:
                self.failed_budget = True
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self._write_times()

    def _write_times(self) -> None:
        """``LIMELIGHT_TEST_TIMES``: the files' CPU and wall seconds and numbers of tests into that
        file (relative to the repository; ignored when it is outside it, as for an inner suite in
        a temporary folder) and for a selection within files (``-k``, ``-m``). The whole suite
        replaces the table; a run of whole files replaces their rows (``write_table`` of
        ``tests/_file_order.py``)."""
        target = os.environ.get("LIMELIGHT_TEST_TIMES")
        root = Path(str(self.config.rootpath)).resolve()
        path = (root / target).resolve() if target else None
        if path is None or not path.is_relative_to(root) or not path.parent.is_dir() or self._selected():
            return
        from _file_order import write_table

        cpu: dict[str, float] = defaultdict(float)
        wall: dict[str, float] = defaultdict(float)
        tests: dict[str, int] = defaultdict(int)
        for nodeid, secs in self.per_test.items():
            name = Path(nodeid.split("::", 1)[0]).name
            cpu[name] += secs
            wall[name] += self.per_test_wall.get(nodeid, 0.0)
            tests[name] += 1
        write_table(path, cpu, wall, tests, self._whole_suite(),
                    time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))

    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput") or not self.per_test:
            return
        tr = terminalreporter
        tr.section(f"CPU time: the {TOP} most expensive tests (setup + call + teardown)")
        for nodeid, secs in sorted(self.per_test.items(), key=lambda kv: -kv[1])[:TOP]:
            tr.write_line(f"{secs:8.1f} s  {nodeid}")
        files: dict[str, float] = defaultdict(float)
        for nodeid, secs in self.per_test.items():
            files[nodeid.split("::", 1)[0]] += secs
        if len(files) > 1:
            tr.write_line(f"the {min(TOP_FILES, len(files))} most expensive files:")
            for name, secs in sorted(files.items(), key=lambda kv: -kv[1])[:TOP_FILES]:
                tr.write_line(f"{secs:8.1f} s  {name}")
        budget = f"budget {self.budget:,.0f} CPU s" if self.budget is not None else "no budget set"
        tr.write_line(f"total {self.total():,.1f} CPU s over {len(self.per_test)} tests; "
                      f"{budget} (whole suite only; pyproject.toml "
                      "[tool.limelight.test-budget], see docs/testing.md)")
        for nodeid in sorted(self.unexplained):
            tr.write_line(f"FAILED cpu budget: {nodeid} used {self.per_test[nodeid]:.1f} CPU s "
                          f"(setup + call + teardown, over {LONG_TEST_S:.0f} s) and neither its "
                          "docstring nor a fixture's says why (a sentence starting 'CPU:')", red=True)
        if self.failed_budget and self.budget is not None and self.total() > self.budget:
            tr.write_line(f"FAILED cpu budget: the suite used {self.total():,.1f} CPU s, over its "
                          f"budget of {self.budget:,.0f}: make the new tests cheaper, or raise "
                          "the budget in pyproject.toml with the reason", red=True)


_PHASE_CPU = pytest.StashKey[dict]()


def _timed(item: pytest.Item, phase: str):
    t0 = cpu_seconds()
    try:
        yield
    finally:
        item.stash.setdefault(_PHASE_CPU, {})[phase] = cpu_seconds() - t0
