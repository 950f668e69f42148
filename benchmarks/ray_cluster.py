"""Issue 44's jobs on a real two-node Ray cluster on this machine, with a node killed mid-job.

Each job runs once in one process (the anchor), then on a fresh cluster of two raylets started
with Ray's CLI on loopback (``limelight.scale.loopback.LoopbackCluster``: ``ray start --head``
and ``ray start --address=...``, ``--num-cpus`` CPUs each), with the second node SIGKILLed (its
raylet and workers) once ``--kill-after`` units of work are written and a task of the job runs
on it. Reported per job: both wall times, when the node died, the output compared byte for byte
with the single-process output, and whether every unit written before the kill kept its inode
and mtime (not computed again); the load average before and after (the machine is shared).

- ``exposure``: every distinct query of the shared log over ``--catalog``, BM25 top 100
  (``compute_exposure(engine="ray")``); units: the store's shards.
- ``index``: the streaming BM25 index build of ``--docs`` (a JSONL file, e.g. the 1M generated
  documents of ``scale_data.py``; default the Debian catalog) — ``build_index_from`` against
  ``limelight.scale.build_index_ray_from``; units: the runs of documents; compared: every file
  of the index directory.
- ``http``: the replay of a real search engine (PISA BM25 over the movies catalog behind the
  test suite's ASGI app, ``tests/_search_engine.py``, on a loopback port; system kind ``http``,
  Elasticsearch preset) for ``--http-queries`` log queries, top 20: the kind's retriever with
  the local engine against ``ShardedReplay`` on Ray (a journal per shard); units: shards; also
  counted: queries the engine answered more than once on Ray (by its own count), and those
  among them whose answer had been committed before the kill (must be 0).

    .venv/bin/python benchmarks/ray_cluster.py [--jobs exposure,index,http]
        [--docs /tmp/limelight-scale-curve/full/docs-1000000.jsonl] [--http-queries 10000]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import filecmp
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(ROOT / "tests"))  # the Ray tests' helpers: file stamps, the search engine
from _file_stamps import stamps  # noqa: E402
from _search_engine import running  # noqa: E402
from _summary import record  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def on_cluster(args, task: str, units, job, snapshot=None) -> dict:
    """Run ``job(address)`` on a fresh two-node cluster, killing node 1 once ``--kill-after``
    of ``units()`` exist and a ``task`` runs there; the times, the units before the kill and
    ``snapshot()`` taken then."""
    from limelight.scale.loopback import LoopbackCluster

    info: dict = {}
    stop = threading.Event()
    t = time.perf_counter()
    with LoopbackCluster(nodes=2, num_cpus=args.num_cpus, object_store_mb=200) as c:
        info["up"] = time.perf_counter() - t

        def killer():
            while not stop.is_set():
                if len(units()) >= args.kill_after and c.runs_task(1, task):
                    info["before"] = stamps(units())
                    info["snapshot"] = snapshot() if snapshot else None
                    info["at"] = time.perf_counter() - t0
                    c.kill_node(1)
                    return
                time.sleep(0.01)

        th = threading.Thread(target=killer, daemon=True)
        t0 = time.perf_counter()
        th.start()
        try:
            info["result"] = job(c.address)
        finally:
            stop.set()
            th.join()
        info["seconds"] = time.perf_counter() - t0
        info["alive"] = c.wait_alive(1, timeout=30)
    info["after"] = stamps(units())
    before = info.get("before", {})
    info["kept"] = sum(info["after"].get(k) == v for k, v in before.items())
    return info


def report(job: str, size: str, t_local: float, info: dict, same: int, total: int,
           extra: str = "", ok_extra: bool = True) -> bool:
    before = info.get("before", {})
    print(f"{job}: two-node Ray cluster ({info['up']:.1f} s to start): {info['seconds']:.1f} s end "
          f"to end vs {t_local:.1f} s in one process; node 1 killed at "
          f"{info.get('at', float('nan')):.1f} s with {len(before)} units written; nodes alive "
          f"after: {info['alive']}")
    print(f"{job}: byte-identical to the single-process output: {same}/{total}; units written "
          f"before the kill kept (same inode and mtime, not recomputed): "
          f"{info['kept']}/{len(before)}{extra}")
    ok = "before" in info and same == total and info["kept"] == len(before) and ok_extra
    record(f"Ray, two nodes, node 1 killed mid-job: {job} ({size})", info["seconds"], unit="s",
           anchor=f"one process {t_local:.1f} s", ratio=info["seconds"] / t_local,
           target="byte-identical output, nothing finished recomputed", met=ok,
           note=f"{same}/{total} identical; {info['kept']}/{len(before)} kept{extra}; "
                f"cluster start {info['up']:.1f} s")
    print(f"{job}: RESULT {'identical, nothing recomputed' if ok else 'FAILED'}; load average {load()}")
    return ok


# ---- the jobs -------------------------------------------------------------------------------------
def job_exposure(args, work: Path) -> bool:
    from limelight.data import load_catalog, load_query_log
    from limelight.exposure import compute_exposure
    from limelight.exposure.shards import shard_path
    from limelight.retrieval.index_dir import build_index, open_fingerprinted
    from limelight.scale import IndexRetriever

    coll = load_catalog(args.catalog)
    qs = load_query_log()
    index = build_index(coll, work / "idx")
    r, fp, _ = open_fingerprinted(index)
    t = time.perf_counter()
    ref = compute_exposure(r, qs, work / "local", depth=args.depth, shard_size=args.shard_size,
                           fingerprint=fp)
    t_local = time.perf_counter() - t
    size = f"{len(coll):,} documents, {len(qs):,} queries, top {args.depth}"
    print(f"exposure: {size}; {ref.n_shards} shards of {args.shard_size}; one process "
          f"{t_local:.1f} s; load average {load()}")
    out = work / "ray"
    info = on_cluster(args, "exposure_shard", lambda: list((out / "shards").glob("part-*.parquet")),
                      lambda a: compute_exposure(IndexRetriever(index), qs, out, depth=args.depth,
                                                 shard_size=args.shard_size, fingerprint=fp,
                                                 engine="ray", address=a))
    same = sum(filecmp.cmp(shard_path(ref.path, i), shard_path(out, i), shallow=False)
               for i in range(ref.n_shards))
    return report("exposure", size, t_local, info, same, ref.n_shards)


def job_index(args, work: Path) -> bool:
    from limelight.retrieval.index_dir import build_index_from
    from limelight.scale import build_index_ray_from

    src = args.docs or "debian"
    t = time.perf_counter()
    ref = build_index_from(src, work / "idx-local", memory_gb=args.memory_gb)
    t_local = time.perf_counter() - t
    meta = json.loads((ref / "meta.json").read_text())
    size = f"{meta['n_docs']:,} documents ({Path(str(src)).name})"
    print(f"index: {size}; one process {t_local:.1f} s; load average {load()}")
    runs = work / "runs"
    out = work / "idx-ray"
    info = on_cluster(args, "index_run", lambda: list(runs.glob("run-*/meta.json")),
                      lambda a: build_index_ray_from(src, out, address=a, memory_gb=args.memory_gb,
                                                     run_chars=args.run_chars, runs_dir=runs,
                                                     keep_runs=True))
    files = sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file())
    same = sum((out / p).is_file() and filecmp.cmp(ref / p, out / p, shallow=False) for p in files)
    n_runs = len(info["after"])
    return report("index", size, t_local, info, same, len(files),
                  extra=f"; {n_runs} runs of {args.run_chars / 2**20:.0f} Mi characters")


def job_http(args, work: Path) -> bool:
    from limelight.data import load_catalog, load_query_log
    from limelight.exposure import compute_exposure
    from limelight.exposure.shards import shard_path
    from limelight.retrieval.spec import System
    from limelight.scale import ShardedReplay

    with contextlib.ExitStack() as stack:
        try:
            url, count = stack.enter_context(running(work))  # stopped when the job ends
        except RuntimeError as e:  # it did not start: the end of its log, as one message
            raise SystemExit(str(e)) from None
        coll = load_catalog("movies")
        qs = load_query_log().head(args.http_queries)
        texts = qs.texts.tolist()
        spec = System.of("http", url=url, preset="elasticsearch")
        t = time.perf_counter()
        ref = compute_exposure(spec.open(None, collection=coll, work_dir=work / "work-local"), qs,
                               work / "local-http", depth=20, shard_size=args.http_shard_size)
        t_local = time.perf_counter() - t
        seen = len(count.read_text().splitlines())
        size = f"{len(qs):,} queries to PISA over {len(coll):,} movies, top 20"
        print(f"http: {size}; {ref.n_shards} shards of {args.http_shard_size}; one process "
              f"{t_local:.1f} s; load average {load()}")
        out = work / "ray-http"
        rep = ShardedReplay(spec, coll.ids, work / "work-ray")

        def journaled() -> set[str]:
            import pyarrow.parquet as pq

            got: set[str] = set()
            for p in (work / "work-ray").glob("shards/*/replay/*/log-*.parquet"):
                tb = pq.read_table(p, columns=["query", "ok"]).to_pydict()
                got.update(q for q, ok in zip(tb["query"], tb["ok"], strict=True) if ok)
            return got

        info = on_cluster(args, "exposure_shard",
                          lambda: list((out / "shards").glob("part-*.parquet")),
                          lambda a: compute_exposure(rep, qs, out, depth=20,
                                                     shard_size=args.http_shard_size,
                                                     engine="ray", address=a), journaled)
        same = sum(filecmp.cmp(shard_path(ref.path, i), shard_path(out, i), shallow=False)
                   for i in range(ref.n_shards))
        asked = collections.Counter(json.loads(x) for x in count.read_text().splitlines()[seen:])
        committed = set(info.get("snapshot") or ()) | {
            x for name in info.get("before", {}) for x in
            texts[int(name[5:10]) * args.http_shard_size:][:args.http_shard_size]}
        again = sum(n > 1 for n in asked.values())
        again_committed = sum(asked[x] > 1 for x in committed)
        missing = len(set(texts) - set(asked))
        extra = (f"; queries asked twice on Ray: {again} (all lost with the node), of them "
                 f"committed before the kill: {again_committed}; never asked: {missing}")
        return report("http", size, t_local, info, same, ref.n_shards, extra,
                      ok_extra=again_committed == 0 and missing == 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="exposure,index,http")
    ap.add_argument("--catalog", default="debian")
    ap.add_argument("--shard-size", type=int, default=4000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--docs", default=None, help="JSONL documents for the index job (default debian)")
    ap.add_argument("--memory-gb", type=float, default=2.0)
    ap.add_argument("--run-chars", type=int, default=8 << 20, help="characters per index run")
    ap.add_argument("--http-queries", type=int, default=10000)
    ap.add_argument("--http-shard-size", type=int, default=500)
    ap.add_argument("--num-cpus", type=int, default=1, help="CPUs of each node")
    ap.add_argument("--kill-after", type=int, default=3, help="units written before the kill")
    ap.add_argument("--work", default=None, help="folder for indexes and stores (a temp dir)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    print(f"# issue 44's jobs on a two-node Ray cluster with a node killed "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); load average {load()}")
    work = Path(args.work or tempfile.mkdtemp(prefix="ray-bench-"))
    jobs = {"exposure": job_exposure, "index": job_index, "http": job_http}
    ok = True
    for name in args.jobs.split(","):
        if name not in jobs:
            raise SystemExit(f"unknown job {name!r} ({', '.join(jobs)})")
        (work / name).mkdir(parents=True, exist_ok=True)
        ok &= jobs[name](args, work / name)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
