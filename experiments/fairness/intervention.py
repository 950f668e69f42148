"""Changing it (issue 45, item 5): Plackett-Luce policies and a deterministic exposure-balancing
re-ranker as interventions on group fairness, against nDCG@10 and R@100, on the CtrlQGen Click
test sets.

    flock /tmp/heavy.lock .venv/bin/python experiments/fairness/intervention.py
        [--work /tmp/limelight-fairness] [--samples 32] [--seed 0] [--rerank-only]

Per catalog (Debian, groups ``section``; movies, groups ``Major Genre``) and system (BM25,
MiniLM, hybrid RRF): a store of the Click test queries at depth 200 (``limelight exposure
compute``; the indexes ``run.py`` prepared), then ``limelight.exposure.fairness.policy_curve``
over a grid of temperatures: the Plackett-Luce policy over each query's top 200 (so that R@100
can move), expected exposure shares (1/log2(rank+1)) against the merit target, the largest group
deficit, expected nDCG@10 and R@100; and ``limelight.exposure.balance.balance_curve`` over a grid
of strengths λ: the greedy re-ranker of each query's top 200 toward the groups' shares of the
catalog (deterministic), the same figures. The temperature (strength) at which the largest
deficit first falls to half its T = 0 (λ = 0) value, and what it costs, go to
``results/intervention.json``; the curves to ``docs/figures/exposure/fairness_intervention.png|svg``.
``--rerank-only`` keeps the Plackett-Luce curves already in ``results/intervention.json`` (same
settings) and recomputes the re-ranker's.
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
from limelight.exposure.balance import balance_curve
from limelight.exposure.fairness import Groups, Merit, policy_curve
from limelight.exposure.store import ExposureStore

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import click_files, index_for  # noqa: E402

SYSTEMS = ("bm25", "dense", "hybrid")
FIELD = {"debian": "section", "movies": "Major Genre"}
TEMPS = [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 5.0, math.inf]
STRENGTHS = [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0]
DEPTH = 200


def store(catalog: str, system: str, work: Path, idx: Path, qfile: Path) -> ExposureStore:
    out = work / catalog / f"click{DEPTH}" / system
    if not (out / "manifest.json").exists() or not json.loads((out / "manifest.json").read_text()).get("complete"):
        subprocess.run([str(ROOT / ".venv" / "bin" / "limelight"), "exposure", "compute", "--index", str(idx),
                        "--queries", str(qfile), "--model", system, "--depth", str(DEPTH), "--out", str(out)],
                       check=True)
    return ExposureStore.open(out)


def halving(curve: list[dict], knob: str = "temperature") -> dict | None:
    """The first temperature (strength) whose largest deficit is at most half that of T = 0
    (λ = 0), with costs."""
    base = curve[0]
    for row in curve[1:]:
        if abs(row["largest_deficit"]) <= abs(base["largest_deficit"]) / 2:
            return {knob: row[knob], "largest_deficit": row["largest_deficit"],
                    "deficit_group": row["deficit_group"],
                    "r@100_cost": row["r@100"] - base["r@100"], "ndcg@10_cost": row["ndcg@10"] - base["ndcg@10"]}
    return None


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    for i, (catalog, systems) in enumerate(results.items()):
        for n, (s, res) in enumerate(systems.items()):
            for key, style in (("curve", "-o"), ("rerank", "--s")):
                c = res.get(key)
                if not c:
                    continue
                x = [100 * abs(r["largest_deficit"]) for r in c]
                what = "Plackett-Luce T" if key == "curve" else "re-ranker λ"
                for j, m in enumerate(("ndcg@10", "r@100")):
                    ax = axes[i, j]
                    ax.plot(x, [r[m] for r in c], style, color=f"C{n}", label=f"{s}: {what}",
                            markersize=4)
                    ax.set_xlabel(f"largest group deficit ({FIELD[catalog]}), points")
                    ax.set_ylabel(f"expected {m}" if key == "curve" else m)
                    ax.set_title(f"{catalog}: T = 0 / λ = 0 at the start of each curve", fontsize=9)
        for j in range(2):
            axes[i, j].invert_xaxis()
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
    ap.add_argument("--rerank-only", action="store_true",
                    help="keep the Plackett-Luce curves of results/intervention.json, recompute the re-ranker's")
    a = ap.parse_args()
    fig = ROOT / "docs" / "figures" / "exposure" / "fairness_intervention"
    saved = HERE / "results" / "intervention.json"
    if a.plot_only:
        plot(json.loads(saved.read_text())["results"], fig)
        return
    old = json.loads(saved.read_text()) if a.rerank_only else None
    if old is not None and (old["samples"], old["seed"], old["depth"]) != (a.samples, a.seed, DEPTH):
        sys.exit(f"{saved}: its Plackett-Luce curves are for other settings; run without --rerank-only")
    results: dict = {}
    for catalog in ("debian", "movies"):
        idx = index_for(catalog, a.work)
        qfile, qrels = click_files(catalog, a.work)
        results[catalog] = {}
        for s in SYSTEMS:
            st = store(catalog, s, a.work, idx, qfile)
            groups = Groups.from_field(st, FIELD[catalog], idx)
            merit = Merit.from_qrels(read_trec_qrels(qrels), st, "CtrlQGen Click test")
            if old is not None:
                entry = {k: old["results"][catalog][s][k] for k in ("curve", "halving")}
            else:
                curve = policy_curve(st, groups, merit, TEMPS, n_samples=a.samples, seed=a.seed)
                rows = [{k: v for k, v in r.items() if not k.startswith("gap:")} for r in curve.to_dict("records")]
                entry = {"curve": rows, "halving": halving(rows)}
            rr = balance_curve(st, groups, merit, STRENGTHS)
            rows = [{k: v for k, v in r.items() if not k.startswith("gap:")} for r in rr.to_dict("records")]
            entry.update(rerank=rows, rerank_halving=halving(rows, "strength"))
            results[catalog][s] = entry
            print(catalog, s, entry["halving"], entry["rerank_halving"], flush=True)
    out = {"results": results, "field": FIELD, "depth": DEPTH, "samples": a.samples, "seed": a.seed,
           "strengths": STRENGTHS, "rerank_target": "the groups' shares of the catalog",
           "load": list(os.getloadavg())}
    if old is not None:
        out["load_plackett_luce"] = old.get("load")
    with atomic_path(HERE / "results" / "intervention.json") as tmp:
        tmp.write_text(json.dumps(out, indent=1, default=lambda x: None if x != x else x).replace("Infinity", '"inf"'))
    plot(results, fig)


if __name__ == "__main__":
    main()
