"""A bounded load test of ``limelight serve`` on loopback: C concurrent clients for S seconds.

    .venv/bin/python benchmarks/serve.py --audit DIR [--clients 50] [--seconds 30] [--json out.json]
    .venv/bin/python benchmarks/serve.py --audit DIR --screenshots docs   # docs/serve-*.png only
    .venv/bin/python benchmarks/serve.py --audit .cache/serve-bench-debian --build debian  # build it first
    .venv/bin/python benchmarks/serve.py --audit demo-out          # the Debian demo audit (make demo)

``--build debian`` writes an audit directory (the tests' builder: two BM25 systems, k1/b 0.9/0.4
and 1.2/0.75, depth 100, group field ``section``) over the whole distinct query log, if absent.

The server is the real command (``limelight serve --audit DIR`` in a subprocess, uvicorn, one
process); the clients are asyncio tasks on one ``httpx.AsyncClient`` in this process, each
issuing requests back to back over a fixed mix of the API's endpoints with parameters drawn
(seeded) from the audit: search texts from its query log, document ids, query ids, pasted
document texts. Printed per endpoint: requests, requests/s, p50 and p99 latency, errors (any
status ≥ 400 or transport error); for the server process, its resident memory after start-up
and its peak (``VmHWM`` of ``/proc/PID/status``: the high-water mark over its whole life, so the
load included). The ``groups`` endpoint is left out for an audit without a group field. The anchor, side by side and as a ratio, is the same call made
in-process through ``AuditService`` (no HTTP, one at a time): p50 over HTTP under load ÷ p50 of
the library call. Client and server share the machine's cores; the load average is printed.

Before the load, the document endpoint alone (issue 20): ``--latency`` requests ``GET
/api/documents/{id}`` (limit 50, a system drawn per request), one at a time from one client
over documents drawn (seeded) among those the first system exposes, plus the most exposed one,
and the same calls through ``AuditService.document`` in-process: p50, p99, max. The server's
resident memory after start-up (load and warm-up) is recorded with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _summary import percentiles_ms, record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENDPOINTS = ["search", "document", "query", "find_queries", "retrievability", "ranked", "groups", "eqi"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> dict[str, float]:
    """Resident memory of process ``pid`` now (``VmRSS``) and at its peak (``VmHWM``), MiB."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out["rss_mib" if key == "VmRSS" else "peak_rss_mib"] = int(val.split()[0]) / 1024
    except OSError:  # no /proc (not Linux): psutil's current RSS, no peak
        import psutil

        out["rss_mib"] = psutil.Process(pid).memory_info().rss / 2**20
    return out


