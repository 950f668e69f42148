"""Shared fixtures: the real data in ../shared/data (never copied into the repository)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import _file_order
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("LIMELIGHT_DATA", REPO.parent / "shared" / "data"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LIMELIGHT_DATA", str(DATA))
# one model cache for the whole suite, the commands it starts included: the cache is ./.cache of the
# working folder by default, and a command run in a test's own folder (the manual's pages, the
# interrupted commands) would export the MiniLM ONNX graph again (~12 CPU s each)
os.environ.setdefault("LIMELIGHT_CACHE", str(REPO / ".cache"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one worker per core (pytest-xdist): one BLAS/OpenMP thread each, set before
    # torch or numpy load (and inherited by the commands the tests start), so that two workers do
    # not run four spinning threads on two cores; a test may still ask for more threads itself
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


# the core test subset (`pytest -m core`, `make test-core`): the test files that need only the
# core install and the [test] extra, one per line in tests/core_tests.txt
CORE_TESTS = frozenset(line.split("#")[0].strip() for line in
                       (REPO / "tests" / "core_tests.txt").read_text(encoding="utf-8").splitlines()) - {""}


# pytest-xdist's --dist loadfile hands whole files to the workers in the order of this collection
# (its own reordering by number of tests is off: pytest_configure): the longest files first, from the
# committed per-file table tests/file_times.json (tests/_file_order.py; docs/testing.md)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # the controller's scheduler reads it
        config.option.loadscopereorder = False
    config.addinivalue_line("markers", "core: needs only the core install and the [test] extra "
                                       "(tests/core_tests.txt)")
    if os.environ.get("LIMELIGHT_WHEEL_TEST") == "1":
        _check_installed_from_wheel()
    from _cpu_budget import CpuBudget  # the suite's CPU-time budget (issue 53, docs/testing.md)

    config.pluginmanager.register(CpuBudget(config), "limelight-cpu-budget")


def _check_installed_from_wheel() -> None:
    """``make test`` runs the suite against the installed wheel (LIMELIGHT_WHEEL_TEST=1): stop
    before any test if ``limelight`` comes from the repository's ``src/`` (an editable install, a
    ``PYTHONPATH`` or a ``sys.path`` entry) or from outside the running interpreter's environment."""
    import sys

    import limelight

    where = Path(limelight.__file__).resolve()
    if where.is_relative_to(REPO / "src") or not where.is_relative_to(Path(sys.prefix).resolve()):
        raise pytest.UsageError(f"LIMELIGHT_WHEEL_TEST=1 but limelight is imported from {where}, "
                                f"not from the wheel installed in {sys.prefix}")


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in CORE_TESTS:
            item.add_marker(pytest.mark.core)
    _file_order.reorder(items)
    if not DATA.is_dir():  # never the case in CI; a clear message for anyone else
        skip = pytest.mark.skip(reason=f"shared data folder {DATA} is absent")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Under ``make test`` (one worker a core), a test that set torch's thread count (a study's
    ``threads``, ``rerank train --threads``, an audit's re-ranking stage, all in-process; in the test
    or in a fixture) leaves the worker at the one thread it started with: a count of 2 left behind
    made every later torch test of that worker spin two threads on a core the other worker shares
    (the CtrlQGen tiny study: 183 CPU s at 2 threads, 87 at 1)."""
    yield
    want = int(os.environ.get("OMP_NUM_THREADS") or 0) if os.environ.get("PYTEST_XDIST_WORKER") else 0
    torch = sys.modules.get("torch")
    if want and torch is not None and torch.get_num_threads() != want:
        torch.set_num_threads(want)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def trec_eval_dir() -> Path:
    return DATA / "runs" / "trec_eval_test"


_LOOPBACK: list = []  # this process's loopback Ray cluster (one per pytest-xdist worker), if started


@pytest.fixture(scope="module")
def cluster():
    """The Ray tests' two-node loopback cluster (``tests/test_ray_*.py``, ``tests/test_scale.py``):
    head + one worker node, each its own raylet, one CPU and 150 MB of object store each. Started
    once for the Ray test files a process runs one after the other (under ``--dist loadfile`` a
    worker runs whole files: ``tests/_file_order.py`` keeps them together) and stopped, process groups
    killed, once the next test does not use it (``pytest_runtest_teardown``): a start takes 10-20 s
    of wall time, and its daemons' CPU is not counted. Each file starts with a live worker node (a
    node killed by an earlier file is replaced) and ends with ``ray.shutdown()`` of its drivers."""
    import ray

    from limelight.scale.loopback import LoopbackCluster

    if not _LOOPBACK:
        c = LoopbackCluster(nodes=2, num_cpus=1, object_store_mb=150)
        try:
            c.start()
        except BaseException:
            c.stop()
            raise
        _LOOPBACK.append(c)
    c = _LOOPBACK[0]
    if not c.workers():
        c.add_node()
    try:
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()


@pytest.hookimpl(trylast=True)  # after the module's fixtures (a driver's ray.shutdown) ended
def pytest_runtest_teardown(item, nextitem):
    """Stop the loopback Ray cluster (``cluster``) after the last test in a row that uses it."""
    if _LOOPBACK and (nextitem is None or "cluster" not in nextitem.fixturenames):
        _LOOPBACK.pop().stop(grace=1.0)  # the head takes ~32 s to end on SIGTERM: killed after 1 s


# ---- the small real data sets several test files open (one load per test module, as before) ----
@pytest.fixture(scope="module")
def adi():
    """The adi test collection (documents, queries, qrels)."""
    from limelight.data import load_dataset

    return load_dataset("adi")


@pytest.fixture(scope="module")
def scifact():
    """The SciFact test collection (documents, queries, qrels)."""
    from limelight.data import load_dataset

    return load_dataset("scifact")


@pytest.fixture(scope="module")
def movies():
    """The shared movies catalog."""
    from limelight.data import load_catalog

    return load_catalog("movies")


@pytest.fixture(scope="module")
def adi_bm25(adi):
    """limelight's BM25 over adi, with the default parameters."""
    from limelight.retrieval.bm25 import BM25, BM25Index

    return BM25(BM25Index.build(adi.collection))


