"""Changing it (issue 45, item 5): Plackett-Luce policies and a deterministic exposure-balancing
re-ranker as interventions on group fairness, against nDCG@10 and R@100, on the CtrlQGen Click
test sets — over a candidate pool deeper than what is shown.

    flock /tmp/heavy.lock .venv/bin/python experiments/fairness/intervention.py
        [--work /tmp/limelight-fairness] [--pool 1000] [--k 100] [--samples 32] [--seed 0]
        [--refine 4] [--boot 200] [--catalogs debian,movies] [--systems bm25,dense,hybrid]

Every Plackett-Luce point carries bootstrap intervals (``--boot`` resamples of the queries,
``limelight.exposure.balance.bootstrap_top_k``) of its largest deficit, total variation, nDCG@10
and R@100 (issue 56 item 3); the re-ranker's targets are labelled with what they saw of the test
set (``SAW_TEST``).
    .venv/bin/python experiments/fairness/report.py

What is measured is what the report's judged tables measure: each query's ranking shown down to
rank ``k`` (100), the exposure share of every group (μ = 1/log2(rank+1), o_q = 1) against the
merit target (each query's exposure to the group of the entity it was written for), the largest
group deficit (the most negative gap, whichever group holds it), nDCG@10 and R@100 on the Click
test qrels. With no intervention this is the ranker's top k (the report's tables, up to ties at
rank k). The interventions choose that top k from each query's top ``pool`` (1,000) of the same
system (``limelight exposure compute --depth POOL``):

- **Plackett-Luce** over the pool (temperature relative to the spread of the query's pool
  scores; ``--samples`` sampled rankings per query, seeded; ``limelight.exposure.balance.
  pool_policy_figures``): a grid of temperatures from 0 (the ranker) to ∞ (the top k a uniform
  sample of the pool);
- **the greedy re-ranker** (``limelight.exposure.balance``) over the pool, toward two targets
  that use no test judgment: the groups' shares of the catalog, and the groups' shares of the
  entities of the Click *training* set (what a platform can estimate from its own past clicks);
  a grid of strengths λ, with the pool = k (the ranker's own top k re-ordered) for comparison.

Per catalog, system, grouping and intervention, the first grid point whose largest deficit is at
most half the no-intervention one brackets the halving point; ``--refine`` bisection steps
narrow the bracket (in u = T/(1+T) for temperatures, in λ for strengths), the knob is then
interpolated linearly between the bracket's ends, and the intervention is *measured* at the
interpolated knob (its deficit, nDCG@10 and R@100). Every evaluated point is cached in
``WORK/intervention/`` (per catalog × system × settings), so a killed run resumes where it
stopped (delete that folder after changing the code). ``--catalogs``/``--systems`` subsets
are merged into ``results/intervention.json`` when it was written with the same settings (pool,
k, samples, seed, refine, boot): a long run can be done a catalog or a system at a time; with
other settings the file is rewritten with the subset only. Results: ``results/intervention.json``
(per catalog × system its timing and the load average when it finished); curves:
``docs/figures/exposure/fairness_intervention.png|svg``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from limelight._io import atomic_path
from limelight.data.formats import read_trec_qrels
from limelight.exposure.balance import (
    balance_ranks,
    bootstrap_top_k,
    pool_policy_figures,
    ranking_figures,
    top_k_target,
)
from limelight.exposure.fairness import Groups, Merit
from limelight.exposure.store import ExposureStore

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import FIELDS, SYSTEMS, click_files, index_for, limelight  # noqa: E402

TEMPS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, math.inf]
STRENGTHS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
TARGETS = ("catalog", "train")
#: what each re-ranker target saw of the test set (issue 56 item 3: curves labelled with it)
SAW_TEST = {"catalog": "none (the groups' shares of the catalog)",
            "train": "no test query or judgment, but drawn from the same query generator (CtrlQGen "
                     "Click) as the test queries: the train and test sets share their distribution"}


def store(catalog: str, system: str, work: Path, idx: Path, qfile: Path, depth: int) -> ExposureStore:
    """Each Click test query's top ``depth`` of ``system`` (computed once into ``work``)."""
    out = work / catalog / f"click{depth}" / system
    m = out / "manifest.json"
    if not m.exists() or not json.loads(m.read_text()).get("complete"):
        limelight("exposure", "compute", "--index", str(idx), "--queries", str(qfile), "--model", system,
                  "--depth", str(depth), "--out", str(out))
    return ExposureStore.open(out)


