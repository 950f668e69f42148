"""Write the section of docs/results-exposure.md on topic-aware retrievability and attention
against merit (issue 56) from the committed results: every figure comes from
``experiments/topics/results/<setting>.json`` (``run.py``); nothing is typed by hand.

    .venv/bin/python experiments/topics/report.py [--doc docs/results-exposure.md]

The section sits between the markers ``<!-- topics:begin -->`` and ``<!-- topics:end -->`` (added
before "## Design decisions and deviations" the first time); the figures are
``docs/figures/exposure/topics_order.png`` and ``docs/figures/exposure/distfair.png``. ``--print``
prints the verdict figures (``summary()``) the rows of docs/results.md quote.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from limelight._io import atomic_path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from _shared import splice_section  # noqa: E402

BEGIN, END = "<!-- topics:begin -->", "<!-- topics:end -->"
SETTINGS = ("debian-log", "movies-log", "debian-click", "movies-click", "adi", "med", "cacm", "cranfield",
            "npl", "scifact")
SYSTEMS = ("bm25", "dense", "hybrid")
NAMES = {"bm25": "BM25", "dense": "MiniLM", "hybrid": "hybrid"}
VALUES = ("individual_aware", "individual_agnostic", "group_aware", "group_agnostic")
FIG = ROOT / "docs" / "figures" / "exposure"


def load() -> dict[str, dict]:
    out = {}
    for s in SETTINGS:
        p = HERE / "results" / f"{s}.json"
        if p.exists():
            out[s] = json.loads(p.read_text(encoding="utf-8"))
    return out


def ci(x: dict, fmt: str = ".3f") -> str:
    v = f"{x['value']:{fmt}}"
    return v if x.get("lo") is None else f"{v} [{x['lo']:{fmt}}, {x['hi']:{fmt}}]"


def order(r: dict, m: str) -> str:
    return " < ".join(NAMES[s] for s in r["order"][m])


def diff(r: dict, pair: str, m: str) -> dict:
    """The paired difference of measure ``m`` between the two systems of ``pair`` with its
    bias-corrected percentile interval (the raw percentiles less the difference of the two
    systems' bootstrap biases, as each system's own interval), and whether it excludes 0."""
    a, b = pair.split("-")
    c = r["pairs"][pair][m]
    bias = r["systems"][a][m].get("bias", 0.0) - r["systems"][b][m].get("bias", 0.0)
    lo, hi = c["lo"] - bias, c["hi"] - bias
    return {"value": c["value"], "lo": lo, "hi": hi, "excludes_0": lo > 0 or hi < 0}


def reversals(r: dict, a: str = "gini_global", b: str = "topic_mean") -> list[dict]:
    """Pairs of systems whose order differs between measures ``a`` and ``b``, with their
    paired-bootstrap differences (``significant_both``: both intervals exclude 0)."""
    out = []
    for pair in r["pairs"]:
        da, db = diff(r, pair, a), diff(r, pair, b)
        if (da["value"] > 0) != (db["value"] > 0):
            out.append({"pair": pair, a: da, b: db, "significant_both": da["excludes_0"] and db["excludes_0"]})
    return out


def distfair_rows(r: dict) -> list[tuple[str, str, str, dict]]:
    """(system, merit source, grouping, summary) of a setting's DistFaiR runs."""
    rows = []
    for key, block in (r.get("distfair") or {}).items():
        for g, s in block.items():
            rows.append((key, "judgments", g, s))
    for key, block in (r.get("distfair_reference") or {}).items():
        sys_, ref = key.split("|")
        for g, s in block.items():
            rows.append((sys_, f"{NAMES[ref]}'s scores", g, s))
    return rows


