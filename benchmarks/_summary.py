"""One summary row per acceptance figure, collected by ``make bench`` (benchmarks/run_all.py).

A benchmark calls :func:`record` for each figure an issue sets a target for. When the
environment variable ``LIMELIGHT_BENCH_SUMMARY`` names a file (run_all.py sets it), the row is
appended to it as one JSON line; otherwise the call only prints the row, so a benchmark run by
hand shows the same verdicts.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

ENV = "LIMELIGHT_BENCH_SUMMARY"


def record(figure: str, value: float, *, anchor: str, ratio: float | None = None,
           target: str = "", met: bool | None = None, unit: str = "", note: str = "") -> dict:
    """Record one figure: its ``value`` (in ``unit``), the ``anchor`` it is compared with, the
    ``ratio`` value/anchor where the target is a ratio, the ``target`` as text and whether it is
    ``met`` (``None`` when the figure has no target). The load average is attached."""
    row = {"benchmark": os.path.basename(sys.argv[0]), "figure": figure, "value": float(value),
           "unit": unit, "anchor": anchor, "ratio": None if ratio is None else float(ratio),
           "target": target, "met": met, "note": note,
           "load": [round(x, 2) for x in os.getloadavg()], "when": time.strftime("%Y-%m-%d %H:%M")}
    verdict = "" if met is None else ("met" if met else "NOT MET")
    ratio_s = "" if ratio is None else f" = {ratio:.2f}× {anchor}"
    unit_s = f" {unit}" if unit else ""
    print(f"[summary] {figure}: {value:.4g}{unit_s}{ratio_s} target {target or '-'} {verdict}", flush=True)
    path = os.environ.get(ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return row


def percentiles_ms(seconds: list[float]) -> dict[str, float]:
    """Latencies (seconds) as ``n``, ``p50_ms``, ``p99_ms``, ``max_ms``, ``mean_ms``."""
    ms = np.asarray(seconds) * 1000
    return {"n": len(ms), "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(ms.max()), "mean_ms": float(ms.mean())}
