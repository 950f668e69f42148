"""Shared pieces of the EQI methods: result rows, store fingerprints, cached query embeddings."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from limelight.data.collection import Collection
from limelight.data.queries import Queries
from limelight.errors import IndexMismatchError, LimelightError
from limelight.retrieval.base import check_k  # noqa: F401  (the eqi modules take it from here)

DEFAULT_CACHE = ".cache/embeddings"


def store_fingerprint(store) -> dict:
    """What ties a model or index to the exposure store it was built from."""
    man = store.manifest
    return {k: man.get(k) for k in ("retriever", "documents", "queries", "depth")}


def check_store(store, recorded: dict, what: str) -> None:
    """``IndexMismatchError`` when ``store`` is not the store ``recorded`` describes."""
    now = store_fingerprint(store)
    diff = [k for k in ("retriever", "documents", "queries") if recorded.get(k) != now.get(k)]
    if diff:
        kind = {"retriever": "another index or retriever", "documents": "another collection",
                "queries": "another query set"}[diff[0]]
        raise IndexMismatchError(f"{what} was built from a store computed with {kind} than "
                                 f"{store.path} ({', '.join(diff)} differ); retrain or rebuild it")


def check_texts(texts: Sequence[str]) -> list[str]:
    """Document texts as a list; an empty or blank text is a one-line ``LimelightError``."""
    out = ["" if t is None else str(t) for t in texts]
    for i, t in enumerate(out):
        if not t.strip():
            raise LimelightError(f"document text {i} is empty: give the document's text")
    return out


def encode_queries_cached(queries: Queries, encoder, cache_dir: str | os.PathLike | None = DEFAULT_CACHE
                          ) -> np.ndarray:
    """Embeddings of a query set in one pass, cached like collection embeddings."""
    coll = Collection(queries.ids, queries.texts, name=queries.name or "queries")
    return encoder.encode_collection(coll, cache_dir=cache_dir)


def rows(queries: Queries, codes: np.ndarray, scores: np.ndarray,
         ranks: np.ndarray | None = None) -> list[dict]:
    """One ranked list as ``[{"qid", "query", "score"(, "rank")}]`` (padding ``-1`` dropped)."""
    codes = np.asarray(codes)
    keep = codes >= 0
    c = codes[keep]
    s = np.asarray(scores, dtype=np.float64)[keep]
    qids = queries.ids.decode(c).tolist()
    texts = queries.texts[c].tolist()
    if ranks is None:
        return [{"qid": a, "query": b, "score": float(x)} for a, b, x in zip(qids, texts, s, strict=True)]
    r = np.asarray(ranks)[keep]
    return [{"qid": a, "query": b, "score": float(x), "rank": int(y)}
            for a, b, x, y in zip(qids, texts, s, r, strict=True)]


def faiss_ip_index(vectors: np.ndarray):
    """An exact inner-product FAISS index (``IndexFlatIP``) over ``vectors``."""
    import faiss

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index


def faiss_search(index, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of an inner-product FAISS index: ``(codes int32, scores float32)``, ``-1`` pad."""
    x = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
    if x.shape[1] != index.d:
        raise IndexMismatchError(f"vectors have {x.shape[1]} dimensions, the index {index.d}")
    kk = min(int(k), index.ntotal)
    n = x.shape[0]
    if kk == 0 or n == 0:
        return np.full((n, k), -1, np.int32), np.zeros((n, k), np.float32)
    s, c = index.search(x, kk)
    c = c.astype(np.int32)
    s = s.astype(np.float32)
    if kk < k:
        c = np.pad(c, ((0, 0), (0, k - kk)), constant_values=-1)
        s = np.pad(s, ((0, 0), (0, k - kk)), constant_values=0)
    return c, s
