"""Benchmark: evaluating 20+ runs with six measures (limelight vs ir_measures vs ranx), and
all-pairs lexirecall (limelight vs a straightforward per-query Python implementation).

Runs: BM25 (limelight.retrieval.bm25) with several k1/b, RRF/CombSUM fusions of them and
score-perturbed variants, on npl and scifact, depth 1000 (no dense runs: encoding the corpora
with MiniLM on CPU takes minutes and is not what this benchmark measures).

Each tool's "cold" figure is its first evaluation call in a fresh Python process (including any
JIT compilation or cache loading, excluding module import, reported apart); "warm" is the
second call in the same process. ranx's object build (Qrels/Run from dicts) is reported apart.

    .venv/bin/python benchmarks/evaluation.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("LIMELIGHT_DATA", REPO.parent / "shared" / "data"))
COLLECTIONS = ("npl", "scifact")
MEASURES_LL = ["AP", "nDCG@10", "RR", "P@10", "R@100", "R@1000"]
MEASURES_RANX = ["map", "ndcg@10", "mrr", "precision@10", "recall@100", "recall@1000"]


def make_runs(collection: str, out_dir: Path) -> list[Path]:
    """Write 12 runs of ``collection`` (6 BM25, 3 fusions, 3 perturbed) as TREC files."""
    from limelight.data.formats import write_trec_qrels, write_trec_run
    from limelight.data.loaders import load_dataset
    from limelight.evaluation.synthetic import perturb_run
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.fusion import combsum, rrf

    ds = load_dataset(collection)
    index = BM25Index.build(ds.collection)
    runs = []
    for k1 in (0.6, 0.9, 1.2):
        for b in (0.4, 0.75):
            runs.append(BM25(index, k1=k1, b=b).retrieve(ds.queries, 1000).rename(f"bm25_k1{k1}_b{b}"))
    runs.append(rrf(runs[0], runs[3]).topk(1000).rename("rrf_a"))
    runs.append(rrf(runs[1], runs[5]).topk(1000).rename("rrf_b"))
    runs.append(combsum(runs[2], runs[4]).topk(1000).rename("combsum"))
    for i, s in enumerate((0.05, 0.2, 0.5)):
        runs.append(perturb_run(runs[1], s, seed=i, depth=1000).rename(f"noisy{s}"))
    paths = []
    for r in runs:
        p = out_dir / f"{collection}.{r.name}.run"
        write_trec_run(r, p)
        paths.append(p)
    write_trec_qrels(ds.qrels, out_dir / f"{collection}.qrels")
    return paths


CHILD = r'''
import json, sys, time
tool, qrels_path, run_paths = sys.argv[1], sys.argv[2], sys.argv[3:]
out = {}
if tool == "limelight":
    t = time.perf_counter()
    from limelight.data.formats import read_trec_qrels, read_trec_run
    from limelight.evaluation import Evaluator
    out["import_s"] = time.perf_counter() - t
    from limelight.data.ids import IdMap
    t = time.perf_counter()
    qrels = read_trec_qrels(qrels_path)
    runs = [read_trec_run(p) for p in run_paths]
    # one document map for all runs, as runs retrieved from one index have
    docs = IdMap(sorted(set().union(*(r.docids.strings.tolist() for r in runs))), kind="document")
    runs = [r.with_doc_map(docs) for r in runs]
    out["build_s"] = time.perf_counter() - t
    def call():
        ev = Evaluator(qrels, MEASURES_LL)
        return [r.aggregate for r in ev.evaluate_many(runs, warn=False)]
elif tool == "ir_measures":
    t = time.perf_counter()
    import ir_measures
    out["import_s"] = time.perf_counter() - t
    t = time.perf_counter()
    qrels = list(ir_measures.read_trec_qrels(qrels_path))
    runs = [list(ir_measures.read_trec_run(p)) for p in run_paths]
    out["build_s"] = time.perf_counter() - t
    ms = [ir_measures.parse_measure(m) for m in MEASURES_LL]
    def call():
        ev = ir_measures.evaluator(ms, qrels)
        return [ev.calc_aggregate(r) for r in runs]
else:
    t = time.perf_counter()
    import ranx
    out["import_s"] = time.perf_counter() - t
    t = time.perf_counter()
    qrels = ranx.Qrels.from_file(qrels_path, kind="trec")
    runs = [ranx.Run.from_file(p, kind="trec") for p in run_paths]
    out["build_s"] = time.perf_counter() - t
    def call():
        return [ranx.evaluate(qrels, r, MEASURES_RANX) for r in runs]
t = time.perf_counter(); call(); out["cold_s"] = time.perf_counter() - t
t = time.perf_counter(); call(); out["warm_s"] = time.perf_counter() - t
print(json.dumps(out))
'''


def run_child(tool: str, qrels: Path, runs: list[Path]) -> dict:
    code = f"MEASURES_LL = {MEASURES_LL!r}\nMEASURES_RANX = {MEASURES_RANX!r}\n" + CHILD
    env = dict(os.environ, NUMBA_CACHE_DIR=os.environ.get("NUMBA_CACHE_DIR", str(REPO / ".numba_cache")))
    p = subprocess.run([sys.executable, "-c", code, tool, str(qrels), *map(str, runs)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{tool} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def python_all_pairs_lexirecall(qrels: dict[str, dict[str, int]], runs: list[dict[str, dict[str, float]]],
                                n: int) -> dict[tuple[int, int, str], int]:
    """The straightforward implementation: per query, per pair, build p from dicts and compare."""
    out = {}
    for qid, judged in qrels.items():
        rel = {d for d, g in judged.items() if g >= 1}
        if not rel:
            continue
        vecs = []
        for run in runs:
            ranking = sorted(run.get(qid, {}).items(), key=lambda x: (-x[1], _neg(x[0])))
            p = [i + 1 for i, (d, _) in enumerate(ranking) if d in rel]
            u = len(rel) - len(p)
            p += list(range(n - u + 1, n + 1))
            vecs.append(p)
        for a in range(len(runs)):
            for b in range(len(runs)):
                if a == b:
                    continue
                pa, pb = vecs[a], vecs[b]
                pref = 0
                for i in range(len(pa) - 1, -1, -1):
                    if pa[i] != pb[i]:
                        pref = 1 if pa[i] < pb[i] else -1
                        break
                out[(a, b, qid)] = pref
    return out


class _neg(str):
    """Sort key reversing string order (docid descending, trec_eval's tie rule)."""

    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)


