"""Issue 25 study driver: the trainings of ``experiments/rerank/PLAN.md``, one at a time,
resumable across sessions, then the test-fold evaluation and the report.

    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/study.py next        # one job
    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/study.py next --all  # until done
    .venv/bin/python experiments/rerank/study.py list                              # status
    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/study.py evaluate    # finished folds
    .venv/bin/python experiments/rerank/study.py report

Every job is a ``limelight rerank train ... --resume`` command (printed by ``list``): a job
killed mid-way continues from its last checkpoint (``<stem>.state.pt``) when run again. A job
is done when its state says ``finished`` (step budget reached or early stop), or, with no
state file (a fresh clone: states are not committed), when its checkpoint and log are there.
Outputs: ``experiments/rerank/results/<collection>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RES = Path(__file__).resolve().parent / "results"
COLLECTIONS = ("cranfield", "scifact", "npl")
MODELS = ("tk2", "knrm")
SOURCES = {"cranfield": ("bm25-log", "title-body"), "scifact": ("bm25-log", "title-body"), "npl": ("bm25-log",)}
FOLDS = 5
PRETRAIN_STEPS = 2000
FINETUNE_STEPS = 600
EVAL_EVERY = 50
PATIENCE = 5
CKPT_EVERY = 50
SEEDS = {("tk2", "cranfield"): (0, 1, 2)}  # everything else: seed 0
DEPTHS = (10, 20, 50, 100)
# Amendment 2026-11-25 (PLAN.md): fine-tunings from a pre-trained model use the learning rates
# times FT_LR_SCALE; the plan's rate (1.0) is kept only for the block that already ran with it.
FT_LR_SCALE = 0.1
PLAN_LR_BLOCKS = {("cranfield", "tk2", 0)}


def model_args(model: str) -> list[str]:
    return ["--model", "tk", "--layers", "2"] if model == "tk2" else ["--model", "knrm"]


def pre_path(c: str, m: str, src: str, seed: int) -> Path:
    return RES / c / f"pre-{src}-{m}-s{seed}.pt"


def ft_path(c: str, m: str, init: str, seed: int, fold: int, lr: float = 1.0) -> Path:
    return RES / c / f"{m}-{init}{_lr_tag(lr)}-s{seed}-f{fold}.pt"


def _lr_tag(lr: float) -> str:
    return "" if lr == 1.0 else f"-lr{lr:g}"


def finetune_variants(c: str, m: str, seed: int) -> list[tuple[str, float]]:
    """(init, learning-rate scale) of the fine-tunings of one block, in run order."""
    plan = [(src, 1.0) for src in SOURCES[c]] if (c, m, seed) in PLAN_LR_BLOCKS else []
    return [("scratch", 1.0), *plan, *((src, FT_LR_SCALE) for src in SOURCES[c])]


def jobs() -> list[dict]:
    """Every training in run order: per collection, pre-trainings first, then fine-tunings."""
    out = []
    for c in COLLECTIONS:
        for m in MODELS:
            for seed in SEEDS.get((m, c), (0,)):
                for src in SOURCES[c]:
                    p = pre_path(c, m, src, seed)
                    out.append({"kind": "pretrain", "collection": c, "model": m, "init": src, "seed": seed,
                                "out": p, "cmd": ["train", c, "--out", str(p.relative_to(ROOT)), *model_args(m),
                                                  "--weak", src, "--max-steps", str(PRETRAIN_STEPS),
                                                  "--eval-every", "100", "--checkpoint-every", "100",
                                                  "--patience", "0", "--seed", str(seed), "--resume"]})
                for init, lr in finetune_variants(c, m, seed):
                    for f in range(FOLDS):
                        p = ft_path(c, m, init, seed, f, lr)
                        cmd = ["train", c, "--out", str(p.relative_to(ROOT)), *model_args(m), "--folds", str(FOLDS),
                               "--fold", str(f), "--split-seed", "0", "--val-share", "0.2",
                               "--max-steps", str(FINETUNE_STEPS), "--eval-every", str(EVAL_EVERY),
                               "--checkpoint-every", str(CKPT_EVERY), "--patience", str(PATIENCE),
                               "--seed", str(seed), "--resume"]
                        if init != "scratch":
                            cmd += ["--init", str(pre_path(c, m, init, seed).relative_to(ROOT))]
                        if lr != 1.0:
                            cmd += ["--lr-scale", f"{lr:g}"]
                        out.append({"kind": "finetune", "collection": c, "model": m, "init": init, "seed": seed,
                                    "fold": f, "lr": lr, "out": p, "cmd": cmd})
    return out


def status(job: dict) -> str:
    from limelight.rerank.train import TrainPaths, load_state

    paths = TrainPaths.of(job["out"])
    st = paths.state
    if not st.exists():
        # the state file is local (gitignored); in a fresh clone a job whose checkpoint and log
        # were committed is done: only finished jobs are committed (PLAN.md, "Files per job")
        return "done" if job["out"].exists() and paths.log.exists() else "todo"
    s = load_state(st)
    return "done" if s.get("finished") else f"partial@{s['step']}"


def fold_models(c: str, m: str = "tk2", seed: int = 0) -> tuple[str, list[Path]]:
    """The five fold models of the (init, learning-rate) variant with the highest mean best
    *validation* nDCG@10 over the folds (no test query is looked at), for the analyses downstream
    of the study (time budgets, query variations, clusters, explanations: PLAN.md amendment 2).
    Returns the variant's label and its checkpoints, fold 0 first; only variants with all five
    folds done compete."""
    from limelight.rerank.ranker import NeuralRanker

    best: tuple[float, str, list[Path]] | None = None
    finetunes = [j for j in jobs() if j["kind"] == "finetune" and (j["collection"], j["model"], j["seed"]) == (c, m, seed)]
    for init, lr in finetune_variants(c, m, seed):
        fold_jobs = [j for j in finetunes if (j["init"], j["lr"]) == (init, lr)]
        if len(fold_jobs) != FOLDS or any(status(j) != "done" for j in fold_jobs):
            continue
        val = sum(NeuralRanker.load(j["out"]).meta["best_val"]["nDCG@10"] for j in fold_jobs) / FOLDS
        if best is None or val > best[0]:
            best = (val, f"{m} {init}{_lr_tag(lr)} s{seed}", [j["out"] for j in fold_jobs])
    if best is None:
        raise SystemExit(f"{c}: no {m} seed-{seed} variant has all {FOLDS} fine-tunings done (study.py next)")
    return best[1], best[2]


def command(job: dict) -> str:
    return "flock /tmp/heavy.lock .venv/bin/limelight rerank " + " ".join(job["cmd"])


def run_next(all_jobs: bool) -> None:
    for job in jobs():
        if status(job) == "done":
            continue
        print("→", command(job), flush=True)
        job["out"].parent.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "limelight.cli", "rerank", *job["cmd"]], cwd=ROOT)
        if r.returncode != 0 or status(job) != "done":
            sys.exit(r.returncode or 1)
        if not all_jobs:
            return
    print("all trainings done")


def evaluate_folds() -> None:
    """For every finished fine-tuning: depth, then λ, chosen on its validation queries only;
    test-fold runs (pure model at the chosen depth; interpolation at that depth) written."""
    cache: dict = {}
    for job in jobs():
        if job["kind"] != "finetune" or status(job) != "done":
            continue
        if job["out"].with_suffix(".eval.json").exists():
            continue
        rec = evaluate_one(job["out"], job["collection"], f"{job['model']}-{job['init']}{_lr_tag(job['lr'])}", cache)
        print(job["out"].name, json.dumps({k: rec[k] for k in ("depth", "lambda", "best_step")}), flush=True)


def read_log(path: Path) -> list[dict]:
    """A training log (``<job>.log.jsonl``) as its records."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def best_validation(recs: list[dict]) -> dict:
    """The record with the highest validation nDCG@10 (the earliest of ties)."""
    return max((r for r in recs if r.get("val_nDCG@10") is not None), key=lambda r: (r["val_nDCG@10"], -r["step"]))


