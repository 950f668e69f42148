"""BM25 (Lucene variant), exactly as bm25s 0.3.16 computes it with ``method="lucene"``.

For a term ``t`` with document frequency ``df`` in a collection of ``N`` documents, and a
document ``d`` of length ``|d|`` (tokens after analysis) where ``t`` occurs ``tf`` times::

    idf(t)    = ln(1 + (N - df + 0.5) / (df + 0.5))                  (stored as float32)
    w(t, d)   = idf(t) · tf / (k1 · (1 - b + b · |d| / avgdl) + tf)   (float64, then float32)
    s(q, d)   = Σ_{t ∈ q} qtf(t, q) · w(t, d)                          (float32)

A term repeated in the query counts once per occurrence (bm25s adds its weight once per token).

The index (``BM25Index``) stores term frequencies and document lengths, not weights, so ``k1`` and
``b`` are chosen when a ``BM25`` retriever is made; the weights are computed when first needed
(one parallel pass over the postings, about 0.1 s for 39M postings on 2 cores) and cached per
``(k1, b)``, and so are the pruning bounds (each term's k-th largest weight), per term, for the
terms the queries use: opening an index reads its files and nothing more. Layout of an index
directory::

    meta.json     format, analyzer config, k1/b defaults, N, avgdl, vocabulary, doc ids
    indptr.npy    int64 (V + 1,)  CSC offsets: postings of term t are [indptr[t], indptr[t+1])
    docs.npy      int32 (P,)      document code of each posting (ascending within a term)
    tf.npy        int32 (P,)      term frequency of each posting
    doc_len.npy   int32 (N,)      document lengths in tokens

Search semantics (``search_batch``, ``search_vectors``): the result rows hold the documents that
share at least one term with the query, best first (score descending, ties by the lower document
code), at most ``k``; rows are padded with doc ``-1`` and score ``0``. A query that is empty or has
no term of the vocabulary retrieves no documents (a row of ``-1``); it never raises.

Query analysis of a batch (``QueryLexicon``): with the default pattern, large batches are
tokenized and mapped to term ids by numba kernels that run in parallel without the GIL, giving
the term ids of ``Analyzer`` + vocabulary lookup exactly (``_encode_reference``, kept as the
reference and for small batches).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp

import limelight.retrieval.bm25_kernels as _k  # by full name: no edge to the package __init__
from limelight._io import atomic_dir, read_versioned
from limelight.analysis import DEFAULT_PATTERN, Analyzer, word_char_table
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.errors import IndexMismatchError, LimelightError
from limelight.retrieval.base import Retriever, check_k
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1

FORMAT = "limelight-bm25/1"

# name, dtype, what its length must equal (a key of ``_shape_of``)
_ARRAYS: tuple[tuple[str, np.dtype, str], ...] = (
    ("indptr", np.dtype(np.int64), "n_terms+1"),
    ("docs", np.dtype(np.int32), "n_postings"),
    ("tf", np.dtype(np.int32), "n_postings"),
    ("doc_len", np.dtype(np.int32), "n_docs"),
)


class BM25Index:
    """An inverted index with term frequencies and document lengths (see the module docstring).

    Attributes: ``analyzer``, ``vocabulary`` (an ``IdMap`` of terms, sorted), ``doc_ids``
    (``IdMap`` of documents), ``indptr``/``docs``/``tf`` (CSC postings), ``doc_len``,
    ``n_docs`` (N), ``avgdl``, ``k1``/``b`` (defaults for retrievers).
    """

    def __init__(self, analyzer: Analyzer, vocabulary: IdMap, doc_ids: IdMap, indptr: np.ndarray,
                 docs: np.ndarray, tf: np.ndarray, doc_len: np.ndarray,
                 k1: float = DEFAULT_K1, b: float = DEFAULT_B, name: str = "collection"):
        self.analyzer = analyzer
        self.vocabulary = vocabulary
        self.doc_ids = doc_ids
        self.indptr = indptr
        self.docs = docs
        self.tf = tf
        self.doc_len = doc_len
        self.k1 = float(k1)
        self.b = float(b)
        self.name = name
        self.n_docs = len(doc_ids)
        self.avgdl = mean_length(doc_len)
        self._weights: dict[tuple[float, float], np.ndarray] = {}
        self._kth: dict[tuple[float, float, int], tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        self._idf: np.ndarray | None = None
        self._lexicon: QueryLexicon | None = None

    def __getstate__(self) -> dict:
        """Pickled without its lock and its query lexicon (rebuilt on first use): Ray ships
        retrievers through its object store."""
        state = self.__dict__.copy()
        del state["_lock"]
        state["_lexicon"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ---- construction --------------------------------------------------------------------
    @classmethod
    def build(cls, collection: Collection, analyzer: Analyzer | None = None,
              show_progress: bool = False, k1: float = DEFAULT_K1,
              b: float = DEFAULT_B) -> BM25Index:
        """Analyze and index ``collection`` (``analyzer`` defaults to ``Analyzer()``), every token
        in memory at once; ``retrieval.bm25_build.BM25Builder`` writes the same files in bounded
        memory (what ``limelight index`` runs)."""
        analyzer = analyzer or Analyzer()
        texts = collection.texts.tolist()
        n = len(texts)
        if show_progress:
            from limelight.progress import progress_bar

            chunk = max(1, n // 50)
            parts = []
            with progress_bar(f"BM25: analyzing {collection.name}", n) as update:
                for i in range(0, n, chunk):
                    parts.append(analyze_flat(analyzer, texts[i:i + chunk]))
                    update(min(n, i + chunk))
            rows, codes, terms = _merge_parts(parts, chunk)
        else:
            rows, codes, terms = analyze_flat(analyzer, texts)
        vocabulary, indptr, docs, tf, doc_len = invert_postings(n, rows, codes, terms)
        return cls(analyzer, vocabulary, collection.ids, indptr, docs, tf, doc_len, k1, b,
                   collection.name)

    # ---- persistence ---------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the index into directory ``path`` atomically (replacing it if present)."""
        path = Path(path)
        with atomic_dir(path, "BM25 index") as tmp:
            for name, dtype, _ in _ARRAYS:
                np.save(tmp / f"{name}.npy", np.ascontiguousarray(getattr(self, name), dtype=dtype))
            write_meta(tmp, self.name, self.analyzer, self.k1, self.b, self.avgdl,
                       int(len(self.docs)), self.vocabulary.strings.tolist(),
                       self.doc_ids.strings.tolist())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True,
             analyzer: Analyzer | None = None) -> BM25Index:
        """Open an index directory. With ``mmap``, arrays are memory-mapped copy-on-write
        (``mmap_mode="c"``: pages are shared with the page cache and the files are never
        written; unlike ``"r"`` this keeps one compiled kernel for in-memory and mapped
        indexes, halving the first-call JIT cost on a machine without a numba cache). When
        ``analyzer`` is given it must equal the one the index was built with
        (``IndexMismatchError`` otherwise). Missing, truncated or inconsistent files raise
        ``IndexMismatchError`` naming the file."""
        path = Path(path)
        mp = path / "meta.json"
        meta = read_versioned(mp, FORMAT, "BM25 index", rebuild="rebuild it with `limelight index`")
        need = ("analyzer", "k1", "b", "n_docs", "n_terms", "n_postings", "vocabulary", "doc_ids")
        missing = [k for k in need if k not in meta]
        if missing:
            raise IndexMismatchError(f"{mp}: corrupt index metadata (missing {', '.join(missing)})")
        if analyzer is not None:
            analyzer.check_same(meta["analyzer"], str(path))
        else:
            try:
                analyzer = Analyzer.from_config(meta["analyzer"])
            except (TypeError, AttributeError, ValueError) as e:
                raise IndexMismatchError(f"{mp}: corrupt analyzer config ({e})") from None
        sizes = {"n_terms+1": int(meta["n_terms"]) + 1, "n_postings": int(meta["n_postings"]),
                 "n_docs": int(meta["n_docs"])}
        if len(meta["vocabulary"]) != meta["n_terms"] or len(meta["doc_ids"]) != meta["n_docs"]:
            raise IndexMismatchError(f"{mp}: corrupt index metadata (vocabulary or doc ids size)")
        arrays = {}
        for name, dtype, size_key in _ARRAYS:
            arrays[name] = _load_array(path / f"{name}.npy", dtype, sizes[size_key], mmap)
        ip, docs = arrays["indptr"], arrays["docs"]
        if ip[0] != 0 or ip[-1] != len(docs) or (len(ip) > 1 and np.any(np.diff(ip) < 0)):
            raise IndexMismatchError(f"{path / 'indptr.npy'}: corrupt postings offsets")
        if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= sizes["n_docs"]):
            raise IndexMismatchError(f"{path / 'docs.npy'}: document code out of range")
        try:
            vocabulary = IdMap(meta["vocabulary"], kind="term")
            doc_ids = IdMap(meta["doc_ids"], kind="document")
        except ValueError as e:
            raise IndexMismatchError(f"{mp}: corrupt index metadata ({e})") from None
        return cls(analyzer, vocabulary, doc_ids, ip, docs, arrays["tf"], arrays["doc_len"],
                   meta["k1"], meta["b"], meta.get("name", "collection"))

    # ---- statistics ----------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"BM25Index({self.name!r}, docs={self.n_docs}, terms={len(self.vocabulary)}, "
                f"postings={len(self.docs)})")

    @property
    def n_terms(self) -> int:
        """Vocabulary size V."""
        return len(self.vocabulary)

    @property
    def df(self) -> np.ndarray:
        """Document frequency of each term (int64, in vocabulary order)."""
        return np.diff(np.asarray(self.indptr))

    @property
    def idf(self) -> np.ndarray:
        """bm25s's Lucene idf of each term, float32: ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
        if self._idf is None:
            df = self.df.astype(np.float64)
            self._idf = np.log(1.0 + (self.n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
        return self._idf

    def weights(self, k1: float, b: float, threads: int | None = None) -> np.ndarray:
        """The BM25 weight of every posting for ``(k1, b)`` (float32, cached for the last four
        pairs). Computed by a parallel kernel (``bm25_kernels.posting_weights``, ``threads``
        numba threads, default all) in one pass over the postings, bit for bit the float64
        formula of the module docstring."""
        key = (float(k1), float(b))
        w = self._weights.get(key)
        if w is None:
            with self._lock:
                w = self._weights.get(key)
                if w is None:
                    n = _kernel_threads(threads)
                    with _numba_threads(n):
                        w = _k.posting_weights(np.asarray(self.indptr), np.asarray(self.docs),
                                               np.asarray(self.tf), np.asarray(self.doc_len),
                                               self.idf, key[0], key[1], self.avgdl, n * 8)
                    if len(self._weights) >= 4:
                        self._weights.pop(next(iter(self._weights)))
                    self._weights[key] = w
        return w

    def lexicon(self) -> QueryLexicon:
        """The compiled query encoder of this index (built on first use, then shared)."""
        if self._lexicon is None:
            with _LEXICON_LOCK:
                if self._lexicon is None:
                    self._lexicon = QueryLexicon(self.analyzer, self.vocabulary)
        return self._lexicon

    def kth_weights(self, k1: float, b: float, k: int, terms: np.ndarray | None = None,
                    threads: int | None = None) -> np.ndarray:
        """For each term, its ``k``-th largest posting weight (0 where df < k), float32: a lower
        bound of the k-th best score of any query containing the term (used for pruning).

        Computed lazily, per term, and cached per ``(k1, b, k)``: with ``terms`` (term ids),
        only those terms are guaranteed to be filled in the returned array (the others may
        hold 0, which is a valid, weaker bound); without, every term. A term costs one pass
        over its postings (``bm25_kernels.kth_largest``), so a batch of queries pays for the
        terms it uses, once per index, not for a sort of every posting at start-up."""
        key = (float(k1), float(b), int(k))
        with self._lock:
            entry = self._kth.get(key)
            if entry is None:
                if len(self._kth) >= 8:
                    self._kth.pop(next(iter(self._kth)))
                entry = self._kth[key] = (np.zeros(self.n_terms, dtype=np.float32),
                                          np.zeros(self.n_terms, dtype=bool))
        values, known = entry
        want = (np.arange(self.n_terms, dtype=np.int64) if terms is None
                else np.unique(np.asarray(terms, dtype=np.int64)))
        todo = want[~known[want]]
        if len(todo) and k >= 1:
            w = self.weights(k1, b, threads)
            n = _kernel_threads(threads)
            with self._lock, _numba_threads(n):
                todo = todo[~known[todo]]
                values[todo] = _k.kth_largest(np.asarray(self.indptr), w, todo, int(k))
                known[todo] = True
        return values


def _kernel_threads(threads: int | None) -> int:
    """numba threads for the index's own kernels (weights, bounds): ``threads`` (default: all
    that numba has), capped at ``numba.config.NUMBA_NUM_THREADS``."""
    cap = numba.config.NUMBA_NUM_THREADS
    return max(1, min(threads or cap, cap))


def mean_length(doc_len: np.ndarray) -> float:
    """avgdl as bm25s computes it: the numpy mean of the int lengths (float64); 0 when empty."""
    return float(np.asarray(doc_len, dtype=np.int64).mean()) if len(doc_len) else 0.0


def write_meta(folder: Path, name: str, analyzer: Analyzer, k1: float, b: float, avgdl: float,
               n_postings: int, vocabulary: list[str], doc_ids: list[str]) -> None:
    """Write an index's ``meta.json`` into ``folder`` (``save`` and the streaming build write
    the same bytes for the same index)."""
    meta = {"format": FORMAT, "name": name, "analyzer": analyzer.config(), "k1": float(k1),
            "b": float(b), "n_docs": len(doc_ids), "avgdl": avgdl, "n_terms": len(vocabulary),
            "n_postings": int(n_postings), "vocabulary": vocabulary, "doc_ids": doc_ids}
    (folder / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")


_NO_FLOOR = np.zeros(0, dtype=np.float32)


class BM25(Retriever):
    """BM25 retrieval over a ``BM25Index`` (``k1``/``b`` default to the index's, 0.9/0.4).

    ``threads`` sets numba's thread count for the search kernels (``None``: all cores; capped
    at ``numba.config.NUMBA_NUM_THREADS``). Results do not depend on the thread count.
    """

    def __init__(self, index: BM25Index, k1: float | None = None, b: float | None = None,
                 threads: int | None = None):
        self.index = index
        self.k1 = index.k1 if k1 is None else float(k1)
        self.b = index.b if b is None else float(b)
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0:
            raise LimelightError(f"BM25 parameters out of range: k1={self.k1} (≥ 0), b={self.b} (0..1)")
        if threads is not None and threads < 1:
            raise LimelightError(f"threads must be ≥ 1, got {threads}")
        self.threads = threads
        self.doc_ids = index.doc_ids
        self.name = f"bm25(k1={self.k1:g},b={self.b:g})"
        self._doc_rows: sp.csr_matrix | None = None

    @property
    def weights(self) -> np.ndarray:
        """The posting weights for this retriever's ``(k1, b)``."""
        return self.index.weights(self.k1, self.b)

    # ---- queries → vectors -----------------------------------------------------------------
    def query_vectors(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Analyze query texts into a ``(n, V)`` CSR matrix of query term counts (float32);
        terms outside the vocabulary are dropped (a term repeated in a query counts twice)."""
        qptr, qterms, qw = self._encode(texts)
        m = sp.csr_matrix((qw, qterms, qptr), shape=(len(qptr) - 1, self.index.n_terms))
        m.sum_duplicates()
        return m

    def _encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Raw query CSR (``qptr``, ``qterms``, weights 1): every known token in query order,
        repeats kept, as bm25s adds a repeated token's weight once per occurrence.

        Batches of ``COMPILED_MIN_QUERIES`` queries or more (or any batch once the index's
        ``QueryLexicon`` exists) are analyzed by the compiled encoder, in parallel and off the
        GIL; smaller ones, and analyzers with another pattern, by ``_encode_reference``
        (the same term ids, tested on the whole query log)."""
        ix = self.index
        if ix.analyzer.compilable and (ix._lexicon is not None
                                       or len(texts) >= COMPILED_MIN_QUERIES):
            qptr, qterms = ix.lexicon().encode(texts, self._threads())
            return qptr, qterms, np.ones(len(qterms), dtype=np.float32)
        return self._encode_reference(texts)

    def _encode_reference(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_encode`` through the Python analyzer (``analyze_flat`` and a vocabulary lookup):
        the reference implementation the compiled encoder must equal."""
        rows, codes, terms = analyze_flat(self.index.analyzer, texts)
        get = self.index.vocabulary._index.get
        lut = np.fromiter((get(t, -1) for t in terms), dtype=np.int32, count=len(terms))
        ids = lut[codes]
        keep = ids >= 0
        qptr = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=len(texts)), out=qptr[1:])
        qterms = np.ascontiguousarray(ids[keep])
        return qptr, qterms, np.ones(len(qterms), dtype=np.float32)

    # ---- search ------------------------------------------------------------------------------
    def search_batch(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` for many query texts at once: ``(docs int32 (n, k), scores float32 (n, k))``;
        rows best first (ties: lower doc code first), padded with ``-1``/``0``. Empty queries
        and queries without a known term retrieve nothing."""
        return self._search(*self._encode(texts), check_k(k))

    def search_vectors(self, queries: sp.csr_matrix | sp.csr_array, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` for weighted query vectors: a ``(n, V)`` sparse matrix over the vocabulary
        whose entries multiply the term weights (``s(q, d) = Σ_t q[t] · w(t, d)``). Used by
        reverse search (documents issued as weighted queries). Same output as ``search_batch``."""
        return self._search(*self._canonical(queries), check_k(k))

    def _search(self, qptr: np.ndarray, qterms: np.ndarray, qw: np.ndarray,
                k: int, floor_k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The batch kernel over an encoding; ``floor_k`` (≥ ``k``): prune with the terms'
        ``floor_k``-th largest weights instead of their ``k``-th (a weaker, still exact bound),
        so that searches at many depths share one cached bound (``kth_weights`` keeps 8)."""
        n_threads = self._threads()
        w = self.index.weights(self.k1, self.b, n_threads)
        positive = len(qw) == 0 or float(qw.min()) > 0.0
        fk = k if floor_k is None else max(int(floor_k), k)
        kth = (self.index.kth_weights(self.k1, self.b, fk, qterms, n_threads) if positive
               else _NO_FLOOR)
        with _numba_threads(n_threads):
            return _k.search_csr(qptr, qterms, qw, self.index.indptr, self.index.docs, w, kth,
                                 self.index.n_docs, k, n_threads * 8)

    def score(self, texts: Sequence[str], docs: np.ndarray) -> np.ndarray:
        """BM25 scores of given documents: ``docs`` is ``(n, m)`` int doc codes aligned with
        ``texts`` (or ``(m,)``, the same documents for every query); ``-1`` scores 0."""
        return self._score(*self._encode(texts), docs)

    def _score(self, qptr: np.ndarray, qterms: np.ndarray, qw: np.ndarray,
               docs: np.ndarray) -> np.ndarray:
        n = len(qptr) - 1
        docs = np.asarray(docs)
        if docs.ndim == 1:
            docs = np.broadcast_to(docs, (n, len(docs)))
        if docs.ndim != 2 or docs.shape[0] != n:
            raise LimelightError(f"docs must be shaped (n_queries={n}, m) or (m,), got {docs.shape}")
        docs = np.ascontiguousarray(docs, dtype=np.int32)
        if docs.size and int(docs.max()) >= self.index.n_docs:
            raise LimelightError(f"document code {int(docs.max())} out of range (N={self.index.n_docs})")
        with _numba_threads(self._threads()):
            return _k.score_pairs(qptr, qterms, qw, self.index.indptr, self.index.docs,
                                  self.weights, docs)

    # ---- inspection ----------------------------------------------------------------------------
    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """Postings of one (analyzed) vocabulary term: ``(doc codes int32, weights float32)``,
        ascending doc codes; a term outside the vocabulary has none (empty arrays)."""
        t = self.index.vocabulary.get(term)
        if t < 0:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        lo, hi = int(self.index.indptr[t]), int(self.index.indptr[t + 1])
        return np.asarray(self.index.docs[lo:hi]), self.weights[lo:hi]

    def doc_matrix(self) -> sp.csr_matrix:
        """The ``(N, V)`` document × term weight matrix in CSR (built once, then cached)."""
        if self._doc_rows is None:
            ix = self.index
            csc = sp.csc_matrix((self.weights, np.asarray(ix.docs), np.asarray(ix.indptr)),
                                shape=(ix.n_docs, ix.n_terms))
            self._doc_rows = csc.tocsr()
        return self._doc_rows

    def doc_term_weights(self, docid: str) -> dict[str, float]:
        """The BM25 weight of every term of document ``docid`` (``UnknownIdError`` if absent)."""
        d = self.index.doc_ids.lookup(docid)
        m = self.doc_matrix()
        lo, hi = m.indptr[d], m.indptr[d + 1]
        terms = self.index.vocabulary.decode(m.indices[lo:hi])
        return dict(zip(terms.tolist(), m.data[lo:hi].tolist(), strict=True))

    # ---- helpers ---------------------------------------------------------------------------------
    def _threads(self) -> int:
        cap = numba.config.NUMBA_NUM_THREADS
        return max(1, min(self.threads or cap, cap))

    def _canonical(self, queries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not sp.issparse(queries):
            raise LimelightError("query vectors must be a scipy.sparse matrix (n_queries × n_terms)")
        if queries.shape[1] != self.index.n_terms:
            raise LimelightError(f"query vectors have {queries.shape[1]} columns, the vocabulary "
                                 f"has {self.index.n_terms} terms")
        q = sp.csr_matrix(queries, dtype=np.float32, copy=False)
        if not q.has_canonical_format:
            q = q.copy()
            q.sum_duplicates()
        if q.nnz and not np.all(q.data):
            q = q.copy()
            q.eliminate_zeros()
        return (np.ascontiguousarray(q.indptr, dtype=np.int64),
                np.ascontiguousarray(q.indices, dtype=np.int32),
                np.ascontiguousarray(q.data, dtype=np.float32))


class _numba_threads:
    """Context manager: run numba kernels with ``n`` threads, restoring the previous count."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self) -> None:
        self.prev = numba.get_num_threads()
        numba.set_num_threads(self.n)

    def __exit__(self, *exc) -> None:
        numba.set_num_threads(self.prev)


COMPILED_MIN_QUERIES = 1000
_LEXICON_MAX_WORDS = 1 << 22
_LEXICON_LOCK = threading.Lock()


class QueryLexicon:
    """Compiled query analysis for one index: texts → query CSR of term ids, equal to the
    Python ``Analyzer`` followed by a vocabulary lookup, with the default pattern only.

    The texts become one code-point array (``Analyzer.code_points``: lowercasing and UTF-32
    encoding in C, the only part holding the GIL); numba kernels (``bm25_kernels``) split it
    into tokens and look every token up in a hash table of surface words → term ids, in
    parallel without the GIL. Without stemming the table is *complete*: it holds the vocabulary
    (stopwords mapped to ``-1``) and a word absent from it has no term. With stemming it is a
    cache: words not yet seen are stemmed by PyStemmer (once per distinct word, under a lock)
    and added; it is emptied when it exceeds ``_LEXICON_MAX_WORDS`` words.
    """

    def __init__(self, analyzer: Analyzer, vocabulary: IdMap):
        if not analyzer.compilable:
            raise LimelightError(f"no compiled analysis for pattern {analyzer.pattern!r}")
        self.analyzer = analyzer
        self.vocabulary = vocabulary
        self.complete = analyzer._stem is None
        self._lock = threading.Lock()
        terms = vocabulary.strings.tolist() if self.complete else []
        self._reset(terms)
        if terms:
            stop = analyzer._stop
            self.vals[:len(terms)] = [-1 if t in stop else i for i, t in enumerate(terms)]

    def _reset(self, words: list[str]) -> None:
        """Hold exactly ``words`` (distinct; values ``-2`` until set)."""
        n = len(words)
        lens = np.fromiter(map(len, words), dtype=np.int64, count=n)
        self.kptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=self.kptr[1:])
        self.keys = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"),
                                  dtype=np.uint32).copy()
        self.whash = _k.lexicon_hashes(self.kptr, self.keys, n)
        self.vals = np.full(n, -2, dtype=np.int32)
        self.n_words = n
        self.slots = _k.lexicon_slots(self.whash, n, _pow2(2 * n))

    def __len__(self) -> int:
        return self.n_words

    def encode(self, texts: Sequence[str], threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """``(qptr int64 (n + 1,), qterms int32)``: the term ids of every query's tokens in text
        order (repeats kept; stopwords and terms outside the vocabulary dropped), using
        ``threads`` numba threads."""
        buf, starts, ends = self.analyzer.code_points(texts)
        bound = np.zeros(len(starts) + 1, dtype=np.int64)
        np.cumsum((ends - starts + 1) // 3, out=bound[1:])
        word = word_char_table()
        if self.complete:
            return self._encode(buf, starts, ends, bound, word, threads)
        with self._lock:
            return self._encode(buf, starts, ends, bound, word, threads)

    def _encode(self, buf, starts, ends, bound, word, threads):
        with _numba_threads(threads):
            out, counts = _k.encode_tokens(buf, starts, ends, word, self.slots, self.whash,
                                           self.kptr, self.keys, self.vals, self.complete,
                                           bound, threads * 8)
            if not self.complete:
                self._resolve(buf, out, word)
            return _k.compact_tokens(out, bound, counts)

    def _resolve(self, buf: np.ndarray, out: np.ndarray, word: np.ndarray) -> None:
        """Replace the tokens ``encode_tokens`` left unresolved (``-2 - start``) by their term
        ids, analyzing the words never seen before in Python."""
        miss = np.flatnonzero(out <= -2)
        if not len(miss):
            return
        starts = -2 - out[miss]
        ends = _k.token_ends(buf, starts, word)
        if self.n_words + len(miss) > _LEXICON_MAX_WORDS:
            self._reset([])
        self._reserve(len(miss), int((ends - starts).sum()))
        widx, n_new = _k.lexicon_insert(buf, starts, ends, self.slots, self.whash, self.kptr,
                                        self.keys, self.vals, self.n_words)
        if n_new > self.n_words:
            self.vals[self.n_words:n_new] = self._analyze(self.n_words, n_new)
            self.n_words = n_new
        out[miss] = self.vals[widx]

    def _reserve(self, n_words: int, n_keys: int) -> None:
        """Room for ``n_words`` more words of ``n_keys`` code points in all."""
        need = self.n_words + n_words
        if need + 1 > len(self.kptr):
            size = max(need + 1, 2 * len(self.kptr))
            self.kptr = _grown(self.kptr, size)
            self.whash = _grown(self.whash, size - 1)
            self.vals = _grown(self.vals, size - 1)
        need_keys = int(self.kptr[self.n_words]) + n_keys
        if need_keys > len(self.keys):
            self.keys = _grown(self.keys, max(need_keys, 2 * len(self.keys)))
        if 2 * need > len(self.slots):
            self.slots = _k.lexicon_slots(self.whash, self.n_words, _pow2(2 * need))

    def _analyze(self, lo: int, hi: int) -> list[int]:
        """Term ids of the words ``lo..hi-1`` through the Python analyzer (stopwords, stems,
        vocabulary)."""
        kp = self.kptr[lo:hi + 1]
        text = self.keys[kp[0]:kp[-1]].tobytes().decode("utf-32-le", "surrogatepass")
        rel = (kp - kp[0]).tolist()
        words = [text[a:b] for a, b in zip(rel[:-1], rel[1:], strict=True)]
        stop = self.analyzer._stop
        kept = [w for w in words if w not in stop]
        stem = self.analyzer._stem
        get = self.vocabulary._index.get
        ids = iter([get(t, -1) for t in (stem.stemWords(kept) if stem is not None else kept)])
        return [-1 if w in stop else next(ids) for w in words]


def _pow2(n: int) -> int:
    """The least power of two ≥ ``max(n, 1024)``."""
    return 1 << max(10, (int(n) - 1).bit_length())


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=a.dtype)
    out[:len(a)] = a
    return out


def analyze_flat(analyzer: Analyzer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Analyze many texts at once: ``(rows, codes, terms)`` where token ``i`` (in text order) is
    ``terms[codes[i]]`` and belongs to text ``rows[i]`` (stopwords removed, stems applied).

    Same tokens as ``analyzer.tokenize_many(texts)``; with the default pattern, the texts are
    joined with NUL separators and tokenized by one regex pass, and each distinct word is
    analyzed once (much faster than one pass per text for a large query log)."""
    texts = ["" if t is None else t for t in texts]
    if analyzer.pattern != DEFAULT_PATTERN:
        return _intern(analyzer.tokenize_many(texts))
    joined = "\x00".join(texts)
    if joined.count("\x00") != max(len(texts) - 1, 0):
        return _intern(analyzer.tokenize_many(texts))
    if analyzer.lowercase:
        joined = joined.lower()
    toks = _JOINED_RE.findall(joined)
    words = list(set(toks))
    # each distinct word is already a lowercased regex token: only stopwords and stems remain
    stop = analyzer._stop
    kept = [w for w in words if w not in stop and w != "\x00"]
    stems = analyzer._stem.stemWords(kept) if analyzer._stem is not None else kept
    term_index: dict[str, int] = {}
    word_code: dict[str, int] = dict.fromkeys(words, -1)
    word_code["\x00"] = -2
    for w, a in zip(kept, stems, strict=True):
        word_code[w] = term_index.setdefault(a, len(term_index))
    codes = np.fromiter(map(word_code.__getitem__, toks), dtype=np.int64, count=len(toks))
    sep = codes == -2
    rows = np.cumsum(sep)
    keep = codes >= 0
    return rows[keep], codes[keep], list(term_index)


_JOINED_RE = re.compile(r"(?u)\b\w\w+\b|\x00")


def _intern(tokens: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Token lists → ``(rows, codes, terms)`` as ``analyze_flat`` returns them."""
    lens = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    intern: dict[str, int] = {}
    setdefault = intern.setdefault
    codes = np.fromiter((setdefault(w, len(intern)) for t in tokens for w in t), dtype=np.int64,
                        count=int(lens.sum()))
    return np.repeat(np.arange(len(tokens), dtype=np.int64), lens), codes, list(intern)


def invert_postings(n: int, rows: np.ndarray, codes: np.ndarray,
                    terms: list[str]) -> tuple[IdMap, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Analyzed tokens of ``n`` documents (``analyze_flat``'s ``rows, codes, terms``) → (sorted
    vocabulary, CSC indptr, posting docs, posting tfs, doc lengths): the postings of a BM25
    index, also those of new documents for exact reverse search."""
    doc_len = np.bincount(rows, minlength=n).astype(np.int32)
    words = np.asarray(terms, dtype=object)
    V = len(words)
    order = np.argsort(words, kind="stable") if V else np.zeros(0, dtype=np.int64)
    rank = np.empty(V, dtype=np.int64)
    rank[order] = np.arange(V)
    m = max(n, 1)
    key, tf = np.unique(rank[codes] * m + rows, return_counts=True)
    indptr = np.zeros(V + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // m, minlength=V), out=indptr[1:])
    vocabulary = IdMap(words[order], kind="term")
    return vocabulary, indptr, (key % m).astype(np.int32), tf.astype(np.int32), doc_len


def _merge_parts(parts: list[tuple[np.ndarray, np.ndarray, list[str]]],
                 chunk: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Concatenate ``analyze_flat`` results of consecutive chunks of ``chunk`` texts."""
    index: dict[str, int] = {}
    all_rows, all_codes = [], []
    for i, (rows, codes, terms) in enumerate(parts):
        lut = np.fromiter((index.setdefault(t, len(index)) for t in terms), dtype=np.int64,
                          count=len(terms))
        all_rows.append(rows + i * chunk)
        all_codes.append(lut[codes])
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    return np.concatenate(all_rows), np.concatenate(all_codes), list(index)


def _load_array(path: Path, dtype: np.dtype, size: int, mmap: bool) -> np.ndarray:
    if not path.is_file():
        raise IndexMismatchError(f"{path}: missing index array")
    try:
        a = np.load(path, mmap_mode="c" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        msg = " ".join(str(e).split())
        raise IndexMismatchError(f"{path}: corrupt index array ({msg})") from None
    if a.dtype != dtype or a.shape != (size,):
        raise IndexMismatchError(f"{path}: expected {dtype} of shape ({size},), found "
                                 f"{a.dtype} of shape {a.shape}")
    return a
