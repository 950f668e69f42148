"""Diagnosis of the Residual model's validation-RELQ collapse (issue 23, item 2).

    flock /tmp/heavy.lock .venv/bin/python experiments/eqi/collapse.py --from-audit demo-out \
        [--steps 150] [--runs base,randneg,lr1e-6]

Trains the Residual heads as ``train_eqi`` does (Algorithm 1 data, the same sampler, RankNet,
Adam) in an instrumented loop and logs, per batch: the training loss, the share of the batch's
pairs already ordered correctly before the step, the gradient norm; every ``--every`` batches:
RELQ(0.5,0.9) of the top-100 lists of 300 validation documents and of 300 *training* documents
(overfitting vs objective mismatch), the share of the returned queries that lie in the
document's base-space neighbourhood ψ_d (the only queries the loss ever sees for it), the number
of distinct queries in the validation lists (collapse onto hub queries), ‖FF(x)‖/‖x‖ of the query
and document heads, and the mean cosine of the transformed queries to their centroid
(anisotropy). Interventions (``--runs``): ``base`` (lr 1e-5), ``randneg`` (half the Case 2
negatives drawn from all of Q_train, outside ψ_d), ``lr1e-6``. Writes
results/collapse_<dataset>.json and docs/figures/eqi/collapse_<dataset>.png.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from common import RESULTS, ROOT, sample_docs

from limelight._io import atomic_path
from limelight.exposure.eqi.base import faiss_ip_index, faiss_search
from limelight.exposure.eqi.learned import make_head, sample_triples, training_data
from limelight.exposure.relq import relq_many

FIG = ROOT / "docs" / "figures" / "eqi"
M = "RELQ(0.5,0.9)"
RUNS = {"base": {"lr": 1e-5, "random_negatives": 0.0},
        "randneg": {"lr": 1e-5, "random_negatives": 0.5},
        "lr1e-6": {"lr": 1e-6, "random_negatives": 0.0}}


def load_audit(a: Path):
    """(store, query vectors, document vectors) of the dense system of an audit output."""
    from limelight.exposure import ExposureStore

    st = ExposureStore.open(a / "systems" / "dense" / "exposure")
    qemb = np.load(a / "systems" / "query_vectors.npy")
    demb = np.load(a / "index" / "dense" / "embeddings.npy")
    return st, qemb, demb


def probe(h_q, h_d, qemb_t, demb_t, groups: dict, truth: dict, psi: dict) -> dict:
    """Eval-mode statistics of the heads (see the module docstring)."""
    import torch

    h_q.eval()
    h_d.eval()
    with torch.no_grad():
        tq = h_q(qemb_t).numpy()
        ffq = np.linalg.norm(tq - qemb_t.numpy(), axis=1)
        out = {"ffq_ratio": float(np.mean(ffq / np.linalg.norm(qemb_t.numpy(), axis=1))),
               "q_norm": float(np.mean(np.linalg.norm(tq, axis=1)))}
        unit = tq / np.linalg.norm(tq, axis=1, keepdims=True)
        out["q_anisotropy"] = float(np.mean(unit @ (unit.mean(0) / np.linalg.norm(unit.mean(0)))))
        index = faiss_ip_index(tq)
        for g, docs in groups.items():
            x = demb_t[docs]
            td = h_d(x).numpy()
            if g == "val":
                out["ffd_ratio"] = float(np.mean(np.linalg.norm(td - x.numpy(), axis=1)
                                                 / np.linalg.norm(x.numpy(), axis=1)))
                out["d_norm"] = float(np.mean(np.linalg.norm(td, axis=1)))
            codes, _ = faiss_search(index, td, 100)
            out[f"relq_{g}"] = float(np.nanmean(relq_many(codes, truth[g], M)[M]))
            out[f"in_psi_{g}"] = float(np.mean([np.isin(c, p).mean() for c, p in zip(codes, psi[g], strict=True)]))
            if g == "val":
                out["distinct_val"] = int(len(np.unique(codes)))
    h_q.train()
    h_d.train()
    return out


def run(name: str, cfg: dict, st, qemb, demb, td, val, steps: int, every: int, seed: int) -> list[dict]:
    """One instrumented training run; the per-batch log."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    dim = qemb.shape[1]
    h_q, h_d = make_head("residual", dim, 0.1), make_head("residual", dim, 0.1)
    opt = torch.optim.Adam(list(h_q.parameters()) + list(h_d.parameters()), lr=cfg["lr"])
    qe, de = torch.from_numpy(qemb), torch.from_numpy(demb)
    ranks = st.ranks()
    train_probe = np.sort(np.random.default_rng(3).choice(len(td.docs), 300, replace=False))
    groups = {"val": val, "train": td.docs[train_probe]}
    truth = {g: ranks[d] for g, d in groups.items()}
    # ψ_d in the base space over Q_train, as Algorithm 1 builds it
    qi = faiss_ip_index(qemb[td.train_queries])
    psi = {g: td.train_queries[np.maximum(faiss_search(qi, demb[d], 100)[0], 0)] for g, d in groups.items()}
    log = []
    h_q.train()
    h_d.train()
    for step in range(steps + 1):
        rec: dict = {"step": step}
        if step % every == 0 or step == steps:
            rec.update(probe(h_q, h_d, qe, de, groups, truth, psi))
        if step < steps:
            d, qp, qn = sample_triples(td, 1000, 0.5, rng, cfg["random_negatives"])
            hd = h_d(de[td.docs[d]])
            margin = (hd * h_q(qe[qp])).sum(-1) - (hd * h_q(qe[qn])).sum(-1)
            loss = torch.nn.functional.softplus(-margin).mean()
            opt.zero_grad()
            loss.backward()
            g = torch.sqrt(sum((p.grad ** 2).sum() for p in list(h_q.parameters()) + list(h_d.parameters())
                               if p.grad is not None))
            opt.step()
            m = margin.detach().numpy()
            rec.update(loss=float(loss.detach()), correct=float((m > 0).mean()),
                       margin_median=float(np.median(m)), grad_norm=float(g))
        log.append(rec)
        if "relq_val" in rec:
            print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in rec.items()}, flush=True)
    return log


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for name, log in results.items():
        s = np.array([r["step"] for r in log if "loss" in r])
        loss = np.array([r["loss"] for r in log if "loss" in r])
        ax[0].plot(s, loss, lw=0.6, label=name)
        p = [r for r in log if "relq_val" in r]
        ax[1].plot([r["step"] for r in p], [r["relq_val"] for r in p], label=f"{name} validation")
        ax[1].plot([r["step"] for r in p], [r["relq_train"] for r in p], ls="--", label=f"{name} training docs")
        ax[2].plot([r["step"] for r in p], [r["in_psi_val"] for r in p], label=f"{name} in ψ_d")
        ax[2].plot([r["step"] for r in p], [r["ffd_ratio"] for r in p], ls=":", label=f"{name} ‖FF(d)‖/‖d‖")
    ax[0].set(title="training loss per batch (RankNet)", xlabel="batch")
    ax[1].set(title=f"{M} of the top-100 lists", xlabel="batch")
    ax[2].set(title="share of returned queries in ψ_d; document residual size", xlabel="batch")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--from-audit", type=Path, default=ROOT / "demo-out")
    ap.add_argument("--dataset", default="debian-audit")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--runs", default="base,randneg,lr1e-6")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from the saved JSON")
    args = ap.parse_args()
    if args.plot_only:
        saved = json.loads((RESULTS / f"collapse_{args.dataset}.json").read_text())
        plot(saved["log"], FIG / f"collapse_{args.dataset}.png")
        return
    st, qemb, demb = load_audit(args.from_audit)
    qemb, demb = np.ascontiguousarray(qemb, np.float32), np.ascontiguousarray(demb, np.float32)
    test = sample_docs(st, 1000, seed=0)
    val = sample_docs(st, 300, seed=1, exclude=test)
    td = training_data(st, qemb, demb, 50_000, 6000, np.concatenate([test, val]), 100, args.seed)
    results, t0 = {}, time.perf_counter()
    for name in args.runs.split(","):
        results[name] = run(name, RUNS[name], st, qemb, demb, td, val, args.steps, args.every, args.seed)
    out = {"dataset": args.dataset, "steps": args.steps, "runs": {k: RUNS[k] for k in results},
           "training": td.summary(), "seconds": round(time.perf_counter() - t0, 1),
           "load": os.getloadavg(), "log": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    with atomic_path(RESULTS / f"collapse_{args.dataset}.json") as tmp:
        tmp.write_text(json.dumps(out, default=float))
    plot(results, FIG / f"collapse_{args.dataset}.png")


if __name__ == "__main__":
    main()
