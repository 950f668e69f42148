"""The suite's CPU-time budget check (tests/_cpu_budget.py, issue 53 item 3), run on a small inner
suite in its own pytest process: it passes within the budget, fails when a test adds more CPU time
than the budget leaves, and fails on an expensive test whose docstring does not say why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from _cpu_budget import CpuBudget

def pytest_configure(config):
    config.pluginmanager.register(CpuBudget(config), "limelight-cpu-budget")
"""

BURN = """
import time

def burn(seconds):
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        pass

def test_cheap():
    assert True
"""


def _inner(tmp_path: Path, body: str, budget: float, long_test_s: float = 30.0, always: bool = True,
           args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(BURN + body)
    # no plugin loaded from the environment (xdist, hypothesis, ...): the inner suite needs none,
    # and loading them took ~2.5 of the ~3 CPU s of each inner run
    env = {**os.environ, "LIMELIGHT_CPU_BUDGET": str(budget), "LIMELIGHT_LONG_TEST_S": str(long_test_s),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("LIMELIGHT_TEST_TIMES", None)  # an inner run never writes the suite's table
    env.pop("LIMELIGHT_CPU_BUDGET_ALWAYS", None)
    if always:
        env["LIMELIGHT_CPU_BUDGET_ALWAYS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_within_budget_passes_and_prints_the_top(tmp_path):
    r = _inner(tmp_path, "\ndef test_small():\n    burn(0.2)\n", budget=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "most expensive tests" in r.stdout and "test_inner.py::test_small" in r.stdout
    assert "budget 30 CPU s" in r.stdout


def test_a_test_that_adds_more_than_the_headroom_fails_the_suite(tmp_path):
    """Scaled down: the same suite, budget 0.6 s, plus one test burning 1 s of CPU (in the real
    suite: a test adding 60 s against a headroom below that)."""
    r = _inner(tmp_path, "\ndef test_new():\n    burn(1.0)\n", budget=0.6)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED cpu budget: the suite used" in r.stdout
    assert "2 passed" in r.stdout  # every test passed: the budget alone fails the run


def test_an_expensive_test_must_say_why(tmp_path):
    body = ('\ndef test_silent():\n    burn(0.5)\n\n'
            'def test_explained():\n    """CPU: it must encode the collection."""\n    burn(0.5)\n')
    r = _inner(tmp_path, body, budget=100, long_test_s=0.3)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "test_inner.py::test_silent used" in r.stdout
    assert "test_explained used" not in r.stdout


FIXTURE = """
import pytest

@pytest.fixture(scope="module")
def built():
    {doc}burn(0.5)
    return 1

def test_first(built):
    assert built == 1

def test_second(built):
    assert built == 1
"""


def test_a_costly_fixture_counts_for_the_test_that_built_it(tmp_path):
    """Scaled down (0.3 s for 30 s): a module fixture that adds the CPU time (in the real suite, a
    new audit of 60 s built for a test) fails the run, naming the first test that used it, the
    one that paid for it; the other test, which only reused it, is not named."""
    r = _inner(tmp_path, FIXTURE.format(doc=""), budget=100, long_test_s=0.3)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "test_inner.py::test_first used" in r.stdout and "neither its docstring nor a fixture's" in r.stdout
    assert "test_second used" not in r.stdout
    assert "3 passed" in r.stdout  # every test passed: the unexplained cost alone fails the run


def test_a_costly_fixture_may_say_why_in_its_own_docstring(tmp_path):
    r = _inner(tmp_path, FIXTURE.format(doc='"""CPU: the audit every test of the file reads."""\n    '),
               budget=100, long_test_s=0.3)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAILED cpu budget" not in r.stdout


def test_the_budget_applies_to_the_whole_suite_only(tmp_path):
    """Without the override, the whole suite is checked (and fails over budget); a selection
    (``-k``, ``-x``) only prints the figures."""
    body = "\ndef test_new():\n    burn(1.0)\n"
    whole = _inner(tmp_path, body, budget=0.6, always=False)
    assert whole.returncode == 1 and "FAILED cpu budget: the suite used" in whole.stdout, whole.stdout
    for args in (("-k", "new"), ("-x",)):
        part = _inner(tmp_path, body, budget=0.6, always=False, args=args)
        assert part.returncode == 0 and "FAILED cpu budget" not in part.stdout, (args, part.stdout)