def concat_runs(rs: list, name: str):
    """One run of the concatenated test-fold runs ``rs``."""
    from limelight.data.run import Run

    return Run.from_arrays([q for x in rs for q in x.qids.decode(x.q)], [d for x in rs for d in x.docids.decode(x.d)],
                           [s for x in rs for s in x.score], name=name)


def dataset_and_bm25(c: str, cache: dict) -> tuple:
    """(dataset, BM25 top-100 run named ``bm25``) of collection ``c``; ``cache`` keeps the last one."""
    from limelight.data.loaders import load_dataset
    from limelight.retrieval.bm25 import BM25, BM25Index

    if c not in cache:
        ds = load_dataset(c)
        cache.clear()
        cache[c] = (ds, BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, 100).rename("bm25"))
    return cache[c]


def evaluate_one(out: Path, c: str, tag: str, cache: dict) -> dict:
    """One fold model ``out`` of collection ``c``: depth, then λ, chosen on its validation
    queries; its test-fold runs written beside it (``.test.parquet``, ``.interp.test.parquet``,
    run names ``tag`` and ``tag+bm25``) with the choices (``.eval.json``). ``cache`` keeps one
    collection's data and BM25 run between calls."""
    import torch

    from limelight.data.formats import write_run_parquet
    from limelight.rerank.budget import rerank_at_depth
    from limelight.rerank.interpolate import interpolate, tune_depth, tune_lambda
    from limelight.rerank.ranker import KernelReranker, NeuralRanker

    torch.set_num_threads(1)
    ds, first = dataset_and_bm25(c, cache)
    ranker = NeuralRanker.load(out)
    val, test = ranker.meta["val_queries"], ranker.meta["test_queries"]
    sub = first.subset(val + test)
    scored = KernelReranker(ranker, ds.collection).transform(ds.queries, sub)
    depth, dtable = tune_depth(sub, scored, ds.qrels, val, DEPTHS)
    lam, ltable = tune_lambda(sub, scored, ds.qrels, val, depth)
    test_first = first.subset(test)
    pure = rerank_at_depth(test_first, scored, depth).rename(tag)
    mixed = interpolate(test_first, scored, lam, depth, name=f"{tag}+bm25")
    write_run_parquet(pure, out.with_suffix(".test.parquet"))
    write_run_parquet(mixed, out.with_suffix(".interp.test.parquet"))
    rec = {"depth": depth, "depth_table": dtable, "lambda": lam, "lambda_table": ltable,
           "best_step": ranker.meta.get("best_step"), "val": ranker.meta.get("best_val")}
    meta_path = out.with_suffix(".eval.json")
    tmp = meta_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, meta_path)
    return rec


