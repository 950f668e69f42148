"""Benchmark (issue 41): replaying the query log against a live service (kind ``http``).

A fast local service (a process of its own: a raw asyncio HTTP/1.1 server answering
``GET /search?q=...&k=...`` with one of 1,024 pre-encoded JSON answers, each 100 real Debian
package ids with scores, picked by a hash of the request) is replayed, side by side in one run:

1. throughput at the same concurrency (``--concurrency``, default 16): limelight's client
   (``HttpRetriever.retrieve``: the replay client with its journal, the answers read into a
   ``Run`` on the catalog's ids) against a minimal asyncio + ``httpx.AsyncClient`` client
   (N workers, ``GET``, ``response.json()``, the ids collected), alternating, ``--rounds``
   times each on ``--queries`` log queries; target: limelight ≥ 0.9× the minimal client's
   queries/s (best round of each: the 2-core machine is shared, and the best round is the
   least disturbed; the CPU time per query, less sensitive to the load, is printed too);
2. the rate limit: ``rate = --rate`` queries/s for ``--seconds`` (60) seconds; the service
   counts the requests it receives and the time from the first to the last; target: the
   measured rate within 5 % of the limit;
3. the whole shared log (114,926 distinct queries) replayed into an exposure store at depth
   100 (``compute_exposure``, the journal in a temporary folder), in a child process with the
   Debian catalog loaded, as an audit has it; figure: its peak RSS (``VmHWM``), target < 1 GB.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/replay.py [--queries 4000] [--rounds 6]
        [--concurrency 16] [--rate 300] [--seconds 60] [--skip-full-log] [--variants]

``--variants`` measures, in the same rounds, limelight's client without its journal (in memory
only) and without building the ``Run`` (``Replayer.ask`` alone), each against the same round's
minimal client, so that what the journal and the ``Run`` cost shows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _summary import record  # noqa: E402

N_POOL, DEPTH = 1024, 100


# ---- the fast service -----------------------------------------------------------------------------
def serve(port_file: str) -> None:
    """The fast service: pre-encoded answers, a request count and its first/last arrival."""
    import numpy as np

    from limelight.data import load_catalog

    ids = load_catalog("debian").ids.strings
    rng = np.random.default_rng(0)
    pool = []
    for _ in range(N_POOL):
        docs = rng.choice(len(ids), DEPTH, replace=False)
        scores = np.sort(rng.random(DEPTH) * 20)[::-1]
        body = json.dumps({"hits": [{"id": str(ids[d]), "score": round(float(s), 4)}
                                    for d, s in zip(docs, scores, strict=True)]}).encode()
        pool.append(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                    + str(len(body)).encode() + b"\r\n\r\n" + body)
    stats = {"n": 0, "first": None, "last": None}

    async def handle(reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                if target.startswith(b"/stats"):
                    body = json.dumps(stats).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                                 + str(len(body)).encode() + b"\r\n\r\n" + body)
                elif target.startswith(b"/reset"):
                    stats.update(n=0, first=None, last=None)
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                else:
                    now = time.monotonic()
                    stats["n"] += 1
                    stats["first"] = stats["first"] or now
                    stats["last"] = now
                    writer.write(pool[zlib.crc32(target) % N_POOL])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def orphaned() -> None:  # the benchmark is gone (killed): go too
        parent = os.getppid()
        while os.getppid() == parent:
            await asyncio.sleep(1)
        os._exit(0)

    async def main() -> None:
        asyncio.get_running_loop().create_task(orphaned())
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        Path(port_file + ".tmp").write_text(str(server.sockets[0].getsockname()[1]))
        os.replace(port_file + ".tmp", port_file)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---- the clients ----------------------------------------------------------------------------------
def minimal_client(url: str, texts: list[str], k: int, concurrency: int) -> tuple[float, float]:
    """Queries/s and CPU µs/query of a minimal asyncio + httpx client: N workers, GET, JSON,
    the ids kept."""
    import httpx

    async def run() -> int:
        out: list[list[str]] = []
        it = iter(texts)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits, timeout=30) as c:
            async def worker() -> None:
                for t in it:
                    r = await c.get(url, params={"q": t, "k": k})
                    out.append([h["id"] for h in r.json()["hits"]])

            await asyncio.gather(*[worker() for _ in range(concurrency)])
        return len(out)

    t0, c0 = time.perf_counter(), time.process_time()
    n = asyncio.run(run())
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


def http_system(base: str, coll, work: Path | None, **params):
    from limelight.retrieval.spec import System

    return System.of("http", url=f"{base}/search", params={"q": "{query}", "k": "{k}"},
                            hits="/hits", id="/id", score="/score", **params).open(
        None, collection=coll, work_dir=work)


#: ``--variants``: limelight's client measured in other ways beside the figure's (journal on,
#: a Run), to show what each part costs
VARIANTS = {
    "no journal": "retrieve() without a work folder: the journal in memory, no Parquet part written",
    "ask only": "Replayer.ask() with the journal on: the answers' hits, no Run built",
}


def limelight_client(base: str, coll, queries, k: int, concurrency: int,
                     variant: str = "") -> tuple[float, float]:
    """Queries/s and CPU µs/query of limelight's client: ``retrieve`` (journal on, a Run on
    the catalog's ids), or one of the ``VARIANTS``."""
    with tempfile.TemporaryDirectory() as work:
        r = http_system(base, coll, None if variant == "no journal" else Path(work), concurrency=concurrency)
        t0, c0 = time.perf_counter(), time.process_time()
        if variant == "ask only":
            keys = list(zip(queries.ids.strings.tolist(), queries.texts.tolist(), strict=True))
            n = len(r._replayer(k).ask(keys, k))
        else:
            n = r.retrieve(queries, k).n_queries
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert n == len(queries)
    return len(queries) / secs, cpu / len(queries) * 1e6


