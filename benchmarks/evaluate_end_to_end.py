"""Benchmark (issue 22): ``limelight evaluate`` end to end on many real TREC runs, beside
ir_measures and ranx, and reading the runs with today's line-by-line reader vs the columnar one.

Runs: limelight's own BM25 (``limelight.retrieval.bm25``) over shared judged collections,
k1 ∈ {0.6, 0.9, 1.2, 1.5} × b ∈ {0.4, 0.75} × stemming {off, Snowball English}, depth 1000:
16 runs per collection, written gzipped once into ``.cache/bench-runs/<collection>/`` (gitignored)
and reused. Measures: AP nDCG@10 P@10 R@1000 RR nDCG.

Two kinds of run files (issue 42), each timed against ir_measures on the same files:

* ``space``: the runs as limelight writes them (one space between fields, 6-decimal scores);
* ``tabs``: the same runs as real TREC submissions come, made from them once into
  ``.cache/bench-runs/<collection>-tabs/``: tab-separated, gzipped, long float scores (each
  score / 3 written with 17 significant digits, ``%.17g``: same ranking, same measures), every other
  run with blanks padding the score as in trec_eval's own ``results.test`` (``\t  2.129133``).

Timed, interleaved, median of ``--repeats`` (default 3), each tool in a fresh process, process
start to printed result, with each child's peak RSS (GNU time):

(a) ``limelight evaluate --qrels Q RUN... -m "..."`` (the installed CLI entry point);
(b) ir_measures 0.4.3: ``read_trec_qrels`` / ``read_trec_run`` (pure Python) + ``calc_aggregate``;
(c) ranx: ``Qrels.from_file`` / ``Run.from_file`` + ``evaluate`` (numba caches warmed first,
    untimed, so that its 30-75 s first compilation is not counted);
(d) in this process: reading the runs with the precise line-by-line reader (today's reader,
    plus the rank-is-a-number check) vs ``read_trec_runs`` (columnar, one shared document map).

Memory of the loaded runs is measured in a fresh child: the arrays' ``nbytes`` plus the id maps,
and the RSS growth while reading (psutil), per million result lines.

    .venv/bin/python benchmarks/evaluate_end_to_end.py [--collections npl cranfield] [--repeats 3] [--out r.json]

(the default is npl only; the results page reports ``--collections npl cranfield``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("LIMELIGHT_DATA", REPO.parent / "shared" / "data"))
CACHE = REPO / ".cache" / "bench-runs"
MEASURES = "AP nDCG@10 P@10 R@1000 RR nDCG"
RANX_MEASURES = ["map", "ndcg@10", "precision@10", "recall@1000", "mrr", "ndcg"]


def make_runs(collection: str) -> list[Path]:
    """16 BM25 runs of ``collection`` at depth 1000, gzipped TREC, cached (made once)."""
    out = CACHE / collection
    done = out / "DONE"
    if done.exists():
        return sorted(out.glob("*.run.gz"))
    from limelight.analysis import Analyzer
    from limelight.data.formats import write_trec_run
    from limelight.data.loaders import load_dataset
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds = load_dataset(collection)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem in (None, "english"):
        index = BM25Index.build(ds.collection, Analyzer(stemmer=stem))
        for k1 in (0.6, 0.9, 1.2, 1.5):
            for b in (0.4, 0.75):
                name = f"bm25_{'stem' if stem else 'nostem'}_k{k1}_b{b}"
                run = BM25(index, k1=k1, b=b).retrieve(ds.queries, 1000).rename(name)
                p = out / f"{name}.run.gz"
                write_trec_run(run, p, tag=name)
                paths.append(p)
    done.write_text("ok\n")
    return sorted(paths)


def make_tab_runs(collection: str) -> list[Path]:
    """The ``space`` runs of ``collection`` rewritten as tab-separated, gzipped runs with long
    float scores (every other one with blanks padding the score), cached (made once)."""
    import gzip

    out = CACHE / f"{collection}-tabs"
    done = out / "DONE"
    if done.exists():
        return sorted(out.glob("*.run.gz"))
    from limelight.data.formats import read_trec_run

    out.mkdir(parents=True, exist_ok=True)
    for i, src in enumerate(make_runs(collection)):
        run = read_trec_run(src)
        sep = "\t  " if i % 2 else "\t"
        tag = run.meta["tag"]
        rows = zip(run.qids.decode(run.q).tolist(), run.docids.decode(run.d).tolist(),
                   run.ranks().tolist(), (run.score / 3.0).tolist(), strict=True)
        text = "".join(f"{q}\tQ0\t{d}\t{r}{sep}{s:.17g}\t{tag}\n" for q, d, r, s in rows)
        (out / src.name).write_bytes(gzip.compress(text.encode(), compresslevel=6))
    done.write_text("ok\n")
    return sorted(out.glob("*.run.gz"))


KINDS = {"space": (make_runs, "space-separated"),
         "tabs": (make_tab_runs, "tab-separated gzipped, long float scores")}


IR_MEASURES = r'''
import sys, ir_measures
qrels_path, runs = sys.argv[1], sys.argv[2:]
ms = [ir_measures.parse_measure(m) for m in ["AP", "nDCG@10", "P@10", "R@1000", "RR", "nDCG"]]
ev = ir_measures.evaluator(ms, list(ir_measures.read_trec_qrels(qrels_path)))
for p in runs:
    agg = ev.calc_aggregate(ir_measures.read_trec_run(p))
    print(p.rsplit("/", 1)[-1], " ".join(f"{agg[m]:.4f}" for m in ms))
'''

RANX = r'''
import sys, ranx
ms = RANX_MEASURES
qrels_path, runs = sys.argv[1], sys.argv[2:]
qrels = ranx.Qrels.from_file(qrels_path, kind="trec")
for p in runs:
    r = ranx.Run.from_file(p, kind="gz")
    res = ranx.evaluate(qrels, r, ms)
    print(p.rsplit("/", 1)[-1], " ".join(f"{res[m]:.4f}" for m in ms))
'''.replace("RANX_MEASURES", repr(RANX_MEASURES))

MEMORY = r'''
import gc, json, sys, psutil
from limelight.data.formats import read_trec_qrels, read_trec_runs
qrels = read_trec_qrels(sys.argv[1])
gc.collect()
proc = psutil.Process()
rss0 = proc.memory_info().rss
runs = read_trec_runs(sys.argv[2:], doc_map=qrels.docids)
gc.collect()
rss1 = proc.memory_info().rss
lines = sum(len(r) for r in runs)
arrays = sum(r.q.nbytes + r.d.nbytes + r.score.nbytes + r.offsets.nbytes for r in runs)
maps = {id(m): m for r in runs for m in (r.qids, r.docids)}
idmaps = sum(m.nbytes() for m in maps.values())
print(json.dumps({"lines": lines, "arrays_bytes": arrays, "idmap_bytes": idmaps,
                  "rss_delta_bytes": rss1 - rss0, "rss_bytes": rss1}))
'''


def _env() -> dict[str, str]:
    return dict(os.environ, NUMBA_CACHE_DIR=os.environ.get("NUMBA_CACHE_DIR", str(REPO / ".numba_cache")))


GNU_TIME = "/usr/bin/time"


def timed_rss(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds from process start to exit, the child's peak RSS in MB, stdout) of ``cmd``.

    The peak RSS comes from GNU time (``%M``) when installed: a child forked straight from this
    (large) process would inherit this process's RSS as its ``ru_maxrss`` (it is kept across
    ``execve``); without GNU time, ``os.wait4``'s figure, which can be too high for that reason.
    """
    import tempfile

    use_time = os.path.exists(GNU_TIME)
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        full = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *cmd] if use_time else cmd
        t = time.perf_counter()
        p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        out, err = p.communicate() if use_time else (p.stdout.read(), p.stderr.read())
        if use_time:
            wall = time.perf_counter() - t
            code = p.returncode
            peak = float(rss_file.read().strip().splitlines()[-1]) / 1024
        else:
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t
            code = os.waitstatus_to_exitcode(status)
            peak = ru.ru_maxrss / 1024
    if code != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({code}): {err.decode()[-2000:]}")
    return wall, peak, out.decode()


