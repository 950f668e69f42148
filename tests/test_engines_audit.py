"""Issue 41's acceptance: the README's "Audit your own search engine" configuration, run as
written, audits the Debian catalog three ways (limelight BM25, PISA through PyTerrier, and a
`limelight serve` replayed over HTTP); the report and the web app show all three, with what
changes from BM25 to PISA. Real processes on loopback, started and stopped here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from limelight.exposure.store import ExposureStore

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
README_URL = "http://127.0.0.1:8765"  # where the README's configuration finds `limelight serve`


def readme_config() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- engines.toml begin -->\n```toml\n(.*?)```\n<!-- engines.toml end -->", text, re.S)
    assert m, "README lacks the engines.toml block"
    return m.group(1)


def cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "limelight.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


class Served:
    """``limelight serve --audit DIR --port PORT`` in a child process, until stopped."""

    def __init__(self, audit: Path, port: int, log: Path):
        self.log = open(log, "w")
        self.proc = subprocess.Popen([PY, "-m", "limelight.cli", "serve", "--audit", str(audit),
                                      "--port", str(port)], stdout=self.log, stderr=subprocess.STDOUT)
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
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """The served audit (BM25 over Debian), `limelight serve` on the README's port, and the
    README's audit of three systems against it."""
    folder = tmp_path_factory.mktemp("engines")
    served_cfg = folder / "served.toml"
    served_cfg.write_text('[audit]\nname = "served"\n[collection]\nsource = "debian"\n'
                          '[queries]\nsource = "log"\nsample = 20\n'
                          '[[systems]]\nname = "bm25"\nkind = "bm25"\n'
                          '[stages]\neqi = false\nctrlqgen = false\nintervention = false\n')
    r = cli("audit", str(served_cfg), "--out", str(folder / "served"))
    assert r.returncode == 0, r.stderr[-3000:]
    server = Served(folder / "served", 0, folder / "serve.log")  # any free port, not the README's
    try:
        cfg = folder / "engines.toml"
        text = readme_config()
        assert README_URL in text
        cfg.write_text(text.replace(README_URL, server.url))  # the configuration as written otherwise
        r = cli("audit", str(cfg), "--out", str(folder / "audit-engines"))
        assert r.returncode == 0, r.stderr[-3000:]
        yield folder / "audit-engines"
    finally:
        server.stop()


def test_three_engines_one_report(engines):
    res = json.loads((engines / "results.json").read_text())
    assert list(res["systems"]) == ["bm25", "pisa", "served"]
    bm25, pisa, served = (ExposureStore.open(engines / "systems" / s / "exposure")
                          for s in ("bm25", "pisa", "served"))
    assert len(bm25.queries) == 2000 and bm25.doc_ids == served.doc_ids == pisa.doc_ids
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
        assert f"audit-engines/systems/bm25/exposure {engines}/systems/{name}/exposure" in page


def test_the_web_app_shows_all_three(engines, tmp_path):
    server = Served(engines, 0, tmp_path / "app.log")
    try:
        info = server.get("/api/info")
        names = [s["name"] if isinstance(s, dict) else s for s in info["systems"]]
        assert names == ["bm25", "pisa", "served"]
        top = ExposureStore.open(engines / "systems" / "pisa" / "exposure").n_exposing().argmax()
        docid = ExposureStore.open(engines / "systems" / "pisa" / "exposure").doc_ids.strings[top]
        doc = server.get(f"/api/documents/{docid}?system=pisa")
        assert doc["docid"] == docid
    finally:
        server.stop()