def report() -> None:
    """Per collection: BM25 and every (model, init, seed) over the concatenated test folds,
    pure and interpolated rows; paired t-tests against BM25, Holm over all pairs per measure."""
    from limelight.data.formats import load_run
    from limelight.data.run import Run
    from limelight.evaluation import evaluate_runs

    lines = ["# Issue 25 study: test-fold results (generated by study.py report)\n"]
    for c in COLLECTIONS:
        groups: dict[str, list[Run]] = {}
        for job in jobs():
            if job["kind"] != "finetune" or job["collection"] != c:
                continue
            for suffix, tag in ((".test.parquet", ""), (".interp.test.parquet", " +BM25 λ")):
                p = job["out"].with_suffix(suffix)
                lr = "" if job["lr"] == 1.0 else f" lr×{job['lr']:g}"
                name = f"{job['model']} {job['init']}{lr} s{job['seed']}{tag}"
                groups.setdefault(name, []).append(load_run(p) if p.exists() else None)
        complete = {n: rs for n, rs in groups.items() if rs and all(r is not None for r in rs)}
        if not complete:
            continue
        ds, bm25 = dataset_and_bm25(c, {})
        runs = [bm25, *(concat_runs(rs, n) for n, rs in complete.items())]
        table = evaluate_runs(runs, ds.qrels, REPORT_MEASURES)
        lines += [f"\n## {c}\n", *_table_lines(table), *_tk_vs_knrm(table), *_seed_lines(table),
                  *_training_lines(c)]
    out = RES / "report.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, out)
    print("\n".join(lines))


REPORT_MEASURES = "nDCG@10 RR@10 R@100 AP"


def _table_lines(table) -> list[str]:
    """Markdown rows: every run with nDCG@10, RR@10 and R@100 (each with its Holm p against the
    first run, BM25) and AP."""
    agg = table.aggregate()
    shown = table.measures[:3]
    out = ["| run | " + " | ".join(f"{m} | p (Holm)" for m in shown) + " | AP |",
           "|---|" + "---|---|" * len(shown) + "---|"]
    for i, n in enumerate(table.names):
        cells = []
        for m in shown:
            cells += [f"{agg[n][str(m)]:.4f}", "" if i == 0 else f"{table.p_vs_first[m][i]:.3g}"]
        out.append(f"| {n} | " + " | ".join(cells) + f" | {agg[n]['AP']:.4f} |")
    return out


