"""Query clustering (paper §5.3, Table 3 analog) and a side-by-side explanation (§6, Figure 3).

Trains one TK-2 on the training part of cross-validation fold 0 (the split ``cv.py`` uses), then

* clusters all judged queries by k-means over their mean contextualized TK query vectors and
  reports, per cluster, the median rank of the first relevant document for BM25 and for the
  cross-validated TK-2 run of ``cv.py`` (each query scored by a model that never saw it);
* picks a fold-0 test query whose BM25 top document is not relevant while this model puts a
  relevant one first, and writes the HTML comparison of those two documents.

    .venv/bin/python experiments/rerank/analysis.py --collection cranfield
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from limelight.data.formats import read_run_parquet
from limelight.data.loaders import load_dataset
from limelight.rerank.explain import cluster_queries, cluster_table, explain, explain_html
from limelight.rerank.models import TKConfig
from limelight.rerank.ranker import KernelReranker, NeuralRanker
from limelight.rerank.train import QrelsTriples, TrainConfig, train
from limelight.rerank.vocab import Vocabulary

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collection", default="cranfield")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--max-seconds", type=float, default=90.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from cv import concat, folds_of, subset

    torch.set_num_threads(1)
    name = args.collection
    folder = args.out / name
    ds = load_dataset(name)
    bm25 = read_run_parquet(folder / "bm25.parquet", "bm25")
    judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
    qids = [q for q in ds.queries.ids if q in judged]
    folds = folds_of(qids, args.folds, args.seed)
    test = folds[0]
    rest = [q for f in folds[1:] for q in f]
    vocab = Vocabulary.build(ds.collection.texts.tolist(), 2)
    ckpt = folder / "tk2_fold0.pt"
    if ckpt.exists():
        ranker = NeuralRanker.load(ckpt, vocab=vocab)
    else:
        ranker = NeuralRanker.create(TKConfig(n_layers=2), vocab, seed=args.seed)
        rng = np.random.default_rng(args.seed)
        rest_sh = [rest[i] for i in rng.permutation(len(rest))]
        val, tr = rest_sh[:20], rest_sh[20:]
        triples = QrelsTriples.build(ds.queries, ds.qrels, bm25, ds.collection, tr)
        train(ranker, ds.collection, ds.queries, triples,
              TrainConfig(epochs=20, batch_size=32, validate_every=10, val_depth=30,
                          max_seconds=args.max_seconds, seed=args.seed),
              bm25, ds.qrels, val, checkpoint=ckpt, progress=print)
    out: dict = {"collection": name, "alpha": float(ranker.model.alpha.detach())}
    # ---- Table 3 analog
    labels = cluster_queries(ranker, ds.queries, k=args.k, seed=args.seed)
    runs = {"bm25": bm25}
    parts = [folder / f"tk2.fold{f}.parquet" for f in range(args.folds)]
    if all(p.exists() for p in parts):
        runs["tk2 (CV)"] = concat([read_run_parquet(p) for p in parts], "tk2")
    table = cluster_table(labels, ds.queries, runs, ds.qrels, examples=2)
    out["clusters"] = table.to_dict("records")
    print(table.to_string(index=False))
    # ---- Figure 3 analog
    test_run = KernelReranker(ranker, ds.collection).transform(ds.queries, subset(bm25, test).topk(50))
    rel = {}
    m = ds.qrels.rel >= 1
    for q, d in zip(ds.qrels.qids.decode(ds.qrels.q[m]).tolist(), ds.qrels.docids.decode(ds.qrels.d[m]).tolist(),
                    strict=True):
        rel.setdefault(q, set()).add(d)
    chosen = None
    for q in test:
        b_docs, _ = bm25.query(q)
        t_docs, _ = test_run.query(q)
        if len(b_docs) and len(t_docs) and b_docs[0] not in rel[q] and t_docs[0] in rel[q]:
            chosen = (q, t_docs[0], b_docs[0], list(b_docs).index(t_docs[0]) + 1, list(t_docs).index(b_docs[0]) + 1)
            break
    if chosen is None:  # fall back: best-ranked relevant document vs BM25's top one
        q = test[0]
        t_docs, _ = test_run.query(q)
        b_docs, _ = bm25.query(q)
        cand = [d for d in t_docs if d in rel[q] and d != b_docs[0]] or [t_docs[1]]
        chosen = (q, cand[0], b_docs[0], list(b_docs).index(cand[0]) + 1, list(t_docs).index(b_docs[0]) + 1)
    q, d_tk, d_bm, bm_rank_of_tk, tk_rank_of_bm = chosen
    qt = ds.queries[q]
    text = {d: ds.collection.texts[ds.collection.ids.lookup(d)] for d in (d_tk, d_bm)}
    html = explain_html(ranker, qt, text[d_tk], text[d_bm],
                        f"{d_tk}: TK rank 1, BM25 rank {bm_rank_of_tk} ({'relevant' if d_tk in rel[q] else 'not relevant'})",
                        f"{d_bm}: BM25 rank 1, TK rank {tk_rank_of_bm} ({'relevant' if d_bm in rel[q] else 'not relevant'})")
    (args.out / f"explain_{name}.html").write_text(html, encoding="utf-8")
    out["explanation"] = {"query": q, "text": qt, "docs": {}}
    for d in (d_tk, d_bm):
        ex = explain(ranker, qt, text[d])
        out["explanation"]["docs"][d] = {"score": ex.score, "s_log": ex.s_log, "s_len": ex.s_len,
                                         "sum_of_contributions": float(ex.kernels.contrib.sum()),
                                         "kernels": ex.kernels.round(4).to_dict("records"),
                                         "terms_per_kernel": ex.doc_terms.kernel.value_counts().sort_index().to_dict()}
        print(d, ex.score, ex.s_log, ex.s_len)
        print(ex.kernels.to_string(index=False))
    (args.out / f"analysis_{name}.json").write_text(json.dumps(out, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
