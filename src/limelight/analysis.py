"""The one text analyzer shared by everything lexical (BM25, reverse BM25, query generation).

Lowercasing, tokenization with a regular expression (default ``(?u)\\b\\w\\w+\\b``, the
scikit-learn/bm25s pattern), stopword removal and optional Snowball stemming (PyStemmer). Its
``config()`` is stored in every index it builds and checked when the index is loaded.

With the default pattern, tokens are exactly the maximal runs of ``\\w`` characters at least two
code points long; ``code_points`` and ``word_char_table`` give compiled tokenizers (the BM25
query encoder, ``limelight.retrieval.bm25_kernels``) what they need to reproduce ``tokenize``
without Python: the lowercased texts as one UTF-32 code-point array, and ``\\w`` as a table over
all code points, derived from ``re`` itself (so it follows the running Python's Unicode data).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from limelight.errors import IndexMismatchError, LimelightError

DEFAULT_PATTERN = r"(?u)\b\w\w+\b"
N_CODE_POINTS = 0x110000


@lru_cache(maxsize=1)
def word_char_table() -> np.ndarray:
    """``uint8`` array over every code point (``0x110000``): 1 where the character matches
    ``\\w`` in a ``str`` pattern of ``re``, else 0. Built once per process (about 0.05 s) by
    running ``re`` over a string of all code points, so it is exact for the running Python.
    Read-only."""
    everything = np.arange(N_CODE_POINTS, dtype=np.uint32).tobytes().decode("utf-32-le",
                                                                            "surrogatepass")
    runs = np.array([m.span() for m in re.finditer(r"(?u)\w+", everything)],
                    dtype=np.int64).reshape(-1, 2)
    edges = np.zeros(N_CODE_POINTS + 1, dtype=np.int32)
    np.add.at(edges, runs[:, 0], 1)
    np.add.at(edges, runs[:, 1], -1)
    table = np.cumsum(edges[:-1]).astype(np.uint8)
    table.flags.writeable = False
    return table


def stopword_list(name: str | Sequence[str] | None) -> frozenset[str]:
    """A stopword set by name: ``"en"`` (bm25s's English list, used for the reference figures),
    ``"en_plus"`` (bm25s's longer English list), ``"none"``; or an explicit list of words."""
    if name is None or name == "none":
        return frozenset()
    if isinstance(name, str):
        from bm25s import stopwords as sw

        table = {"en": sw.STOPWORDS_EN, "english": sw.STOPWORDS_EN, "en_plus": sw.STOPWORDS_EN_PLUS}
        if name not in table:
            raise LimelightError(f"unknown stopword list {name!r} (en, en_plus, none, or a list)")
        return frozenset(table[name])
    return frozenset(w.lower() for w in name)


@dataclass
class Analyzer:
    """Text → tokens. ``stemmer`` is a Snowball language name (``"english"``) or ``None``."""

    lowercase: bool = True
    pattern: str = DEFAULT_PATTERN
    stopwords: str | tuple[str, ...] = "en"
    stemmer: str | None = None
    _re: re.Pattern = field(init=False, repr=False)
    _stop: frozenset = field(init=False, repr=False)
    _stem: object = field(init=False, repr=False, default=None)

    def __post_init__(self):
        if isinstance(self.stopwords, list):
            self.stopwords = tuple(self.stopwords)
        self._re = re.compile(self.pattern)
        self._stop = stopword_list(self.stopwords)
        if self.stemmer:
            import Stemmer

            try:
                self._stem = Stemmer.Stemmer(self.stemmer)
            except KeyError:
                raise LimelightError(f"unknown stemmer language {self.stemmer!r}") from None

    def tokenize(self, text: str) -> list[str]:
        """Tokens of one text, in order."""
        if self.lowercase:
            text = text.lower()
        toks = self._re.findall(text)
        if self._stop:
            stop = self._stop
            toks = [t for t in toks if t not in stop]
        if self._stem is not None:
            toks = self._stem.stemWords(toks)
        return toks

    def tokenize_many(self, texts: Iterable[str]) -> list[list[str]]:
        """Tokens of many texts (stemming is batched through a cache of distinct words)."""
        find = self._re.findall
        stop = self._stop
        low = self.lowercase
        out = [[t for t in find(s.lower() if low else s) if t not in stop] for s in texts]
        if self._stem is not None:
            vocab = {w for doc in out for w in doc}
            words = list(vocab)
            stems = dict(zip(words, self._stem.stemWords(words), strict=True))
            out = [[stems[w] for w in doc] for doc in out]
        return out

    @property
    def compilable(self) -> bool:
        """Whether compiled tokenizers can reproduce this analyzer (the default pattern)."""
        return self.pattern == DEFAULT_PATTERN

    def code_points(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The texts, lowercased if the analyzer lowercases, as one array of code points:
        ``(buf uint32, starts int64, ends int64)``; text ``i`` is ``buf[starts[i]:ends[i]]``
        and texts are separated by one NUL (never a word character), so no run of word
        characters crosses a text boundary. ``None`` counts as an empty text. Lowercasing is
        Python's ``str.lower`` (final sigma, ``İ`` → two code points); lone surrogates are
        kept (``surrogatepass``). Runs in C, holding the GIL (about 20 ms per million characters)."""
        texts = ["" if t is None else t for t in texts]
        n = len(texts)
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        joined = "\x00".join(texts)
        if self.lowercase:
            lowered = joined.lower()
            if len(lowered) != len(joined):  # a character lowercases to several (İ → i̇)
                texts = [t.lower() for t in texts]
                lens = np.fromiter(map(len, texts), dtype=np.int64, count=n)
                lowered = "\x00".join(texts)
            joined = lowered
        buf = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        starts = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(lens[:-1] + 1, out=starts[1:])
        return buf, starts, starts + lens

    def config(self) -> dict:
        """A JSON-able description, stored in indexes and compared on load."""
        sw = self.stopwords if isinstance(self.stopwords, str) or self.stopwords is None else list(self.stopwords)
        return {"lowercase": self.lowercase, "pattern": self.pattern, "stopwords": sw,
                "stemmer": self.stemmer}

    @classmethod
    def from_config(cls, cfg: dict) -> Analyzer:
        sw = cfg.get("stopwords", "en")
        return cls(cfg.get("lowercase", True), cfg.get("pattern", DEFAULT_PATTERN),
                   tuple(sw) if isinstance(sw, list) else sw, cfg.get("stemmer"))

    def check_same(self, other: dict, where: str) -> None:
        """Raise ``IndexMismatchError`` if ``other`` (a stored config) differs from this one."""
        mine = self.config()
        if mine != other:
            diff = {k: (other.get(k), mine.get(k)) for k in mine if mine.get(k) != other.get(k)}
            raise IndexMismatchError(
                f"{where} was built with another analyzer: " +
                ", ".join(f"{k} {a!r} (index) vs {b!r} (requested)" for k, (a, b) in diff.items()))
