"""Composable retrieval stages, PyTerrier-style.

A ``Stage`` maps ``Queries`` (and, for re-rankers, an input ``Run``) to a ``Run``.
``bm25 % 100`` cuts a stage's output to the top 100; ``bm25 >> reranker`` feeds one stage's
run to the next; ``a | b`` (or ``RRF(a, b)``) fuses runs. The fusion stages (``RRF``,
``CombSUM``, ``CombMNZ``, ``Linear``) live here, beside ``Stage``, because ``a | b`` builds one;
the formulas they apply are functions on runs in ``limelight.retrieval.runfusion``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.retrieval.runfusion import _flatten, fuse


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
        all three at once (see ``limelight.retrieval.runfusion``)."""
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


# ---- fusion stages ----------------------------------------------------------------------------
class Fusion(Stage):
    """A stage that runs several stages on the same queries and fuses their runs."""

    method: str = "rrf"

    def __init__(self, *stages: Stage | Sequence[Stage], **params):
        self.stages: list[Stage] = _flatten(stages)
        if len(self.stages) < 1:
            raise LimelightError(f"{self.method} needs at least one stage")
        self.params = params
        self.name = f"{self.method}({','.join(s.name for s in self.stages)})"

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        runs = [s.transform(queries, run) for s in self.stages]
        return fuse(runs, self.method, name=self.name, **self.params)


class RRF(Fusion):
    """``RRF(a, b, ..., k=60, depth=None, weights=None)``; also ``a | b``."""

    method = "rrf"

    def __init__(self, *stages: Stage | Sequence[Stage], k: float = 60, depth: int | None = None,
                 weights: Sequence[float] | None = None):
        super().__init__(*stages, k=k, depth=depth, weights=weights)
        self._from_or = False

    def __or__(self, other: Stage) -> Stage:
        if self._from_or:  # a | b | c fuses the three at once, not rrf(rrf(a, b), c)
            out = RRF(*self.stages, other, **self.params)
            out._from_or = True
            return out
        return super().__or__(other)


class CombSUM(Fusion):
    """``CombSUM(a, b, ..., norm='min-max', depth=None, weights=None)``."""

    method = "combsum"

    def __init__(self, *stages: Stage | Sequence[Stage], norm: str | None = "min-max",
                 depth: int | None = None, weights: Sequence[float] | None = None):
        super().__init__(*stages, norm=norm, depth=depth, weights=weights)


class CombMNZ(Fusion):
    """``CombMNZ(a, b, ..., norm='min-max', depth=None, weights=None)``."""

    method = "combmnz"

    def __init__(self, *stages: Stage | Sequence[Stage], norm: str | None = "min-max",
                 depth: int | None = None, weights: Sequence[float] | None = None):
        super().__init__(*stages, norm=norm, depth=depth, weights=weights)


class Linear(Fusion):
    """``Linear(a, b, alpha=0.5, norm='min-max', depth=None)``: ``alpha`` weighs ``a``."""

    method = "linear"

    def __init__(self, a: Stage, b: Stage, alpha: float = 0.5, norm: str | None = "min-max",
                 depth: int | None = None):
        if not 0.0 <= alpha <= 1.0:
            raise LimelightError(f"alpha must lie in [0, 1], got {alpha}")
        super().__init__(a, b, alpha=alpha, norm=norm, depth=depth)


def rrf_or(left: Stage, right: Stage) -> RRF:
    """``left | right``: RRF (k=60) of the two stages (``a | b | c`` fuses all three)."""
    out = RRF(left, right)
    out._from_or = True
    return out


# ---- first-stage retrievers ---------------------------------------------------------------------
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


def check_k(k: int) -> int:
    """``k`` (results per query) as an int, a ``LimelightError`` when it is below 1."""
    k = int(k)
    if k < 1:
        raise LimelightError(f"k must be ≥ 1, got {k}")
    return k


def run_from_topk(qids: IdMap, doc_ids: IdMap, docs: np.ndarray, scores: np.ndarray,
                  name: str) -> Run:
    """A ``Run`` from padded ``(n, k)`` top-k arrays (``-1`` = no document)."""
    n, k = docs.shape
    q = np.repeat(np.arange(n, dtype=np.int32), k)
    d = docs.reshape(-1)
    s = scores.reshape(-1).astype(np.float64)
    keep = d >= 0
    return Run.from_codes(qids, doc_ids, q[keep], d[keep], s[keep], name)
