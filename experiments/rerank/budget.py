"""Time-budget evaluation (paper §5.2, Figure 2 analog) from the cross-validation runs.

Inputs: the concatenated test-fold runs of ``cv.py`` (every model scored the BM25 top ``depth``
of every query once) and the documents/ms of ``benchmarks/rerank.py`` on this machine. For each
budget (ms per query) each model re-ranks the BM25 top ``floor(budget · docs/ms)`` (capped at
the CV depth); nDCG@10 and MRR@10 are computed at that depth.

    .venv/bin/python experiments/rerank/budget.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from limelight.data.formats import read_run_parquet
from limelight.data.loaders import load_dataset
from limelight.rerank.budget import best_ranges, budget_table, depth_curve

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collections", nargs="+", default=["cranfield", "npl", "scifact"])
    ap.add_argument("--models", nargs="+", default=["knrm", "tk1", "tk2", "tk3"])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--benchmark", type=Path, default=OUT / "benchmark.json")
    ap.add_argument("--budgets", default="0:300:5")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from cv import concat  # same folder

    bench = json.loads(args.benchmark.read_text())
    speed = bench["docs_per_ms"]
    a, b, s = (float(x) for x in args.budgets.split(":"))
    budgets = list(np.arange(a, b + s / 2, s))
    results: dict = {"docs_per_ms": speed, "budgets": args.budgets}
    lines = []
    for name in args.collections:
        ds = load_dataset(name)
        folder = args.out / name
        first = read_run_parquet(folder / "bm25.parquet", "bm25")
        curves = {"nDCG@10": {}, "RR@10": {}}
        for m in args.models:
            parts = [folder / f"{m}.fold{f}.parquet" for f in range(args.folds)]
            if not all(p.exists() for p in parts):
                continue
            scored = concat([read_run_parquet(p) for p in parts], m)
            for meas in curves:
                curves[meas][m] = depth_curve(first, scored, ds.qrels, args.depth, meas)
        if not curves["nDCG@10"]:
            continue
        res = {}
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
            lines.append(f"\nunconstrained best depth (≤ {args.depth}): " + ", ".join(
                f"{m} {res[meas]['best_depth'][m]} ({res[meas]['best_value'][m]:.3f})" for m in cv))
        results[name] = res
        _plot(name, curves["nDCG@10"], speed, budgets, args.out / f"budget_{name}.png")
    (args.out / "budget_results.json").write_text(json.dumps(results, indent=1, default=float))
    text = "\n".join(lines)
    (args.out / "budget_results.md").write_text(text + "\n")
    print(text)
    return results


def _plot(name: str, curves: dict, speed: dict, budgets: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m, c in curves.items():
        depth = np.minimum(len(c) - 1, np.floor(np.asarray(budgets) * speed[m])).astype(int)
        ax.plot(budgets, c[depth], label=f"{m} ({speed[m]:.3g} docs/ms)")
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
