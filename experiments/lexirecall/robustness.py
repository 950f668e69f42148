"""Section 6 of the lexirecall paper (Diaz & Mitra, TOIS 2023) on real runs: ties, agreement
between measures and label degradation, printed as Markdown (``docs/results-evaluation.md``).

    .venv/bin/python experiments/lexirecall/robustness.py --collection npl --samples 3
"""

from __future__ import annotations

import argparse

from limelight.data.loaders import load_dataset
from limelight.evaluation.robustness import label_degradation, measure_agreement
from limelight.evaluation.synthetic import perturb_run
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.fusion import rrf


def main() -> None:
    """Section 6 analyses on real runs of a shared collection (BM25 variants, fusions and
    score-perturbed runs at depth 1000), printed as Markdown."""
    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("--collection", default="scifact")
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    ds = load_dataset(args.collection)
    index = BM25Index.build(ds.collection)
    runs = [BM25(index, k1=k1, b=b).retrieve(ds.queries, 1000).rename(f"bm25_{k1}_{b}")
            for k1 in (0.6, 0.9, 1.2) for b in (0.4, 0.75)]
    runs += [rrf(runs[0], runs[3]).topk(1000).rename("rrf"), perturb_run(runs[1], 0.3, 1, 1000).rename("noisy0.3"),
             perturb_run(runs[1], 0.3, 2, 100).rename("noisy0.3@100")]
    measures = "R@1000 Rprec AP nDCG nDCG@10 RR LexiRecall"
    print(f"### {args.collection}: {len(runs)} runs, {len(ds.qrels.qids)} judged queries\n")
    print(measure_agreement(runs, ds.qrels, measures).to_markdown(index=False, floatfmt=".3f"))
    for mode in ("uniform", "frequency"):
        df = label_degradation(runs, ds.qrels, "R@1000 Rprec AP nDCG LexiRecall", (0.0, 0.25, 0.5, 0.75),
                               mode, samples=args.samples, seed=0)
        print(f"\n#### label degradation ({mode}, mean of {args.samples} samples)\n")
        print(df.pivot(index="fraction", columns="measure", values=["tied", "agreement"])
              .to_markdown(floatfmt=".3f"))


if __name__ == "__main__":
    main()