def summary(res: dict[str, dict]) -> dict:
    """The figures the verdict rows quote."""
    same = {s: r["order"]["gini_global"] == r["order"]["topic_mean"] for s, r in res.items()}
    rev = {s: reversals(r) for s, r in res.items()}
    n_bound = n_runs = 0
    min_share, min_margin = 1.0, float("inf")
    fw = []
    for s, r in res.items():
        for sys_, merit, g, d in distfair_rows(r):
            n_runs += 1
            ok = all(b["holds"] for b in d["bound"].values())
            n_bound += ok
            for b in d["bound"].values():
                min_share = min(min_share, b.get("holds_in_resamples", 1.0))
            min_margin = min(min_margin, d["bound"]["group_le_individual_aware"]["margin"],
                             d["bound"]["group_le_individual_agnostic"]["margin"])
            if g == "topics":
                fw.append((s, sys_, merit, d["individual_aware"]["value"], d["individual_agnostic"]["value"],
                           d["fairwashing"]["individual"]))
    return {"same_order": same, "reversals": rev, "bound_runs": n_runs, "bound_holds": n_bound,
            "bound_min_share_of_resamples": min_share, "bound_min_margin": min_margin, "fairwashing": fw}


def agnostic_flips(r: dict) -> list[str]:
    """Per merit source and grouping: the systems' order by query-aware and by query-agnostic
    individual unfairness, where they differ."""
    out = []
    by: dict[tuple[str, str], dict[str, dict]] = {}
    for sys_, merit, g, d in distfair_rows(r):
        by.setdefault((merit, g), {})[sys_] = d
    for (merit, g), d in by.items():
        if g != "topics" or len(d) < 2:
            continue
        aw = sorted(d, key=lambda s: d[s]["individual_aware"]["value"])
        ag = sorted(d, key=lambda s: d[s]["individual_agnostic"]["value"])
        if aw != ag:
            out.append(f"merit {merit}: aware {' < '.join(NAMES[s] for s in aw)}, "
                       f"agnostic {' < '.join(NAMES[s] for s in ag)}")
    return out


def finish(fig, axes, n: int, ylabel: str, legend: int, title: str, name: str) -> str:
    """Ends a figure of ``n`` panels on the grid ``axes``: the unused panels hidden, the first
    one's y label and legend (font size ``legend``), the title; writes it to ``FIG/name`` and
    returns ``name``."""
    import matplotlib.pyplot as plt

    for ax in axes.ravel()[n:]:
        ax.axis("off")
    axes[0, 0].set_ylabel(ylabel, fontsize=8)
    axes[0, 0].legend(fontsize=legend)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(FIG / name) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return name