@pytest.fixture(scope="module")
def adi_dense(adi, tmp_path_factory):
    """The default dense retriever over adi (its embeddings cached in a temporary folder)."""
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

    enc = Encoder()
    return DenseRetriever(DenseIndex.build(adi.collection, enc, cache_dir=tmp_path_factory.mktemp("emb")), enc)


@pytest.fixture(scope="module")
def cranfield_store(tmp_path_factory):
    """``(cranfield, its BM25 exposure store at depth 50 over its judged queries)``."""
    from limelight.data import load_dataset
    from limelight.exposure import compute_exposure
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds = load_dataset("cranfield")
    root = tmp_path_factory.mktemp("cranfield")
    store = compute_exposure(BM25(BM25Index.build(ds.collection)), ds.queries, root / "bm25", depth=50)
    return ds, store


@pytest.fixture(scope="module")
def movies_bm25(tmp_path_factory):
    """``(BM25 over an index of the movies catalog, its fingerprint)`` (``open_fingerprinted``)."""
    from limelight.data import load_catalog
    from limelight.retrieval.index_dir import build_index, open_fingerprinted

    idx = tmp_path_factory.mktemp("idx") / "movies"
    build_index(load_catalog("movies"), idx)
    retriever, fp, _ = open_fingerprinted(idx, "bm25")
    return retriever, fp


# ---- headless Chromium (the browser tests: test_*_browser.py) -----------------------------------
@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright, one per test module; a test that asks for it
    fails, never skips, when Chromium is missing (``make browser``)."""
    from limelight.report.browser import CHROMIUM, CHROMIUM_ARGS

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`make browser`)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A new page (1280 × 900, actions waiting up to 120 s), watched from the start
    (``limelight.report.browser.watch``: its console errors, page errors and dialogs, also as
    ``page.problems``)."""
    from limelight.report.browser import watch

    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(120_000)
    pg.problems = watch(pg)
    yield pg
    ctx.close()
