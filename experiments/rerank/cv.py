"""Query-level cross-validation of BM25, KNRM and TK-1/2/3 on the shared collections.

For each collection: BM25 (limelight.retrieval.bm25, k1=0.9, b=0.4) retrieves the top 100 of every
query. Queries with a relevant document are split into ``--folds`` folds (seeded). For each fold
and model a fresh ranker is trained on the other folds (a share of them held out for early
stopping on MRR@10) and re-ranks the BM25 top ``--depth`` of the test fold's queries. Test-fold
runs are concatenated into one run per model (every query scored by a model that never saw it).
The script is resumable: finished (collection, model, fold) runs are kept in ``--out``.

    .venv/bin/python experiments/rerank/cv.py --collections cranfield --folds 5
    .venv/bin/python experiments/rerank/cv.py --report   # tables + paired t-tests
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from limelight.data.formats import read_run_parquet, write_run_parquet
from limelight.data.loaders import load_dataset
from limelight.data.run import Run
from limelight.evaluation import evaluate
from limelight.evaluation.stats import paired_t
from limelight.rerank.models import KNRMConfig, TKConfig
from limelight.rerank.ranker import KernelReranker, NeuralRanker
from limelight.rerank.train import QrelsTriples, TrainConfig, train
from limelight.rerank.vocab import Vocabulary
from limelight.retrieval.bm25 import BM25, BM25Index

OUT = Path(__file__).resolve().parent / "out"
MODELS = {"knrm": lambda: KNRMConfig(), "tk1": lambda: TKConfig(n_layers=1),
          "tk2": lambda: TKConfig(n_layers=2), "tk3": lambda: TKConfig(n_layers=3)}


def bm25_run(name: str, out: Path, k: int = 100) -> Run:
    path = out / name / "bm25.parquet"
    if path.exists():
        return read_run_parquet(path, "bm25")
    ds = load_dataset(name)
    run = BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, k).rename("bm25")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_run_parquet(run, path)
    return run


def folds_of(qids: list[str], k: int, seed: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(qids))
    return [[qids[i] for i in perm[f::k]] for f in range(k)]


def subset(run: Run, qids: list[str]) -> Run:
    keep_q = np.zeros(run.n_queries, dtype=bool)
    c = run.qids.encode(qids, missing=-1)
    keep_q[c[c >= 0]] = True
    keep = keep_q[run.q]
    return Run.from_codes(run.qids, run.docids, run.q[keep], run.d[keep], run.score[keep], run.name, sort=False)


def run_collection(name: str, args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(name)
    run = bm25_run(name, args.out)
    judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
    qids = [q for q in ds.queries.ids if q in judged]
    folds = folds_of(qids, args.folds, args.seed)
    vocab = Vocabulary.build(ds.collection.texts.tolist(), args.min_cf)
    docs_enc = None
    log = out / "log.jsonl"
    for model_name in args.models:
        for f, test in enumerate(folds):
            path = out / f"{model_name}.fold{f}.parquet"
            if path.exists() or (args.only_folds and f not in args.only_folds):
                continue
            rest = [q for g, fold in enumerate(folds) if g != f for q in fold]
            rng = np.random.default_rng(args.seed + f)
            rest = [rest[i] for i in rng.permutation(len(rest))]
            n_val = min(args.max_val, max(1, int(len(rest) * args.val_share)))
            val, tr = rest[:n_val], rest[n_val:]
            ranker = NeuralRanker.create(MODELS[model_name](), vocab, seed=args.seed + f)
            triples = QrelsTriples.build(ds.queries, ds.qrels, run, ds.collection, tr, depth=100)
            cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, patience=args.patience,
                              validate_every=args.validate_every, val_depth=args.val_depth,
                              seed=args.seed + f, threads=args.threads, max_seconds=args.max_seconds)
            t0 = time.perf_counter()
            res = train(ranker, ds.collection, ds.queries, triples, cfg, run, ds.qrels, val)
            stage = KernelReranker(ranker, ds.collection, depth=args.depth, batch_size=256)
            if docs_enc is not None and docs_enc.fingerprint == vocab.fingerprint:
                stage._docs = docs_enc
            reranked = stage.transform(ds.queries, subset(run, test).topk(args.depth))
            docs_enc = stage.encoded_docs
            write_run_parquet(reranked.rename(model_name), path)
            rec = {"collection": name, "model": model_name, "fold": f, "train_queries": len(tr),
                   "val_queries": len(val), "test_queries": len(test), "positives": triples.n_positives,
                   "steps": res.steps, "best_step": res.best_step, "best_val_mrr10": res.best_mrr,
                   "stopped": res.stopped, "train_s": res.seconds,
                   "test_model_s": stage.last_model_seconds, "test_pairs": int(len(reranked)),
                   "total_s": time.perf_counter() - t0, "alpha": float(getattr(ranker.model, "alpha", torch.tensor(float("nan"))).detach())}
            with open(log, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)


def _subset_qrels(qrels, qids: list[str]):
    from limelight.data.qrels import Qrels

    keep = np.isin(qrels.qids.decode(qrels.q), np.asarray(qids, dtype=object))
    return Qrels.from_arrays(qrels.qids.decode(qrels.q[keep]), qrels.docids.decode(qrels.d[keep]),
                             qrels.rel[keep], qrels.name)


def concat(runs: list[Run], name: str) -> Run:
    df = [r.to_pandas() for r in runs]
    import pandas as pd

    return Run.from_pandas(pd.concat(df, ignore_index=True), name)


def report(args: argparse.Namespace) -> dict:
    """Evaluate the concatenated test-fold runs; paired t-tests vs BM25 and KNRM."""
    results: dict = {}
    lines = []
    for name in args.collections:
        out = args.out / name
        ds = load_dataset(name)
        bm25 = bm25_run(name, args.out)
        used = args.only_folds or list(range(args.folds))
        if args.only_folds:  # evaluate on the chosen folds' test queries only
            judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
            folds = folds_of([q for q in ds.queries.ids if q in judged], args.folds, args.seed)
            keep = [q for f in used for q in folds[f]]
            bm25 = subset(bm25, keep)
            ds.qrels = _subset_qrels(ds.qrels, keep)
        runs = {"bm25": bm25}
        for m in args.models:
            parts = [out / f"{m}.fold{f}.parquet" for f in used]
            if all(p.exists() for p in parts):
                runs[m] = concat([read_run_parquet(p) for p in parts], m)
        res = evaluate(list(runs.values()), ds.qrels, "nDCG@10 RR@10")
        per = {n: r for n, r in zip(runs, res, strict=True)}
        tab = {}
        for n, r in per.items():
            row = {}
            for meas in ("nDCG@10", "RR@10"):
                v = r.to_pandas()[meas].to_numpy()
                row[meas] = float(v.mean())
                for base in ("bm25", "knrm"):
                    if base in per and base != n:
                        b = per[base].to_pandas()[meas].to_numpy()
                        row[f"{meas} p vs {base}"] = paired_t(v, b)
                        row[f"{meas} diff vs {base}"] = float(v.mean() - b.mean())
            tab[n] = row
        results[name] = {"n_queries": int(len(per["bm25"].qids)), "models": tab}
        lines.append(f"\n### {name} ({len(per['bm25'].qids)} queries, {args.folds}-fold CV, folds {used})\n")
        lines.append("| model | nDCG@10 | p vs BM25 | p vs KNRM | MRR@10 | p vs BM25 | p vs KNRM |")
        lines.append("|---|---|---|---|---|---|---|")
        for n, row in tab.items():
            def cell(meas, base, row=row):
                p = row.get(f"{meas} p vs {base}")
                if p is None:
                    return "–"
                d = row[f"{meas} diff vs {base}"]
                return f"{d:+.3f} (p={p:.3f}){' *' if p < 0.05 else ''}"
            lines.append(f"| {n} | {row['nDCG@10']:.3f} | {cell('nDCG@10', 'bm25')} | {cell('nDCG@10', 'knrm')} "
                         f"| {row['RR@10']:.3f} | {cell('RR@10', 'bm25')} | {cell('RR@10', 'knrm')} |")
    stem = "cv_results" if not args.only_folds else "cv_results_folds" + "".join(map(str, args.only_folds))
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    text = "\n".join(lines)
    (args.out / f"{stem}.md").write_text(text + "\n")
    print(text)
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collections", nargs="+", default=["cranfield", "npl", "scifact"])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-cf", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--patience", type=int, default=3)
    ap.add_argument("--validate-every", type=int, default=10)
    ap.add_argument("--val-depth", type=int, default=30)
    ap.add_argument("--val-share", type=float, default=0.2)
    ap.add_argument("--max-val", type=int, default=20)
    ap.add_argument("--max-seconds", type=float, default=40.0)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only-folds", type=int, nargs="+", default=None,
                    help="train/evaluate only these folds (e.g. a longer-training diagnostic)")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args(argv)
    if args.report:
        report(args)
        return
    for name in args.collections:
        run_collection(name, args)


if __name__ == "__main__":
    sys.exit(main())