def figure_order(res: dict[str, dict]) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    names = [s for s in SETTINGS if s in res]
    cols = 5
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.9 * rows), dpi=110, squeeze=False)
    for ax, s in zip(axes.ravel(), names, strict=False):
        r = res[s]
        for i, sysn in enumerate(SYSTEMS):
            g = r["systems"][sysn]
            ys = [g["gini_global"], g["topic_mean"]]
            x = [0 + 0.04 * (i - 1), 1 + 0.04 * (i - 1)]
            err = [[max(y["value"] - y.get("lo", y["value"]), 0) for y in ys],
                   [max(y.get("hi", y["value"]) - y["value"], 0) for y in ys]]
            ax.errorbar(x, [y["value"] for y in ys], yerr=err, marker="o", ms=4, capsize=2, label=NAMES[sysn])
        ax.set_xticks([0, 1], [f"global\n(c = {r['c']})", f"mean of\nK = {r['k']} topics"], fontsize=8)
        ax.set_xlim(-0.4, 1.4)
        same = r["order"]["gini_global"] == r["order"]["topic_mean"]
        ax.set_title(f"{s}: order {'kept' if same else 'changes'}", fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    return finish(fig, axes, len(names), "Gini (95 % bootstrap interval)", 7,
                  "Global Gini against the mean per-topic Gini (T-Retrievability), per system",
                  "topics_order.png")


def figure_distfair(res: dict[str, dict]) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    names = [s for s in SETTINGS if s in res and distfair_rows(res[s])]
    cols = 5
    rows = max(1, (len(names) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), dpi=110, squeeze=False)
    labels = {"individual_aware": "individual, query-aware", "individual_agnostic": "individual, query-agnostic",
              "group_aware": "topic groups, query-aware", "group_agnostic": "topic groups, query-agnostic"}
    for ax, s in zip(axes.ravel(), names, strict=False):
        rows_ = [(sy, m, d) for sy, m, g, d in distfair_rows(res[s]) if g == "topics"]
        x = np.arange(len(rows_))
        for j, v in enumerate(VALUES):
            vals = [d[v]["value"] for _, _, d in rows_]
            lo = [d[v]["value"] - d[v].get("lo", d[v]["value"]) for _, _, d in rows_]
            hi = [d[v].get("hi", d[v]["value"]) - d[v]["value"] for _, _, d in rows_]
            ax.bar(x + 0.2 * (j - 1.5), vals, 0.2, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)],
                   capsize=1.5, label=labels[v])
        ax.set_xticks(x, [NAMES[sy] + ("" if m == "judgments" else f"\n({m.split(chr(39))[0]})")
                          for sy, m, _ in rows_], fontsize=6.5)
        ax.set_title(s, fontsize=9)
        ax.set_ylim(0, 1)
        ax.tick_params(axis="y", labelsize=8)
    return finish(fig, axes, len(names), "unfairness (total variation)", 6,
                  "Attention against merit over the queries (DistFaiR, TV): individual ≥ group, "
                  "query-aware ≥ query-agnostic", "distfair.png")


