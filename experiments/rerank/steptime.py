"""Machine time of one optimizer step (issue 25 compute plan): TK-2 and KNRM, batch 32, 1 thread,
on the judged triples of a collection; plus one validation pass (re-rank the BM25 top 100 of
``--val-queries`` queries) and one training-state checkpoint. Records the load average.

    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/steptime.py --collections cranfield scifact npl
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from limelight.data.loaders import load_dataset
from limelight.rerank import KNRMConfig, NeuralRanker, TKConfig, Vocabulary
from limelight.rerank.models import param_groups
from limelight.rerank.train import FitConfig, TripleSet, Validation, fit
from limelight.retrieval.bm25 import BM25, BM25Index

OUT = Path(__file__).parent / "results" / "steptime.json"


def measure(name: str, model: str, batch: int, steps: int, val_queries: int) -> dict:
    torch.set_num_threads(1)
    ds = load_dataset(name)
    run = BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, 100)
    qids = [q for q in ds.queries.ids if q in set(ds.qrels.qids.decode(ds.qrels.q).tolist())]
    data = TripleSet.from_qrels(ds.queries, ds.qrels, run, ds.collection, qids)
    vocab = Vocabulary.build(ds.collection.texts.tolist(), 2)
    ranker = NeuralRanker.create(TKConfig(n_layers=2) if model == "tk2" else KNRMConfig(), vocab, 0)
    m = ranker.model
    m.train()
    opt = torch.optim.Adam(param_groups(m))
    docs, qenc = ranker.encode_docs(data.doc_texts.tolist()), ranker.encode_queries(data.query_texts.tolist())
    q, p, n = data.epoch(np.random.default_rng(0))
    times = []
    for s in range(steps + 3):
        sl = slice((s * batch) % (len(q) - batch), (s * batch) % (len(q) - batch) + batch)
        t0 = time.perf_counter()
        qr, qm = m.encode(torch.from_numpy(qenc.take(q[sl])))
        pr, pm = m.encode(torch.from_numpy(docs.take(p[sl])))
        nr, nm = m.encode(torch.from_numpy(docs.take(n[sl])))
        loss = torch.clamp(1 - m.score_encoded(qr, qm, pr, pm) + m.score_encoded(qr, qm, nr, nm), min=0).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if s >= 3:  # warm-up excluded
            times.append(time.perf_counter() - t0)
    val = Validation(ds.collection, ds.queries, run, ds.qrels, qids[:val_queries], 100)
    t0 = time.perf_counter()
    val.evaluate(ranker)
    t_val = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:  # one checkpoint: a 1-step fit writes state + model
        t0 = time.perf_counter()
        fit(ranker, data, FitConfig(max_steps=1, batch_size=batch, eval_every=10, checkpoint_every=1), Path(d) / "x.pt")
        t_ckpt = time.perf_counter() - t0 - float(np.median(times))
    return {"collection": name, "model": model, "batch": batch, "steps_timed": steps,
            "step_s_median": float(np.median(times)), "step_s_p90": float(np.percentile(times, 90)),
            "validation_s": t_val, "validation_queries": val_queries, "checkpoint_s": t_ckpt,
            "load_avg_after": os.getloadavg(), "mean_doc_tokens": float(np.minimum(docs.lengths, 200).mean())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="+", default=["cranfield"])
    ap.add_argument("--models", nargs="+", default=["tk2", "knrm"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--val-queries", type=int, default=45)
    a = ap.parse_args()
    recs = []
    for c in a.collections:
        for m in a.models:
            load = os.getloadavg()
            r = measure(c, m, a.batch, a.steps, a.val_queries)
            r["load_avg_before"] = load
            print(json.dumps(r), flush=True)
            recs.append(r)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps({"cpu_count": os.cpu_count(), "records": recs}, indent=1))
    os.replace(tmp, OUT)


if __name__ == "__main__":
    main()