def limelight_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("limelight")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "limelight.cli"]


def bench_collection(collection: str, repeats: int, kind: str = "space") -> dict:
    runs = KINDS[kind][0](collection)
    qrels = DATA / "collections" / collection / "qrels.txt"
    rs = [str(p) for p in runs]
    cmds = {
        "limelight": limelight_cmd() + ["evaluate", "--qrels", str(qrels), *rs, "-m", MEASURES],
        "ir_measures": [sys.executable, "-c", IR_MEASURES, str(qrels), *rs],
        "ranx": [sys.executable, "-c", RANX, str(qrels), *rs],
    }
    timed_rss(cmds["ranx"])  # untimed: fills ranx's numba cache
    times: dict[str, list[float]] = {k: [] for k in cmds}
    rss: dict[str, list[float]] = {k: [] for k in cmds}
    outputs: dict[str, str] = {}
    for _ in range(repeats):
        for tool, cmd in cmds.items():
            w, m, out = timed_rss(cmd)
            times[tool].append(w)
            rss[tool].append(m)
            outputs[tool] = out

    # the same numbers from the three tools (first run, AP and nDCG@10)
    ll_lines = outputs["limelight"].splitlines()
    first = Path(rs[0]).name
    ll_row = next(ln for ln in ll_lines if ln.startswith(first)).replace("*", " ").split()
    im_row = next(ln for ln in outputs["ir_measures"].splitlines() if ln.startswith(first)).split()
    rx_row = next(ln for ln in outputs["ranx"].splitlines() if ln.startswith(first)).split()

    # (d) reading in this process: today's line-by-line reader vs the columnar reader
    from limelight.data.formats import _read_trec_run_precise, read_trec_qrels, read_trec_runs

    q = read_trec_qrels(qrels)
    read_old, read_new = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        old = [_read_trec_run_precise(p) for p in runs]
        read_old.append(time.perf_counter() - t)
        t = time.perf_counter()
        new = read_trec_runs(runs, doc_map=q.docids)
        read_new.append(time.perf_counter() - t)
    same = all(
        a.qids == b.qids and (a.docids.decode(a.d) == b.docids.decode(b.d)).all()
        and (a.score == b.score).all() for a, b in zip(old, new, strict=True))
    lines = sum(len(r) for r in new)
    del old, new

    p = subprocess.run([sys.executable, "-c", MEMORY, str(qrels), *rs], capture_output=True,
                       text=True, env=_env(), check=True)
    mem = json.loads(p.stdout.strip().splitlines()[-1])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "collection": collection, "kind": kind, "runs": len(runs), "lines": lines,
        "min_lines_per_run": None, "times_s": times, "median_s": med,
        "peak_rss_mb": {k: statistics.median(v) for k, v in rss.items()},
        "read_old_s": read_old, "read_new_s": read_new,
        "read_old_median_s": statistics.median(read_old),
        "read_new_median_s": statistics.median(read_new),
        "readers_agree": bool(same), "memory": mem,
        "first_run_ap_ndcg10": {"limelight": ll_row[1:3], "ir_measures": im_row[1:3],
                                "ranx": rx_row[1:3]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collections", nargs="+", default=["npl"])
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS),
                    help="run files: space-separated as limelight writes them, and/or tab-separated "
                         "gzipped with long float scores (default: both)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}  cpus: {os.cpu_count()}")
    results = []
    for c, kind in [(c, k) for c in args.collections for k in args.kinds]:
        t = time.perf_counter()
        paths = KINDS[kind][0](c)
        gen = time.perf_counter() - t
        import gzip

        sizes = [sum(1 for _ in gzip.open(p, "rb")) for p in paths]
        r = bench_collection(c, args.repeats, kind)
        r["min_lines_per_run"] = min(sizes)
        r["run_generation_s"] = gen
        r["load_after"] = list(os.getloadavg())
        results.append(r)
        med, mem = r["median_s"], r["memory"]
        per_m = 1e6 / mem["lines"] / 2**20
        print(f"\n{c}, {KINDS[kind][1]}: {r['runs']} runs, {r['lines']:,} result lines (≥ "
              f"{min(sizes):,} per run), measures {MEASURES}; median of {args.repeats} interleaved "
              f"repeats; load average {os.getloadavg()}")
        print(f"{'tool':12s} {'wall s':>8s} {'peak RSS MB':>12s}   (process start to printed table)")
        for k in ("limelight", "ir_measures", "ranx"):
            print(f"{k:12s} {med[k]:8.2f} {r['peak_rss_mb'][k]:12.0f}   all: "
                  + " ".join(f"{x:.2f}" for x in r["times_s"][k]))
        print(f"limelight / ir_measures = {med['limelight'] / med['ir_measures']:.2f} (target ≤ 0.5); "
              f"limelight / ranx (warm numba cache) = {med['limelight'] / med['ranx']:.2f}")
        print(f"reading {r['runs']} runs: line-by-line {r['read_old_median_s']:.2f} s, columnar "
              f"{r['read_new_median_s']:.3f} s: {r['read_old_median_s'] / r['read_new_median_s']:.1f}x "
              f"faster (target ≥ 10x); same runs: {r['readers_agree']}")
        print(f"memory of the loaded runs: arrays {mem['arrays_bytes'] * per_m:.1f} MB + id maps "
              f"{mem['idmap_bytes'] * per_m:.2f} MB per million lines; RSS growth while reading "
              f"{mem['rss_delta_bytes'] * per_m:.1f} MB per million lines (target ≤ 40)")
        print(f"first run AP, nDCG@10: limelight {r['first_run_ap_ndcg10']['limelight']}, "
              f"ir_measures {r['first_run_ap_ndcg10']['ir_measures']}, ranx {r['first_run_ap_ndcg10']['ranx']}")
    by = {(r["collection"], r["kind"]): r["first_run_ap_ndcg10"]["limelight"] for r in results}
    for c in args.collections:
        if (c, "space") in by and (c, "tabs") in by:  # score / 3: same ranking, same figures
            print(f"{c}: tab-separated runs give the space-separated runs' figures: "
                  f"{by[(c, 'space')] == by[(c, 'tabs')]}")
    summarize(results)
    print(f"\nload average after: {os.getloadavg()}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


def summarize(results: list[dict]) -> None:
    """One ``make bench`` row per acceptance figure of issue 22 and collection: end to end
    ≤ 0.5 × ir_measures, reading ≥ 10× the line-by-line reader, ≤ 40 MB per million lines."""
    from _summary import record

    for r in results:
        c, med, mem, lines = r["collection"], r["median_s"], r["memory"], r["lines"]
        kind = "" if r.get("kind", "space") == "space" else f"{KINDS[r['kind']][1]}, "
        what = f"{c}, {kind}{r['runs']} runs, {lines / 1e6:.2f}M lines"
        c = f"{c}, {kind[:-2]}" if kind else c
        ratio = med["limelight"] / med["ir_measures"]
        record(f"`limelight evaluate` end to end ({what})", med["limelight"], unit="s",
               anchor=f"ir_measures {med['ir_measures']:.2f} s", ratio=ratio,
               target="≤ 0.5× ir_measures", met=ratio <= 0.5,
               note=f"ranx (warm) {med['ranx']:.2f} s")
        old, new = r["read_old_median_s"], r["read_new_median_s"]
        record(f"reading the runs ({what})", lines / new / 1e6, unit="M lines/s",
               anchor=f"line-by-line reader {lines / old / 1e6:.3g} M lines/s", ratio=old / new,
               target="≥ 10× the line-by-line reader, same runs",
               met=old / new >= 10 and r["readers_agree"],
               note="" if r["readers_agree"] else "the two readers' runs DIFFER")
        per_m = 1e6 / mem["lines"] / 2**20
        record(f"memory of the loaded runs: RSS growth while reading ({c})",
               mem["rss_delta_bytes"] * per_m, unit="MB per million lines",
               anchor=f"arrays {mem['arrays_bytes'] * per_m:.1f} MB + id maps "
                      f"{mem['idmap_bytes'] * per_m:.2f} MB per million lines",
               target="≤ 40 MB per million lines", met=mem["rss_delta_bytes"] * per_m <= 40)


if __name__ == "__main__":
    main()