def _stats(base: str) -> dict:
    import httpx

    return httpx.get(f"{base}/stats", timeout=10).json()


def full_log(base: str, out: Path, concurrency: int) -> None:
    """(child) the whole log into a store at depth 100; prints a JSON line with the figures."""
    from limelight.data import load_catalog, load_query_log
    from limelight.exposure.compute import compute_exposure

    coll, qs = load_catalog("debian"), load_query_log()
    loaded = _vm("VmRSS")
    r = http_system(base, coll, out / "work", concurrency=concurrency)
    t0 = time.perf_counter()
    st = compute_exposure(r, qs, out / "store", depth=DEPTH)
    secs = time.perf_counter() - t0
    print(json.dumps({"queries": len(st.queries), "pairs": int(len(st.pair_arrays()[0])),
                      "seconds": secs, "rss_loaded_mb": loaded, "peak_rss_mb": _vm("VmHWM"),
                      "summary": r.replay_summary()}), flush=True)


def _vm(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rate", type=float, default=300)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--skip-full-log", action="store_true")
    ap.add_argument("--variants", action="store_true",
                    help="also measure limelight's client without its journal and without the Run")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--child-full-log", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve)
    if a.child_full_log:
        return full_log(a.child_full_log[0], Path(a.child_full_log[1]), a.concurrency)

    from limelight.data import load_catalog, load_query_log

    print(f"load at start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        pf = Path(tmp) / "port"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(pf)])
        try:
            while not pf.exists():
                time.sleep(0.05)
            base = f"http://127.0.0.1:{pf.read_text()}"
            coll, log = load_catalog("debian"), load_query_log()
            qs = log.take(list(range(min(a.queries, len(log)))))
            texts = qs.texts.tolist()
            # 1. throughput, alternating (a short warm-up of each first)
            minimal_client(f"{base}/search", texts[:500], DEPTH, a.concurrency)  # warm-up
            limelight_client(base, coll, qs.take(list(range(500))), DEPTH, a.concurrency)
            ours, theirs = [], []
            others: dict[str, list] = {v: [] for v in (VARIANTS if a.variants else ())}
            for i in range(a.rounds):
                theirs.append(minimal_client(f"{base}/search", texts, DEPTH, a.concurrency))
                ours.append(limelight_client(base, coll, qs, DEPTH, a.concurrency))
                line = (f"round {i + 1}: minimal {theirs[-1][0]:,.0f} q/s ({theirs[-1][1]:,.0f} µs CPU/query), "
                        f"limelight {ours[-1][0]:,.0f} q/s ({ours[-1][1]:,.0f} µs CPU/query)")
                for v, got in others.items():
                    got.append(limelight_client(base, coll, qs, DEPTH, a.concurrency, v))
                    line += f", {v} {got[-1][0]:,.0f} q/s ({got[-1][1]:,.0f} µs)"
                print(line, flush=True)
            for v, got in others.items():
                best_v = max(x[0] for x in got)
                print(f"variant {v!r} ({VARIANTS[v]}): best {best_v:,.0f} q/s = "
                      f"{best_v / max(x[0] for x in theirs):.2f}× the minimal client's best; CPU "
                      f"{min(x[1] for x in got):,.0f} µs/query", flush=True)
            best_o, best_t = max(x[0] for x in ours), max(x[0] for x in theirs)
            cpu_o, cpu_t = min(x[1] for x in ours), min(x[1] for x in theirs)
            record("replay client throughput (limelight)", best_o, unit="queries/s",
                   anchor=f"minimal asyncio+httpx client {best_t:,.0f} q/s", ratio=best_o / best_t,
                   target="≥ 0.9×", met=best_o / best_t >= 0.9,
                   note=f"concurrency {a.concurrency}, {len(qs):,} queries, best of {a.rounds}; CPU "
                        f"{cpu_o:,.0f} vs {cpu_t:,.0f} µs/query")
            # 2. the rate limit over --seconds
            n = int(a.rate * a.seconds) + 1
            rq = log.take(list(range(min(n, len(log)))))
            import httpx

            httpx.get(f"{base}/reset", timeout=10)
            with tempfile.TemporaryDirectory() as work:
                r = http_system(base, coll, Path(work), concurrency=a.concurrency, rate=a.rate)
                r.retrieve(rq, DEPTH)
            s = _stats(base)
            measured = (s["n"] - 1) / (s["last"] - s["first"])
            record("replay rate limit held", measured, unit="queries/s", anchor=f"rate = {a.rate:g}",
                   ratio=measured / a.rate, target="within 5 %", met=abs(measured / a.rate - 1) <= 0.05,
                   note=f"{s['n']:,} requests over {s['last'] - s['first']:.1f} s")
            # 3. the whole log, in a child process (its own peak RSS)
            if not a.skip_full_log:
                out = Path(tmp) / "full"
                p = subprocess.run([sys.executable, __file__, "--child-full-log", base, str(out),
                                    "--concurrency", str(a.concurrency)],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    raise SystemExit(p.stderr[-3000:])
                res = json.loads(p.stdout.strip().splitlines()[-1])
                print(json.dumps(res, indent=1), flush=True)
                record("whole-log replay peak RSS", res["peak_rss_mb"], unit="MB",
                       anchor=f"{res['queries']:,} queries, depth {DEPTH}, {res['pairs']:,} pairs, "
                              f"{res['queries'] / res['seconds']:,.0f} q/s; catalog loaded: "
                              f"{res['rss_loaded_mb']:,.0f} MB",
                       target="< 1024 MB", met=res["peak_rss_mb"] < 1024)
        finally:
            server.terminate()
            server.wait(10)
    print(f"load at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
