"""Compiled analysis of new documents for exact reverse search (BM25): texts → per-document term
counts over the query log's vocabulary, and document lengths, without Python per token.

Equal to ``analyze_flat`` followed by the vocabulary lookup of ``ExactReverse`` for an analyzer
with the default pattern and no stemmer: the texts become one lowercased code-point array
(``Analyzer.code_points``), a token is a maximal run of ``\\w`` code points at least two long
(``word_char_table``), and each token is looked up in a hash table of surface words — the
terms of the query log and of the index (→ their ids) and the stopwords (→ dropped). A token
found nowhere is a word of the document the queries never ask for: it counts in the document's
length only. An analyzer with a stemmer or another pattern has no ``DocLexicon`` (``build``
returns None) and goes through ``analyze_flat``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from limelight.retrieval.bm25_kernels import (
    find_word,
    lexicon_hashes,
    lexicon_slots,
    next_token,
    word_hash,
)


@numba.njit(cache=True, nogil=True)
def _analyze(buf, starts, ends, word, slots, whash, kptr, keys, vals):  # pragma: no cover - numba
    """Per text: its length (tokens that are not stopwords) and the sorted distinct term ids of
    its tokens found in the table with their counts, as CSR ``(dptr, dterm, tf)``."""
    m = len(starts)
    dl = np.zeros(m, dtype=np.int64)
    cap = 0
    for i in range(m):
        cap += (ends[i] - starts[i] + 1) // 2
    terms = np.empty(cap, dtype=np.int64)
    dptr = np.zeros(m + 1, dtype=np.int64)
    tf = np.empty(cap, dtype=np.int64)
    dterm = np.empty(cap, dtype=np.int64)
    n_out = 0
    for i in range(m):
        k = 0
        p = starts[i]
        e = ends[i]
        while p < e:
            s, p = next_token(buf, p, e, word)
            if p - s >= 2:
                w = find_word(buf, s, p, word_hash(buf, s, p), slots, whash, kptr, keys)
                if w < 0:
                    dl[i] += 1  # a word of the document no query asks for
                elif vals[w] >= 0:
                    dl[i] += 1
                    terms[k] = vals[w]
                    k += 1
        t = np.sort(terms[:k])
        a = 0
        while a < k:
            b = a + 1
            while b < k and t[b] == t[a]:
                b += 1
            dterm[n_out] = t[a]
            tf[n_out] = b - a
            n_out += 1
            a = b
        dptr[i + 1] = n_out
    return dl, dptr, dterm[:n_out].copy(), tf[:n_out].copy()


class DocLexicon:
    """Surface words → term ids (``-1``: a stopword) for compiled document analysis."""

    def __init__(self, analyzer, terms: Sequence[str], ids: np.ndarray):
        from limelight.analysis import word_char_table

        self.analyzer = analyzer
        stop = sorted(analyzer._stop - set(terms))
        words = list(terms) + stop
        vals = np.concatenate([np.asarray(ids, dtype=np.int64), np.full(len(stop), -1, np.int64)])
        vals[[i for i, t in enumerate(terms) if t in analyzer._stop]] = -1
        lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        self.kptr = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(lens, out=self.kptr[1:])
        self.keys = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"),
                                  dtype=np.uint32).copy()
        size = 1 << max(10, (2 * len(words) - 1).bit_length())
        # the BM25 query analysis's table (the same hash and probing)
        self.whash = lexicon_hashes(self.kptr, self.keys, len(words))
        self.slots = lexicon_slots(self.whash, len(words), size)
        self.vals = vals
        self.word = word_char_table()

    @classmethod
    def build(cls, analyzer, terms: Sequence[str], ids: np.ndarray) -> DocLexicon | None:
        """A lexicon of ``terms`` (with their ``ids``) for ``analyzer``, or None where compiled
        analysis cannot reproduce it (a stemmer, or a pattern other than the default)."""
        if not getattr(analyzer, "compilable", False) or analyzer._stem is not None:
            return None
        return cls(analyzer, terms, ids)

    def analyze(self, texts: Sequence[str]) -> tuple[np.ndarray, ...]:
        """``(doc_len, dptr, dterm, tf)`` of ``texts``: lengths (tokens that are not stopwords)
        and, per text, its distinct known term ids (ascending) with their counts."""
        buf, starts, ends = self.analyzer.code_points(texts)
        return _analyze(buf, starts, ends, self.word, self.slots, self.whash, self.kptr,
                        self.keys, self.vals)