def start_server(audit: str, port: int, log: Path) -> subprocess.Popen:
    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "limelight.cli", "serve", "--audit", audit,
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {log.read_text().strip()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("server did not start within 900 s")


class Workload:
    """Seeded request parameters drawn from the audit."""

    def __init__(self, svc, seed: int = 0):
        self.rng = random.Random(seed)
        self.svc = svc
        st = next(iter(svc.systems.values())).store
        q = st.queries
        exposed = np.flatnonzero(st.n_exposing() > 0)
        self.docids = st.doc_ids.decode(exposed).tolist()
        self.qids = q.ids.strings.tolist()
        self.texts = q.texts.tolist()
        self.systems = list(svc.systems)
        self.field = svc.group_field
        self.endpoints = [k for k in ENDPOINTS if k != "groups" or self.field is not None]
        self.words = [w for t in self.texts[:5000] for w in t.split() if len(w) > 3][:20000]

    def make(self, kind: str) -> tuple[str, str, dict | None, dict | None]:
        """(method, path, params, json body) of one request."""
        r = self.rng
        system = r.choice(self.systems)
        if kind == "search":
            return "GET", "/api/search", {"q": r.choice(self.texts), "limit": 10}, None
        if kind == "document":
            return "GET", f"/api/documents/{r.choice(self.docids)}", {"system": system, "limit": 50}, None
        if kind == "query":
            return "GET", f"/api/queries/{r.choice(self.qids)}", {"system": system}, None
        if kind == "find_queries":
            return "GET", "/api/queries", {"search": r.choice(self.words), "limit": 20}, None
        if kind == "retrievability":
            return "GET", "/api/retrievability", {"system": system, "c": r.choice([10, 100])}, None
        if kind == "ranked":
            return "GET", "/api/retrievability/documents", {"system": system, "order": r.choice(["most", "least"]),
                                                            "offset": r.randrange(0, 1000)}, None
        if kind == "groups":
            return "GET", "/api/retrievability/groups", {"system": system, "field": self.field}, None
        d = self.svc.doc_row(r.choice(self.docids))
        return "POST", "/api/eqi", None, {"text": str(self.svc.docs.texts[d])[:4000], "system": system, "k": 20}

    def call_library(self, kind: str) -> None:
        """The same operation through ``AuditService`` (the anchor)."""
        m, path, params, body = self.make(kind)
        s = self.svc
        if kind == "search":
            s.search(params["q"], "bm25", 10)
        elif kind == "document":
            s.document(path.rsplit("/", 1)[1], params["system"], limit=50)
        elif kind == "query":
            s.query(path.rsplit("/", 1)[1], params["system"])
        elif kind == "find_queries":
            s.find_queries(params["search"], limit=20)
        elif kind == "retrievability":
            s.retrievability_summary(params["system"], params["c"])
        elif kind == "ranked":
            s.ranked_documents(params["system"], 100, params["order"], 20, params["offset"])
        elif kind == "groups":
            s.groups(params["field"], params["system"])
        else:
            s.eqi(body["text"], body["system"], 20)


async def load(base: str, work: Workload, clients: int, seconds: float) -> dict:
    import httpx

    endpoints = work.endpoints
    lat: dict[str, list[float]] = {k: [] for k in endpoints}
    errors: dict[str, list[str]] = {k: [] for k in endpoints}
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as http:
        async def client(i: int) -> None:
            j = i
            while time.perf_counter() < stop:
                kind = endpoints[j % len(endpoints)]
                j += 1
                method, path, params, body = work.make(kind)
                t0 = time.perf_counter()
                try:
                    r = await http.request(method, path, params=params, json=body)
                    if r.status_code >= 400:
                        errors[kind].append(f"{r.status_code} {path} {r.text[:120]}")
                except httpx.HTTPError as e:
                    errors[kind].append(f"{type(e).__name__} {path}")
                lat[kind].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - t0
    return {"lat": lat, "errors": errors, "wall": wall}


def document_latency(base: str, svc, n: int, seed: int = 0) -> dict:
    """The document endpoint alone: ``n`` documents (+ the most exposed one), one request at a
    time over HTTP, and the same calls through ``AuditService.document`` in-process."""
    import httpx

    st = next(iter(svc.systems.values())).store
    n_exp = st.n_exposing()
    rng = random.Random(seed)
    exposed = st.doc_ids.decode(np.flatnonzero(n_exp > 0)).tolist()
    docs = rng.sample(exposed, min(n, len(exposed))) + [str(st.doc_ids[int(np.argmax(n_exp))])]
    systems = [rng.choice(list(svc.systems)) for _ in docs]
    for name, s in svc.systems.items():  # r(d) of every system, as the warmed server has it
        svc.retrievability(name, min(100, s.store.depth))
    http, lib = [], []
    with httpx.Client(base_url=base, timeout=120) as c:
        for docid, system in list(zip(docs, systems, strict=True))[:10]:  # warm
            c.get(f"/api/documents/{quote(docid)}", params={"system": system, "limit": 50})
            svc.document(docid, system, limit=50)
        for docid, system in zip(docs, systems, strict=True):
            t0 = time.perf_counter()
            r = c.get(f"/api/documents/{quote(docid)}", params={"system": system, "limit": 50})
            http.append(time.perf_counter() - t0)
            if r.status_code != 200:
                raise SystemExit(f"GET /api/documents/{docid}: {r.status_code} {r.text[:200]}")
            t0 = time.perf_counter()
            svc.document(docid, system, limit=50)
            lib.append(time.perf_counter() - t0)
    out = {"documents": len(docs), "http": percentiles_ms(http), "library": percentiles_ms(lib),
           "most_exposed_http_ms": http[-1] * 1000, "load_average": [round(x, 2) for x in os.getloadavg()]}
    print(f"document endpoint, {len(docs)} documents one at a time: HTTP p50 {out['http']['p50_ms']:.1f} ms, "
          f"p99 {out['http']['p99_ms']:.1f} ms, max {out['http']['max_ms']:.1f} ms; AuditService.document "
          f"p50 {out['library']['p50_ms']:.1f} ms, p99 {out['library']['p99_ms']:.1f} ms; load "
          f"{out['load_average']}", flush=True)
    return out


def anchor(work: Workload, n: int) -> dict[str, float]:
    out = {}
    for kind in work.endpoints:
        work.call_library(kind)  # warm
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            work.call_library(kind)
            ts.append(time.perf_counter() - t0)
        out[kind] = float(np.median(ts))
    return out


def screenshots(base: str, out: Path, work: Workload) -> list[Path]:
    from playwright.sync_api import sync_playwright

    doc = work.svc.ranked_documents(None, 100, "most", 1, 0)["documents"][0]["docid"]
    qid = work.svc.document(doc, limit=1)["queries"][0]["qid"]
    text = str(work.svc.docs.texts[work.svc.doc_row(doc)])
    shots = []
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=args, headless=True)
        pg = b.new_page(viewport={"width": 1280, "height": 900})
        pg.set_default_timeout(300_000)
        for name, url in [("search", "/?q=" + work.texts[1]), ("document", f"/documents/{doc}"),
                          ("query", f"/queries/{qid}"), ("retrievability", "/retrievability")]:
            pg.goto(base + url)
            shots.append(out / f"serve-{name}.png")
            pg.screenshot(path=str(shots[-1]), full_page=False)
        pg.goto(base + "/eqi")
        pg.fill("#eqi-text", text)
        pg.click("#eqi-form button")
        pg.wait_for_selector("#eqi-results")
        shots.append(out / "serve-eqi.png")
        pg.screenshot(path=str(shots[-1]), full_page=False)
        b.close()
    return shots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audit", required=True)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--anchor-calls", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--screenshots", help="write docs/serve-*.png into this folder and exit")
    ap.add_argument("--build", choices=["debian", "movies"], help="build the audit first (if absent)")
    ap.add_argument("--latency", type=int, default=300,
                    help="documents timed one at a time on the document endpoint (0: skip)")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.build:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from test_serve_support import build_audit

        t0 = time.perf_counter()
        build_audit(Path(a.audit), a.build, n_queries=0,
                    group_field="section" if a.build == "debian" else "Major Genre")
        print(f"audit {a.audit} ready in {time.perf_counter() - t0:.1f} s", flush=True)
    from limelight.service.core import AuditService

    t0 = time.perf_counter()
    port = free_port()
    log = Path(a.json).with_suffix(".server.log") if a.json else ROOT / ".cache" / "bench" / "serve.server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = start_server(a.audit, port, log)
    mem_start = rss_mib(proc.pid)
    print(f"server up in {time.perf_counter() - t0:.1f} s (load and warm-up); resident "
          f"{mem_start.get('rss_mib', float('nan')):.0f} MiB", flush=True)
    base = f"http://127.0.0.1:{port}"
    try:
        svc = AuditService(a.audit)
        work = Workload(svc)
        if a.screenshots:
            for p in screenshots(base, Path(a.screenshots), work):
                print("wrote", p)
            return
        lat = document_latency(base, svc, a.latency) if a.latency else None
        load_before = os.getloadavg()
        res = asyncio.run(load(base, work, a.clients, a.seconds))
        load_after = os.getloadavg()
        mem = rss_mib(proc.pid)  # before it exits: VmHWM is the peak over its whole life
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"anchor: each operation through AuditService in-process, {a.anchor_calls} calls, one at a time", flush=True)
    svc.warm()
    anc = anchor(work, a.anchor_calls)
    load_end = os.getloadavg()
    total = sum(len(v) for v in res["lat"].values())
    n_err = sum(len(v) for v in res["errors"].values())
    print(f"\n{a.clients} concurrent clients for {res['wall']:.1f} s on loopback; audit {a.audit}")
    print(f"load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}; 2 vCPU shared by clients and server")
    hdr = f"{'endpoint':<16}{'requests':>9}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}{'library p50 ms':>16}{'ratio':>8}"
    peak = mem.get("peak_rss_mib", mem.get("rss_mib", float("nan")))
    print(f"server process: resident {mem_start.get('rss_mib', float('nan')):.0f} MiB after start-up, "
          f"{mem.get('rss_mib', float('nan')):.0f} MiB after the load, peak {peak:.0f} MiB"
          + ("" if "peak_rss_mib" in mem else " (no /proc: current RSS, not the peak)"))
    print(hdr)
    rows = {}
    for k in work.endpoints:
        ls = np.asarray(res["lat"][k]) * 1000
        p50, p99 = (float(np.percentile(ls, 50)), float(np.percentile(ls, 99))) if len(ls) else (float("nan"),) * 2
        lib = anc[k] * 1000
        rows[k] = {"requests": len(ls), "rps": len(ls) / res["wall"], "p50_ms": p50, "p99_ms": p99,
                   "errors": len(res["errors"][k]), "library_p50_ms": lib, "ratio": p50 / lib}
        print(f"{k:<16}{len(ls):>9}{len(ls) / res['wall']:>8.1f}{p50:>9.1f}{p99:>9.1f}{len(res['errors'][k]):>7}"
              f"{lib:>16.2f}{p50 / lib:>8.1f}")
    print(f"{'all':<16}{total:>9}{total / res['wall']:>8.1f}{'':>9}{'':>9}{n_err:>7}")
    for k, errs in res["errors"].items():
        for e in errs[:3]:
            print(f"  error {k}: {e}")
    server_log = log.read_text().strip().splitlines()
    print(f"server log ({log}): {len(server_log)} lines", *server_log[-5:], sep="\n  ")
    record(f"limelight serve resident memory after start-up (load and warm-up), audit {Path(a.audit).name}",
           mem_start.get("rss_mib", float("nan")), unit="MiB", anchor="3.0 GB before issue 20 (docs/results.md)",
           note=f"peak {peak:.0f} MiB over the whole run, the {a.clients}-client load included")
    if lat is not None:
        record(f"web app document endpoint (GET /api/documents/{{id}}, limit 50), p99, one client, audit "
               f"{Path(a.audit).name}", lat["http"]["p99_ms"], unit="ms", anchor="50 ms",
               ratio=lat["http"]["p99_ms"] / 50, target="≤ 50 ms", met=lat["http"]["p99_ms"] <= 50,
               note=f"{lat['documents']} documents; AuditService.document p99 {lat['library']['p99_ms']:.1f} ms, "
                    f"HTTP max {lat['http']['max_ms']:.1f} ms")
    if a.json:
        Path(a.json).write_text(json.dumps({"clients": a.clients, "seconds": res["wall"], "total": total,
                                            "errors": n_err, "endpoints": rows, "load_before": load_before,
                                            "load_after": load_after, "load_anchor": load_end,
                                            "server_memory_start": mem_start, "server_memory": mem,
                                            "document_latency": lat}, indent=1))
    if n_err:
        raise SystemExit(f"{n_err} errors")


if __name__ == "__main__":
    main()
