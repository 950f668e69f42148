"""Changing it (issue 45, item 5): Plackett-Luce policies as an intervention on group fairness,
against nDCG@10 and R@100, on the CtrlQGen Click test sets.

    flock /tmp/heavy.lock .venv/bin/python experiments/fairness/intervention.py
        [--work /tmp/limelight-fairness] [--samples 32] [--seed 0]

Per catalog (Debian, groups ``section``; movies, groups ``Major Genre``) and system (BM25,
MiniLM, hybrid RRF): a store of the Click test queries at depth 200 (``limelight exposure
compute``; the indexes ``run.py`` prepared), then ``limelight.exposure.fairness.policy_curve``
over a grid of temperatures: the Plackett-Luce policy over each query's top 200 (so that R@100
can move), expected exposure shares (1/log2(rank+1)) against the merit target, the largest group
deficit, expected nDCG@10 and R@100. The temperature at which the largest deficit first falls to
half its T = 0 value, and what it costs, go to ``results/intervention.json``; the curves to
``docs/figures/exposure/fairness_intervention.png|svg``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from limelight._io import atomic_path
from limelight.data.formats import read_trec_qrels
from limelight.exposure.fairness import Groups, Merit, policy_curve
from limelight.exposure.store import ExposureStore

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import click_files, index_for  # noqa: E402

SYSTEMS = ("bm25", "dense", "hybrid")
FIELD = {"debian": "section", "movies": "Major Genre"}
TEMPS = [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 5.0, math.inf]
DEPTH = 200


def store(catalog: str, system: str, work: Path, idx: Path, qfile: Path) -> ExposureStore:
    out = work / catalog / f"click{DEPTH}" / system
    if not (out / "manifest.json").exists() or not json.loads((out / "manifest.json").read_text()).get("complete"):
        subprocess.run([str(ROOT / ".venv" / "bin" / "limelight"), "exposure", "compute", "--index", str(idx),
                        "--queries", str(qfile), "--model", system, "--depth", str(DEPTH), "--out", str(out)],
                       check=True)
    return ExposureStore.open(out)


def halving(curve: list[dict]) -> dict | None:
    """The first temperature whose largest deficit is at most half that of T = 0, with costs."""
    base = curve[0]
    for row in curve[1:]:
        if abs(row["largest_deficit"]) <= abs(base["largest_deficit"]) / 2:
            return {"temperature": row["temperature"], "largest_deficit": row["largest_deficit"],
                    "deficit_group": row["deficit_group"],
                    "r@100_cost": row["r@100"] - base["r@100"], "ndcg@10_cost": row["ndcg@10"] - base["ndcg@10"]}
    return None


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    for i, (catalog, systems) in enumerate(results.items()):
        for s, res in systems.items():
            c = res["curve"]
            x = [100 * abs(r["largest_deficit"]) for r in c]
            for j, m in enumerate(("ndcg@10", "r@100")):
                ax = axes[i, j]
                ax.plot(x, [r[m] for r in c], marker="o", label=s)
                ax.set_xlabel(f"largest group deficit ({FIELD[catalog]}), points")
                ax.set_ylabel(f"expected {m}")
                ax.set_title(f"{catalog}: T = 0 at the top of each curve, T = ∞ at the bottom", fontsize=9)
                ax.invert_xaxis()
    axes[0, 0].legend()
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-fairness"))
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from results/intervention.json")
    a = ap.parse_args()
    fig = ROOT / "docs" / "figures" / "exposure" / "fairness_intervention"
    if a.plot_only:
        plot(json.loads((HERE / "results" / "intervention.json").read_text())["results"], fig)
        return
    results: dict = {}
    for catalog in ("debian", "movies"):
        idx = index_for(catalog, a.work)
        qfile, qrels = click_files(catalog, a.work)
        results[catalog] = {}
        for s in SYSTEMS:
            st = store(catalog, s, a.work, idx, qfile)
            curve = policy_curve(st, Groups.from_field(st, FIELD[catalog], idx),
                                 Merit.from_qrels(read_trec_qrels(qrels), st, "CtrlQGen Click test"),
                                 TEMPS, n_samples=a.samples, seed=a.seed)
            rows = [{k: v for k, v in r.items() if not k.startswith("gap:")} for r in curve.to_dict("records")]
            results[catalog][s] = {"curve": rows, "halving": halving(rows)}
            print(catalog, s, results[catalog][s]["halving"], flush=True)
    out = {"results": results, "field": FIELD, "depth": DEPTH, "samples": a.samples, "seed": a.seed,
           "load": list(os.getloadavg())}
    with atomic_path(HERE / "results" / "intervention.json") as tmp:
        tmp.write_text(json.dumps(out, indent=1, default=lambda x: None if x != x else x).replace("Infinity", '"inf"'))
    plot(results, fig)


if __name__ == "__main__":
    main()
