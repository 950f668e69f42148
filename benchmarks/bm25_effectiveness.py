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
    for name, ds in datasets.items():
        plain = evaluate(ds, Analyzer())
        stem = evaluate(ds, Analyzer(stemmer="english"))
        ref = REFERENCE[name]
        got = (plain[nDCG @ 10], plain[AP], plain[R @ 100], stem[nDCG @ 10])
        worst = max(worst, *(abs(g - r) for g, r in zip(got, ref, strict=True)))
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


if __name__ == "__main__":
    main()
