"""Issue 41's acceptance: the README's "Audit your own search engine" configuration, run as
written, audits the Debian catalog three ways (limelight BM25, PISA through PyTerrier, and a
`limelight serve` replayed over HTTP); the report and the web app show all three, with what
changes from BM25 to PISA. Real processes on loopback, started and stopped here."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from _audits import seeded, stages_off
from _inproc import run_cli  # tests/_inproc.py
from _shared import stop_process

from limelight.exposure.store import ExposureStore

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
README_URL = "http://127.0.0.1:8765"  # where the README's configuration finds `limelight serve`


def readme_block(name: str, lang: str) -> str:
    """The README's fenced block between ``<!-- name begin -->`` and ``<!-- name end -->``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"<!-- {re.escape(name)} begin -->\n```{lang}\n(.*?)```\n<!-- {re.escape(name)} end -->",
                  text, re.S)
    assert m, f"README lacks the {name} block"
    return m.group(1)


def readme_config() -> str:
    return readme_block("engines.toml", "toml")


def readme_sample() -> int:
    """The seeded sample of log queries the README's configuration audits."""
    return tomllib.loads(readme_config())["queries"]["sample"]


def readme_commands(name: str) -> list[list[str]]:
    """The README's ``bash`` block ``name`` as argument lists: continuation lines joined,
    comments dropped, every line a ``limelight`` command."""
    text = re.sub(r"\\\n\s*", " ", readme_block(name, "bash"))
    out = []
    for line in text.splitlines():
        args = shlex.split(line, comments=True)
        if args:
            assert args[0] == "limelight", line
            out.append(args[1:])
    return out