def _tk_vs_knrm(table) -> list[str]:
    """TK-2 against KNRM for every row both models have (same init, learning rate, seed,
    pure/interpolated), from the same all-pairs Holm family as the rows against BM25."""
    idx = {n: i for i, n in enumerate(table.names)}
    pairs = [(n, "knrm" + n[3:]) for n in table.names if n.startswith("tk2 ") and "knrm" + n[3:] in idx]
    if not pairs:
        return []
    m = table.measures[0]
    agg = table.aggregate()
    out = [f"\nTK-2 vs KNRM ({m}, paired t-test, Holm over all pairs of runs):\n",
           "| TK-2 row | TK-2 | KNRM | Δ | p (Holm) |", "|---|---|---|---|---|"]
    for tk, kn in pairs:
        a, b = agg[tk][str(m)], agg[kn][str(m)]
        out.append(f"| {tk[4:]} | {a:.4f} | {b:.4f} | {a - b:+.4f} | {table.p_pairs[m][idx[tk], idx[kn]]:.3g} |")
    return out


def _seed_lines(table) -> list[str]:
    """Rows trained with several seeds (names differing only in `` s<seed>``): mean ± sample sd of
    the first measure across seeds, each seed's value and its Holm p against BM25 (PLAN.md)."""
    import re
    import statistics

    m = table.measures[0]
    agg = table.aggregate()
    groups: dict[str, list[tuple[int, int]]] = {}
    for i, n in enumerate(table.names):
        hit = re.search(r" s(\d+)( |$)", n)
        if hit:
            groups.setdefault(n[:hit.start()] + " s*" + n[hit.end(1):], []).append((int(hit.group(1)), i))
    multi = {k: sorted(v) for k, v in groups.items() if len(v) > 1}
    if not multi:
        return []
    out = [f"\nSeed spread ({m}; mean ± sample sd over seeds; per seed: value, Holm p against BM25):\n",
           "| row | seeds | mean ± sd | per seed |", "|---|---|---|---|"]
    for k, v in multi.items():
        vals = [agg[table.names[i]][str(m)] for _, i in v]
        per = "; ".join(f"s{s} {agg[table.names[i]][str(m)]:.4f} (p {table.p_vs_first[m][i]:.3g})" for s, i in v)
        out.append(f"| {k} | {len(v)} | {statistics.mean(vals):.4f} ± {statistics.stdev(vals):.4f} | {per} |")
    return out


def _training_lines(c: str) -> list[str]:
    """Every finished training of the collection, from its log: steps, wall seconds, and for the
    fine-tunings the best validation step and nDCG@10 (the curves: ``<job>.curve.png``)."""
    out = [f"\nTrainings ({c}; fine-tunings per fold 0-4: steps, best step, best validation nDCG@10):\n",
           "| training | steps | wall s | best step | best val nDCG@10 | loss first → last 100 steps |",
           "|---|---|---|---|---|---|"]
    rows: dict[str, list[dict]] = {}
    for job in jobs():
        log = job["out"].with_suffix(".log.jsonl")
        if job["collection"] != c or status(job) != "done" or not log.exists():
            continue
        recs = read_log(log)
        key = job["out"].stem.rsplit("-f", 1)[0] if job["kind"] == "finetune" else job["out"].stem
        rows.setdefault(key, []).append({"kind": job["kind"], "recs": recs})
    for key, items in rows.items():
        steps = "/".join(str(it["recs"][-1]["step"]) for it in items)
        wall = "/".join(f"{it['recs'][-1]['wall_s']:.0f}" for it in items)
        if items[0]["kind"] == "pretrain":
            losses = [r["loss"] for r in items[0]["recs"] if r.get("loss") is not None]
            out.append(f"| {key} | {steps} | {wall} | | | {losses[0]:.3f} → {losses[-1]:.3f} |")
            continue
        best = [best_validation(it["recs"]) for it in items]
        best_steps = "/".join(str(b["step"]) for b in best)
        best_vals = "/".join(f"{b['val_nDCG@10']:.3f}" for b in best)
        out.append(f"| {key} | {steps} | {wall} | {best_steps} | {best_vals} | |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["list", "next", "evaluate", "report"])
    ap.add_argument("--all", action="store_true", help="next: run every remaining job")
    a = ap.parse_args()
    try:
        _dispatch(a)
    except KeyboardInterrupt:
        print("interrupted; `study.py next` continues from the job's last checkpoint", file=sys.stderr)
        sys.exit(130)


def _dispatch(a: argparse.Namespace) -> None:
    if a.action == "list":
        js = jobs()
        for i, j in enumerate(js, 1):
            print(f"{i:3d} [{status(j)}] {command(j)}")
    elif a.action == "next":
        run_next(a.all)
    elif a.action == "evaluate":
        evaluate_folds()
    else:
        report()


if __name__ == "__main__":
    main()
