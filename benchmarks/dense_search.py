"""Dense search, the exposure job's hot path: ``DenseIndex.search`` over the Debian catalog
(the 63,666 MiniLM vectors of ``make demo``'s dense index, demo-out/index/dense) for log
queries (the demo's query vectors, demo-out/systems/query_vectors.npy: ``--queries`` of them,
sampled), top 100, in batches of 512 and 8,192 queries (an exposure shard's batch), flat float32, flat
float16 and HNSW; queries/s, the median of ``--rounds`` rounds. Then batch invariance: whether
every query's row (documents, ranks, float32 scores) is the same bit for bit when the queries
are searched in one batch, in batches cut at other places (a resumed job), and one at a time.

    .venv/bin/python benchmarks/dense_search.py [--queries 2000] [--rounds 3] [--no-hnsw] [--no-invariance]
        [--index demo-out/index/dense] [--vectors demo-out/systems/query_vectors.npy]

Run it with another checkout's ``src`` first on ``PYTHONPATH`` to compare two versions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

import limelight  # noqa: E402
from limelight.retrieval.dense import DenseIndex  # noqa: E402

K = 100
DEMO = Path(__file__).resolve().parents[1] / "demo-out"


def load() -> str:
    return "load average {:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())


def search(index: DenseIndex, q: np.ndarray, cuts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    parts = [index.search(q[a:b], K) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return np.vstack([d for d, _ in parts]), np.vstack([s for _, s in parts])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-hnsw", action="store_true")
    ap.add_argument("--no-invariance", action="store_true", help="timings only")
    ap.add_argument("--index", type=Path, default=DEMO / "index" / "dense")
    ap.add_argument("--vectors", type=Path, default=DEMO / "systems" / "query_vectors.npy")
    args = ap.parse_args()
    print(f"limelight from {os.path.dirname(limelight.__file__)}; cores {os.cpu_count()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; start: {load()}")
    t = time.perf_counter()
    base = DenseIndex.load(args.index)
    print(f"{args.index}: {len(base)} vectors, read in {time.perf_counter() - t:.1f} s")
    vectors = np.load(args.vectors, mmap_mode="r")
    rng = np.random.default_rng(0)
    q = np.ascontiguousarray(vectors[np.sort(rng.choice(len(vectors), args.queries, replace=False))],
                             dtype=np.float32)
    n = len(q)
    configs = [("flat float32", {}), ("flat float16", {"dtype": "float16"})]
    if not args.no_hnsw:
        configs.append(("HNSW M=32 ef=128 float32", {"hnsw": True}))
    print(f"\n{n} query vectors of {args.vectors}, top {K}\n")
    print("| index | batch | queries/s (median of rounds) | rounds (s) |\n|---|---|---|---|")
    for label, meta in configs:
        index = DenseIndex.from_embeddings(base.doc_ids, base.embeddings, {**base.meta, **meta})
        index.search(q[:10], K)  # (builds nothing more; warms the index)
        for batch in (512, 8192):
            cuts = [*range(0, n, batch), n]
            secs = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                search(index, q, cuts)
                secs.append(time.perf_counter() - t)
            print(f"| {label} | {batch} | {n / statistics.median(secs):.0f} | "
                  f"{', '.join(f'{s:.2f}' for s in secs)} |", flush=True)
        if args.no_invariance:
            continue
        ref_d, ref_s = search(index, q, [0, n])
        diffs = []
        for name, cuts in (("cut at 700", [0, 512, 700, 1024, n]), ("batches of 13", [*range(0, n, 13), n]),
                           ("one at a time", list(range(n + 1)))):
            d, s = search(index, q, cuts)
            rows = int((np.any(d != ref_d, axis=1) | np.any(s != ref_s, axis=1)).sum())
            diffs.append(f"{name}: {rows} rows differ ({int((s != ref_s).sum())} scores, "
                         f"{int((d != ref_d).sum())} documents)")
        print(f"  {label}, against one batch of {n}: " + "; ".join(diffs), flush=True)
    print(f"end: {load()}")


if __name__ == "__main__":
    main()
