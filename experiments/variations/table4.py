"""Table 4 analog: BM25 and MiniLM (dense) on cranfield, npl and scifact under every available
query variation method (one variant per query and method, seed 0).

    .venv/bin/python experiments/variations/table4.py [cranfield npl scifact] [--tk CKPT] [--systems bm25,dense]

Writes experiments/variations/out/table4_<collection>.{md,json,png} and variants_<collection>.tsv.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from limelight.data import load_dataset
from limelight.querygen.robustness import build_systems, robustness_report
from limelight.querygen.variations import generate_variations

OUT = Path(__file__).resolve().parent / "out"


def save_report(rep, stem: str) -> None:
    """``out/<stem>.{md,json,png}`` of a robustness report; the table is also printed."""
    md = rep.to_markdown()
    (OUT / f"{stem}.md").write_text(md, encoding="utf-8")
    rep.to_json(OUT / f"{stem}.json")
    rep.plot(OUT / f"{stem}.png")
    print(md)


def main(argv: list[str]) -> None:
    tk = None
    if "--tk" in argv:
        i = argv.index("--tk")
        tk = Path(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    systems_spec = "bm25,dense"
    if "--systems" in argv:
        i = argv.index("--systems")
        systems_spec = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    names = argv or ["cranfield", "npl", "scifact"]
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.time()
        ds = load_dataset(name)
        var = generate_variations(ds.queries, "all", n=1, seed=0)
        var.write_tsv(OUT / f"variants_{name}.tsv")
        t1 = time.time()
        systems = build_systems(ds.collection, systems_spec, k=1000, tk=tk)
        rep = robustness_report(systems, ds.queries, ds.qrels, variations=var, measure="nDCG@10",
                                mode="both" if tk else "full", dataset=name, progress=True)
        save_report(rep, f"table4_{name}")
        print(f"{name}: variations {t1 - t0:.1f} s, report {time.time() - t1:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
