"""Table 4 analog with the TK re-ranker, on queries TK never saw.

TK-2 is the issue-25 study's model (``experiments/rerank/study.py``; no training here): the
fold ``--fold`` checkpoint of the TK-2 variant chosen on validation (``study.fold_models``,
PLAN.md amendment 2; its label is printed and written with the outputs). BM25, MiniLM and
BM25 top 100 >> TK-2 are run on that fold's test queries (the checkpoint's meta
``test_queries``: never trained or validated on) and their variations, in both modes of the
paper (the whole pipeline sees the variant; only the re-ranker does).

    flock /tmp/heavy.lock .venv/bin/python experiments/variations/table4_tk.py [cranfield npl] [--fold 0]

Writes experiments/variations/out/table4_tk_<collection>.{md,json,png} and
table4_tk_<collection>_train.json (the model used: variant, checkpoint, its query counts and best
validation). A collection whose study folds are not done is skipped with a one-line message
(exit status 1 at the end).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from table4 import save_report  # the script's folder is on sys.path

from limelight.data import load_dataset
from limelight.data.queries import Queries
from limelight.querygen.robustness import build_systems, robustness_report
from limelight.querygen.variations import generate_variations
from limelight.rerank.ranker import NeuralRanker

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def _cv():
    """experiments/rerank/cv.py as a module: the study's fold models and the qrels subset."""
    spec = importlib.util.spec_from_file_location("rerank_cv", HERE.parent / "rerank" / "cv.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(name: str, args: argparse.Namespace) -> None:
    cv = _cv()
    label, ckpts = cv.study_models(name, "tk2", args.model_seed)  # SystemExit (one line) if not done
    ckpt = ckpts[args.fold]
    meta = NeuralRanker.load(ckpt).meta
    if meta.get("fold") != args.fold:
        raise SystemExit(f"{ckpt}: its meta says fold {meta.get('fold')}, not {args.fold}")
    test = list(meta["test_queries"])
    ds = load_dataset(name)
    log = {"collection": name, "fold": args.fold, "model": label, "checkpoint": ckpt.name,
           "train_queries": len(meta["train_queries"]), "val_queries": len(meta["val_queries"]),
           "test_queries": len(test), "best_step": meta.get("best_step"), "best_val": meta.get("best_val")}
    print(json.dumps(log), flush=True)
    t1 = time.perf_counter()

    keep = set(test)
    ids = list(ds.queries.ids.strings)
    rows = [i for i, q in enumerate(ids) if q in keep]
    queries = Queries.from_lists([ids[i] for i in rows], [ds.queries.texts[i] for i in rows],
                                 name=f"{name}-fold{args.fold}")
    var = generate_variations(queries, "all", n=1, seed=0)
    systems = build_systems(ds.collection, "bm25,dense", k=1000, tk=ckpt)
    qrels = cv._subset_qrels(ds.qrels, test)  # else the other folds' queries count as 0 (trec_eval -c)
    rep = robustness_report(systems, queries, qrels, variations=var, measure="nDCG@10",
                            mode="both", dataset=f"{name} (test fold {args.fold}, {len(queries)} queries; TK-2: {label})",
                            progress=True)
    save_report(rep, f"table4_tk_{name}")
    (OUT / f"table4_tk_{name}_train.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"{name}: report {time.perf_counter() - t1:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("collections", nargs="*", default=["cranfield", "npl"])
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--model-seed", type=int, default=0, help="the study seed whose fold models are used")
    args = ap.parse_args(argv)
    if not 0 <= args.fold < 5:
        ap.error("--fold must be in 0..4 (the study's five folds)")
    skipped = 0
    for name in args.collections:
        try:
            run(name, args)
        except SystemExit as e:
            print(e, flush=True)
            skipped += 1
    if skipped:
        sys.exit(1)


if __name__ == "__main__":
    main()