def cli(*args: str, timeout: int = 900, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "limelight.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


class Served:
    """``limelight serve ARGS`` (``--audit DIR --port PORT``) in a child process, until stopped."""

    def __init__(self, args: list[str], log: Path, cwd: Path | None = None):
        self.log = open(log, "w")
        self.proc = subprocess.Popen([PY, "-m", "limelight.cli", "serve", *args], cwd=cwd,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "serving" not in Path(log).read_text():
            assert self.proc.poll() is None, Path(log).read_text()
            assert time.monotonic() < deadline, "limelight serve did not start"
            time.sleep(0.1)
        line = Path(log).read_text()
        self.url = "http://127.0.0.1:" + line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0].strip()

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        stop_process(self.proc, 20)
        self.log.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A served audit (BM25 over Debian): `limelight serve` where the README's configuration
    finds it (any free port here, the README's URL replaced by it)."""
    folder = tmp_path_factory.mktemp("served")
    cfg = folder / "served.toml"
    cfg.write_text('[audit]\nname = "served"\n[collection]\nsource = "debian"\n'
                   '[queries]\nsource = "log"\nsample = 20\n'
                   '[[systems]]\nname = "bm25"\nkind = "bm25"\n'
                   + stages_off("eqi", "ctrlqgen", "intervention", "topics"))  # what serve needs
    r = run_cli("audit", str(cfg), "--out", str(folder / "served"))  # in-process: the server is the process
    assert r.returncode == 0, r.stderr[-3000:]
    server = Served(["--audit", str(folder / "served"), "--port", "0"], folder / "serve.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def readme(tmp_path_factory, served):
    """The README's working folder: ``../shared`` beside it is the shared data (a link), and
    its ``engines.sh`` commands run there as written (``--port 8001`` made any free port); its
    last, ``limelight serve``, is left running for the file's tests: ``(folder, server)``.

    CPU: the README's engines audit of Debian as a reader runs it (limelight's BM25 index, PISA's
    through PyTerrier, the README's sample of the log replayed over HTTP from a served audit),
    once for the file."""
    base = tmp_path_factory.mktemp("readme")
    (base / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
    folder = base / "work"
    folder.mkdir()
    text = readme_config()
    assert README_URL in text
    (folder / "engines.toml").write_text(text.replace(README_URL, served.url))
    commands = readme_commands("engines.sh")
    assert commands[-1][0] == "serve" and commands[-1][-2:] == ["--port", "8001"], commands
    for args in commands[:-1]:
        # the audit in a process of its own (PISA's engine with it); the diff in-process
        r = cli(*args, cwd=folder) if args[0] == "audit" else run_cli(*args, cwd=folder)
        assert r.returncode == 0, (args, r.stderr[-3000:])
    app = Served(commands[-1][1:-1] + ["0"], base / "app.log", cwd=folder)
    try:
        yield folder, app
    finally:
        app.stop()


@pytest.fixture(scope="module")
def work(readme):
    return readme[0]


@pytest.fixture(scope="module")
def engines(work):
    return work / "audit-engines"


def test_three_engines_one_report(engines):
    res = json.loads((engines / "results.json").read_text())
    assert list(res["systems"]) == ["bm25", "pisa", "served"]
    bm25, pisa, served = (ExposureStore.open(engines / "systems" / s / "exposure")
                          for s in ("bm25", "pisa", "served"))
    assert len(bm25.queries) == readme_sample() and bm25.doc_ids == served.doc_ids == pisa.doc_ids
    # the served audit's BM25 over HTTP is limelight's BM25: the same pairs, rank for rank
    a, b = bm25.pair_arrays(), served.pair_arrays()
    assert len(a[0]) == len(b[0]) > 0
    for x, y in zip(a[:3], b[:3], strict=True):  # q, d, rank
        assert (x == y).all()
    # PISA is another engine: close, not equal (no exactness claim across engines)
    assert len(pisa.pair_arrays()[0]) > 0
    page = (engines / "report.html").read_text()
    assert "What changes from bm25 to each other system" in page
    for name in ("pisa", "served"):
        assert f"r(d) under {name} against bm25" in page
        # the README ran it as `--out audit-engines`: the reproduce line names that folder
        assert f"exposure diff audit-engines/systems/bm25/exposure audit-engines/systems/{name}/exposure" in page


def test_the_web_app_shows_all_three(readme, engines):
    """The README's ``limelight serve --audit audit-engines`` (its last command, still running)."""
    server = readme[1]
    info = server.get("/api/info")
    names = [s["name"] if isinstance(s, dict) else s for s in info["systems"]]
    assert names == ["bm25", "pisa", "served"]
    top = ExposureStore.open(engines / "systems" / "pisa" / "exposure").n_exposing().argmax()
    docid = ExposureStore.open(engines / "systems" / "pisa" / "exposure").doc_ids.strings[top]
    doc = server.get(f"/api/documents/{docid}?system=pisa")
    assert doc["docid"] == docid


def test_results_you_already_have(work, served, engines):
    """The README's ``run.sh`` block as written, in bash (its service URL made the served
    one's), then its ``run.toml`` system in an audit of the same queries: the run written by
    ``limelight retrieve`` over the engines audit's index, the same BM25 replayed over HTTP (its
    first 200 lines), the engines audit's own BM25 (the queries its sample shares with the run)
    and the ``run`` system in an audit expose the same pairs.

    The run system's audit starts from the engines audit's index (``seeded``: its index stage
    is cached, as in a rerun) instead of indexing Debian a third time; what it checks is the
    run system's pairs.

    CPU: ~35 s: run.sh's three commands are processes of their own, and the served audit's
    server stops after this test, so the CPU it spent answering the file's HTTP replays (the
    engines audit's sample and run.sh's 200 lines; the limelight preset asks no snippets) is
    counted here."""
    block = readme_block("run.sh", "bash")
    assert README_URL in block
    env = {**os.environ, "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-e", "-c", block.replace(README_URL, served.url)], cwd=work, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    prod, over_http = (ExposureStore.open(work / s) for s in ("st-prod", "st-served"))
    qids = set(prod.queries.ids.strings.tolist())
    assert 1000 < len(qids) <= 2000  # the distinct queries of the log's first 2,000 lines
    http_qids = set(over_http.queries.ids.strings.tolist())
    assert 100 < len(http_qids) <= 200 and http_qids < qids  # those of its first 200 lines

    def pairs(store: ExposureStore, qids: set[str] | None = None) -> set[tuple[str, str]]:
        q, d = store.pair_arrays()[:2]
        out = set(zip(store.queries.ids.strings[q].tolist(), store.doc_ids.strings[d].tolist(),
                      strict=True))
        return out if qids is None else {p for p in out if p[0] in qids}

    served_pairs = pairs(over_http)
    assert len(served_pairs) > 50 * len(http_qids)  # most queries find documents (depth 100)
    assert served_pairs == pairs(prod, http_qids)
    # the engines audit's own BM25 on the queries its seeded sample shares with the log's head
    bm25 = ExposureStore.open(engines / "systems" / "bm25" / "exposure")
    shared = qids & set(bm25.queries.ids.strings.tolist())
    assert shared
    assert pairs(bm25, shared) == pairs(prod, shared) and len(pairs(bm25, shared)) > len(shared)
    cfg = ('[audit]\nname = "prod"\n[collection]\nsource = "debian"\n'
           '[queries]\nsource = "first2000.tsv"\n'
           + readme_block("run.toml", "toml")
           + stages_off("eqi", "ctrlqgen", "intervention", "topics"))
    (work / "prod.toml").write_text(cfg)
    seeded(engines, work / "audit-prod")
    r = run_cli("audit", "prod.toml", "--out", "audit-prod", cwd=work)
    assert r.returncode == 0, r.stderr[-3000:]
    index = json.loads((work / "audit-prod" / "audit.json").read_text())["stages"][0]
    assert index["name"] == "index" and index["status"] == "cached"
    audited = ExposureStore.open(work / "audit-prod" / "systems" / "production" / "exposure")
    assert set(audited.queries.ids.strings.tolist()) == qids
    assert pairs(audited) == pairs(prod) and pairs(audited, http_qids) == served_pairs
