"""The demo audit's hybrid exposure job, today's way (the dense half searches FAISS again for
every query) beside the audit's way since issue 53 (the dense half read from the dense system's
exposure store, ``limelight.exposure.stored.StoredTopK``), in one process, one after the other.

Prints the wall and CPU time of each job, the ratio, and how far the two stores agree (pairs
equal; Gini of r(d) at c = 10 and 100, whose difference must stay under 0.005). Needs the demo
audit (``make demo``: its index, query vectors and dense store).

    flock /tmp/heavy.lock .venv/bin/python benchmarks/hybrid_exposure.py [--audit demo-out]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from _summary import record  # noqa: E402

from limelight.audit.layout import AuditDir  # noqa: E402
from limelight.audit.runner import LookupEncoder  # noqa: E402
from limelight.exposure.compute import compute_exposure  # noqa: E402
from limelight.exposure.retrievability import gini  # noqa: E402
from limelight.exposure.stored import StoredTopK  # noqa: E402
from limelight.retrieval.dense import Encoder  # noqa: E402
from limelight.retrieval.spec import System  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _gini_at(store, c: int) -> float:
    q, d, rank, _ = store.pair_arrays()
    keep = rank <= c
    w = np.asarray(store.queries.weights, dtype=np.float64)[q[keep]]
    return float(gini(np.bincount(d[keep], weights=w, minlength=len(store.doc_ids))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--audit", type=Path, default=ROOT / "demo-out")
    a = ap.parse_args()
    audit = AuditDir(a.audit)
    if not audit.query_vectors.exists() or not audit.store_dir("dense").exists():
        print(f"{a.audit}: no demo audit with query vectors and a dense store; run `make demo`",
              file=sys.stderr)
        return 2
    dense = audit.store("dense")
    queries = dense.queries
    print(f"load average {os.getloadavg()}; {len(queries):,} queries, {len(dense.doc_ids):,} docs",
          flush=True)
    enc = LookupEncoder(Encoder(), queries.texts, np.load(audit.query_vectors))
    spec = System.of("hybrid", k1=0.9, b=0.4, rrf_k=60, fusion_depth=100)
    times, stores = {}, {}
    with tempfile.TemporaryDirectory(prefix="hybrid-bench-") as tmp:
        for way in ("live dense search (before)", "dense lists from the dense store"):
            hyb = spec.open(audit.index_dir, name="hybrid", encoder=enc)
            if way.startswith("dense lists"):
                hyb.dense = StoredTopK(hyb.dense, dense)
            w0, c0 = time.perf_counter(), time.process_time()
            st = compute_exposure(hyb, queries, Path(tmp) / way.split()[0], depth=100)
            times[way] = (time.perf_counter() - w0, time.process_time() - c0)
            stores[way] = st
            print(f"{way}: {times[way][0]:.1f} s wall, {times[way][1]:.1f} s CPU "
                  f"(load average {os.getloadavg()})", flush=True)
        before, after = (stores[k] for k in times)
        (bw, bc), (aw, ac) = times.values()
        pb, pa = before.pair_arrays(), after.pair_arrays()
        same = len(pb[0]) == len(pa[0]) and bool(np.array_equal(pb[1], pa[1]))
        frac = float(np.mean(pb[1] == pa[1])) if len(pb[0]) == len(pa[0]) else float("nan")
        print(f"pairs: {len(pb[0]):,} before, {len(pa[0]):,} after; documents equal at "
              f"{frac:.6f} of the positions ({'identical' if same else 'FAISS float noise'})")
        dg = {}
        for c in (10, 100):
            gb, ga = _gini_at(before, c), _gini_at(after, c)
            dg[c] = abs(gb - ga)
            print(f"Gini c={c}: before {gb:.6f}, after {ga:.6f}, |diff| {dg[c]:.2e}")
    record("hybrid exposure job, Debian × log, dense half from the dense store", aw, unit="s",
           anchor="live dense search", ratio=aw / bw, target="faster, same lists",
           met=aw < bw and max(dg.values()) < 0.005,
           note=f"before {bw:.1f} s wall / {bc:.1f} s CPU, after {aw:.1f} / {ac:.1f}; "
                f"documents equal at {frac:.6f} of positions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
