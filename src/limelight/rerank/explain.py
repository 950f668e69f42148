"""Interpretability (paper §6) and query clustering (§5.3).

* :func:`explain` — for one (query, document): per-kernel ``s_log^k`` and ``s_len^k``, their
  weighted contributions (which sum exactly to the model's score), and for every document term
  the kernel its strongest match (max cosine over the query terms) is closest to.
* :func:`explain_html` — a side-by-side view of two documents for one query (Figure 3 analog).
* :func:`cluster_queries` / :func:`cluster_table` — k-means over mean contextualized query vectors
  and the median rank of the first relevant document per cluster for several runs (Table 3).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.rerank.ranker import NeuralRanker
from limelight.rerank.vocab import OOV


@dataclass
class Explanation:
    """Scoring details of one (query, document) pair.

    ``kernels`` has one row per kernel: ``mu``, ``sigma``, ``s_log``, ``s_len`` (eq. 7-8) and
    ``contrib_log``/``contrib_len`` (their weighted share of the score, eq. 9-10), ``contrib``
    (both). ``score == kernels.contrib.sum()`` up to float rounding. ``doc_terms``: one row per
    document token (``term``, ``in_vocab``, ``best_cos``: its strongest cosine with a query term,
    ``best_query_term``, ``kernel``: index of the closest kernel centre or -1 when masked).
    """

    query: str
    score: float
    kernels: pd.DataFrame
    query_terms: list[str]
    doc_terms: pd.DataFrame

    @property
    def s_log(self) -> float:
        return float(self.kernels["contrib_log"].sum())

    @property
    def s_len(self) -> float:
        return float(self.kernels["contrib_len"].sum())


def _tokens(ranker: NeuralRanker, text: str, max_len: int) -> list[str]:
    return ranker.vocab.analyzer.tokenize(text)[:max_len]


@torch.no_grad()
def explain(ranker: NeuralRanker, query: str, document: str) -> Explanation:
    """Per-kernel scores and term-level kernel affiliations of ``document`` for ``query``."""
    model = ranker.model
    cfg = model.config
    q_tok = _tokens(ranker, query, cfg.max_query_len)
    d_tok = _tokens(ranker, document, cfg.max_doc_len)
    if not q_tok:
        raise LimelightError(f"query {query!r} has no token")
    if not d_tok:
        raise LimelightError("the document has no token")
    device = next(model.parameters()).device
    q_ids = torch.from_numpy(ranker.encode_queries([query]).ids).to(device)
    d_ids = torch.from_numpy(ranker.encode_docs([document]).ids).to(device)
    was = model.training
    model.eval()
    try:
        ks = model.explain(q_ids, d_ids)
    finally:
        model.train(was)
    mus = np.asarray(cfg.mus)
    kern = pd.DataFrame({
        "mu": mus, "sigma": np.asarray(cfg.sigmas),
        "s_log": ks.s_log[0].double().cpu().numpy(), "s_len": ks.s_len[0].double().cpu().numpy(),
        "contrib_log": ks.contrib_log[0].double().cpu().numpy(),
        "contrib_len": ks.contrib_len[0].double().cpu().numpy(),
    })
    kern["contrib"] = kern["contrib_log"] + kern["contrib_len"]
    match = ks.match[0].double().cpu().numpy()[:len(q_tok), :len(d_tok)]
    qm = ks.q_mask[0].cpu().numpy()[:len(q_tok)]
    dm = ks.d_mask[0].cpu().numpy()[:len(d_tok)]
    masked = np.where(qm[:, None], match, -np.inf)
    best_i = masked.argmax(0) if qm.any() else np.zeros(len(d_tok), dtype=int)
    best = masked.max(0) if qm.any() else np.full(len(d_tok), -np.inf)
    valid = dm & qm.any()
    kernel = np.where(valid, np.abs(best[:, None] - mus[None, :]).argmin(1), -1)
    doc_terms = pd.DataFrame({
        "term": d_tok, "in_vocab": d_ids[0, :len(d_tok)].cpu().numpy() != OOV,
        "best_cos": np.where(valid, best, np.nan),
        "best_query_term": [q_tok[i] if v else "" for i, v in zip(best_i, valid, strict=True)],
        "kernel": kernel,
    })
    return Explanation(query, float(ks.score[0]), kern, q_tok, doc_terms)


_PALETTE = ["#d73027", "#f46d43", "#fdae61", "#fee08b", "#d9ef8b", "#a6d96a", "#66bd63",
            "#1a9850", "#abd9e9", "#74add1", "#4575b4"]


def _doc_html(ex: Explanation, highlight: Sequence[int]) -> str:
    out = []
    for t, k, c in zip(ex.doc_terms["term"], ex.doc_terms["kernel"], ex.doc_terms["best_cos"], strict=True):
        w = html.escape(str(t))
        if k in highlight:
            col = _PALETTE[int(k) % len(_PALETTE)]
            out.append(f'<span style="background:{col};text-decoration:underline" '
                       f'title="cos {c:.2f}, kernel μ={ex.kernels.mu[k]:.1f}">{w}</span>')
        else:
            out.append(w)
    return " ".join(out)


def _kernel_html(ex: Explanation, highlight: Sequence[int]) -> str:
    rows = []
    for k in highlight:
        col = _PALETTE[int(k) % len(_PALETTE)]
        rows.append(f'<tr><td style="background:{col}">μ={ex.kernels.mu[k]:.1f}</td>'
                    f'<td>{ex.kernels.contrib_log[k]:.3f}</td><td>{ex.kernels.contrib_len[k]:.3f}</td></tr>')
    rest = [k for k in range(len(ex.kernels)) if k not in highlight]
    rows.append(f"<tr><td>rest</td><td>{ex.kernels.contrib_log[rest].sum():.3f}</td>"
                f"<td>{ex.kernels.contrib_len[rest].sum():.3f}</td></tr>")
    rows.append(f"<tr><th>s_log / s_len</th><td>{ex.s_log:.3f}</td><td>{ex.s_len:.3f}</td></tr>")
    rows.append(f"<tr><th>s</th><td colspan=2>{ex.score:.3f}</td></tr>")
    return ("<table border=1 cellpadding=3><tr><th>kernel</th><th>β·W_log·s_log^k</th>"
            "<th>γ·W_len·s_len^k</th></tr>" + "".join(rows) + "</table>")


def explain_html(ranker: NeuralRanker, query: str, doc_a: str, doc_b: str,
                 title_a: str = "document A", title_b: str = "document B",
                 highlight: Sequence[float] = (1.0, 0.9, 0.7)) -> str:
    """A self-contained HTML page comparing two documents for one query (Figure 3 analog):
    document text with terms coloured by the kernel they are closest to (for the kernels with
    centres in ``highlight``), and the per-kernel contributions of each document."""
    ea, eb = explain(ranker, query, doc_a), explain(ranker, query, doc_b)
    mus = list(ranker.config.mus)
    hk = [mus.index(m) for m in highlight if m in mus]
    col = []
    for title, ex in ((title_a, ea), (title_b, eb)):
        col.append(f"<td style='vertical-align:top;width:50%'><h3>{html.escape(title)}</h3>"
                   f"{_kernel_html(ex, hk)}<p style='line-height:1.6'>{_doc_html(ex, hk)}</p></td>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>limelight rerank explain</title>"
            "</head><body style='font-family:sans-serif'>"
            f"<h2>Query: {html.escape(query)}</h2><p>Model: {html.escape(ranker.name)}; terms are "
            "coloured by the kernel their strongest query match is closest to.</p>"
            f"<table><tr>{''.join(col)}</tr></table></body></html>")


@torch.no_grad()
def query_vectors(ranker: NeuralRanker, queries: Queries) -> np.ndarray:
    """Mean contextualized vector of each query (over its in-vocabulary tokens)."""
    model = ranker.model
    device = next(model.parameters()).device
    enc = ranker.encode_queries(queries.texts.tolist())
    out = []
    was = model.training
    model.eval()
    try:
        for s in range(0, len(enc), 512):
            ids = torch.from_numpy(enc.ids[s:s + 512]).to(device)
            rep, mask = model.encode(ids)
            m = mask.unsqueeze(-1).to(rep.dtype)
            out.append((rep * m).sum(1) / m.sum(1).clamp(min=1))
    finally:
        model.train(was)
    return torch.cat(out).double().cpu().numpy()


def cluster_queries(ranker: NeuralRanker, queries: Queries, k: int = 10, seed: int = 0) -> np.ndarray:
    """k-means cluster label of every query (over mean contextualized query vectors)."""
    from scipy.cluster.vq import kmeans2

    x = query_vectors(ranker, queries)
    if k < 1 or k > len(x):
        raise LimelightError(f"k must be between 1 and the number of queries ({len(x)}), got {k}")
    _, labels = kmeans2(x, k, seed=seed, minit="++")
    return labels


def first_relevant_rank(run: Run, qrels: Qrels, qids: Sequence[str], threshold: int = 1) -> np.ndarray:
    """1-based rank of the first relevant document of each query in ``run`` (``inf`` when
    none is retrieved)."""
    rel: dict[str, set[str]] = {}
    m = qrels.rel >= threshold
    for q, d in zip(qrels.qids.decode(qrels.q[m]).tolist(), qrels.docids.decode(qrels.d[m]).tolist(),
                    strict=True):
        rel.setdefault(q, set()).add(d)
    docs = run.docids.decode(run.d)
    out = np.full(len(qids), np.inf)
    for j, q in enumerate(qids):
        i = run.qids.get(q)
        if i < 0 or q not in rel:
            continue
        for r, d in enumerate(docs[int(run.offsets[i]):int(run.offsets[i + 1])].tolist(), 1):
            if d in rel[q]:
                out[j] = r
                break
    return out


def cluster_table(labels: np.ndarray, queries: Queries, runs: Mapping[str, Run], qrels: Qrels,
                  examples: int = 3) -> pd.DataFrame:
    """Per cluster: number of queries with a relevant document, example queries, and the
    median rank of the first relevant document in each run (Table 3 analog; a query with none
    retrieved counts as rank ∞). A last row covers all queries."""
    judged = set(qrels.qids.decode(qrels.q[qrels.rel >= 1]).tolist())
    qids = queries.ids.strings.tolist()
    keep = np.array([q in judged for q in qids])
    ranks = {n: first_relevant_rank(r, qrels, qids) for n, r in runs.items()}
    rows = []
    for c in [*sorted(set(labels[keep].tolist())), None]:
        sel = keep & ((labels == c) if c is not None else True)
        row = {"cluster": "all" if c is None else int(c), "n_queries": int(sel.sum()),
               "examples": "" if c is None else " | ".join(queries.texts[sel][:examples].tolist())}
        for n, rk in ranks.items():
            row[f"median rank {n}"] = float(np.median(rk[sel])) if sel.any() else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)