def train_target(catalog: str, st: ExposureStore, groups: Groups) -> np.ndarray:
    """Each group's share of the entities of the Click training set (one per training query)."""
    df = pd.read_parquet(ROOT / "experiments" / "ctrlqgen" / "results" / catalog / "weaklabels" / "click_train.parquet")
    codes = st.doc_ids.encode(df["entity_id"].astype(str), missing=-1)
    codes = codes[codes >= 0]
    t = np.bincount(codes, minlength=groups.n_docs) @ groups.matrix
    return np.asarray(t, dtype=np.float64) / t.sum()


class Points:
    """Evaluated points of one catalog × system, cached on disk after each evaluation."""

    def __init__(self, path: Path, settings: dict):
        self.path = path
        self.data: dict = {}
        if path.exists():
            old = json.loads(path.read_text())
            if old.get("settings") == settings:
                self.data = old["points"]
        self.settings = settings
        self.computed = 0  # points evaluated by this run (0: every one came from the cache)

    def get(self, key: str, compute):
        if key not in self.data:
            self.computed += 1
            t = time.perf_counter()
            self.data[key] = {**compute(), "seconds": time.perf_counter() - t}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.path) as tmp:
                tmp.write_text(json.dumps({"settings": self.settings, "points": self.data}))
        return self.data[key]


def _u(x: float, kind: str) -> float:
    return x if kind == "strength" else (1.0 if math.isinf(x) else x / (1.0 + x))


def _x(u: float, kind: str) -> float:
    return u if kind == "strength" else (math.inf if u >= 1.0 else u / (1.0 - u))


def _row(x: float, f: dict, field: str, kind: str) -> dict:
    g = f[field]
    row = {kind: x, "largest_deficit": g["largest_deficit"], "deficit_group": g["deficit_group"],
           "tvd": g["tvd"], "ndcg@10": f["ndcg@10"], "r@100": f["r@100"]}
    if "ci" in f:  # the bootstrap intervals of the Plackett-Luce points (issue 56 item 3)
        row["ci"] = {"largest_deficit": f["ci"][f"{field}.largest_deficit"], "tvd": f["ci"][f"{field}.tvd"],
                     "ndcg@10": f["ci"]["ndcg@10"], "r@100": f["ci"]["r@100"]}
    return row


def locate(evaluate, grid: list[float], field: str, kind: str, refine: int) -> dict:
    """The curve over ``grid`` and, if some point reaches half the first point's largest deficit,
    the halving point: the first grid bracket, ``refine`` bisection steps in u, the knob
    interpolated linearly in u between the bracket's ends, and the figures measured there."""
    curve = [_row(x, evaluate(x), field, kind) for x in grid]
    base = curve[0]
    half = abs(base["largest_deficit"]) / 2
    best = min(curve, key=lambda r: abs(r["largest_deficit"]))
    out = {"curve": curve, "best": {kind: best[kind], "largest_deficit": best["largest_deficit"],
                                    "deficit_group": best["deficit_group"],
                                    "cut": 1 - abs(best["largest_deficit"]) / abs(base["largest_deficit"])
                                    if base["largest_deficit"] else None,
                                    "ndcg@10": best["ndcg@10"], "r@100": best["r@100"]},
           "halving": None}
    i = next((j for j, r in enumerate(curve) if j and abs(r["largest_deficit"]) <= half), None)
    if i is None or not half:
        return out
    lo, hi = curve[i - 1], curve[i]
    steps = []
    for _ in range(refine):
        mid = _x((_u(lo[kind], kind) + _u(hi[kind], kind)) / 2, kind)
        r = _row(mid, evaluate(mid), field, kind)
        steps.append(r)
        if abs(r["largest_deficit"]) <= half:
            hi = r
        else:
            lo = r
    dlo, dhi = abs(lo["largest_deficit"]), abs(hi["largest_deficit"])
    ulo, uhi = _u(lo[kind], kind), _u(hi[kind], kind)
    ustar = ulo + (dlo - half) / (dlo - dhi) * (uhi - ulo) if dlo > dhi else uhi
    xstar = _x(ustar, kind)
    at = _row(xstar, evaluate(xstar), field, kind)
    out["halving"] = {kind: xstar, "bracket": [lo[kind], hi[kind]], "target_deficit": -half,
                      "largest_deficit": at["largest_deficit"], "deficit_group": at["deficit_group"],
                      "ndcg@10": at["ndcg@10"], "r@100": at["r@100"],
                      "ndcg@10_cost": at["ndcg@10"] - base["ndcg@10"], "r@100_cost": at["r@100"] - base["r@100"],
                      "refined": steps}
    if "ci" in at:  # the Plackett-Luce point measured at the interpolated knob, with its intervals
        out["halving"]["ci"] = at["ci"]
    return out


