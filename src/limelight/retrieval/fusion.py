"""Fusion of runs and stages, in one place: the run-level functions (``rrf``, ``combsum``,
``combmnz``, ``linear``, ``fuse``, ``rrf_topk``; defined in ``limelight.retrieval.runfusion``), the
fusion stages (``RRF(bm25 % 100, dense % 100)`` or ``bm25 | dense``, ``CombSUM``, ``CombMNZ``,
``Linear``; defined beside ``Stage`` in ``limelight.retrieval.base``) and ``Hybrid``, the BM25 +
dense RRF retriever of ``limelight retrieve --model hybrid``.

* ``rrf(*runs, k=60)``: ``sum_r w_r / (k + rank_r(d))`` (Cormack et al. 2009).
* ``combsum(*runs, norm='min-max')``: ``sum_r w_r * norm_r(s_r(d))``.
* ``combmnz(*runs, norm='min-max')``: CombSUM times the number of runs that retrieved ``d``.
* ``linear(a, b, alpha=0.5)``: ``alpha * mm(s_a) + (1 - alpha) * mm(s_b)`` (Chen et al. 2022).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from limelight.errors import IndexMismatchError
from limelight.retrieval.base import (
    RRF,
    CombMNZ,
    CombSUM,
    Fusion,
    Linear,
    Retriever,
    rrf_or,
)
from limelight.retrieval.defaults import FUSION_DEPTH, RRF_K
from limelight.retrieval.runfusion import (
    FUSIONS,
    NORMS,
    combmnz,
    combsum,
    fuse,
    linear,
    minmax_scores,
    rrf,
    rrf_topk,
)

__all__ = ["FUSIONS", "NORMS", "RRF", "CombMNZ", "CombSUM", "Fusion", "Hybrid", "Linear", "combmnz",
           "combsum", "fuse", "linear", "minmax_scores", "rrf", "rrf_or", "rrf_topk"]


class Hybrid(Retriever):
    """RRF (``k=60``) of a lexical and a dense retriever's top ``depth`` (Chen et al., ECIR 2022).

    Both retrievers must index the same collection (same document ids, same order).
    """

    def __init__(self, lexical: Retriever, dense: Retriever, k: float = RRF_K,
                 depth: int = FUSION_DEPTH, name: str = "hybrid"):
        if not (lexical.doc_ids is dense.doc_ids or lexical.doc_ids == dense.doc_ids):
            raise IndexMismatchError(f"hybrid: {lexical.name} and {dense.name} index different "
                                     f"collections ({len(lexical.doc_ids)} vs {len(dense.doc_ids)} documents)")
        self.lexical, self.dense = lexical, dense
        self.doc_ids = lexical.doc_ids
        self.rrf_k, self.depth, self.name = k, int(depth), name

    def search_batch(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of the RRF of both retrievers' top ``max(depth, k)``."""
        depth = max(self.depth, int(k))
        d1, s1 = self.lexical.search_batch(texts, depth)
        d2, s2 = self.dense.search_batch(texts, depth)
        return rrf_topk([d1, d2], len(self.doc_ids), int(k), self.rrf_k,
                        self.doc_ids.lexical_rank(), [s1, s2])
