"""Render experiments/ctrlqgen/results.json as the markdown tables of docs/results-ctrlqgen.md.

    .venv/bin/python experiments/ctrlqgen/report.py [results.json]
"""

from __future__ import annotations

import json
import sys

PAPER_BOOKS = {  # Table 2, Books column (the paper's synthetic Click protocol): R@100, Gini
    "BM25": (0.721, 0.779), "zero-shot": (0.415, 0.836), "InPars": (0.492, 0.842),
    "QGen": (0.755, 0.766), "CtrlQGen_narrow": (0.770, 0.762), "Click+CtrlQGen": (0.775, 0.768),
    "Click": (0.769, 0.767)}
PAPER_TRACKS_BROAD = {  # Table 3, Tracks_broad: R@100, Gini
    "CtrlQGen_broad": (0.074, 0.596), "Click": (0.035, 0.878), "CtrlQGen_both": (0.033, 0.492),
    "InPars": (0.010, 0.489), "QGen": (0.009, 0.540), "CtrlQGen_narrow": (0.003, 0.517)}


def main(path: str) -> None:
    r = json.loads(open(path).read())
    s = r["summary"]
    print("| model | R@100 Click test | R@100 broad test | Gini (log, c = --c) | r>0 fraction | paper Books R@100 / Gini | paper Tracks_broad R@100 / Gini |")
    print("|---|---|---|---|---|---|---|")
    for m, v in s.items():
        pb = "{:.3f} / {:.3f}".format(*PAPER_BOOKS[m]) if m in PAPER_BOOKS else "-"
        pt = "{:.3f} / {:.3f}".format(*PAPER_TRACKS_BROAD[m]) if m in PAPER_TRACKS_BROAD else "-"
        print(f"| {m} | {v['R@100_click_test']:.3f} | {v['R@100_broad_test']:.3f} | "
              f"{v['gini_log']:.3f} | {v['retrievable_fraction_log']:.3f} | "
              f"{pb} | {pt} |")
    print()
    print("Selected tests (Bonferroni-corrected p over all", len(r["tests"]), "pairs):")
    print()
    print("| pair | p R@100 Click test | p R@100 broad test | Gini diff [95% CI] | p Gini |")
    print("|---|---|---|---|---|")
    keys = [k for k in r["tests"] if "Click vs" in k or k.endswith("vs Click") or "zero-shot vs" in k]
    for k in keys:
        t = r["tests"][k]
        print(f"| {k} | {t['p_click_test_bonf']:.3g} | {t['p_broad_test_bonf']:.3g} | "
              f"{t['gini_diff']:+.3f} [{t['gini_ci'][0]:+.3f}, {t['gini_ci'][1]:+.3f}] | {t['p_gini_bonf']:.3g} |")
    print()
    print("Figure 4 analog (Gini / retrievable fraction vs acceptance of broad suggestions):")
    print()
    print("| model / suggestions | n suggestions | " + " | ".join(
        f"{c['acceptance']:.0%}" for c in next(iter(r["fig4"].values()))["curve"]) + " |")
    print("|---|---|" + "---|" * len(next(iter(r["fig4"].values()))["curve"]))
    for k, v in r["fig4"].items():
        print(f"| {k} | {v['n_suggestions']} | " + " | ".join(
            f"{c['gini']:.4f} / {c['retrievable_fraction']:.3f}" for c in v["curve"]) + " |")
    if r.get("ablation"):
        print()
        print("Table 4 analog (components added to QGen; p and Gini differences vs QGen: paired t, "
              "paired bootstrap):")
        print()
        print("| row | R@100 Click test (p) | Gini, narrow model (diff, p) | R@100 broad test (p) | "
              "Gini, broad model (diff, p) |")
        print("|---|---|---|---|---|")
        # the paper's row order (older result files list the full CtrlQGen second)
        rows = sorted(r["ablation"].items(), key=lambda kv: (kv[0] != "QGen", "(1,2a,2b,3)" in kv[0]))
        for k, t in rows:
            def cell(v, p=None, d=None):
                return f"{v:.3f}" + ("" if p is None else f" ({'' if d is None else f'{d:+.3f}, '}p={p:.2g})")
            print(f"| {k} | {cell(t['R@100_click_test'], t.get('p_click_test_vs_qgen'))} | "
                  f"{cell(t['gini_log_narrow_model'], t.get('p_gini_narrow_vs_qgen'), t.get('gini_narrow_diff_vs_qgen'))} | "
                  f"{cell(t['R@100_broad_test'], t.get('p_broad_test_vs_qgen'))} | "
                  f"{cell(t['gini_log_broad_model'], t.get('p_gini_broad_vs_qgen'), t.get('gini_broad_diff_vs_qgen'))} |")
    print()
    v = r["validity"]
    print("Validity and appendix D:", json.dumps({k: v[k] for k in v if k != "examples"}, indent=1))
    print("IP agreement with WeakLabeling-Un intents:", r["ip_agreement_with_wl_un"])
    print("Examples:", v["examples"])
    print("Timings:", r["timings"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "experiments/ctrlqgen/results.json")
