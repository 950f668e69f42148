"""A bounded load test of ``limelight serve`` on loopback: phases of C concurrent clients for S seconds.

    .venv/bin/python benchmarks/serve.py --audit demo-out      # the Debian demo audit (make demo): the targets
    .venv/bin/python benchmarks/serve.py --audit DIR [--clients 8,30] [--seconds 40] [--hammer 4] [--json out.json]
    .venv/bin/python benchmarks/serve.py --audit DIR --screenshots docs   # docs/serve-*.png only
    .venv/bin/python benchmarks/serve.py --audit .cache/serve-bench-debian --build debian  # build it first
    PYTHONPATH=OTHER/src .venv/bin/python benchmarks/serve.py ...   # another checkout's server (a baseline)

``--build debian`` writes an audit directory (the tests' builder: two BM25 systems, k1/b 0.9/0.4
and 1.2/0.75, depth 100, group field ``section``) over the whole distinct query log, if absent.

The server is the real command (``limelight serve --audit DIR`` in a subprocess, uvicorn, one
process, its defaults); the clients are asyncio tasks on one ``httpx.AsyncClient`` in this
process, each issuing requests back to back over a fixed mix of the API's endpoints with
parameters drawn (seeded) from the audit: search texts from its query log, document ids, query
ids, pasted document texts. One phase per ``--clients`` count. Printed per endpoint: answered
requests, requests/s, p50 and p99 latency of answered requests, errors (any status ≥ 400 but
429, or a transport error) and 429s: a full queue's refusal, after which the client waits what
Retry-After says before its next request. Targets (issue 42): 8 clients p99 ≤ 200 ms and 30
clients p99 ≤ 500 ms on every endpoint but EQI, 0 errors. The ``groups`` endpoint is left out
for an audit without a group field. The anchor, side by side and as a ratio, is the same call
made in-process through ``AuditService`` (no HTTP, one at a time): p50 over HTTP under load ÷
p50 of the library call. Client and server share the machine's cores; the load average is
printed before and after each phase.

Then ``--hammer`` clients (4) ask retrievability views never asked before (a new (system, c)
each request: r(d) from the whole store) while one client asks ``/api/info`` back to back:
target p99 ≤ 50 ms for ``/api/info``.

Memory of the server process (``/proc/PID/status``): resident (``VmRSS``, with its anonymous
and file-backed parts: mapped files are shared with the page cache and can be dropped) after
start-up (target ≤ 1.5 GB), after each phase, and its peak (``VmHWM``, the high-water mark
over its whole life, the loads included).

Before the load, the document endpoint alone (issue 20): ``--latency`` requests ``GET
/api/documents/{id}`` (limit 50, a system drawn per request), one at a time from one client
over documents drawn (seeded) among those the first system exposes, plus the most exposed one,
and the same calls through ``AuditService.document`` in-process: p50, p99, max.
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
    """Resident memory of process ``pid`` now (``VmRSS``; its anonymous and file-backed parts,
    ``RssAnon`` and ``RssFile``: mapped files are shared with the page cache and can be
    dropped) and at its peak (``VmHWM``), MiB."""
    out = {}
    names = {"VmRSS": "rss_mib", "VmHWM": "peak_rss_mib", "RssAnon": "anon_mib", "RssFile": "file_mib"}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, val = line.partition(":")
            if key in names:
                out[names[key]] = int(val.split()[0]) / 1024
    except OSError:  # no /proc (not Linux): psutil's current RSS, no peak
        import psutil

        out["rss_mib"] = psutil.Process(pid).memory_info().rss / 2**20
    return out


def finish(out: dict, json_path: str | None) -> None:
    """Write ``out`` to ``json_path`` (when given); a non-zero exit when a phase had errors."""
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=1, default=float))
    n_err = sum(p["errors"] for p in out["phases"])
    if n_err:
        raise SystemExit(f"{n_err} errors")


def start_server(audit: str, port: int, log: Path, extra: tuple[str, ...] = (),
                 wait_s: float = 900) -> subprocess.Popen:
    """``limelight serve --audit AUDIT --port PORT EXTRA...`` started and answering /api/info
    (its stderr in ``log``); the script stops if it exits or does not answer within ``wait_s``."""
    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "limelight.cli", "serve", "--audit", audit,
                             "--port", str(port), *extra], stdout=subprocess.DEVNULL, stderr=log.open("w"),
                            text=True)
    deadline = time.monotonic() + wait_s
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
    raise SystemExit(f"server did not start within {wait_s:.0f} s")


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


async def timed_request(request, kind: str, path: str, lat: dict[str, list[float]],
                        errors: dict[str, list[str]], later_ok: bool = True):
    """Await ``request`` (an httpx request of ``kind`` to ``path``): its latency into
    ``lat[kind]``, a failure into ``errors[kind]``; the response, None on a transport error. With
    ``later_ok`` a 429 (the server's "later") is neither timed nor an error: the caller waits and
    asks again."""
    import httpx

    t0 = time.perf_counter()
    try:
        r = await request
    except httpx.HTTPError as e:
        errors[kind].append(f"{type(e).__name__} {path}")
        r = None
    else:
        if r.status_code == 429 and later_ok:
            return r
        if r.status_code >= 400:
            errors[kind].append(f"{r.status_code} {path} {r.text[:120]}")
    lat[kind].append(time.perf_counter() - t0)
    return r


async def load(base: str, work: Workload, clients: int, seconds: float) -> dict:
    """``clients`` asyncio clients issuing requests back to back over the endpoint mix for
    ``seconds``. A 429 (a full queue: EQI, or views) is not an error but a refusal the server
    was built to give: it is counted apart and the client waits what Retry-After says, as a
    well-behaved client does; latencies are those of answered requests."""
    import httpx

    endpoints = work.endpoints
    lat: dict[str, list[float]] = {k: [] for k in endpoints}
    errors: dict[str, list[str]] = {k: [] for k in endpoints}
    refused: dict[str, int] = dict.fromkeys(endpoints, 0)
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as http:
        async def client(i: int) -> None:
            j = i
            while time.perf_counter() < stop:
                kind = endpoints[j % len(endpoints)]
                j += 1
                method, path, params, body = work.make(kind)
                r = await timed_request(http.request(method, path, params=params, json=body), kind, path,
                                        lat, errors)
                if r is not None and r.status_code == 429:
                    refused[kind] += 1
                    wait = float(r.headers.get("retry-after", "1"))
                    await asyncio.sleep(max(0.0, min(wait, stop - time.perf_counter())))

        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - t0
    return {"lat": lat, "errors": errors, "refused": refused, "wall": wall}


async def hammer_views(base: str, work: Workload, clients: int, seconds: float, seed: int = 0) -> dict:
    """``clients`` clients asking retrievability views never asked before (each request a new
    (system, c): r(d) computed from the whole store, ~1 s of CPU on the Debian demo audit),
    while one more client asks ``/api/info`` back to back: its latency is what a busy server's
    cheapest request costs."""
    import httpx

    depth = min(s.store.depth for s in work.svc.systems.values())
    keys = [(s, c) for s in work.systems for c in range(1, depth) if c != 10]  # 10, 100: warmed
    random.Random(seed).shuffle(keys)
    kinds = [("retrievability", "/api/retrievability", {}),
             ("ranked", "/api/retrievability/documents", {"order": "least"})]
    if work.field is not None:
        kinds.append(("groups", "/api/retrievability/groups", {"field": work.field}))
    out = {"views": [], "view_errors": [], "refused": 0, "info": [], "info_errors": []}
    stop = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=base, timeout=300) as http:
        async def viewer(i: int) -> None:
            n = 0
            while time.perf_counter() < stop and keys:
                system, c = keys.pop()
                _, path, extra = kinds[(i + n) % len(kinds)]
                n += 1
                t0 = time.perf_counter()
                try:
                    r = await http.get(path, params={"system": system, "c": c, **extra})
                    if r.status_code == 429:
                        out["refused"] += 1
                        await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                        continue
                    if r.status_code >= 400:
                        out["view_errors"].append(f"{r.status_code} {path} {r.text[:120]}")
                except httpx.HTTPError as e:
                    out["view_errors"].append(f"{type(e).__name__} {path}")
                out["views"].append(time.perf_counter() - t0)

        async def info() -> None:
            await asyncio.sleep(0.5)  # the viewers' first computations are under way
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                try:
                    r = await http.get("/api/info")
                    if r.status_code != 200:
                        out["info_errors"].append(str(r.status_code))
                except httpx.HTTPError as e:
                    out["info_errors"].append(type(e).__name__)
                out["info"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(info(), *(viewer(i) for i in range(clients)))
        out["wall"] = time.perf_counter() - t0
    return out


def first_requests(base: str, work: Workload) -> dict:
    """One request per endpoint and system, one at a time, before the load phases (a load test's
    warm-up): what a cold server pays once — chiefly the first EQI search of each system, which
    builds its exact reverse search engine. Printed, and left out of the phases' figures."""
    import httpx

    out = {}
    with httpx.Client(base_url=base, timeout=300) as c:
        for kind in work.endpoints:
            for system in work.systems:
                method, path, params, body = work.make(kind)
                if params is not None and "system" in params:
                    params = {**params, "system": system}
                if body is not None:
                    body = {**body, "system": system}
                t0 = time.perf_counter()
                r = c.request(method, path, params=params, json=body)
                out[f"{kind} {system}"] = {"ms": (time.perf_counter() - t0) * 1000, "status": r.status_code}
    slow = sorted(out.items(), key=lambda kv: -kv[1]["ms"])[:4]
    print("first requests, one per endpoint and system (slowest): " +
          ", ".join(f"{k} {v['ms']:.0f} ms ({v['status']})" for k, v in slow), flush=True)
    return out


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


SCREENSHOT_DOC = "vim"  # the document page shown in the docs (the most retrievable one if absent)


def screenshots(base: str, out: Path, work: Workload) -> list[Path]:
    from playwright.sync_api import sync_playwright

    doc = work.svc.ranked_documents(None, 100, "most", 1, 0)["documents"][0]["docid"]
    if SCREENSHOT_DOC in work.svc.doc_ids.strings:  # the package a content owner asks about
        doc = SCREENSHOT_DOC
    qid = work.svc.document(doc, limit=1)["queries"][0]["qid"]
    text = str(work.svc.docs.texts[work.svc.doc_row(doc)])
    shots = []
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=args, headless=True)
        pg = b.new_page(viewport={"width": 1280, "height": 900})
        pg.set_default_timeout(300_000)
        for name, url, height in [("search", "/?q=" + work.texts[1], 900), ("document", f"/documents/{doc}", 1700),
                                  ("query", f"/queries/{qid}", 900), ("retrievability", "/retrievability", 1100),
                                  ("groups", "/groups", 1100), ("glossary", "/glossary", 900)]:
            pg.set_viewport_size({"width": 1280, "height": height})
            pg.goto(base + url)
            shots.append(out / f"serve-{name}.png")
            pg.screenshot(path=str(shots[-1]), full_page=False)
        pg.set_viewport_size({"width": 1280, "height": 900})
        pg.goto(base + "/eqi")
        pg.fill("#eqi-text", text)
        pg.click("#eqi-form button")
        pg.wait_for_selector("#eqi-results")
        shots.append(out / "serve-eqi.png")
        pg.screenshot(path=str(shots[-1]), full_page=False)
        b.close()
    return shots


