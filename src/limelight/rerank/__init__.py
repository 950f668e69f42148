"""Neural re-ranking: TK (Transformer-Kernel) and KNRM over any first-stage run.

>>> from limelight.rerank import NeuralRanker, KernelReranker, RerankedRetriever  # doctest: +SKIP
>>> stage = bm25 % 100 >> KernelReranker(NeuralRanker.load("tk2.pt"), collection)  # doctest: +SKIP
>>> retriever = RerankedRetriever(bm25, NeuralRanker.load("tk2.pt"), collection, depth=100)  # doctest: +SKIP
>>> docs, scores = retriever.search_batch(["query text"], 10)  # what the exposure job calls  # doctest: +SKIP

See ``docs/results-rerank.md`` for the experiments and the choices made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.rerank.interpolate import interpolate, tune_depth, tune_lambda
    from limelight.rerank.models import (
        KNRM,
        MUS,
        TK,
        KernelRanker,
        KernelScores,
        KNRMConfig,
        TKConfig,
    )
    from limelight.rerank.ranker import (
        KernelReranker,
        NeuralRanker,
        PairScorer,
        RerankedRetriever,
        ranker_fingerprint,
    )
    from limelight.rerank.train import (
        FitConfig,
        FitResult,
        QrelsTriples,
        TrainConfig,
        TrainResult,
        TripleSet,
        TripleSource,
        Validation,
        fit,
        fold_split,
        mrr_at_10,
        train,
    )
    from limelight.rerank.vocab import (
        EncodedTexts,
        Vocabulary,
        VocabularyMismatchError,
        glove_matrix,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)