def plot(r: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(c, f) for c in r["results"] for f in r["fields"][c]]
    fig, axes = plt.subplots(len(panels), 2, figsize=(10, 3.3 * len(panels)), squeeze=False)
    styles = {"pl": ("-o", "Plackett-Luce T"),
              f"rerank:catalog:{r['pool']}": ("--s", "re-ranker λ → catalog (saw no test information)"),
              f"rerank:train:{r['pool']}": (":^", "re-ranker λ → train demand (same generator as the test set)")}
    for i, (cat, field) in enumerate(panels):
        for n, s in enumerate(r["results"][cat]):
            res = r["results"][cat][s][field]
            for key, (style, what) in styles.items():
                c = res[key]["curve"]
                x = [100 * abs(p["largest_deficit"]) for p in c]
                for j, m in enumerate(("ndcg@10", "r@100")):
                    axes[i, j].plot(x, [p[m] for p in c], style, color=f"C{n}", markersize=3,
                                    label=f"{s}: {what}")
                    if key == "pl" and all("ci" in p for p in c):  # 95 % intervals, both axes
                        ci = [p["ci"] for p in c]
                        axes[i, j].errorbar(
                            x, [p[m] for p in c], fmt="none", ecolor=f"C{n}", elinewidth=0.6, alpha=0.7,
                            yerr=[[max(p[m] - q[m]["lo"], 0) for p, q in zip(c, ci, strict=True)],
                                  [max(q[m]["hi"] - p[m], 0) for p, q in zip(c, ci, strict=True)]],
                            xerr=[[max(xx - 100 * abs(q["largest_deficit"]["hi"]), 0) for xx, q in zip(x, ci, strict=True)],
                                  [max(100 * abs(q["largest_deficit"]["lo"]) - xx, 0) for xx, q in zip(x, ci, strict=True)]])
        base = [100 * abs(r["results"][cat][s][field]["pl"]["curve"][0]["largest_deficit"]) / 2
                for s in r["results"][cat]]
        for j, m in enumerate(("ndcg@10", "r@100")):
            ax = axes[i, j]
            for n, b in enumerate(base):
                ax.axvline(b, color=f"C{n}", lw=0.6, alpha=0.6)
            ax.set_xlabel(f"largest deficit ({field}), points; line: half the ranker's")
            ax.set_ylabel(m)
            ax.set_title(f"{cat}, {field}: pool {r['pool']}, top {r['k']} shown", fontsize=9)
            ax.invert_xaxis()
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=100)
    plt.close(fig)


