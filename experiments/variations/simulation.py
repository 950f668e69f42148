"""Table 1 / Figures 1, 2, 4, 5 analog of Breuer et al. (ECIR 2022) on shared collections.

The collections have one real query per topic (no user query variants, no description or
narrative), so the "real" queries are the collection's own and TTS reads only their text. For
every source (TTS, KIS) and strategy (S1 ... S4''), 10 queries per topic are simulated; BM25
(k1=0.9, b=0.4, top 1000) gives nDCG, P@10 and AP averaged over all, first and best queries
(Table 1); the first simulated query is validated against the real one: per-topic RMSE of
nDCG, paired t-test p, Kendall's τ of the ordering of six BM25 systems (k1 ∈ {0.3, 0.9, 1.5} ×
b ∈ {0.2, 0.75}; the paper orders six QLD μ values), and the Jaccard overlap of terms.

    .venv/bin/python experiments/variations/simulation.py [cranfield npl scifact]

Writes experiments/variations/out/simulation_<collection>.{md,json}.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from limelight.data import load_dataset
from limelight.evaluation.evaluate import Evaluator
from limelight.querygen.simulation import (
    SOURCES,
    STRATEGIES,
    TermModel,
    session_query,
    simulate_queries,
    validate_simulation,
)
from limelight.retrieval.bm25 import BM25, BM25Index

OUT = Path(__file__).resolve().parent / "out"
N = 10


def arp(stage, ev: Evaluator, sim, real_ids) -> dict:
    per_pos = []
    for i in range(N):
        q = session_query(sim, i)
        res = ev.evaluate(stage.transform(q), warn=False)
        per_pos.append(np.vstack([res.per_query[m] for m in ev.measures]))  # (measures, topics)
    x = np.stack(per_pos)  # (positions, measures, topics)
    names = [str(m) for m in ev.measures]
    return {"all": dict(zip(names, x.mean(axis=(0, 2)).tolist(), strict=True)),
            "first": dict(zip(names, x[0].mean(axis=1).tolist(), strict=True)),
            "best": dict(zip(names, x.max(axis=0).mean(axis=1).tolist(), strict=True))}


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.time()
        ds = load_dataset(name)
        tm = TermModel.build(ds.collection)
        idx = BM25Index.build(ds.collection)
        bm25 = BM25(idx) % 1000
        systems = {f"bm25({k1},{b})": BM25(idx, k1=k1, b=b) % 1000 for k1 in (0.3, 0.9, 1.5) for b in (0.2, 0.75)}
        ev = Evaluator(ds.qrels, "nDCG P@10 AP")
        real = ev.evaluate(bm25.transform(ds.queries), warn=False)
        rows = [{"queries": "real", **{f"{k}": v for k, v in real.aggregate.items()}}]
        lines = [f"**{name}**: BM25 (k1=0.9, b=0.4), {len(ev.qids)} topics, {N} simulated queries per topic\n",
                 "| queries | all: nDCG | P@10 | AP | first: nDCG | P@10 | AP | best: nDCG | RMSE nDCG@10 (first) | p (first) | Kendall τ (6 BM25) | Jaccard |",
                 "|---|" + "---:|" * 11]
        r = {str(k): v for k, v in real.aggregate.items()}
        lines.append(f"| real | {r['nDCG']:.4f} | {r['P@10']:.4f} | {r['AP']:.4f} | {r['nDCG']:.4f} | "
                     f"{r['P@10']:.4f} | {r['AP']:.4f} | {r['nDCG']:.4f} | – | – | – | – |")
        real_ids = list(ds.queries.ids.strings)
        for src in SOURCES:
            for s in STRATEGIES:
                sim = simulate_queries(ds.queries, s, src, N, term_model=tm, qrels=ds.qrels)
                a = arp(bm25, ev, sim, real_ids)
                v = validate_simulation(systems, ds.queries, sim, ds.qrels, measure="nDCG@10")
                rows.append({"queries": f"{src} {s}", **a, "validation": v.to_dict()})
                lines.append(f"| {src} {s} | {a['all']['nDCG']:.4f} | {a['all']['P@10']:.4f} | {a['all']['AP']:.4f} | "
                             f"{a['first']['nDCG']:.4f} | {a['first']['P@10']:.4f} | {a['first']['AP']:.4f} | "
                             f"{a['best']['nDCG']:.4f} | {v.rmse:.4f} | {v.p_value:.2g} | {v.tau:.2f} | {v.jaccard:.3f} |")
                print(lines[-1], flush=True)
        md = "\n".join(lines) + "\n"
        (OUT / f"simulation_{name}.md").write_text(md, encoding="utf-8")
        (OUT / f"simulation_{name}.json").write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
        print(md)
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["cranfield", "npl", "scifact"])