def section(res: dict[str, dict]) -> str:
    L = [BEGIN, "", "## Exposure in context: topic-aware retrievability and attention against merit (issue 56)", "",
         "Command: `flock /tmp/heavy.lock .venv/bin/python experiments/topics/run.py` (results: "
         "`experiments/topics/results/<setting>.json`), then `.venv/bin/python experiments/topics/report.py` "
         "(this section and the two figures). Systems: BM25 (k1 0.9, b 0.4), all-MiniLM-L6-v2, RRF (k = 60) of "
         "both, top 100. Topics: K-means over the queries' TF-IDF (LSA 50 dimensions, seed 0), the same for the "
         "three systems; K = 20 on the log and the Click test sets, K = 5 on the judged collections (30 to 300 "
         "queries). Global Gini: limelight's r(d) = Σ o_q 1[k ≤ c] over every document, c = 100 on the catalogs "
         "and 10 on the judged collections (a top 100 holds all of adi's 82 documents); per-topic Gini: the "
         "paper's r_i(d) = Σ o_q / ln(1 + k) within the topic over the documents its queries retrieve. Intervals: "
         "bias-corrected percentile intervals of one bootstrap over the queries (o_q kept; the same resamples for "
         "the three systems, so differences are paired): 100 resamples on the log, 200 elsewhere.", ""]
    L += ["### Does the order of systems by the global Gini survive within topics?", "",
          "| setting | queries | K | c | system | global Gini | rank-weighted Gini (K = 1) | per-topic min | "
          "per-topic mean | per-topic max | traffic-weighted mean |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s, r in res.items():
        for sysn in SYSTEMS:
            g = r["systems"][sysn]
            L.append(f"| {s} | {r['n_queries']:,} | {r['k']} | {r['c']} | {NAMES[sysn]} | {ci(g['gini_global'])} | "
                     f"{ci(g['gini_rank'])} | {g['topic_min']['value']:.3f} | {ci(g['topic_mean'])} | "
                     f"{g['topic_max']['value']:.3f} | {ci(g['topic_weighted'])} |")
    L += ["", "| setting | order by global Gini (most even first) | order by mean per-topic Gini | "
              "order by traffic-weighted per-topic Gini | pairs that swap: global Gini difference; mean per-topic "
              "Gini difference (paired bootstrap, 95 % bias-corrected intervals) |",
          "|---|---|---|---|---|"]
    for s, r in res.items():
        rv = reversals(r)
        cells = "; ".join(f"{' − '.join(NAMES[x] for x in p['pair'].split('-'))}: {ci(p['gini_global'], '+.3f')}, "
                          f"{ci(p['topic_mean'], '+.3f')}" + (" **both significant**" if p["significant_both"] else "")
                          for p in rv) or "none"
        L.append(f"| {s} | {order(r, 'gini_global')} | {order(r, 'topic_mean')} | {order(r, 'topic_weighted')} | {cells} |")
    L += ["", "The order by the mean per-topic Gini under other topic models (point estimates; TF-IDF "
          "K-means for K = 5, 10, 20, 50 where the queries allow five per topic, and on the Debian log "
          "K-means over the demo audit's MiniLM query vectors):", "",
          "| setting | global Gini | per-topic Gini by topic model |", "|---|---|---|"]
    for s, r in res.items():
        cells = "; ".join(f"{'vectors' if 'vectors' in x['model'] else 'TF-IDF'} K = {x['k']}: "
                          f"{' < '.join(NAMES[y] for y in x['order_mean'])}" for x in r.get("sweep", []))
        L.append(f"| {s} | {order(r, 'gini_global')} | {cells} |")
    L += ["", "![global against per-topic Gini](figures/exposure/topics_order.png)", "",
          "### Attention against merit: the DistFaiR bound and query-agnostic accounting", "",
          "Total variation between the attention distribution (dcg browsing, accumulated over the queries with "
          "o_q) and the merit distribution (each query's attention owed in proportion to its merit: judgments, or "
          "on the log another system's scores, an assumption); groups: the topics (the BM25 store's assignment, a "
          "document split over the topics whose queries retrieve it) and, on the catalogs' Click sets, the "
          "catalog's field (Debian `section`, movies `Major Genre`). Fairwashing = query-aware − query-agnostic "
          "individual unfairness (attention given for the wrong queries, cancelled in the per-document sums).", "",
          "| setting | system | merit | groups | individual, aware | individual, agnostic | group, aware | "
          "group, agnostic | fairwashing (individual) | bound holds (point; share of resamples) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for s, r in res.items():
        for sysn, merit, g, d in distfair_rows(r):
            share = min(b.get("holds_in_resamples", 1.0) for b in d["bound"].values())
            holds = all(b["holds"] for b in d["bound"].values())
            L.append(f"| {s} | {NAMES[sysn]} | {merit} | {g} | {ci(d['individual_aware'])} | "
                     f"{ci(d['individual_agnostic'])} | {ci(d['group_aware'])} | {ci(d['group_agnostic'])} | "
                     f"{ci(d['fairwashing']['individual'])} | {'yes' if holds else '**no**'}; {share:.0%} |")
    flips = [(s, agnostic_flips(r)) for s, r in res.items()]
    L += ["", "Where the query-agnostic accounting reorders the systems (individual unfairness, topic groups' runs): "
          + ("; ".join(f"{s}: " + " / ".join(f) for s, f in flips if f) or "nowhere") + ".", "",
          "![DistFaiR values per setting](figures/exposure/distfair.png)", "", END, ""]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "results-exposure.md")
    ap.add_argument("--print", action="store_true", help="print the verdict figures")
    a = ap.parse_args()
    res = load()
    if a.print:
        print(json.dumps(summary(res), indent=1, default=str))
        return
    figure_order(res)
    figure_distfair(res)
    text = a.doc.read_text(encoding="utf-8")
    new = section(res)
    with atomic_path(a.doc) as tmp:
        tmp.write_text(splice_section(text, new, BEGIN, END), encoding="utf-8")
    print(f"wrote {a.doc} and {FIG / 'topics_order.png'}, {FIG / 'distfair.png'}")


if __name__ == "__main__":
    main()
