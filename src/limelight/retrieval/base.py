"""Composable retrieval stages, PyTerrier-style.

A ``Stage`` maps ``Queries`` (and, for re-rankers, an input ``Run``) to a ``Run``.
``bm25 % 100`` cuts a stage's output to the top 100; ``bm25 >> reranker`` feeds one stage's
run to the next; ``a | b`` (or ``fusion.rrf(a, b)``) fuses runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run


class Stage:
    """Base class of every pipeline stage."""

    name: str = "stage"

    def transform(self, queries: Queries, run: Run | None = None) -> Run:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, queries: Queries, run: Run | None = None) -> Run:
        return self.transform(queries, run)

    def __mod__(self, k: int) -> Stage:
        return Cutoff(self, int(k))

    def __rshift__(self, other: Stage) -> Stage:
        return Then(self, other)

    def __or__(self, other: Stage) -> Stage:
        """``a | b``: reciprocal rank fusion (k=60) of both stages' runs; ``a | b | c`` fuses
        all three at once (see ``limelight.retrieval.fusion``)."""
        from limelight.retrieval.fusion import rrf_or

        return rrf_or(self, other)


class Cutoff(Stage):
    def __init__(self, inner: Stage, k: int):
        self.inner, self.k = inner, k
        self.name = f"{inner.name}%{k}"

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        return self.inner.transform(queries, run).topk(self.k)


class Then(Stage):
    def __init__(self, first: Stage, second: Stage):
        self.first, self.second = first, second
        self.name = f"{first.name}>>{second.name}"

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        return self.second.transform(queries, self.first.transform(queries, run))


class Retriever(Stage):
    """A first-stage retriever over a fixed collection.

    Subclasses implement ``search_batch``; ``retrieve``/``transform`` build a ``Run`` from it.
    """

    doc_ids: IdMap
    default_k: int = 1000

    def search_batch(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` for many query texts: ``(docs, scores)``, both shaped ``(n, k)``; docs are
        int32 codes into ``doc_ids`` (``-1`` pads rows with fewer than ``k`` hits), scores
        float32, each row best first."""
        raise NotImplementedError

    def retrieve(self, queries: Queries, k: int | None = None) -> Run:
        """A ``Run`` with the top ``k`` documents of every query (empty queries retrieve none)."""
        k = self.default_k if k is None else k
        docs, scores = self.search_batch(queries.texts.tolist(), k)
        return run_from_topk(queries.ids, self.doc_ids, docs, scores, self.name)

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        return self.retrieve(queries)


def run_from_topk(qids: IdMap, doc_ids: IdMap, docs: np.ndarray, scores: np.ndarray,
                  name: str) -> Run:
    """A ``Run`` from padded ``(n, k)`` top-k arrays (``-1`` = no document)."""
    n, k = docs.shape
    q = np.repeat(np.arange(n, dtype=np.int32), k)
    d = docs.reshape(-1)
    s = scores.reshape(-1).astype(np.float64)
    keep = d >= 0
    return Run.from_codes(qids, doc_ids, q[keep], d[keep], s[keep], name)
