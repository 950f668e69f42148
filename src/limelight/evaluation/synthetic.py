"""Realistic runs for validating and benchmarking evaluation code without a retrieval engine.

``bm25_like_run`` scores a shared collection with a small self-contained BM25 (sparse matrix
product; lowercase ``\\w\\w+`` tokens, no stemming or stopwords), so evaluation tests have real
rankings of real queries against real judgments. ``perturb_run`` makes system variants by
adding seeded noise to scores and re-cutting the ranking.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.run import Run
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1


def load_collection_texts(folder: str | Path) -> tuple[list[str], list[str], list[str], list[str]]:
    """(doc ids, doc texts, query ids, query texts) of a shared collection folder."""
    folder = Path(folder)
    ids, texts = [], []
    with open(folder / "docs.jsonl", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            ids.append(str(o["id"]))
            texts.append(f"{o.get('title') or ''} {o.get('text') or ''}")
    qids, qtexts = [], []
    with open(folder / "queries.tsv", encoding="utf-8") as f:
        for line in f:
            if "\t" in line:
                a, b = line.rstrip("\n").split("\t", 1)
                qids.append(a)
                qtexts.append(b)
    return ids, texts, qids, qtexts


def bm25_like_run(folder: str | Path, k1: float = DEFAULT_K1, b: float = DEFAULT_B, depth: int = 1000,
                  name: str | None = None, doc_map: IdMap | None = None) -> Run:
    """A BM25 run (Lucene idf) of a shared collection's queries, top ``depth`` per query."""
    from sklearn.feature_extraction.text import CountVectorizer

    ids, texts, qids, qtexts = load_collection_texts(folder)
    vec = CountVectorizer(token_pattern=r"(?u)\b\w\w+\b", lowercase=True, dtype=np.float64)
    tf = vec.fit_transform(texts).tocsr()
    dl = np.asarray(tf.sum(axis=1)).ravel()
    avgdl = dl.mean()
    df = np.bincount(tf.indices, minlength=tf.shape[1])
    idf = np.log(1.0 + (len(ids) - df + 0.5) / (df + 0.5))
    tfc = tf.tocoo()
    norm = k1 * (1.0 - b + b * dl[tfc.row] / avgdl)
    w = tfc.data * (k1 + 1.0) / (tfc.data + norm) * idf[tfc.col]
    from scipy.sparse import csr_matrix

    W = csr_matrix((w, (tfc.row, tfc.col)), shape=tf.shape).T.tocsr()  # terms × docs
    qv = vec.transform(qtexts)
    qv.data[:] = 1.0
    scores = (qv @ W).toarray()  # queries × docs
    depth = min(depth, len(ids))
    top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
    sc = np.take_along_axis(scores, top, axis=1)
    keep = sc > 0
    qq = np.repeat(np.arange(len(qids)), depth)[keep.ravel()]
    dmap = doc_map if doc_map is not None else IdMap(ids, kind="document")
    dd = top.ravel()[keep.ravel()]
    if doc_map is not None:
        dd = doc_map.encode(np.asarray(ids, dtype=object)[dd])
    qmap = IdMap(qids, kind="query")
    return Run.from_codes(qmap, dmap, qq.astype(np.int32), dd.astype(np.int32), sc.ravel()[keep.ravel()],
                          name or f"bm25_k1={k1}_b={b}")


def perturb_run(run: Run, noise: float, seed: int, depth: int | None = None, name: str | None = None) -> Run:
    """A variant of ``run``: scores plus Gaussian noise (``noise`` × each query's score spread),
    re-ranked and cut to ``depth`` (default: unchanged)."""
    rng = np.random.default_rng(seed)
    spread = np.maximum.reduceat(run.score, run.offsets[:-1].clip(max=max(len(run) - 1, 0))) if len(run) else run.score
    scale = np.repeat(np.where(np.diff(run.offsets) > 0, spread, 1.0), np.diff(run.offsets))
    s = run.score + rng.normal(0.0, 1.0, len(run)) * noise * np.abs(scale)
    out = Run.from_codes(run.qids, run.docids, run.q, run.d, s, name or f"{run.name}+noise{noise}_{seed}")
    return out.topk(depth) if depth is not None else out
