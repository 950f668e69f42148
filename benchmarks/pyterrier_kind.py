"""Benchmark (issue 41): PISA's BM25 through kind ``pyterrier`` beside limelight's BM25, on the
Debian catalog (63,666 entries) and every distinct query of the shared log (114,926), top 100,
one thread each.

- limelight: ``BM25(index, threads=1).search_batch(texts, 100)`` (query analysis included);
- PISA through the kind: the system ``kind = "pyterrier"``, ``factory =
  "limelight.retrieval.kinds.pyterrier:pisa_bm25"`` opened as an audit opens it, and its
  ``search_batch(texts, 100)``, what the exposure job calls: limelight's analysis in a PyTerrier
  transformer, frames of ``--batch-size`` queries, PISA's block-max WAND (``pyterrier-pisa``
  0.4.9, C++, no Java), the results frames checked against the catalog's ids and padded;
- PISA alone: PISA's transformer on the same frames already tokenized, so that the kind's own
  cost (analysis, frames, id checks) shows.

Interleaved ``--repeats`` times; the best time of each. Figures: queries/s side by side and the
ratio PISA-through-the-kind / limelight; the top-10 (and top-100) overlap of the two rankings,
the mean over the queries limelight retrieves for of |L ∩ P| / |L| (two BM25s with different
idfs: close, not equal); index build times; the load average. Run it alone
(``flock /tmp/heavy.lock``): the machine has two cores.

    .venv/bin/python benchmarks/pyterrier_kind.py [--repeats 3] [--batch-size 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _summary import record  # noqa: E402

PISA = "limelight.retrieval.kinds.pyterrier:pisa_bm25"
DEPTH = 100


def overlap(ref: np.ndarray, other: np.ndarray, k: int) -> tuple[float, int]:
    """Mean |top-k of ``ref`` ∩ top-k of ``other``| / |top-k of ``ref``| over the rows where
    ``ref`` has a result, and how many such rows."""
    vals = []
    for a, b in zip(ref[:, :k], other[:, :k], strict=True):
        sa = set(a[a >= 0].tolist())
        if sa:
            vals.append(len(sa & set(b[b >= 0].tolist())) / len(sa))
    return float(np.mean(vals)), len(vals)


def pisa_alone(retriever, texts: list[str], batch: int):
    """PISA's own transformer (cut at ``DEPTH``) and the log as tokenized frames of ``batch``."""
    import pandas as pd

    tokens, pisa = retriever.transformer[0], retriever.transformer[1]
    engine = (pisa % DEPTH).compile()
    frames = []
    for i in range(0, len(texts), batch):
        f = pd.DataFrame({"qid": [str(j) for j in range(i, min(i + batch, len(texts)))],
                          "query": texts[i:i + batch]})
        frames.append(tokens.transform(f))
    return engine, frames


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=1000)
    args = ap.parse_args(argv)

    from limelight.data import load_catalog, load_query_log
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.spec import System

    coll, qs = load_catalog("debian"), load_query_log()
    texts = qs.texts.tolist()
    print(f"Debian catalog: {len(coll):,} entries; log: {len(qs):,} distinct queries; top {DEPTH}; "
          f"load {'/'.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    t0 = time.perf_counter()
    bm25 = BM25(BM25Index.build(coll), threads=1)
    build_l = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="pyterrier_kind_") as work:
        spec = System.of("pyterrier", factory=PISA, batch_size=args.batch_size)
        t0 = time.perf_counter()
        kind = spec.open(None, name="pisa", collection=coll, queries=qs, work_dir=Path(work))
        build_p = time.perf_counter() - t0
        print(f"index: limelight BM25 {build_l:.1f} s; PISA through the kind (analysis, PISA "
              f"index, score bounds) {build_p:.1f} s", flush=True)
        engine, frames = pisa_alone(kind, texts, args.batch_size)
        times: dict[str, list[float]] = {"limelight": [], "kind": [], "alone": []}
        for i in range(args.repeats):
            t0 = time.perf_counter()
            ref, _ = bm25.search_batch(texts, DEPTH)
            times["limelight"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got, _ = kind.search_batch(texts, DEPTH)
            times["kind"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            n_rows = sum(len(engine.transform(f)) for f in frames)
            times["alone"].append(time.perf_counter() - t0)
            print(f"repeat {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
                  + f" (PISA rows {n_rows:,}); load "
                  + "/".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    report(len(texts), times, ref, got)
    return 0


def report(n: int, times: dict[str, list[float]], ref: np.ndarray, got: np.ndarray) -> None:
    """Print and record the figures."""
    qps = {k: n / min(v) for k, v in times.items()}
    ratio = qps["kind"] / qps["limelight"]
    ov10, nq = overlap(ref, got, 10)
    ov100, _ = overlap(ref, got, 100)
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"queries/s, 1 thread, top {DEPTH}: limelight BM25 {qps['limelight']:,.0f}; PISA through "
          f"kind pyterrier {qps['kind']:,.0f} ({ratio:.2f}× limelight); PISA alone on tokenized "
          f"frames {qps['alone']:,.0f} (the kind keeps {qps['kind'] / qps['alone']:.2f}× of it)")
    print(f"overlap with limelight BM25 over the {nq:,} queries it retrieves for: top-10 "
          f"{ov10:.3f}, top-100 {ov100:.3f}; load {load}")
    record(f"PISA BM25 through kind pyterrier: queries/s (Debian × log, top {DEPTH}, 1 thread)",
           qps["kind"], unit="q/s", anchor=f"limelight BM25 {qps['limelight']:,.0f} q/s",
           ratio=ratio, note=f"PISA alone {qps['alone']:,.0f} q/s")
    record("PISA BM25 through kind pyterrier: top-10 overlap with limelight BM25 (Debian × log)",
           ov10, anchor="limelight BM25 (same tokens, another idf)", note=f"top-100 {ov100:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
