"""Benchmark (issue 41): a 10M-line TREC run becomes an exposure store through a ``run`` system
at ≥ 0.5× the speed of ``limelight evaluate``'s reader on the same file.

The run is real retrieval: limelight's BM25 (k1 0.9, b 0.4) over the Debian catalog (63,666
entries) for the distinct queries of the shared query log (114,926), each query's top results
written in query order until the file holds ``--lines`` lines (``write_trec_run``, in a temporary
folder; the file is cached under ``--work`` for reruns). Then, alternating, ``--repeats`` times:

- the reader: ``read_trec_runs([file])``, what ``limelight evaluate`` reads runs with;
- the run kind → store: the system's files checked and hashed (``resolve``, the SHA-256 of the
  file computed again each time), the results read onto the catalog's ids and matched to the log
  by query id (``open``), and ``compute_exposure`` into a new store (Parquet shards, the
  per-document index, complete), depth = the run's deepest query.

The catalog and the log are loaded once before (an audit has them loaded). Figures: the best
time of each, the ratio reader / run kind (target ≥ 0.5), and the load average.

    .venv/bin/python benchmarks/run_kind.py [--lines 10000000] [--repeats 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _summary import record  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def make_run(path: Path, lines: int) -> None:
    """BM25 over the Debian catalog for the whole log, the first ``lines`` lines written to ``path``."""
    from limelight.data import load_catalog, load_query_log
    from limelight.data.formats import write_trec_run
    from limelight.data.run import Run
    from limelight.retrieval.bm25 import BM25, BM25Index

    coll, qs = load_catalog("debian"), load_query_log()
    t0 = time.perf_counter()
    index = BM25Index.build(coll)
    k = 200
    run = BM25(index).retrieve(qs, k)
    if len(run) < lines:
        raise SystemExit(f"BM25 top {k} of the log holds {len(run):,} lines, fewer than {lines:,}")
    cut = Run.from_codes(run.qids, run.docids, run.q[:lines], run.d[:lines], run.score[:lines],
                         "bm25", sort=False)
    write_trec_run(cut, path, tag="bm25")
    print(f"wrote {path} ({lines:,} lines, {path.stat().st_size / 1e6:,.0f} MB, "
          f"{int(cut.depths().astype(bool).sum()):,} queries) in {time.perf_counter() - t0:.1f} s",
          flush=True)


def time_reader(path: Path) -> float:
    """Seconds ``limelight evaluate``'s reader takes to read ``path``."""
    from limelight.data.formats import read_trec_runs

    t0 = time.perf_counter()
    runs = read_trec_runs([path])
    secs = time.perf_counter() - t0
    assert len(runs[0]) > 0
    return secs


def time_run_kind(path: Path, coll, qs, depth: int, store: Path) -> tuple[float, dict]:
    """Seconds from the ``run`` system's parameters to a complete store, and its coverage."""
    import limelight.retrieval.kinds.run as run_kind
    from limelight.exposure.compute import compute_exposure
    from limelight.retrieval.spec import System
    from limelight.retrieval.systems import get_kind

    run_kind._HASHES.clear()  # the file is hashed every time, as a fresh process does
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    spec = System.of("run", **get_kind("run").resolved({"path": str(path)}))
    retriever = spec.open(None, collection=coll, queries=qs)
    st = compute_exposure(retriever, qs, store, depth=depth,
                          fingerprint=spec.fingerprint(index_key="debian"), settings=spec.settings())
    secs = time.perf_counter() - t0
    assert st.manifest["complete"]
    return secs, retriever.coverage()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the generated run in this folder for reruns (default: a temporary "
                         "folder, removed)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="run_kind_") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        path = work / f"debian-log-bm25-{args.lines}.run"
        if not path.exists():
            make_run(path, args.lines)
        store = Path(tmp) / "store"
        measure(path, store, args.lines, args.repeats)
    return 0


def measure(path: Path, store: Path, lines: int, repeats: int) -> None:
    """Time the reader and the run kind on ``path`` (alternating), print and record the figures."""
    from limelight.data import load_catalog, load_query_log

    coll, qs = load_catalog("debian"), load_query_log()
    reader, kind = [], []
    cov: dict = {}
    for i in range(repeats):
        reader.append(time_reader(path))
        secs, cov = time_run_kind(path, coll, qs, 200, store)
        kind.append(secs)
        print(f"repeat {i + 1}: reader {reader[-1]:.2f} s, run kind → store {kind[-1]:.2f} s",
              flush=True)
    best_r, best_k = min(reader), min(kind)
    ratio = best_r / best_k
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{lines:,}-line TREC run ({path.stat().st_size / 1e6:,.0f} MB): evaluate's reader "
          f"{best_r:.2f} s ({lines / best_r / 1e6:.2f}M lines/s); run kind → store {best_k:.2f} s "
          f"({lines / best_k / 1e6:.2f}M lines/s); speed ratio {ratio:.2f}× (target ≥ 0.5×); "
          f"load {load}")
    print(f"coverage: {cov}")
    record(f"run kind: a {lines / 1e6:g}M-line TREC run → exposure store (Debian × log)",
           lines / best_k, unit="lines/s",
           anchor=f"limelight evaluate's reader {lines / best_r:,.0f} lines/s", ratio=ratio,
           target="≥ 0.5×", met=ratio >= 0.5)


if __name__ == "__main__":
    raise SystemExit(main())
