"""Query clustering (paper §5.3, Table 3 analog) and a side-by-side explanation (§6, Figure 3)
with the issue-25 study's TK-2 (no training here).

The model is the fold-0 checkpoint of the TK-2 variant chosen on validation
(``study.fold_models``, PLAN.md amendment 2; the label is printed and recorded). Then

* all judged queries are clustered by k-means over their mean contextualized TK query vectors
  of that model, and per cluster the median rank of the first relevant document is reported for
  BM25 and for the cross-validated run of ``cv.cv_run`` (each query scored by the fold model that
  held it out);
* among fold 0's test queries (the checkpoint's meta ``test_queries``), the first one whose BM25
  top document is not relevant while the model puts a relevant one first is explained: the HTML
  comparison of those two documents.

    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/analysis.py --collection cranfield

Exits with a one-line message when the collection's study folds are not done.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from limelight.data.loaders import load_dataset
from limelight.rerank.explain import cluster_queries, cluster_table, explain, explain_html
from limelight.rerank.ranker import NeuralRanker

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collection", default="cranfield")
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0, help="k-means seed")
    ap.add_argument("--model-seed", type=int, default=0, help="the study seed whose fold models are used")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from cv import bm25_run, cv_run, study_models, subset  # same folder

    torch.set_num_threads(1)
    name = args.collection
    label, cv = cv_run(name, "tk2", args.model_seed, args.out)  # SystemExit (one line) if not done
    ckpt = study_models(name, "tk2", args.model_seed)[1][0]
    ranker = NeuralRanker.load(ckpt)
    test = list(ranker.meta["test_queries"])
    print(f"{name}: TK-2 = {label} (fold 0: {ckpt.name}, {len(test)} test queries)", flush=True)
    ds = load_dataset(name)
    bm25 = bm25_run(name, args.out)
    out: dict = {"collection": name, "model": label, "checkpoint": ckpt.name, "fold0_test_queries": len(test),
                 "alpha": float(ranker.model.alpha.detach())}
    # ---- Table 3 analog
    labels = cluster_queries(ranker, ds.queries, k=args.k, seed=args.seed)
    runs = {"bm25": bm25, "tk2 (CV)": cv}
    table = cluster_table(labels, ds.queries, runs, ds.qrels, examples=2)
    out["clusters"] = table.to_dict("records")
    print(table.to_string(index=False))
    # ---- Figure 3 analog
    test_run = subset(cv, test)  # fold 0's test queries, scored by this model
    rel: dict[str, set] = {}
    m = ds.qrels.rel >= 1
    for q, d in zip(ds.qrels.qids.decode(ds.qrels.q[m]).tolist(), ds.qrels.docids.decode(ds.qrels.d[m]).tolist(),
                    strict=True):
        rel.setdefault(q, set()).add(d)
    chosen = _pick(test, bm25, test_run, rel)
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


def _pick(test: list[str], bm25, test_run, rel: dict[str, set]) -> tuple:
    """``(query, model's doc, BM25's doc, BM25 rank of the model's, model rank of BM25's)``: the
    first test query whose BM25 top document is not relevant while the model's is; else the
    first test query's best-ranked relevant document (not BM25's top) against BM25's top one."""
    for q in test:
        b_docs, _ = bm25.query(q)
        t_docs, _ = test_run.query(q)
        if len(b_docs) and len(t_docs) and b_docs[0] not in rel[q] and t_docs[0] in rel[q]:
            return q, t_docs[0], b_docs[0], list(b_docs).index(t_docs[0]) + 1, list(t_docs).index(b_docs[0]) + 1
    q = test[0]
    t_docs, _ = test_run.query(q)
    b_docs, _ = bm25.query(q)
    cand = [d for d in t_docs if d in rel[q] and d != b_docs[0]] or [t_docs[1]]
    return q, cand[0], b_docs[0], list(b_docs).index(cand[0]) + 1, list(t_docs).index(b_docs[0]) + 1


if __name__ == "__main__":
    main()
