"""The default settings of the retrievers, written once.

Everything that needs a default (``BM25``, ``System``, the CLI's options, the audit's
configuration) imports it from here. A module of constants only: it imports nothing, so any
module of any layer can import it.
"""

from __future__ import annotations

#: BM25's term-frequency saturation ``k1`` and length normalisation ``b`` (Anserini's defaults)
DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
#: a hybrid retriever: the RRF constant ``k`` and how deep each side's ranking is fused
RRF_K = 60
FUSION_DEPTH = 100
#: a reranked retriever: how many of the first stage's documents the neural ranker re-scores
RERANK_DEPTH = 100

__all__ = ["DEFAULT_B", "DEFAULT_K1", "FUSION_DEPTH", "RERANK_DEPTH", "RRF_K"]
