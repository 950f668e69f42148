"""The exposure job on a real two-node Ray cluster on this machine, with a node killed mid-job.

The shared query log (every distinct query) over the Debian catalog, BM25 top 100: once in one
process (the local engine), then on a cluster of two raylets started with Ray's CLI on loopback
(``limelight.scale.loopback.LoopbackCluster``: ``ray start --head`` and ``ray start
--address=...``, ``--num-cpus`` CPUs each), with the second node SIGKILLed (its raylet and
workers) once ``--kill-after`` shards are written and a shard task runs on it. Reported: both
wall times, when the node died, the shard files compared byte for byte with the single-process
store, and whether every shard written before the kill kept its inode and mtime (not computed
again); the load average before and after (the machine is shared).

    .venv/bin/python benchmarks/ray_cluster.py [--shard-size 4000] [--kill-after 3]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path


def _stamps(store: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in (store / "shards").glob("part-*.parquet"):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        out[p.name] = (st.st_ino, st.st_mtime_ns)
    return out


def _running_shard(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::exposure_shard"):
                return True
        except OSError:
            continue
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalog", default="debian")
    ap.add_argument("--shard-size", type=int, default=4000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--num-cpus", type=int, default=1, help="CPUs of each node")
    ap.add_argument("--kill-after", type=int, default=3, help="shards written before the kill")
    ap.add_argument("--work", default=None, help="folder for the index and stores (a temp dir)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    from limelight.data import load_catalog, load_query_log
    from limelight.exposure import compute_exposure
    from limelight.exposure.shards import shard_path
    from limelight.retrieval.index_dir import build_index, open_fingerprinted
    from limelight.scale import IndexRetriever
    from limelight.scale.loopback import LoopbackCluster

    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())  # noqa: E731
    print(f"# exposure on a two-node Ray cluster with a node killed "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); load average {load()}")
    work = Path(args.work or tempfile.mkdtemp(prefix="ray-bench-"))
    coll = load_catalog(args.catalog)
    qs = load_query_log()
    index = build_index(coll, work / "idx")
    r, fp, _ = open_fingerprinted(index)
    t = time.perf_counter()
    ref = compute_exposure(r, qs, work / "local", depth=args.depth, shard_size=args.shard_size,
                           fingerprint=fp)
    t_local = time.perf_counter() - t
    print(f"{coll.name}: {len(coll):,} documents; {len(qs):,} queries; top {args.depth}; "
          f"{ref.n_shards} shards of {args.shard_size}")
    print(f"single process (local engine): {t_local:.1f} s; load average {load()}")

    out = work / "ray"
    info: dict = {}
    stop = threading.Event()
    t = time.perf_counter()
    with LoopbackCluster(nodes=2, num_cpus=args.num_cpus, object_store_mb=200) as c:
        t_up = time.perf_counter() - t

        def killer():
            while not stop.is_set():
                if (out.exists() and len(_stamps(out)) >= args.kill_after
                        and _running_shard(c.node_pids(1))):
                    info["before"] = _stamps(out)
                    info["at"] = time.perf_counter() - t0
                    c.kill_node(1)
                    return
                time.sleep(0.01)

        th = threading.Thread(target=killer, daemon=True)
        t0 = time.perf_counter()
        th.start()
        try:
            compute_exposure(IndexRetriever(index), qs, out, depth=args.depth,
                             shard_size=args.shard_size, fingerprint=fp, engine="ray",
                             address=c.address)
        finally:
            stop.set()
            th.join()
        t_ray = time.perf_counter() - t0
        alive = c.alive_nodes()
    same = sum(filecmp.cmp(shard_path(ref.path, i), shard_path(out, i), shallow=False)
               for i in range(ref.n_shards))
    after = _stamps(out)
    before = info.get("before", {})
    kept = sum(after.get(k) == v for k, v in before.items())
    print(f"two-node Ray cluster ({args.num_cpus} CPU each; started in {t_up:.1f} s): "
          f"{t_ray:.1f} s end to end; node 1 killed at {info.get('at', float('nan')):.1f} s "
          f"with {len(before)} shards written; nodes alive after: {alive}")
    print(f"shards byte-identical to the single-process store: {same}/{ref.n_shards}; shards "
          f"written before the kill kept (same inode and mtime, not recomputed): "
          f"{kept}/{len(before)}")
    ok = "before" in info and same == ref.n_shards and kept == len(before)
    print(f"RESULT {'identical, nothing recomputed' if ok else 'FAILED'}; load average {load()}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