TARGET_P99_MS = {8: 200.0, 30: 500.0}  # issue 42: every endpoint but EQI, 0 errors
TARGET_INFO_P99_MS = 50.0  # issue 42: /api/info while 4 clients hammer uncached views
TARGET_START_MIB = 1536.0  # issue 42: resident memory after start-up ≤ 1.5 GB


def load_avg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _phase_table(res: dict, work: Workload, clients: int, anc: dict | None) -> dict:
    """Print one load phase per endpoint; returns its rows."""
    total = sum(len(v) for v in res["lat"].values())
    print(f"{'endpoint':<16}{'answered':>9}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}{'429':>6}"
          + (f"{'library p50 ms':>16}{'ratio':>8}" if anc else ""))
    rows = {}
    for k in work.endpoints:
        ls = np.asarray(res["lat"][k]) * 1000
        p50, p99 = (float(np.percentile(ls, 50)), float(np.percentile(ls, 99))) if len(ls) else (float("nan"),) * 2
        rows[k] = {"requests": len(ls), "rps": len(ls) / res["wall"], "p50_ms": p50, "p99_ms": p99,
                   "errors": len(res["errors"][k]), "refused_429": res["refused"][k]}
        line = (f"{k:<16}{len(ls):>9}{len(ls) / res['wall']:>8.1f}{p50:>9.1f}{p99:>9.1f}{len(res['errors'][k]):>7}"
                f"{res['refused'][k]:>6}")
        if anc:
            rows[k]["library_p50_ms"] = anc[k] * 1000
            line += f"{anc[k] * 1000:>16.2f}{p50 / (anc[k] * 1000):>8.1f}"
        print(line)
    n_err = sum(len(v) for v in res["errors"].values())
    print(f"{'all':<16}{total:>9}{total / res['wall']:>8.1f}{'':>9}{'':>9}{n_err:>7}{sum(res['refused'].values()):>6}")
    for k, errs in res["errors"].items():
        for e in errs[:3]:
            print(f"  error {k}: {e}")
    worst = max((r["p99_ms"] for k, r in rows.items() if k != "eqi"), default=float("nan"))
    target = TARGET_P99_MS.get(clients)
    if target is not None:
        record(f"web app, {clients} clients on the endpoint mix: worst p99 over every endpoint but EQI",
               worst, unit="ms", anchor=f"{target:.0f} ms", ratio=worst / target, target=f"≤ {target:.0f} ms, 0 errors",
               met=bool(worst <= target and n_err == 0),
               note=f"{n_err} errors; {total / res['wall']:.0f} answered req/s; EQI 429s {res['refused'].get('eqi', 0)}")
    return {"clients": clients, "seconds": res["wall"], "answered": total, "errors": n_err,
            "refused_429": sum(res["refused"].values()), "worst_p99_ms_but_eqi": worst, "endpoints": rows}


