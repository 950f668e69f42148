"""Neural re-ranking: TK (Transformer-Kernel) and KNRM over any first-stage run.

>>> from limelight.rerank import NeuralRanker, KernelReranker  # doctest: +SKIP
>>> stage = bm25 % 100 >> KernelReranker(NeuralRanker.load("tk2.pt"), collection)  # doctest: +SKIP

See ``docs/results-rerank.md`` for the experiments and the choices made.
"""

from limelight.rerank.models import KNRM, MUS, TK, KernelRanker, KernelScores, KNRMConfig, TKConfig
from limelight.rerank.ranker import KernelReranker, NeuralRanker, PairScorer
from limelight.rerank.train import (
    QrelsTriples,
    TrainConfig,
    TrainResult,
    TripleSource,
    mrr_at_10,
    train,
)
from limelight.rerank.vocab import EncodedTexts, Vocabulary, VocabularyMismatchError, glove_matrix

__all__ = [
    "KNRM", "MUS", "TK", "EncodedTexts", "KNRMConfig", "KernelRanker", "KernelReranker", "KernelScores",
    "NeuralRanker", "PairScorer", "QrelsTriples", "TKConfig", "TrainConfig", "TrainResult",
    "TripleSource", "Vocabulary", "VocabularyMismatchError", "glove_matrix", "mrr_at_10", "train",
]
