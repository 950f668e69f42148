"""BM25 effectiveness on the six shared test collections, next to the README's reference points.

limelight's BM25 (k1=0.9, b=0.4, Lucene variant; title and text joined by a space; top 1000),
evaluated with ir_measures (trec_eval definitions), with and without Snowball English stemming;
then nDCG@10 for each stopword list, to show which one the reference figures used.

    .venv/bin/python benchmarks/bm25_effectiveness.py
"""

from __future__ import annotations

import time

import ir_measures
from ir_measures import AP, R, nDCG

from limelight.analysis import Analyzer
from limelight.data import load_dataset
from limelight.retrieval.bm25 import BM25, BM25Index

COLLECTIONS = ("cranfield", "med", "cacm", "npl", "scifact", "adi")
# /work/shared/data/README.md: nDCG@10, AP, R@100, and nDCG@10 with Snowball stemming
REFERENCE = {
    "cranfield": (.332, .268, .687, .352),
    "med": (.664, .490, .771, .671),
    "cacm": (.413, .298, .605, .487),
    "npl": (.382, .224, .490, .445),
    "scifact": (.657, .619, .876, .676),
    "adi": (.422, .352, .809, .480),
}
MEASURES = [nDCG @ 10, AP, R @ 100]


def evaluate(ds, analyzer: Analyzer) -> dict:
    bm = BM25(BM25Index.build(ds.collection, analyzer), k1=0.9, b=0.4)
    run = bm.retrieve(ds.queries, 1000)
    return ir_measures.calc_aggregate(MEASURES, ds.qrels.to_ir_measures(), run.to_ir_measures())


def main() -> None:
    t0 = time.perf_counter()
    datasets = {name: load_dataset(name) for name in COLLECTIONS}
    print("| collection | nDCG@10 | ref | AP | ref | R@100 | ref | stemmed nDCG@10 | ref | "
          "stemmed AP | stemmed R@100 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    ndcg10: dict[str, float] = {}
    for name, ds in datasets.items():
        plain = evaluate(ds, Analyzer())
        stem = evaluate(ds, Analyzer(stemmer="english"))
        ref = REFERENCE[name]
        got = (plain[nDCG @ 10], plain[AP], plain[R @ 100], stem[nDCG @ 10])
        worst = max(worst, *(abs(g - r) for g, r in zip(got, ref, strict=True)))
        ndcg10[name] = got[0]
        print(f"| {name} | {got[0]:.3f} | {ref[0]:.3f} | {got[1]:.3f} | {ref[1]:.3f} | "
              f"{got[2]:.3f} | {ref[2]:.3f} | {got[3]:.3f} | {ref[3]:.3f} | "
              f"{stem[AP]:.3f} | {stem[R @ 100]:.3f} |")
    print(f"\nlargest |difference| from a reference figure: {worst:.4f}")

    print("\nnDCG@10 by stopword list (no stemming):\n")
    lists = ("none", "en", "en_plus")
    print("| collection | " + " | ".join(lists) + " | reference |")
    print("|---|" + "---|" * (len(lists) + 1))
    for name, ds in datasets.items():
        vals = [evaluate(ds, Analyzer(stopwords=s))[nDCG @ 10] for s in lists]
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {REFERENCE[name][0]:.3f} |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    summarize(ndcg10, worst)


def summarize(ndcg10: dict[str, float], worst: float) -> None:
    """``make bench`` rows for issue 2's acceptance: BM25 nDCG@10 within ±0.01 of the data
    README's reference points (k1 0.9, b 0.4, no stemming), per collection, and the largest
    difference over every reference figure (nDCG@10, AP, R@100, stemmed nDCG@10)."""
    from _summary import record

    for name, v in ndcg10.items():
        ref = REFERENCE[name][0]
        record(f"BM25 nDCG@10, {name} (k1 0.9, b 0.4)", v, anchor=f"data README {ref:.3f}",
               target="within ±0.01 of the reference", met=abs(v - ref) <= 0.01)
    record("largest |difference| from a reference figure (nDCG@10, AP, R@100, stemmed nDCG@10; "
           f"{len(ndcg10)} collections)", worst, anchor="data README reference points",
           target="≤ 0.01", met=worst <= 0.01)


if __name__ == "__main__":
    main()
