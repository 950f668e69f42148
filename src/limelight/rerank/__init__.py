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

_EXPORTS = {
    "EncodedTexts": "limelight.rerank.vocab",
    "fit": "limelight.rerank.train",
    "FitConfig": "limelight.rerank.train",
    "FitResult": "limelight.rerank.train",
    "fold_split": "limelight.rerank.train",
    "interpolate": "limelight.rerank.interpolate",
    "tune_depth": "limelight.rerank.interpolate",
    "tune_lambda": "limelight.rerank.interpolate",
    "TripleSet": "limelight.rerank.train",
    "Validation": "limelight.rerank.train",
    "glove_matrix": "limelight.rerank.vocab",
    "KernelRanker": "limelight.rerank.models",
    "KernelReranker": "limelight.rerank.ranker",
    "KernelScores": "limelight.rerank.models",
    "KNRM": "limelight.rerank.models",
    "KNRMConfig": "limelight.rerank.models",
    "mrr_at_10": "limelight.rerank.train",
    "MUS": "limelight.rerank.models",
    "NeuralRanker": "limelight.rerank.ranker",
    "PairScorer": "limelight.rerank.ranker",
    "QrelsTriples": "limelight.rerank.train",
    "ranker_fingerprint": "limelight.rerank.ranker",
    "RerankedRetriever": "limelight.rerank.ranker",
    "TK": "limelight.rerank.models",
    "TKConfig": "limelight.rerank.models",
    "train": "limelight.rerank.train",
    "TrainConfig": "limelight.rerank.train",
    "TrainResult": "limelight.rerank.train",
    "TripleSource": "limelight.rerank.train",
    "Vocabulary": "limelight.rerank.vocab",
    "VocabularyMismatchError": "limelight.rerank.vocab",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs
    from limelight.rerank.interpolate import interpolate, tune_depth, tune_lambda  # noqa: F401
    from limelight.rerank.models import (  # noqa: F401
        KNRM,
        MUS,
        TK,
        KernelRanker,
        KernelScores,
        KNRMConfig,
        TKConfig,
    )
    from limelight.rerank.ranker import (  # noqa: F401
        KernelReranker,
        NeuralRanker,
        PairScorer,
        RerankedRetriever,
        ranker_fingerprint,
    )
    from limelight.rerank.train import (  # noqa: F401
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
    from limelight.rerank.vocab import (  # noqa: F401
        EncodedTexts,
        Vocabulary,
        VocabularyMismatchError,
        glove_matrix,
    )
