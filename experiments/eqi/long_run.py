"""Long, resumable Residual training runs (issue 23, item 2): ≥ 3 seeds × ≥ 5,000 batches.

    # one piece of seed 0 (at most 1,000 batches), continued by the same command until finished
    flock /tmp/heavy.lock .venv/bin/python experiments/eqi/long_run.py --seed 0 --steps 5000 \
        --budget 1000 --resume [--from-audit demo-out]
    # the spread over the finished seeds
    .venv/bin/python experiments/eqi/long_run.py --report [--from-audit demo-out]

Setting as Table 2(b) (dense_experiments.py): 1,000 test documents (seed 0), 300 validation
documents (seed 1), |Q_train| = 50,000, |D_train| = 6,000, batches of 1,000 triples, Adam;
validation RELQ(0.5,0.9) every ``--eval-every`` batches, the best heads kept (no patience: the
whole curve is logged). Checkpoints (heads, optimizer, RNGs, sampler position, early-stopping
state) under .cache/eqi/long/; the per-batch JSONL log, the per-call timings and, once finished,
the test-set RELQ of the best heads under results/long/. ``--resume`` continues from the
checkpoint; the result is the same as an uninterrupted run (tests/test_eqi.py).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from common import CACHE, EMB, RESULTS, collection, dense_store, log_queries, sample_docs

from limelight._io import atomic_path
from limelight.exposure.eqi import method_lists, train_eqi
from limelight.exposure.relq import relq_many

OUT = RESULTS / "long"
MEASURES = ("RELQ(0.5,0.5)", "RELQ(0.5,0.9)", "RELQ(1,1)", "RELQ(EXH,NDCG)")


def setting(dataset: str, from_audit: Path | None) -> tuple:
    """(name, store, query vectors, document vectors) as in dense_experiments.py."""
    if from_audit is not None:
        from limelight.exposure import ExposureStore

        st = ExposureStore.open(from_audit / "systems" / "dense" / "exposure")
        qemb = np.load(from_audit / "systems" / "query_vectors.npy")
        demb = np.load(from_audit / "index" / "dense" / "embeddings.npy")
        return f"{dataset}-audit", st, qemb, demb
    from limelight.exposure.eqi import encode_queries_cached
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

    coll, qs, enc = collection(dataset), log_queries(), Encoder()
    demb = enc.encode_collection(coll, cache_dir=EMB)
    qemb = encode_queries_cached(qs, enc, EMB)
    ret = DenseRetriever(DenseIndex.from_embeddings(coll.ids, demb, {"encoder": enc.identity()}), enc)
    return dataset, dense_store(dataset, ret, qemb, qs), qemb, demb


def write_json(path: Path, obj) -> None:
    """Atomic JSON write."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, default=float))


def report(name: str, method: str) -> dict:
    """Mean, standard deviation, min and max over the finished seeds' test RELQ."""
    runs = sorted(OUT.glob(f"{name}-{method}-lr*-rn*-s*.json"))
    groups: dict[str, list[dict]] = {}
    for p in runs:
        r = json.loads(p.read_text())
        groups.setdefault(r["tag"], []).append(r)
    out = {}
    for tag, rs in groups.items():
        out[tag] = {"seeds": [r["seed"] for r in rs], "best_step": [r["best_step"] for r in rs]}
        for m in MEASURES:
            v = np.array([r["test"][m] for r in rs])
            out[tag][m] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else None,
                           "min": float(v.min()), "max": float(v.max())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="npl")
    ap.add_argument("--from-audit", type=Path, default=None)
    ap.add_argument("--method", default="residual")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--budget", type=int, default=None, help="at most this many batches in this call")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--random-negatives", type=float, default=0.0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--checkpoint-every", type=int, default=100)
    ap.add_argument("--report", action="store_true", help="summarise the finished seeds and exit")
    args = ap.parse_args()
    name = f"{args.dataset}-audit" if args.from_audit else args.dataset
    if args.report:
        res = report(name, args.method)
        write_json(OUT / f"{name}-{args.method}-spread.json", res)
        print(json.dumps(res, indent=1))
        return
    name, st, qemb, demb = setting(args.dataset, args.from_audit)
    tag = f"lr{args.lr:g}-rn{args.random_negatives:g}"
    run = f"{name}-{args.method}-{tag}-s{args.seed}"
    test = sample_docs(st, 1000, seed=0)
    val = sample_docs(st, 300, seed=1, exclude=test)
    t0, load0 = time.perf_counter(), os.getloadavg()
    model = train_eqi(args.method, st, qemb, demb, n_queries=50_000, n_docs=6000, exclude_docs=test,
                      steps=args.steps, batch_size=1000, lr=args.lr, seed=args.seed,
                      random_negatives=args.random_negatives, validation_docs=val,
                      eval_every=args.eval_every, checkpoint=CACHE / "long" / f"{run}.ckpt",
                      checkpoint_every=args.checkpoint_every, resume=args.resume, budget=args.budget,
                      log_path=OUT / f"{run}.jsonl")
    timing = {"seconds": round(time.perf_counter() - t0, 1), "reached": model.meta["step"],
              "load_start": load0, "load_end": os.getloadavg()}
    with open(OUT / f"{run}.calls.jsonl", "a") as f:  # one line per call: per-batch time and load
        f.write(json.dumps(timing) + "\n")
    print(run, timing, "best", model.meta["validation"]["best"], "at", model.meta["validation"]["best_step"],
          flush=True)
    if not model.meta["finished"]:
        print(f"not finished ({model.meta['step']}/{args.steps}): run the same command again", flush=True)
        return
    lists = method_lists(model, test, embeddings=demb[test])
    res = {m: float(np.nanmean(relq_many(lists, st.ranks()[test], m)[m])) for m in MEASURES}
    write_json(OUT / f"{run}.json", {"tag": tag, "seed": args.seed, "steps": args.steps,
                                     "best_step": model.meta["validation"]["best_step"],
                                     "validation_best": model.meta["validation"]["best"], "test": res})
    print(res, flush=True)


if __name__ == "__main__":
    main()
