"""Cross-validated test-fold runs of the issue-25 study's models (``experiments/rerank/study.py``).

For a collection and model, ``study.fold_models`` picks the (init, learning-rate) variant with
the highest mean *validation* nDCG@10 over the five folds (PLAN.md amendment 2). Every judged
query's BM25 top 100 (limelight.retrieval.bm25, the study's first stage) is then re-ranked — all
100 documents scored — by the model of the fold that held the query out (the checkpoint's meta
``test_queries``; a query in two test folds, a test query the model trained or validated on, or
a judged query in no test fold is an error). The concatenated run is
``out/<collection>/<model>.cv.parquet``; ``<model>.cv.json`` records the variant's label, the
checkpoints (with their SHA-256: the run is rebuilt when the chosen models change) and the
folds. No model is trained here.

These runs feed the downstream analyses (``budget.py``: depth curves; ``analysis.py``: the
cluster table). Effectiveness tables are ``study.py report``'s (depth and λ chosen on
validation, Holm-corrected tests): this script computes none.

    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/cv.py --collections cranfield --models tk2 knrm
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

from limelight.data.formats import read_run_parquet, write_run_parquet
from limelight.data.loaders import load_dataset
from limelight.data.run import Run
from limelight.errors import LimelightError

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
DEPTH = 100  # the study's first stage: BM25 top 100


def bm25_run(name: str, out: Path = OUT, k: int = DEPTH) -> Run:
    """BM25 (k1=0.9, b=0.4) top ``k`` of every query of ``name``, cached in ``out/<name>/bm25.parquet``."""
    from limelight.retrieval.bm25 import BM25, BM25Index

    path = out / name / "bm25.parquet"
    if path.exists():
        return read_run_parquet(path, "bm25")
    ds = load_dataset(name)
    run = BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, k).rename("bm25")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_run_parquet(run, path)
    return run


def judged_qids(ds) -> list[str]:
    """The queries with a relevant (grade ≥ 1) document, in query order (the study's folds)."""
    judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
    return [q for q in ds.queries.ids if q in judged]


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


def _subset_qrels(qrels, qids: list[str]):
    from limelight.data.qrels import Qrels

    keep = np.isin(qrels.qids.decode(qrels.q), np.asarray(qids, dtype=object))
    return Qrels.from_arrays(qrels.qids.decode(qrels.q[keep]), qrels.docids.decode(qrels.d[keep]),
                             qrels.rel[keep], qrels.name)


def concat(runs: list[Run], name: str) -> Run:
    df = [r.to_pandas() for r in runs]
    import pandas as pd

    return Run.from_pandas(pd.concat(df, ignore_index=True), name)


def _study():
    """``study.py`` of this folder as a module (loaded by path: works whether or not this folder
    is on sys.path, e.g. from experiments/variations/table4_tk.py)."""
    global _STUDY
    if _STUDY is None:
        spec = importlib.util.spec_from_file_location("rerank_study", HERE / "study.py")
        _STUDY = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_STUDY)
    return _STUDY


_STUDY = None


def study_models(name: str, model: str = "tk2", seed: int = 0) -> tuple[str, list[Path]]:
    """``study.fold_models``: the variant chosen on validation and its five fold checkpoints
    (fold 0 first). Raises SystemExit with a one-line message when no variant is complete."""
    return _study().fold_models(name, model, seed)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(HERE.parents[1]))
    except ValueError:
        return str(path)


def cv_run(name: str, model: str = "tk2", seed: int = 0, out: Path = OUT) -> tuple[str, Run]:
    """``(variant label, run)``: every judged query's BM25 top 100 scored by the study model of
    the fold that held it out (see the module docstring); cached in ``out/<name>/<model>.cv.*``.
    SystemExit (one line) when the study has no complete variant of ``model`` for ``name``."""
    label, ckpts = study_models(name, model, seed)
    folder = out / name
    path, rec_path = folder / f"{model}.cv.parquet", folder / f"{model}.cv.json"
    key = {"label": label, "checkpoints": [{"path": _rel(p), "sha256": _sha256(p)} for p in ckpts]}
    if path.exists() and rec_path.exists():
        rec = json.loads(rec_path.read_text())
        if {k: rec.get(k) for k in key} == key:
            return label, read_run_parquet(path, model)
    run, folds = _score_folds(name, model, ckpts, out)
    folder.mkdir(parents=True, exist_ok=True)
    write_run_parquet(run, path)
    rec = {**key, "collection": name, "model": model, "seed": seed, "depth": DEPTH, "folds": folds,
           "queries": int(run.n_queries), "pairs": int(len(run))}
    tmp = rec_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, rec_path)
    print(f"{name}: {model} CV run of {label!r} written to {_rel(path)} ({rec['queries']} queries)", flush=True)
    return label, run


def _score_folds(name: str, model: str, ckpts: list[Path], out: Path) -> tuple[Run, list[dict]]:
    """Each fold model re-ranks its own test queries' BM25 top 100; checks that the test folds
    partition the judged queries and that no model saw its test queries."""
    import torch

    from limelight.rerank.ranker import KernelReranker, NeuralRanker

    torch.set_num_threads(1)
    ds = load_dataset(name)
    first = bm25_run(name, out)
    parts, folds, seen = [], [], set()
    docs = None
    for f, p in enumerate(ckpts):
        ranker = NeuralRanker.load(p)
        meta = ranker.meta
        test = list(meta["test_queries"])
        if leak := set(test) & (set(meta["train_queries"]) | set(meta["val_queries"])):
            raise LimelightError(f"{p}: {len(leak)} test queries were also training/validation queries")
        if twice := set(test) & seen:
            raise LimelightError(f"{p}: {len(twice)} test queries already held out by another fold")
        seen |= set(test)
        stage = KernelReranker(ranker, ds.collection)
        if docs is not None and docs.fingerprint == ranker.vocab.fingerprint:
            stage._docs = docs
        parts.append(stage.transform(ds.queries, subset(first, test)).rename(model))
        docs = stage.encoded_docs
        folds.append({"fold": meta.get("fold", f), "checkpoint": _rel(p), "test_queries": len(test),
                      "best_step": meta.get("best_step"), "best_val": meta.get("best_val"),
                      "model_seconds": round(stage.last_model_seconds, 2)})
    judged = set(judged_qids(ds))
    if seen != judged:
        raise LimelightError(f"{name}: the {model} test folds hold {len(seen)} queries, not the "
                             f"{len(judged)} judged ones ({len(judged - seen)} missing, {len(seen - judged)} extra)")
    return concat(parts, model), folds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collections", nargs="+", default=["cranfield", "scifact", "npl"])
    ap.add_argument("--models", nargs="+", default=["tk2", "knrm"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    missing = 0
    for name in args.collections:
        for m in args.models:
            try:
                label, run = cv_run(name, m, args.seed, args.out)
            except SystemExit as e:
                print(e, flush=True)
                missing += 1
                continue
            print(f"{name}: {m} = {label} ({run.n_queries} queries, {len(run)} re-ranked pairs)", flush=True)
    if missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
