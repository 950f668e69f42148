"""Time-budget evaluation (paper §5.2, Figure 2 analog) from the study's cross-validated runs.

Inputs: per model, the test-fold run of ``cv.cv_run`` (the issue-25 study's variant chosen on
validation, PLAN.md amendment 2: every judged query's BM25 top 100 scored by the fold model that
held it out) and the documents/ms of ``benchmarks/rerank.py`` on this machine
(``out/benchmark.json``). For each budget (ms per query) each model re-ranks the BM25 top
``floor(budget · docs/ms)`` (capped at ``--depth``); nDCG@10 and MRR@10 are computed at that
depth. A model without finished study folds (or without a measured speed) is skipped with a
printed note; the chosen variants are printed and recorded with the results.

    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/budget.py --collections cranfield
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from limelight.data.loaders import load_dataset
from limelight.rerank.budget import best_ranges, budget_table, depth_curve

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collections", nargs="+", default=["cranfield", "npl", "scifact"])
    ap.add_argument("--models", nargs="+", default=["knrm", "tk1", "tk2", "tk3"])
    ap.add_argument("--seed", type=int, default=0, help="the study seed whose fold models are used")
    ap.add_argument("--depth", type=int, default=100, help="deepest re-ranking depth (≤ 100)")
    ap.add_argument("--benchmark", type=Path, default=OUT / "benchmark.json")
    ap.add_argument("--budgets", default="0:300:5")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if not 0 < args.depth <= 100:
        ap.error("--depth must be in 1..100 (the study's runs score the BM25 top 100)")
    bench = json.loads(args.benchmark.read_text())
    speed = bench["docs_per_ms"]
    a, b, s = (float(x) for x in args.budgets.split(":"))
    budgets = list(np.arange(a, b + s / 2, s))
    results: dict = {"docs_per_ms": speed, "budgets": args.budgets, "depth": args.depth}
    lines = []
    for name in args.collections:
        curves, variants = _curves(name, args, speed)
        if not variants:
            print(f"{name}: no model has finished study folds; no budget curve", flush=True)
            continue
        results[name], text = _tables(name, curves, variants, speed, budgets, args.depth)
        lines += text
        _plot(name, curves["nDCG@10"], speed, budgets, variants, args.out / f"budget_{name}.png")
    (args.out / "budget_results.json").write_text(json.dumps(results, indent=1, default=float))
    text = "\n".join(lines)
    (args.out / "budget_results.md").write_text(text + "\n")
    print(text)
    return results


def _curves(name: str, args: argparse.Namespace, speed: dict) -> tuple[dict, dict[str, str]]:
    """``({measure: {model: curve over depths 0..depth}}, {model: study variant label})`` of the
    models with finished study folds and a measured speed (the others: a printed note)."""
    from cv import bm25_run, cv_run  # same folder

    curves: dict = {"nDCG@10": {}, "RR@10": {}}
    variants: dict[str, str] = {}
    ds = first = None
    for m in args.models:
        if m not in speed:
            print(f"{name}: {m} skipped: no documents/ms for it in {args.benchmark}", flush=True)
            continue
        try:
            label, scored = cv_run(name, m, args.seed, args.out)
        except SystemExit as e:
            print(f"{e}: {m} skipped", flush=True)
            continue
        variants[m] = label
        if ds is None:
            ds, first = load_dataset(name), bm25_run(name, args.out)
        for meas in curves:
            curves[meas][m] = depth_curve(first, scored, ds.qrels, args.depth, meas)
    return curves, variants


def _tables(name: str, curves: dict, variants: dict[str, str], speed: dict, budgets: list[float],
            depth: int) -> tuple[dict, list[str]]:
    """The results record and the markdown lines of one collection."""
    res: dict = {"variants": variants}
    lines = [f"\n### {name}: models (variant chosen on validation, PLAN.md amendment 2): "
             + "; ".join(f"{m} = {v}" for m, v in variants.items())]
    for meas, cv in curves.items():
        table = budget_table(cv, speed, budgets)
        res[meas] = {
            "curves": {m: c.tolist() for m, c in cv.items()},
            "best_depth": {m: int(np.argmax(c)) for m, c in cv.items()},
            "best_value": {m: float(np.max(c)) for m, c in cv.items()},
            "ranges": best_ranges(table),
            "at_100ms": table[table.budget_ms == 100].to_dict("records"),
            "at_300ms": table[table.budget_ms == 300].to_dict("records"),
        }
        lines.append(f"\n#### {name}: {meas} by budget (ms/query → depth, value)\n")
        cols = [c for c in table.columns if c not in ("best",)]
        sel = table[table.budget_ms.isin([0, 10, 25, 50, 100, 150, 200, 250, 300])]
        lines.append("| " + " | ".join(cols + ["best"]) + " |")
        lines.append("|" + "---|" * (len(cols) + 1))
        for _, row in sel.iterrows():
            cells = [f"{row[c]:.0f}" if c.endswith("depth") or c == "budget_ms" else f"{row[c]:.3f}" for c in cols]
            lines.append("| " + " | ".join(cells + [row["best"]]) + " |")
        lines.append("\nbest: " + "; ".join(f"{m} {x:g}-{y:g} ms" for m, x, y in res[meas]["ranges"]))
        lines.append(f"\nunconstrained best depth (≤ {depth}): " + ", ".join(
            f"{m} {res[meas]['best_depth'][m]} ({res[meas]['best_value'][m]:.3f})" for m in cv))
    return res, lines


def _plot(name: str, curves: dict, speed: dict, budgets: list[float], variants: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m, c in curves.items():
        depth = np.minimum(len(c) - 1, np.floor(np.asarray(budgets) * speed[m])).astype(int)
        ax.plot(budgets, c[depth], label=f"{variants[m]} ({speed[m]:.3g} docs/ms)")
    ax.axhline(next(iter(curves.values()))[0], color="gray", ls="--", label="BM25")
    ax.set_xlabel("re-ranking budget (ms per query)")
    ax.set_ylabel("nDCG@10")
    ax.set_title(f"{name}: time-budget analysis (this CPU)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
