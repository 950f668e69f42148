"""Shared setup of the EQI experiments: collections, the query log, stores (under .cache/eqi)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from limelight.data import load_dataset, load_query_log
from limelight.exposure import ExposureStore, compute_exposure
from limelight.retrieval.bm25 import BM25, BM25Index

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "eqi"
EMB = ROOT / ".cache" / "embeddings"
RESULTS = Path(__file__).resolve().parent / "results"


def log_queries():
    return load_query_log()


def collection(name: str):
    return load_dataset(name).collection


def bm25_store(name: str, coll=None, queries=None, tag: str = "") -> tuple:
    """(retriever, store) for BM25 (k1=0.9, b=0.4) over ``coll`` and the query log, top 100."""
    coll = coll if coll is not None else collection(name)
    queries = queries if queries is not None else log_queries()
    ret = BM25(BM25Index.build(coll), threads=2)
    path = CACHE / f"{name}{tag}-bm25"
    st = compute_exposure(ret, queries, path, depth=100)
    return ret, st


def dense_store(name: str, ret, qemb: np.ndarray, queries, tag: str = "") -> ExposureStore:
    """A dense store computed from precomputed query embeddings (so that exact reverse search
    reads the same query vectors)."""
    lookup = {t: i for i, t in enumerate(queries.texts.tolist())}

    class FromEmbeddings:
        doc_ids = ret.doc_ids
        name = "dense-minilm-precomputed"

        def search_batch(self, texts, k):
            return ret.search_vectors(qemb[[lookup[t] for t in texts]], k)

    # the store is keyed by the vectors it was computed from: cached stores never outlive them
    h = hashlib.sha256()
    for a in (qemb, np.asarray(ret.index.embeddings)):
        h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
    fp = h.hexdigest()[:12]
    return compute_exposure(FromEmbeddings(), queries, CACHE / f"{name}{tag}-dense-{fp}", depth=100,
                            fingerprint=f"dense-precomputed:{fp}")


def save(name: str, obj) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(obj, indent=1, default=float))


def sample_docs(st, n: int, seed: int, exclude=None) -> np.ndarray:
    """``n`` documents with at least one exposing query (seeded)."""
    rng = np.random.default_rng(seed)
    cand = np.flatnonzero(st.n_exposing() > 0)
    if exclude is not None:
        cand = np.setdiff1d(cand, exclude)
    return np.sort(rng.choice(cand, size=min(n, len(cand)), replace=False))


class Timer:
    def __enter__(self):
        self.t = time.perf_counter()
        return self

    def __exit__(self, *a):
        self.s = time.perf_counter() - self.t
