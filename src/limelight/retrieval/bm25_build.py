"""Streaming BM25 index build in bounded memory: the same files, byte for byte, as
``BM25Index.build(collection).save(path)``.

``BM25Builder`` takes the documents in chunks, in order (``add``), and never holds more than one
batch of analyzed tokens: each batch (about ``chunk_chars`` characters of text) is analyzed
(``analyze_flat``), its postings counted per (term, document) and appended to three spill files
(term, document, frequency: 12 bytes a posting) in the output folder; only the vocabulary seen
so far (a dict of words), each term's document frequency and each document's length stay in
memory. ``finish`` sorts the vocabulary, lays out the CSC offsets from the document frequencies,
and reads the spill back in blocks, placing each posting at its term's write cursor
(``bm25_kernels.scatter_postings``) straight into the memory-mapped ``docs.npy`` and ``tf.npy``:
batches come in document order, so each term's postings arrive in ascending document order, as
``BM25Index.build`` lays them out. Peak memory: about ``memory_bytes`` (a batch's analysis, at
~19 bytes per character of text, and a spill block) plus the vocabulary, the document ids and
lengths, and the output's pages (the size of the index on disk).

A document longer than a batch is analyzed in pieces cut after a whitespace character (no token
crosses one, and lowercasing, final sigma included, reads the same context), its counts summed:
a 10M-token document costs a batch's memory, not ten times its text. Pieces need the default
token pattern; with another pattern a long document is analyzed whole.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

import limelight.retrieval.bm25_kernels as _k  # by full name: no edge to the package __init__
from limelight.analysis import Analyzer
from limelight.retrieval.bm25 import _ARRAYS, analyze_flat, mean_length, write_meta
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1

DEFAULT_MEMORY_BYTES = 2 << 30
_BYTES_PER_CHAR = 96  # a batch of c characters takes ~19c bytes to analyze; the rest is headroom
_SPILL = ".postings"
_SPACE = re.compile(r"\s")


class BM25Builder:
    """Build a BM25 index into ``folder`` (an empty folder, usually the temporary one of
    ``atomic_dir``) from documents given in order (see the module docstring).

    ``memory_bytes`` bounds the working memory; ``chunk_chars`` (default ``memory_bytes / 96``)
    is the characters of text analyzed at once."""

    def __init__(self, folder: str | Path, analyzer: Analyzer | None = None,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES, chunk_chars: int | None = None):
        self.folder = Path(folder)
        self.analyzer = analyzer or Analyzer()
        self.chunk_chars = max(1, int(chunk_chars or memory_bytes // _BYTES_PER_CHAR))
        self.block = max(1 << 16, memory_bytes // 128)  # postings read back at a time
        self.terms: dict[str, int] = {}  # word → term id in order of first appearance
        self.df = np.zeros(1024, dtype=np.int64)
        self.doc_lens: list[np.ndarray] = []
        self.n_docs = 0
        self.n_postings = 0
        spill = self.folder / _SPILL
        spill.mkdir(parents=True, exist_ok=True)
        self._files = [open(spill / f"{n}.i32", "wb") for n in ("term", "doc", "tf")]
        self._batch: list[str] = []
        self._batch_chars = 0

    # ---- input -----------------------------------------------------------------------------
    def add(self, texts: Iterable[str | None]) -> None:
        """Index the next documents (``None`` counts as an empty text)."""
        for t in texts:
            t = "" if t is None else t
            if len(t) > self.chunk_chars and self.analyzer.compilable:
                self._flush()
                self._add_long(t)
                continue
            self._batch.append(t)
            self._batch_chars += len(t) + 1
            if self._batch_chars >= self.chunk_chars:
                self._flush()

    def _flush(self) -> None:
        """Analyze the pending batch of documents and spill its postings."""
        texts, self._batch, self._batch_chars = self._batch, [], 0
        if not texts:
            return
        n = len(texts)
        rows, codes, words = analyze_flat(self.analyzer, texts)
        g = self._term_ids(words)[codes]
        key, tf = np.unique(g * n + rows, return_counts=True)
        self._spill(key // n, key % n + self.n_docs, tf)
        self.doc_lens.append(np.bincount(rows, minlength=n).astype(np.int32))
        self.n_docs += n

    def _add_long(self, text: str) -> None:
        """One document longer than a batch, analyzed piece by piece, its counts summed."""
        gids, counts = [], []
        length = 0
        for piece in _pieces(text, self.chunk_chars):
            _, codes, words = analyze_flat(self.analyzer, [piece])
            u, c = np.unique(self._term_ids(words)[codes], return_counts=True)
            gids.append(u)
            counts.append(c)
            length += len(codes)
        u, inv = np.unique(np.concatenate(gids), return_inverse=True)
        tf = np.bincount(inv, weights=np.concatenate(counts)).astype(np.int64)
        self._spill(u, np.full(len(u), self.n_docs, dtype=np.int64), tf)
        self.doc_lens.append(np.array([length], dtype=np.int32))
        self.n_docs += 1

    def _term_ids(self, words: list[str]) -> np.ndarray:
        """The builder's term id of each word (new words get the next ids)."""
        terms = self.terms
        return np.fromiter((terms.setdefault(w, len(terms)) for w in words), dtype=np.int64,
                           count=len(words))

    def _spill(self, gid: np.ndarray, doc: np.ndarray, tf: np.ndarray) -> None:
        if len(self.terms) > len(self.df):
            grown = np.zeros(max(len(self.terms), 2 * len(self.df)), dtype=np.int64)
            grown[:len(self.df)] = self.df
            self.df = grown
        self.df[:len(self.terms)] += np.bincount(gid, minlength=len(self.terms))
        for f, a in zip(self._files, (gid, doc, tf), strict=True):
            a.astype(np.int32).tofile(f)
        self.n_postings += len(gid)

    # ---- runs: builders of parts of a collection, merged into one (the Ray build) -----------
    def close_spill(self) -> Path:
        """Analyze the pending documents and close the spill: the folder whose ``term.i32``,
        ``doc.i32`` and ``tf.i32`` (int32) hold every posting so far, with this builder's term
        ids (``terms``) and document numbers. Nothing can be added afterwards; another builder
        takes these postings with ``add_postings``."""
        self._flush()
        for f in self._files:
            f.close()
        return self.folder / _SPILL

    def term_ids(self, words: Sequence[str]) -> np.ndarray:
        """This builder's term id of each word (words it has not seen get the next ids)."""
        return self._term_ids(list(words))

    def add_postings(self, term: np.ndarray, doc: np.ndarray, tf: np.ndarray,
                     doc_lens: np.ndarray | None = None) -> None:
        """Append postings written by another builder after the documents indexed so far: their
        term ids already this builder's (``term_ids`` of that builder's vocabulary), their
        document numbers ``doc`` counted from 0; with ``doc_lens`` (that builder's document
        lengths) its documents are counted in, so give them with its last postings."""
        self._spill(np.asarray(term, dtype=np.int64), np.asarray(doc, dtype=np.int64) + self.n_docs, tf)
        if doc_lens is not None:
            self.doc_lens.append(np.asarray(doc_lens, dtype=np.int32))
            self.n_docs += len(doc_lens)

    # ---- output ----------------------------------------------------------------------------
    def finish(self, doc_ids: Sequence[str], name: str = "collection", k1: float = DEFAULT_K1,
               b: float = DEFAULT_B) -> None:
        """Write the index files (``indptr``, ``docs``, ``tf``, ``doc_len`` and ``meta.json``)
        into the folder and remove the spill; ``doc_ids`` are the documents' ids in order."""
        self._flush()
        for f in self._files:
            f.close()
        if len(doc_ids) != self.n_docs:
            raise ValueError(f"{len(doc_ids)} document ids for {self.n_docs} documents")
        V = len(self.terms)
        words = np.asarray(list(self.terms), dtype=object)
        order = np.argsort(words, kind="stable") if V else np.zeros(0, dtype=np.int64)
        rank = np.empty(V, dtype=np.int64)
        rank[order] = np.arange(V)
        indptr = np.zeros(V + 1, dtype=np.int64)
        np.cumsum(self.df[:V][order], out=indptr[1:])
        dtypes = {n: d for n, d, _ in _ARRAYS}
        P = self.n_postings
        out_docs = _open_output(self.folder / "docs.npy", dtypes["docs"], P)
        out_tf = _open_output(self.folder / "tf.npy", dtypes["tf"], P)
        cursor = indptr[:-1][rank]
        spill = self.folder / _SPILL
        with (open(spill / "term.i32", "rb") as ft, open(spill / "doc.i32", "rb") as fd,
              open(spill / "tf.i32", "rb") as ff):
            for _ in range(0, P, self.block):
                gid = np.fromfile(ft, dtype=np.int32, count=self.block)
                _k.scatter_postings(gid, np.fromfile(fd, dtype=np.int32, count=self.block),
                                    np.fromfile(ff, dtype=np.int32, count=self.block), cursor,
                                    out_docs, out_tf)
        for a in (out_docs, out_tf):
            if isinstance(a, np.memmap):
                a.flush()
        del out_docs, out_tf
        shutil.rmtree(spill)
        doc_len = (np.concatenate(self.doc_lens) if self.doc_lens else np.zeros(0, dtype=np.int32))
        np.save(self.folder / "indptr.npy", indptr)
        np.save(self.folder / "doc_len.npy", doc_len.astype(dtypes["doc_len"]))
        write_meta(self.folder, name, self.analyzer, k1, b, mean_length(doc_len), P,
                   words[order].tolist(), list(doc_ids))

    def abort(self) -> None:
        """Close and remove the spill (after a failure)."""
        for f in self._files:
            f.close()
        shutil.rmtree(self.folder / _SPILL, ignore_errors=True)


def _open_output(path: Path, dtype: np.dtype, n: int) -> np.ndarray:
    """A ``.npy`` file of ``n`` items open for writing (memory-mapped; ``np.save`` writes the
    same header), or an in-memory array saved at once when empty (nothing to map)."""
    if n == 0:
        a = np.zeros(0, dtype=dtype)
        np.save(path, a)
        return a
    return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n,))


def _pieces(text: str, size: int) -> Iterable[str]:
    """``text`` cut into consecutive pieces of about ``size`` characters, each ending just after
    a whitespace character (or at the end of the text)."""
    start, n = 0, len(text)
    while start < n:
        end = start + size
        if end >= n:
            yield text[start:]
            return
        cut = max(text.rfind(c, start, end) for c in " \n\t\r")
        if cut < start:  # no common space in the window: the next whitespace of any kind
            m = _SPACE.search(text, end)
            cut = m.start() if m else n - 1
        yield text[start:cut + 1]
        start = cut + 1