def bench_lexirecall(qrels_path: Path, run_paths: list[Path]) -> dict:
    import numpy as np

    from limelight.data.formats import read_trec_qrels, read_trec_run
    from limelight.data.ids import IdMap
    from limelight.evaluation import Evaluator, preference_matrix, stack_positions
    from limelight.evaluation.relpos import default_n_docs

    qrels = read_trec_qrels(qrels_path)
    runs = [read_trec_run(p) for p in run_paths]
    docs = IdMap(sorted(set().union(*(r.docids.strings.tolist() for r in runs))), kind="document")
    runs = [r.with_doc_map(docs) for r in runs]  # one map, as runs from one index share
    n = default_n_docs(qrels, runs)
    def all_pairs():
        ev = Evaluator(qrels, "LexiRecall", n_docs=n)
        return ev, preference_matrix(stack_positions([ev.positions(r, 1, n) for r in runs]), "recall")

    t = time.perf_counter()
    ev, prefs = all_pairs()
    t_ll = time.perf_counter() - t
    t_best = t_ll
    for _ in range(5):
        t = time.perf_counter()
        all_pairs()
        t_best = min(t_best, time.perf_counter() - t)
    qd = qrels.to_dict()
    rd = [r.to_dict() for r in runs]
    t = time.perf_counter()
    ref = python_all_pairs_lexirecall(qd, rd, n)
    t_py = time.perf_counter() - t
    qidx = {q: i for i, q in enumerate(ev.qids.strings.tolist())}
    mismatches = sum(int(prefs[a, b, qidx[q]]) != v for (a, b, q), v in ref.items())
    return {"limelight_s": t_ll, "limelight_best_s": t_best, "python_s": t_py, "speedup": t_py / t_ll,
            "speedup_best": t_py / t_best, "mismatches": mismatches,
            "comparisons": len(ref), "queries": int(prefs.shape[2]), "runs": len(runs),
            "agree": bool(np.all(prefs == -prefs.transpose(1, 0, 2))) and mismatches == 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    results: dict = {"collections": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        t = time.perf_counter()
        all_runs = {c: make_runs(c, tmpd) for c in COLLECTIONS}
        results["run_generation_s"] = time.perf_counter() - t
        totals: dict[str, dict[str, float]] = {}
        for c in COLLECTIONS:
            qrels = tmpd / f"{c}.qrels"
            res = {"runs": len(all_runs[c])}
            for tool in ("limelight", "ir_measures", "ranx"):
                res[tool] = run_child(tool, qrels, all_runs[c])
                for k, v in res[tool].items():
                    totals.setdefault(tool, {}).setdefault(k, 0.0)
                    totals[tool][k] += v
            res["lexirecall_all_pairs"] = bench_lexirecall(qrels, all_runs[c])
            results["collections"][c] = res
        results["totals"] = totals
        results["n_runs"] = sum(len(v) for v in all_runs.values())
    ll, im, rx = totals["limelight"], totals["ir_measures"], totals["ranx"]
    print(f"{results['n_runs']} runs (depth 1000) on {', '.join(COLLECTIONS)}, measures {' '.join(MEASURES_LL)}")
    print(f"{'tool':12s} {'import':>8s} {'build':>8s} {'cold':>8s} {'warm':>8s}   (seconds, sums over collections)")
    for name, d in (("limelight", ll), ("ir_measures", im), ("ranx", rx)):
        print(f"{name:12s} {d['import_s']:8.3f} {d.get('build_s', 0.0):8.3f} {d['cold_s']:8.3f} {d['warm_s']:8.3f}")
    print(f"limelight cold / ir_measures cold = {ll['cold_s'] / im['cold_s']:.2f} (target ≤ 1)")
    print(f"limelight warm / ranx warm = {ll['warm_s'] / rx['warm_s']:.2f} (target ≤ 1.5)")
    for c in COLLECTIONS:
        lx = results["collections"][c]["lexirecall_all_pairs"]
        print(f"all-pairs lexirecall {c}: limelight first call {lx['limelight_s']:.4f}s (best of 6 "
              f"{lx['limelight_best_s']:.4f}s), Python {lx['python_s']:.3f}s, speed-up {lx['speedup']:.0f}x "
              f"(best {lx['speedup_best']:.0f}x), mismatches {lx['mismatches']} of {lx['comparisons']}")
    summarize(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


def summarize(results: dict) -> None:
    """One ``make bench`` row per acceptance figure of issue 3: limelight cold ≤ ir_measures
    cold, warm ≤ 1.5 × ranx warm, all-pairs lexirecall ≥ 50× the per-query Python loop."""
    from _summary import record

    tot = results["totals"]
    ll, im, rx = tot["limelight"], tot["ir_measures"], tot["ranx"]
    what = f"{results['n_runs']} runs × 6 measures"
    cold = ll["cold_s"] / im["cold_s"]
    record(f"evaluation, cold (first call in a fresh process), {what}", ll["cold_s"], unit="s",
           anchor=f"ir_measures cold {im['cold_s']:.3g} s", ratio=cold,
           target="≤ 1× ir_measures cold", met=cold <= 1)
    warm = ll["warm_s"] / rx["warm_s"]
    record(f"evaluation, warm (second call), {what}", ll["warm_s"], unit="s",
           anchor=f"ranx warm {rx['warm_s']:.3g} s", ratio=warm, target="≤ 1.5× ranx warm",
           met=warm <= 1.5)
    for c, res in results["collections"].items():
        lx = res["lexirecall_all_pairs"]
        n = lx["comparisons"]
        record(f"all-pairs lexirecall, {c} ({lx['runs']} runs, first call)", n / lx["limelight_s"],
               unit="comparisons/s", anchor=f"per-query Python loop {n / lx['python_s']:,.0f}/s",
               ratio=lx["speedup"], target="≥ 50× the Python loop, same preferences",
               met=lx["speedup"] >= 50 and lx["agree"],
               note=f"{lx['mismatches']} mismatches of {n}; best of 6 {lx['speedup_best']:.0f}×")


if __name__ == "__main__":
    main()