def _hammer_report(h: dict, clients: int) -> dict:
    info = percentiles_ms(h["info"]) if h["info"] else {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"),
                                                         "max_ms": float("nan")}
    views = percentiles_ms(h["views"]) if h["views"] else {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan")}
    print(f"{clients} clients on uncached retrievability views for {h['wall']:.1f} s: {views['n']} views "
          f"(p50 {views['p50_ms']:.0f} ms, p99 {views['p99_ms']:.0f} ms, {len(h['view_errors'])} errors, "
          f"{h['refused']} refused 429); /api/info meanwhile: {info['n']} requests, p50 {info['p50_ms']:.1f} ms, "
          f"p99 {info['p99_ms']:.1f} ms, max {info['max_ms']:.1f} ms, {len(h['info_errors'])} errors")
    record(f"web app /api/info p99 while {clients} clients ask uncached retrievability views", info["p99_ms"],
           unit="ms", anchor=f"{TARGET_INFO_P99_MS:.0f} ms", ratio=info["p99_ms"] / TARGET_INFO_P99_MS,
           target=f"≤ {TARGET_INFO_P99_MS:.0f} ms", met=bool(info["p99_ms"] <= TARGET_INFO_P99_MS and not h["info_errors"]),
           note=f"{views['n']} views computed, p50 {views['p50_ms']:.0f} ms")
    return {"clients": clients, "seconds": h["wall"], "info": info, "views": views,
            "view_errors": h["view_errors"][:10], "info_errors": h["info_errors"][:10], "refused_429": h["refused"]}


def _memory_line(what: str, mem: dict) -> str:
    return (f"{what}: resident {mem.get('rss_mib', float('nan')):.0f} MiB (anonymous "
            f"{mem.get('anon_mib', float('nan')):.0f}, file-backed {mem.get('file_mib', float('nan')):.0f}), "
            f"peak so far {mem.get('peak_rss_mib', float('nan')):.0f} MiB")


def main() -> None:
    """Long because it is the benchmark's script: options, server, phases, report, summary rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audit", required=True)
    ap.add_argument("--clients", default="8,30", help="comma-separated client counts, one load phase each")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--hammer", type=int, default=4,
                    help="clients asking uncached retrievability views beside an /api/info poller (0: skip)")
    ap.add_argument("--hammer-seconds", type=float, default=30)
    ap.add_argument("--anchor-calls", type=int, default=20, help="in-process calls per endpoint (0: skip)")
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

    client_counts = [int(x) for x in str(a.clients).split(",") if x.strip()]
    t0 = time.perf_counter()
    port = free_port()
    log = Path(a.json).with_suffix(".server.log") if a.json else ROOT / ".cache" / "bench" / "serve.server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"load average (1/5/15 min) {load_avg()} before the server starts", flush=True)
    proc = start_server(a.audit, port, log)
    mem_start = rss_mib(proc.pid)
    print(f"server up in {time.perf_counter() - t0:.1f} s (load and warm-up); load {load_avg()}", flush=True)
    print(_memory_line("after start-up", mem_start), flush=True)
    base = f"http://127.0.0.1:{port}"
    out: dict = {"audit": str(a.audit), "memory": {"start": mem_start}, "phases": []}
    try:
        svc = AuditService(a.audit)
        work = Workload(svc)
        if a.screenshots:
            for p in screenshots(base, Path(a.screenshots), work):
                print("wrote", p)
            return
        lat = document_latency(base, svc, a.latency) if a.latency else None
        out["document_latency"] = lat
        out["first_requests"] = first_requests(base, work)
        mem = rss_mib(proc.pid)
        out["memory"]["after_first_requests"] = mem
        print(_memory_line("after the first request of each endpoint and system", mem), flush=True)
        runs = []
        for n in client_counts:
            before = load_avg()
            res = asyncio.run(load(base, work, n, a.seconds))
            after = load_avg()
            mem = rss_mib(proc.pid)
            out["memory"][f"after_{n}_clients"] = mem
            runs.append((n, res, before, after, mem))
            print(f"{n} clients done: load {before} -> {after}; " + _memory_line("server", mem), flush=True)
        hammer = None
        if a.hammer:
            before = load_avg()
            hammer = asyncio.run(hammer_views(base, work, a.hammer, a.hammer_seconds))
            hammer["load"] = (before, load_avg())
            mem = rss_mib(proc.pid)
            out["memory"]["after_views"] = mem
            print(f"views done: load {before} -> {load_avg()}; " + _memory_line("server", mem), flush=True)
        mem_end = rss_mib(proc.pid)  # before it exits: VmHWM is the peak over its whole life
        out["memory"]["end"] = mem_end
    finally:
        proc.terminate()
        proc.wait(30)
    anc = None
    if a.anchor_calls:
        print(f"anchor: each operation through AuditService in-process, {a.anchor_calls} calls, one at a time",
              flush=True)
        svc.warm()
        anc = anchor(work, a.anchor_calls)
    print(f"\naudit {a.audit}; client and server on the same {os.cpu_count()} vCPUs, loopback")
    print(_memory_line("server after start-up", mem_start))
    print(_memory_line("server at the end", mem_end))
    for n, res, before, after, _mem in runs:
        print(f"\n{n} concurrent clients for {res['wall']:.1f} s; load average (1/5/15 min) before {before}, after {after}")
        out["phases"].append({**_phase_table(res, work, n, anc), "load_before": before, "load_after": after})
    if hammer is not None:
        print(f"\nload average before {hammer['load'][0]}, after {hammer['load'][1]}")
        out["views"] = {**_hammer_report(hammer, a.hammer), "load": hammer["load"]}
    peak = mem_end.get("peak_rss_mib", mem_end.get("rss_mib", float("nan")))
    start_mib = mem_start.get("rss_mib", float("nan"))
    record(f"limelight serve resident memory after start-up (load and warm-up), audit {Path(a.audit).name}",
           start_mib, unit="MiB", anchor="2.4-2.8 GB before issue 42", target="≤ 1.5 GB",
           met=bool(start_mib <= TARGET_START_MIB),
           note=f"anonymous {mem_start.get('anon_mib', float('nan')):.0f} MiB; {mem_end.get('rss_mib', float('nan')):.0f} "
                f"MiB at the end, peak {peak:.0f} MiB over the whole run, the loads included")
    if lat is not None:
        record(f"web app document endpoint (GET /api/documents/{{id}}, limit 50), p99, one client, audit "
               f"{Path(a.audit).name}", lat["http"]["p99_ms"], unit="ms", anchor="50 ms",
               ratio=lat["http"]["p99_ms"] / 50, target="≤ 50 ms", met=lat["http"]["p99_ms"] <= 50,
               note=f"{lat['documents']} documents; AuditService.document p99 {lat['library']['p99_ms']:.1f} ms, "
                    f"HTTP max {lat['http']['max_ms']:.1f} ms")
    finish(out, a.json)


if __name__ == "__main__":
    main()
