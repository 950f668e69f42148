"""Table 4 analog with the TK re-ranker, on queries TK never saw.

The judged queries of a collection are split into the folds of ``experiments/rerank/cv.py``
(same seed). TK-2 is trained on the other folds (20% of them held out for early stopping) and
written to ``out/ckpt/`` (not in git); then BM25, MiniLM and BM25 top 100 >> TK-2 are run on the
test fold's original queries and their variations, in both modes of the paper (the whole
pipeline sees the variant; only the re-ranker does).

    .venv/bin/python experiments/variations/table4_tk.py [cranfield npl] [--fold 0] [--max-seconds 300]

Writes experiments/variations/out/table4_tk_<collection>.{md,json,png} and its training log.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np
from table4 import save_report  # the script's folder is on sys.path

from limelight.data import load_dataset
from limelight.data.queries import Queries
from limelight.querygen.robustness import robustness_report
from limelight.querygen.variations import generate_variations
from limelight.querygen.variations_cli import build_systems
from limelight.rerank.ranker import NeuralRanker
from limelight.rerank.train import QrelsTriples, TrainConfig, train
from limelight.rerank.vocab import Vocabulary

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def _cv():
    """experiments/rerank/cv.py as a module: its folds, BM25 run and model configurations."""
    spec = importlib.util.spec_from_file_location("rerank_cv", HERE.parent / "rerank" / "cv.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(name: str, args: argparse.Namespace) -> None:
    cv = _cv()
    ds = load_dataset(name)
    judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
    folds = cv.folds_of([q for q in ds.queries.ids if q in judged], args.folds, args.seed)
    test = folds[args.fold]
    rest = [q for g, f in enumerate(folds) if g != args.fold for q in f]
    rest = [rest[i] for i in np.random.default_rng(args.seed + args.fold).permutation(len(rest))]
    n_val = min(20, max(1, int(len(rest) * 0.2)))
    val, tr = rest[:n_val], rest[n_val:]

    ckpt = OUT / "ckpt" / f"tk2_{name}_fold{args.fold}.pt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not ckpt.exists() or args.retrain:
        bm25_run = cv.bm25_run(name, cv.OUT)
        vocab = Vocabulary.build(ds.collection.texts.tolist(), 2)
        ranker = NeuralRanker.create(cv.MODELS["tk2"](), vocab, seed=args.seed)
        triples = QrelsTriples.build(ds.queries, ds.qrels, bm25_run, ds.collection, tr, depth=100)
        cfg = TrainConfig(batch_size=32, patience=3, validate_every=10, val_depth=30,
                          seed=args.seed, threads=args.threads, max_seconds=args.max_seconds)
        res = train(ranker, ds.collection, ds.queries, triples, cfg, bm25_run, ds.qrels, val,
                    checkpoint=ckpt)
        ranker.save(ckpt)
        log = {"collection": name, "fold": args.fold, "train_queries": len(tr), "val_queries": len(val),
               "test_queries": len(test), "steps": res.steps, "best_step": res.best_step,
               "best_val_mrr10": res.best_mrr, "train_s": round(res.seconds, 1)}
        (OUT / f"table4_tk_{name}_train.json").write_text(json.dumps(log, indent=1) + "\n")
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
                            mode="both", dataset=f"{name} (test fold {args.fold}, {len(queries)} queries)",
                            progress=True)
    save_report(rep, f"table4_tk_{name}")
    print(f"{name}: training {t1 - t0:.0f} s, report {time.perf_counter() - t1:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("collections", nargs="*", default=["cranfield", "npl"])
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--retrain", action="store_true")
    args = ap.parse_args(argv)
    for name in args.collections:
        run(name, args)


if __name__ == "__main__":
    main()
