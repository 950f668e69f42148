"""Tables 2, 3 and 4 of the lexirecall paper (Diaz & Mitra, TOIS 2023): closed forms, simulation
and the paper's printed values, as Markdown (``docs/results-evaluation.md``).

    .venv/bin/python experiments/lexirecall/simulate.py [--pairs 20000] [--seed 0]
"""

from __future__ import annotations

from limelight.evaluation.simulate import (
    COLS,
    TABLE2_PAPER,
    TABLE3_PAPER,
    TABLE4_PAPER,
    simulate_worst_case_agreement,
    table_ties,
)


def main() -> None:
    """Print Tables 2, 3 and 4 (closed forms, simulation, the paper's values) as Markdown."""
    import argparse

    ap = argparse.ArgumentParser(description="Reproduce Tables 2-4 of the lexirecall paper")
    ap.add_argument("--pairs", type=int, default=20000, help="simulated pairs per cell (Tables 3-4)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    fmt = "{:.3f}".format
    print(f"### Table 3 (m = 10): closed form / simulated ({args.pairs} pairs) / paper\n")
    print("| n | " + " | ".join(COLS) + " |\n|---|" + "---|" * len(COLS))
    for n, paper in TABLE3_PAPER.items():
        row = table_ties(n, 10, args.pairs, args.seed)
        cells = [f"{'–' if row[c][0] is None else fmt(row[c][0])} / {fmt(row[c][1])} / {fmt(p)}"
                 for c, p in zip(COLS, paper, strict=True)]
        print(f"| 10^{len(str(n)) - 1} | " + " | ".join(cells) + " |")
    print(f"\n### Table 4 (n = 10^6): closed form / simulated ({args.pairs} pairs) / paper\n")
    print("| m | " + " | ".join(COLS) + " |\n|---|" + "---|" * len(COLS))
    for m, paper in TABLE4_PAPER.items():
        row = table_ties(10 ** 6, m, args.pairs, args.seed)
        cells = [f"{'–' if row[c][0] is None else fmt(row[c][0])} / {fmt(row[c][1])} / {fmt(p)}"
                 for c, p in zip(COLS, paper, strict=True)]
        print(f"| {m} | " + " | ".join(cells) + " |")
    print("\n### Table 2 (10,000 pairs, m ~ U(5, 50)): simulated / paper\n")
    keys = ("tied", "TSE", "R@1000", "Rprec", "AP", "nDCG", "random")
    print("| n | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for n, paper in TABLE2_PAPER.items():
        got = simulate_worst_case_agreement(n, 10000, seed=args.seed)
        print(f"| 10^{len(str(n)) - 1} | " + " | ".join(f"{fmt(got[k])} / {fmt(p)}" for k, p in
                                                       zip(keys, paper, strict=True)) + " |")


if __name__ == "__main__":
    main()
