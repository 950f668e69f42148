"""Latency of a document's exposing queries on a large exposure store (issue 44, item 3).

    .venv/bin/python benchmarks/exposure_latency.py --store STORE --index INDEX [--docs 200]

Two measurements over the same documents (a seeded sample of the store's documents that some
query exposes, plus the 20 most exposed ones):

* ``exposure doc``: what the command does after Python has started — open the store
  (``ExposureStore.open``) and list the document's exposing queries (``exposing_queries``), a
  fresh store object per document, as each command is a fresh process: its default page (the
  first 100, ``exposing_queries(limit=100)``, and their count, ``exposing_count``) — the figure
  with the target — and every exposing query (``--limit 0``, no target: a document of a 10M-query
  log can have 400,000, and turning them into Python rows dominates);
* the web app's document endpoint: ``limelight serve`` on loopback over an audit directory made
  of INDEX and STORE (symbolic links), ``GET /api/documents/{docid}`` one request at a time
  after a first request (which loads r(d) and the scores).

Prints p50/p99/max in ms with the load average, and records them for ``make bench`` (target:
p99 ≤ 50 ms). Stores come from ``scale_curve.py`` (its largest points are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
from _summary import percentiles_ms, record

ROOT = Path(__file__).resolve().parent.parent


def sample_docs(store: Path, n: int) -> list[str]:
    from limelight.exposure.store import ExposureStore

    st = ExposureStore.open(store)
    n_exp = st.n_exposing()
    some = np.flatnonzero(n_exp > 0)
    rng = np.random.default_rng(0)
    pick = rng.choice(some, size=min(n, len(some)), replace=False)
    top = np.argsort(-n_exp, kind="stable")[:20]
    codes = np.unique(np.concatenate([pick, top]))
    print(f"{len(codes)} documents; exposing queries per document: median "
          f"{int(np.median(n_exp[codes])):,}, max {int(n_exp.max()):,}", flush=True)
    return st.doc_ids.decode(codes).tolist()


def doc_command(store: Path, docids: list[str], limit: int | None = None) -> dict:
    """``exposure doc``'s work per document (a fresh store object each time): with ``limit``
    its page (the first ``limit`` exposing queries and their count), else every exposing query."""
    from limelight.exposure.store import ExposureStore

    def one(d: str) -> None:
        st = ExposureStore.open(store)
        st.exposing_queries(d, limit)
        if limit is not None:
            st.exposing_count(d)

    one(docids[0])  # the page cache, as a rerun has it
    times = []
    for d in docids:
        t = time.perf_counter()
        one(d)
        times.append(time.perf_counter() - t)
    return percentiles_ms(times)


def _audit(tmp: Path, store: Path, index: Path) -> Path:
    """An audit directory around ``index`` and ``store`` (one system, bm25)."""
    st = json.loads((store / "manifest.json").read_text())
    aud = tmp / "audit"
    (aud / "systems" / "bm25").mkdir(parents=True)
    (aud / "index").symlink_to(index.resolve())
    (aud / "systems" / "bm25" / "exposure").symlink_to(store.resolve())
    (aud / "audit.json").write_text(json.dumps({
        "format": "limelight-audit/1", "name": "scale", "complete": True, "quick": False,
        "collection": {"source": str(index), "name": "scale", "n_docs": st["n_docs"]},
        "queries": {"source": "log", "n_queries": st["n_queries"]},
        "depth": st["depth"], "cutoffs": [10, st["depth"]],
        "systems": [{"name": "bm25", "kind": "bm25"}], "stages": []}))
    return aud


def endpoint(store: Path, index: Path, docids: list[str]) -> dict:
    """``GET /api/documents/{docid}`` of ``limelight serve`` on loopback, one at a time."""
    with tempfile.TemporaryDirectory() as tmp:
        aud = _audit(Path(tmp), store, index)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        exe = str(Path(sys.executable).with_name("limelight"))
        proc = subprocess.Popen([exe, "serve", "--audit", str(aud), "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"{base}/api/info", timeout=5).read()
                    break
                except OSError:
                    if proc.poll() is not None:
                        raise SystemExit(f"limelight serve exited: {proc.stderr.read()[-2000:]}") from None
                    time.sleep(0.5)
            url = lambda d: f"{base}/api/documents/{urllib.parse.quote(d, safe='')}"  # noqa: E731
            t = time.perf_counter()
            urllib.request.urlopen(url(docids[0]), timeout=600).read()
            first = time.perf_counter() - t
            times = []
            for d in docids:
                t = time.perf_counter()
                with urllib.request.urlopen(url(d), timeout=60) as r:
                    r.read()
                times.append(time.perf_counter() - t)
        finally:
            proc.terminate()
            proc.wait(30)
    return {**percentiles_ms(times), "first_request_s": first}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if shutil.which("limelight") is None and not Path(sys.executable).with_name("limelight").exists():
        raise SystemExit("the limelight command is not installed beside this Python")
    man = json.loads((a.store / "manifest.json").read_text())
    what = f"{man['n_queries']:,} queries, {man.get('n_pairs', 0):,} pairs"
    docids = sample_docs(a.store, a.docs)
    res = {"store": str(a.store), "n_queries": man["n_queries"], "n_pairs": man.get("n_pairs"),
           "load": [round(x, 2) for x in os.getloadavg()]}
    res["exposure_doc"] = doc_command(a.store, docids, 100)
    print(f"exposure doc (default page, 100 rows): {res['exposure_doc']}", flush=True)
    res["exposure_doc_all"] = doc_command(a.store, docids)
    print(f"exposure doc --limit 0 (every row): {res['exposure_doc_all']}", flush=True)
    res["endpoint"] = endpoint(a.store, a.index, docids)
    print(f"GET /api/documents: {res['endpoint']}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))
    for key, fig, target in (
            ("exposure_doc", "`exposure doc` (open the store, its default page of 100 and the count)", True),
            ("exposure_doc_all", "`exposure doc --limit 0` (every exposing query as rows)", False),
            ("endpoint", "web app GET /api/documents/{docid}", True)):
        r = res[key]
        record(f"{fig}, p99 on the largest store", r["p99_ms"], unit="ms", anchor="",
               target="≤ 50 ms" if target else "", met=(r["p99_ms"] <= 50) if target else None, note=f"{what}; {r['n']} documents; p50 {r['p50_ms']:.1f} ms, "
                                           f"max {r['max_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