def save(saved: Path, a: argparse.Namespace, results: dict, fields: dict, timing: dict) -> None:
    """``results/intervention.json`` as it stands (written after every catalog × system), the
    catalogs and systems in their usual order whatever order the runs came in."""
    cats = sorted(results, key=lambda c: list(FIELDS).index(c) if c in FIELDS else len(FIELDS))
    results = {c: {s: results[c][s] for s in sorted(results[c], key=lambda s: SYSTEMS.index(s)
                                                   if s in SYSTEMS else len(SYSTEMS))} for c in cats}
    fields = {c: fields[c] for c in cats}
    out = {"results": results, "fields": fields, "pool": a.pool, "k": a.k,
           "samples": a.samples, "seed": a.seed, "refine": a.refine, "temperatures": TEMPS,
           "strengths": STRENGTHS, "targets": {"catalog": "the groups' shares of the catalog",
                                               "train": "the groups' shares of the Click training set's entities"},
           "saw_test": SAW_TEST, "boot": a.boot,
           "timing": timing, "load": list(os.getloadavg())}
    with atomic_path(saved) as tmp:
        tmp.write_text(json.dumps(out, indent=1, ensure_ascii=False,
                                  default=lambda x: None if x != x else x).replace("Infinity", '"inf"'))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-fairness"))
    ap.add_argument("--pool", type=int, default=1000, help="candidates per query (the store's depth)")
    ap.add_argument("--k", type=int, default=100, help="the ranking shown and measured: its top k")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--refine", type=int, default=4, help="bisection steps inside the halving bracket")
    ap.add_argument("--boot", type=int, default=200,
                    help="bootstrap resamples of the queries for the Plackett-Luce points' intervals")
    ap.add_argument("--catalogs", default="debian,movies")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from results/intervention.json")
    a = ap.parse_args()
    fig = ROOT / "docs" / "figures" / "exposure" / "fairness_intervention"
    saved = HERE / "results" / "intervention.json"
    if a.plot_only:
        plot(json.loads(saved.read_text()), fig)
        return
    if not 1 <= a.k <= a.pool:
        sys.exit(f"--k must lie in 1..--pool ({a.pool}), got {a.k}")
    same = {"pool": a.pool, "k": a.k, "samples": a.samples, "seed": a.seed, "refine": a.refine, "boot": a.boot}
    prev = json.loads(saved.read_text()) if saved.exists() else {}
    if prev and all(prev.get(key) == v for key, v in same.items()):  # a subset run adds to the last one
        results, timing = prev["results"], prev.get("timing", {})
        fields = prev["fields"]
    else:
        results, timing, fields = {}, {}, {}
    for catalog in a.catalogs.split(","):
        idx = index_for(catalog, a.work)
        qfile, qrels = click_files(catalog, a.work)
        results.setdefault(catalog, {})
        fields[catalog] = list(FIELDS[catalog])
        for s in a.systems.split(","):
            t0 = time.perf_counter()
            st = store(catalog, s, a.work, idx, qfile, a.pool)
            groupings = {f: Groups.from_field(st, f, idx) for f in FIELDS[catalog]}
            merit = Merit.from_qrels(read_trec_qrels(qrels), st, "CtrlQGen Click test")
            q, d, rank, score = st.pair_arrays()
            w = st.queries.weights
            tk = top_k_target(q, w, merit, groupings, a.k)
            settings = {"pool": a.pool, "k": a.k, "samples": a.samples, "seed": a.seed, "boot": a.boot,
                        "store": st.manifest.get("queries"), "n_pairs": int(len(q))}
            pts = Points(a.work / "intervention" / f"{catalog}-{s}.json", settings)

            def pl(t: float, pts=pts, tk=tk, groupings=groupings, q=q, d=d, rank=rank, score=score):
                def go():
                    f = pool_policy_figures(tk, groupings, q, d, rank, score, t, a.samples, a.seed, per_query=True)
                    f["ci"] = bootstrap_top_k(tk, f.pop("per_query"), groupings, a.boot, seed=a.seed)
                    return f
                return pts.get(f"pl:{t!r}", go)

            results[catalog][s] = {}
            for field, groups in groupings.items():
                entry = {"pl": locate(pl, TEMPS, field, "temperature", a.refine)}
                for target in TARGETS:
                    tau = None if target == "catalog" else train_target(catalog, st, groups)
                    for pool in (a.k, a.pool):
                        cand = rank <= pool

                        def rr(lam: float, field=field, groups=groups, tau=tau, pool=pool, cand=cand,
                               target=target, pts=pts, tk=tk, q=q, d=d, rank=rank):
                            def go():
                                new = balance_ranks(q[cand], d[cand], rank[cand], groups, lam, tau, "dcg", k=a.k)
                                f = ranking_figures(tk, {field: groups}, q[cand], d[cand], new)
                                f["moved"] = float(np.mean(new[new <= a.k] != rank[cand][new <= a.k]))
                                return f
                            return pts.get(f"rr:{field}:{target}:{pool}:{lam!r}", go)

                        entry[f"rerank:{target}:{pool}"] = locate(rr, STRENGTHS, field, "strength", a.refine)
                        if target == "train":
                            entry[f"rerank:{target}:{pool}"]["target"] = dict(zip(groups.names, map(float, tau),
                                                                                  strict=True))
                results[catalog][s][field] = entry
                print(catalog, s, field, {k: (v["halving"] or {}).get("temperature", (v["halving"] or {}).get("strength"))
                                          for k, v in entry.items()}, flush=True)
            if not pts.computed and f"{catalog}/{s}" in timing:  # all from the cache: keep the real run's
                save(saved, a, results, fields, timing)
                continue
            timing[f"{catalog}/{s}"] = {"seconds": time.perf_counter() - t0,
                                        "point_seconds": sum(p.get("seconds", 0.0) for p in pts.data.values()),
                                        "load": list(os.getloadavg()),
                                        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            save(saved, a, results, fields, timing)
    plot(json.loads(saved.read_text()), fig)


if __name__ == "__main__":
    main()
