"""Trade-off curves of Plackett-Luce policies (issue 21): what a temperature buys in exposure
equality and costs in relevance, on cranfield, npl and scifact × BM25 / MiniLM / hybrid RRF.

    flock /tmp/heavy.lock .venv/bin/python experiments/intervention/run.py \
        [--collections cranfield,npl,scifact] [--systems bm25,dense,hybrid] [--log-sample 20000]
        [--samples 200] [--log-samples 16] [--seed 0] [--figure docs/figures/exposure/intervention]

For every (collection, system, temperature T of the grid), the policy samples each query's
top-100 by Plackett-Luce with probabilities ∝ exp(s / (T·σ_q)), σ_q the standard deviation of
the query's top-100 scores (``limelight.exposure.stochastic``; T = 0 is the ranker):
- on the judged queries (``--samples`` Monte-Carlo rankings per query): expected nDCG@10 (per
  query, E[DCG@10] / IDCG@10) and EE-L/EE-D/EE-R with γ = 0.5 over the whole collection (n);
- on a seeded sample of ``--log-sample`` distinct queries of the shared query log (o_q = their
  counts in the log; ``--log-samples`` rankings each): the expected r(d) at c = 10 over every
  document of the collection and its Gini.
Then, per (collection, system): the first temperature at which the Gini falls by ≥ 10 % from
T = 0, and paired tests (t-test and Wilcoxon, Holm-corrected over the 9 pairs) of per-query
nDCG@10 between T = 0 and that temperature; the same tests of per-query EE-L between T = 0 and the temperature
of the lowest mean EE-L.

Results are cached as JSON per (collection, system, T) under ``results/`` (rerunning skips what
is there: delete a file to recompute it); dense query and document vectors are cached under
``.cache/`` (documents: ``.cache/embeddings``, the encoder's own cache).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from limelight._io import atomic_path
from limelight.data import load_dataset, load_query_log
from limelight.evaluation.expected_exposure import evaluate_exposure, expected_ndcg
from limelight.evaluation.stats import holm, paired_t, wilcoxon
from limelight.exposure.retrievability import gini
from limelight.exposure.stochastic import policy_expectations, stochastic_topk_exposure
from limelight.retrieval.base import run_from_topk

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TEMPS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 5.0]
K = 100  # the policy's top-k
C = 10  # retrievability cutoff
GAMMA = 0.5  # RBP patience of EE-L/EE-D/EE-R


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1))


class Systems:
    """BM25, dense and hybrid top-100 for the judged queries and the log sample of one collection."""

    def __init__(self, name: str, log, args, encoder_box: dict):
        from limelight.retrieval.bm25 import BM25, BM25Index

        self.ds = load_dataset(name)
        self.name, self.log, self.args, self.box = name, log, args, encoder_box
        self.coll = self.ds.collection
        self.bm25 = BM25(BM25Index.build(self.coll))
        self._cache: dict = {}

    def encoder(self):
        if "enc" not in self.box:
            from limelight.retrieval.dense import Encoder

            self.box["enc"] = Encoder()
        return self.box["enc"]

    def _dense(self):
        if "dense" not in self._cache:
            from limelight.retrieval.dense import DenseIndex, DenseRetriever

            enc = self.encoder()
            di = DenseIndex.build(self.coll, enc, cache_dir=ROOT / ".cache" / "embeddings")
            self._cache["dense"] = DenseRetriever(di, enc)
        return self._cache["dense"]

    def _log_vectors(self) -> np.ndarray:
        if "logvec" not in self.box:
            enc = self.encoder()
            key = f"{enc.fingerprint[:12]}-{enc.variant}-{len(self.log)}-{self.args.seed}"
            path = ROOT / ".cache" / "intervention" / f"logq-{key}.npy"
            if path.exists():
                self.box["logvec"] = np.load(path)
            else:
                t = time.perf_counter()
                v = enc.encode(self.log.texts.tolist())
                print(f"  encoded {len(v)} log queries in {time.perf_counter() - t:.0f} s", flush=True)
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(path) as tmp, open(tmp, "wb") as f:
                    np.save(f, v)
                self.box["logvec"] = v
        return self.box["logvec"]

    def topk(self, system: str, which: str) -> tuple[np.ndarray, np.ndarray]:
        """Padded top-100 ``(docs, scores)`` of ``system`` for the judged queries or the log."""
        key = (system, which)
        if key in self._cache:
            return self._cache[key]
        texts = (self.ds.queries.texts if which == "judged" else self.log.texts).tolist()
        if system == "bm25":
            out = self.bm25.search_batch(texts, K)
        elif system == "dense":
            dr = self._dense()
            vec = dr.encode_queries(texts) if which == "judged" else self._log_vectors()
            out = dr.search_vectors(vec, K)
            blank = np.array([not t.strip() for t in texts])
            if blank.any():
                out[0][blank] = -1
        else:
            from limelight.retrieval.fusion import rrf_topk

            d1, s1 = self.topk("bm25", which)
            d2, s2 = self.topk("dense", which)
            out = rrf_topk([d1, d2], len(self.coll), K, 60, self.coll.ids.lexical_rank(), [s1, s2])
        self._cache[key] = (np.asarray(out[0]), np.asarray(out[1], dtype=np.float64))
        return self._cache[key]


def one_point(sy: Systems, system: str, t: float, args) -> dict:
    """Expected nDCG@10, EE-* and the expected-r Gini of one (collection, system, T)."""
    n = len(sy.coll)
    t0 = time.perf_counter()
    docs, scores = sy.topk(system, "judged")
    run = run_from_topk(sy.ds.queries.ids, sy.coll.ids, docs, scores, system)
    pol = policy_expectations(run, t, k=K, gamma=GAMMA, c=C, n_samples=args.samples, seed=args.seed)
    qids, ndcg = expected_ndcg(pol.dcg, sy.ds.qrels, 10, n_docs=n)
    ee = evaluate_exposure(pol.exposure, sy.ds.qrels, f"EE-L(gamma={GAMMA}) EE-D(gamma={GAMMA}) "
                           f"EE-R(gamma={GAMMA})", n_docs=n)
    t1 = time.perf_counter()
    ld, ls = sy.topk(system, "log")
    r, _ = stochastic_topk_exposure(ld, ls, sy.log.weights, n, t, c=C, gamma=GAMMA,
                                    n_samples=args.log_samples, seed=args.seed)
    t2 = time.perf_counter()
    return {"collection": sy.name, "system": system, "temperature": t,
            "ndcg10": float(ndcg.mean()), "per_query_ndcg10": dict(zip(qids.strings.tolist(),
                                                                       ndcg.tolist(), strict=True)),
            **{m.name: float(v) for m, v in ee.aggregate.items()},
            "per_query_eel": dict(zip(ee.qids.strings.tolist(),
                                      next(v for m, v in ee.per_query.items() if m.name == "EE-L").tolist(),
                                      strict=True)),
            "gini": gini(r), "retrievable_fraction": float((r > 0).mean()),
            "n_docs": n, "n_judged_queries": len(qids), "n_log_queries": len(sy.log),
            "samples": args.samples, "log_samples": args.log_samples, "seed": args.seed,
            "seconds_judged": t1 - t0, "seconds_log": t2 - t1}


def summarise(points: list[dict]) -> dict:
    """Per (collection, system): the first T with Gini ≤ 0.9 × Gini(T=0), its nDCG@10 cost and
    paired tests (Holm over all pairs tested)."""
    rows = []
    by = {}
    for p in points:
        by.setdefault((p["collection"], p["system"]), []).append(p)
    for (coll, sys_), ps in by.items():
        ps.sort(key=lambda p: p["temperature"])
        base = ps[0]
        hit = next((p for p in ps[1:] if p["gini"] <= 0.9 * base["gini"]), None)
        row = {"collection": coll, "system": sys_, "gini_0": base["gini"], "ndcg_0": base["ndcg10"],
               "eel_0": base["EE-L"], "T": None}
        if hit is not None:
            qs = sorted(base["per_query_ndcg10"])
            x = np.array([base["per_query_ndcg10"][q] for q in qs])
            y = np.array([hit["per_query_ndcg10"][q] for q in qs])
            row.update({"T": hit["temperature"], "gini_T": hit["gini"], "ndcg_T": hit["ndcg10"],
                        "eel_T": hit["EE-L"], "delta_ndcg": hit["ndcg10"] - base["ndcg10"],
                        "rel_delta_ndcg": (hit["ndcg10"] - base["ndcg10"]) / base["ndcg10"],
                        "p_t": paired_t(y, x), "p_wilcoxon": wilcoxon(y, x), "n_queries": len(qs)})
        best = min(ps, key=lambda p: p["EE-L"])
        if best is not base and "per_query_eel" in base:
            qs = sorted(base["per_query_eel"])
            x = np.array([base["per_query_eel"][q] for q in qs])
            y = np.array([best["per_query_eel"][q] for q in qs])
            row.update({"T_min_eel": best["temperature"], "eel_min": best["EE-L"],
                        "eel_p_t": paired_t(y, x), "eel_p_wilcoxon": wilcoxon(y, x),
                        "eel_lower_queries": int((y < x).sum()), "eel_higher_queries": int((y > x).sum())})
        rows.append(row)
    tested = [i for i, r in enumerate(rows) if r["T"] is not None]
    if tested:
        for name in ("p_t", "p_wilcoxon"):
            adj = holm([rows[i][name] for i in tested])
            for i, a in zip(tested, adj, strict=True):
                rows[i][name + "_holm"] = float(a)
    tested = [i for i, r in enumerate(rows) if "eel_p_t" in r]
    if tested:
        for name in ("eel_p_t", "eel_p_wilcoxon"):
            adj = holm([rows[i][name] for i in tested])
            for i, a in zip(tested, adj, strict=True):
                rows[i][name + "_holm"] = float(a)
    return {"rows": rows}


def plot(points: list[dict], out: Path) -> list[Path]:
    """One row per collection: EE-R vs EE-D, and nDCG@10 vs Gini, one line per system."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from limelight.exposure.plots import save_figure

    colls = list(dict.fromkeys(p["collection"] for p in points))
    fig, axes = plt.subplots(len(colls), 2, figsize=(10, 3.6 * len(colls)), dpi=110, squeeze=False)
    colors = {"bm25": "tab:blue", "dense": "tab:orange", "hybrid": "tab:green"}
    for i, c in enumerate(colls):
        for sys_ in colors:
            ps = sorted([p for p in points if p["collection"] == c and p["system"] == sys_],
                        key=lambda p: p["temperature"])
            if not ps:
                continue
            for ax, (xk, yk) in zip(axes[i], (("EE-D", "EE-R"), ("gini", "ndcg10")), strict=True):
                x = [p[xk] for p in ps]
                y = [p[yk] for p in ps]
                ax.plot(x, y, "-o", ms=3, color=colors[sys_], label=sys_)
                for p, xx, yy in zip(ps, x, y, strict=True):
                    if p["temperature"] in (0.0, 0.5, 5.0):
                        ax.annotate(f"T={p['temperature']:g}", (xx, yy), fontsize=6,
                                    textcoords="offset points", xytext=(3, 3))
        axes[i, 0].set_xlabel("EE-D (γ=0.5, disparity, lower = more equal)")
        axes[i, 0].set_ylabel("EE-R (γ=0.5, relevance)")
        axes[i, 1].set_xlabel(f"Gini of expected r(d), c={C}, log sample")
        axes[i, 1].set_ylabel("expected nDCG@10")
        for ax in axes[i]:
            ax.set_title(c, fontsize=9)
            ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collections", default="cranfield,npl,scifact")
    ap.add_argument("--systems", default="bm25,dense,hybrid")
    ap.add_argument("--log-sample", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--log-samples", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--figure", type=Path, default=ROOT / "docs" / "figures" / "exposure" / "intervention")
    args = ap.parse_args()
    t_start = time.perf_counter()
    log = load_query_log().sample(args.log_sample, seed=args.seed)
    box: dict = {}
    points = []
    for coll in args.collections.split(","):
        sy = None
        for system in args.systems.split(","):
            for t in TEMPS:
                path = args.out / f"{coll}-{system}-T{t:g}-s{args.samples}-l{args.log_samples}-n{len(log)}-seed{args.seed}.json"
                if path.exists():
                    points.append(json.loads(path.read_text()))
                    continue
                sy = sy or Systems(coll, log, args, box)
                p = one_point(sy, system, t, args)
                _write_json(path, p)
                points.append(p)
                print(f"{coll:9s} {system:6s} T={t:<5g} nDCG@10={p['ndcg10']:.4f} EE-L={p['EE-L']:.4f} "
                      f"EE-D={p['EE-D']:.4f} EE-R={p['EE-R']:.4f} Gini={p['gini']:.4f} "
                      f"({p['seconds_judged']:.1f}+{p['seconds_log']:.1f} s)", flush=True)
    summary = summarise(points)
    summary.update({"temperatures": TEMPS, "k": K, "c": C, "gamma": GAMMA, "log_sample": len(log),
                    "samples": args.samples, "log_samples": args.log_samples, "seed": args.seed,
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                    "points": [{k: v for k, v in p.items() if not k.startswith("per_query")} for p in points],
                    "seconds": time.perf_counter() - t_start})
    _write_json(args.out / "summary.json", summary)
    figs = plot(points, args.figure)
    for r in summary["rows"]:
        if r["T"] is None:
            print(f"{r['collection']:9s} {r['system']:6s} Gini {r['gini_0']:.4f}: never falls by 10 %")
        else:
            print(f"{r['collection']:9s} {r['system']:6s} Gini {r['gini_0']:.4f} → {r['gini_T']:.4f} at "
                  f"T={r['T']:g}; nDCG@10 {r['ndcg_0']:.4f} → {r['ndcg_T']:.4f} "
                  f"({100 * r['rel_delta_ndcg']:+.1f} %), p_t={r['p_t']:.2g} "
                  f"(Holm {r['p_t_holm']:.2g}), p_wilcoxon={r['p_wilcoxon']:.2g}")
        if "eel_p_t" in r:
            print(f"{'':16s} EE-L {r['eel_0']:.4f} → {r['eel_min']:.4f} (minimum, T={r['T_min_eel']:g}); "
                  f"lower on {r['eel_lower_queries']}, higher on {r['eel_higher_queries']} queries; "
                  f"p_t={r['eel_p_t']:.2g} (Holm {r['eel_p_t_holm']:.2g}), "
                  f"p_wilcoxon={r['eel_p_wilcoxon']:.2g} (Holm {r['eel_p_wilcoxon_holm']:.2g})")
    print("figures:", ", ".join(map(str, figs)), f"total {summary['seconds']:.0f} s")


if __name__ == "__main__":
    main()
