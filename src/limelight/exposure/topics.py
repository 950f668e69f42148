"""Topic-aware retrievability (T-Retrievability: Chang, Meng & Ganguly, CIKM 2025).

A collection-wide Gini of r(d) mixes two things: how unequally a system exposes documents, and
how unequally the log *asks* about them (a document no query is about is not "unfairly"
hidden). T-Retrievability clusters the log's queries into K topics and measures inequality
within each topic. Here, with o_q the query's weight (its number of log entries) and k_qd the
1-based rank of d for q:

* **Topics** (``Topics``): one label per query. ``topics_from_texts``: K-means over the TF-IDF
  vectors of the queries' texts (``tfidf``: tokens as limelight's default analysis finds them,
  less the ``en_plus`` English stop words, terms in at least 2 queries, sublinear tf, smooth idf, rows
  L2-normalised), reduced by LSA (a seeded randomized SVD) to ``dims`` = 50 dimensions and
  L2-normalised again (Euclidean K-means on unit rows ranks like cosine). LSA is a deviation
  from the paper's "K-means over TF-IDF", made because on short web queries the raw sparse
  vectors give one catch-all cluster: on the shared log (114,926 queries, K = 20, seed 0,
  scikit-learn's TF-IDF and K-means) 107,596 queries (94 %) fell into one topic; after LSA the
  largest holds 21,814 (19 %) (``dims=None`` gives the literal setting, through scikit-learn).
  ``topics_from_vectors``: K-means over given query vectors (an audit's
  ``systems/query_vectors.npy``: the paper's sentence-embedding variant), rows L2-normalised.
  K-means over dense rows: k-means++ seeds, then Lloyd iterations until no query moves (at
  most ``KMEANS_ITER`` = 30; what scipy's ``kmeans2`` does, in numpy). Seeded: the sample, the
  SVD's test matrix and the k-means++ seeds all come from ``seed``; the SVD and K-means are
  fitted on at most ``fit_sample`` = 10,000 queries (at least 100 K) and every query is then
  put in the topic of its nearest centre (the cost of fitting grows with the sample, not the
  log). The number of topics K is the user's, or swept (``sweep_topics``). Queries are
  **not** weighted by o_q in the clustering (a topic is a kind of question, not a volume of
  traffic). A query whose TF-IDF vector is empty (every term a stop word or in one query only)
  is a zero vector, put in the topic whose centre is nearest the origin; their number is
  ``info["n_empty"]`` (6,142 of the shared log's queries). A topic K-means leaves empty has 0
  queries and Gini NaN.
* **Per-topic retrievability**, the paper's rank-based form with the query weights:
  r_i(d) = (1 / W_i) Σ_{q ∈ Q_i} o_q f(k_qd), W_i = Σ_{q ∈ Q_i} o_q, where
  f(k) = 1 / ln(1 + k) for k ≤ c and 0 beyond (``weighting="log"``: the **natural** logarithm,
  so f(1) = 1/ln 2 ≈ 1.44; a different base only rescales every r_i(d) by one constant and leaves
  every Gini unchanged). ``weighting="cumulative"`` (f = 1[k ≤ c]) or ``"gravity"`` with ``beta``
  (f = 1[k ≤ c] / k^β) give limelight's usual r(d) inside each topic instead.
* **Who is in a topic** (``population``): ``"retrieved"`` (default) — the documents some query
  of the topic retrieves at any stored depth (a document outside the topic's results is not
  about it: the paper's point); with one topic this is ``Retrievability.gini_retrieved_only``.
  ``"collection"`` — every document of the collection in every topic; with one topic this is
  ``Retrievability.gini``.
* **Gini per topic**: ``limelight.exposure.retrievability.gini`` (the collection Gini's own
  formula) over the topic's population; a topic whose population is empty has Gini NaN and is
  left out of the aggregates. Aggregates: ``min``, ``mean`` (unweighted over topics, the
  paper's), ``max`` and ``mean_weighted`` (by each topic's W_i: the log's traffic).
* **Standing of a document within its topics** (``TopicRetrievability.standing``): per topic
  whose population holds it, r_i(d), its rank among the topic's documents (1 = most
  retrievable; ties share the best rank), the share of the topic's documents less retrievable
  than it (``below``) and its share of the topic's total r.
* **Topics as groups** (``TopicRetrievability.groups``): a document-side ``Groups`` for
  ``limelight.exposure.fairness`` — each document split over the topics whose queries retrieve
  it, in proportion to its weighted retrievals (Σ o_q over the topic's queries that retrieve it,
  any depth: ``mode="share"``), or wholly to the topic retrieving it most (``mode="home"``: the
  TSV ``write_groups_tsv`` writes, which ``limelight fairness --groups`` reads); documents no
  query retrieves form ``(none)``. The assignment comes from the store's results, so it depends
  on the system: compare systems under one system's assignment.

Everything is computed from the store's parallel (query, document, rank) arrays in one numba
pass into a topics × documents array (as ``limelight.exposure.retrievability`` computes r(d);
a sparse matrix built by scipy when K × documents is too large to hold densely): no loop over
queries in Python; the per-topic loops run over K.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp

from limelight.data.ids import IdMap
from limelight.errors import LimelightError
from limelight.evaluation.discounts import LogDiscount, retrievability_discount
from limelight.exposure.retrievability import _check_weights, gini

WEIGHTINGS = ("log", "cumulative", "gravity")
POPULATIONS = ("retrieved", "collection")
#: topics × documents cells held as a dense array at most (8 bytes each: 512 MiB); beyond, sparse
DENSE_CELLS = 1 << 26
#: Lloyd iterations of K-means over dense rows
KMEANS_ITER = 30


# ---- topic models ---------------------------------------------------------------------------


@dataclass
class Topics:
    """One topic label per query (``labels[q]`` in ``0..k − 1``), the topics' ``names`` and how
    they were made (``method``, ``seed``, ``info``)."""

    labels: np.ndarray
    names: list[str]
    method: str
    seed: int | None = None
    info: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return len(self.names)

    @classmethod
    def from_labels(cls, labels: Sequence | np.ndarray, method: str = "given") -> Topics:
        """Any hashable label per query, recoded to ``0..k − 1`` in order of first appearance
        (names: the labels as strings)."""
        codes, uniq = pd.factorize(np.asarray(labels, dtype=object), use_na_sentinel=False)
        return cls(np.asarray(codes, dtype=np.int64), [str(u) for u in uniq], method)


def _kmeans(x, k: int, seed: int, fit_sample: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """K-means fitted on a seeded sample of at most ``fit_sample`` rows (None: all), every row
    then given its nearest centre: (labels, centres, rows fitted on). Dense rows: ``_lloyd``
    (k-means++ seeds, at most ``KMEANS_ITER`` Lloyd iterations, in numpy: scipy's ``kmeans2``
    would do the same after a 0.2 s import, a tenth of the whole topic model's time); sparse
    rows (raw TF-IDF: the paper's setting, or too few queries or terms for LSA): scikit-learn's
    ``KMeans`` (one run, ``n_init=1``), which takes them as they are; without scikit-learn (the
    core install) they are made dense for ``_lloyd`` (seeded the same way, not the same labels)."""
    n = x.shape[0]
    if not 1 <= k <= n:
        raise LimelightError(f"--topics {k}: the number of topics must lie in 1..{n} (the queries)")
    rows = _sample(n, k, seed, fit_sample)
    fit = x if rows is None else x[rows]
    if sp.issparse(x):
        try:
            from sklearn.cluster import KMeans
        except ImportError:  # the core install (no extra): ``_lloyd`` on the dense rows
            x, fit = x.toarray(), fit.toarray()
    with _one_thread():
        if sp.issparse(x):
            km = KMeans(n_clusters=k, n_init=1, random_state=seed).fit(fit)
            centres = km.cluster_centers_
            labels = km.labels_ if rows is None else km.predict(x)
        else:
            centres = _lloyd(np.asarray(fit, dtype=np.float64), k, np.random.default_rng([seed, 1]))
            labels = _nearest(np.asarray(x, dtype=np.float64), centres)
    return np.asarray(labels, dtype=np.int64), centres, n if rows is None else len(rows)


def _nearest(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Each row's nearest centre (Euclidean: the largest x·c − |c|²/2), in blocks of rows."""
    half = 0.5 * np.einsum("ij,ij->i", centres, centres)
    out = np.empty(len(x), dtype=np.int64)
    for a in range(0, len(x), 65536):  # blocks of rows: a bounded rows × K array
        out[a:a + 65536] = np.argmax(x[a:a + 65536] @ centres.T - half, axis=1)
    return out


def _lloyd(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """K-means centres of the rows of ``x``: k-means++ seeds (Arthur & Vassilvitskii 2007: each
    next seed drawn with probability ∝ its squared distance to the nearest seed so far), then
    at most ``KMEANS_ITER`` Lloyd iterations (until no row changes topic); a topic left empty
    keeps its centre. Loops over the K seeds and the iterations only."""
    n = len(x)
    centres = np.empty((k, x.shape[1]))
    centres[0] = x[rng.integers(n)]
    d2 = ((x - centres[0]) ** 2).sum(axis=1)
    for j in range(1, k):  # the K seeds
        tot = d2.sum()
        i = int(rng.choice(n, p=d2 / tot)) if tot > 0 else int(rng.integers(n))
        centres[j] = x[i]
        d2 = np.minimum(d2, ((x - centres[j]) ** 2).sum(axis=1))
    labels = np.full(n, -1, dtype=np.int64)
    for _ in range(KMEANS_ITER):  # Lloyd iterations
        new = _nearest(x, centres)
        if np.array_equal(new, labels):
            break
        labels = new
        counts = np.bincount(labels, minlength=k)
        sums = sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(k, n)) @ x
        full = counts > 0
        centres[full] = sums[full] / counts[full, None]
    return centres


def _one_thread():
    """BLAS and OpenMP on one thread: the matrices are small (a sample × 50), and on a busy
    machine the libraries' spinning threads cost more than they bring (the SVD of the shared
    log's 20,000-query sample: 7.7 s on 2 threads at load 6 on 2 cores, 0.35 s on one), and the
    figures do not depend on the number of threads. threadpoolctl comes with scikit-learn (an
    extra); the core install, without it, keeps the libraries' own thread counts."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        from contextlib import nullcontext

        return nullcontext()
    return threadpool_limits(1)


def _sample(n: int, k: int, seed: int, fit_sample: int | None) -> np.ndarray | None:
    """Sorted rows of a seeded sample of ``max(fit_sample, 100 k)`` rows (K-means: about 100
    queries a topic at least), or None for all."""
    m = None if fit_sample is None else max(fit_sample, 100 * k)
    if m is None or n <= m:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, m, replace=False))


def _tokens(texts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, codes, terms)`` of every token of every text, in pyarrow's C++ kernels (half the
    time of ``limelight.retrieval.bm25.analyze_flat``'s Python pass over a 115k-query log, the
    same 669,718 tokens of 59,225 words on the shared log): limelight's default analysis
    (``limelight.analysis.DEFAULT_PATTERN``: lowercased runs of two or more word characters —
    letters, digits, underscore — no stemming) less the ``en_plus`` stop words."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from limelight.analysis import stopword_list

    arr = texts if isinstance(texts, pa.Array | pa.ChunkedArray) else pa.array(texts, type=pa.large_string())
    toks = pc.split_pattern_regex(pc.utf8_lower(arr), pattern=r"[^\p{L}\p{N}_]+")
    flat, rows = pc.list_flatten(toks), pc.list_parent_indices(toks)
    stop = pa.array(sorted(stopword_list("en_plus")), type=flat.type)
    keep = pc.and_(pc.greater_equal(pc.utf8_length(flat), 2), pc.invert(pc.is_in(flat, value_set=stop)))
    enc = pc.dictionary_encode(pc.filter(flat, keep))
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    return (np.asarray(pc.filter(rows, keep).to_numpy(), dtype=np.int64),
            np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64),
            np.asarray(enc.dictionary.to_pylist(), dtype=object))


def tfidf(texts) -> tuple[sp.csr_matrix, np.ndarray]:
    """(queries × terms TF-IDF, the terms) of ``texts`` (strings, or a pyarrow string array):
    tokens by ``_tokens`` (limelight's analysis, the ``en_plus`` stop words: 179 words; with
    the 33 of ``en``, the question words what/how/why/does/... cluster web queries by their
    form, not their subject), terms in at least 2 queries (1 for a log of 2 queries or fewer),
    sublinear tf 1 + ln(tf), smooth idf ln((1 + n) / (1 + df)) + 1 (scikit-learn's
    ``TfidfVectorizer`` defaults), rows L2-normalised (float32)."""
    n = len(texts)
    rows, codes, terms = _tokens(texts)
    x = sp.csr_matrix((np.ones(len(codes), dtype=np.float32), (rows, codes)), shape=(n, len(terms)))
    x.sum_duplicates()
    df = np.bincount(x.indices, minlength=len(terms))
    keep = np.flatnonzero(df >= (2 if n > 2 else 1))
    x = sp.csr_matrix(x[:, keep])
    x.data = 1.0 + np.log(x.data)
    x = sp.csr_matrix(x @ sp.diags((np.log((1.0 + n) / (1.0 + df[keep])) + 1.0).astype(np.float32)))
    norm = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x = sp.csr_matrix(sp.diags(np.divide(1.0, norm, out=np.zeros(n), where=norm > 0).astype(np.float32)) @ x)
    return x, terms[keep]


def _lsa(x: sp.csr_matrix, dims: int, seed: int, rows: np.ndarray | None,
         n_iter: int = 2) -> np.ndarray:
    """The top ``dims`` right singular vectors of ``x`` (or of its ``rows``) by randomized SVD
    (Halko, Martinsson & Tropp 2011: a Gaussian test matrix of ``dims + 10`` columns, ``n_iter``
    power iterations with QR re-orthonormalisation), seeded: ``dims × terms``."""
    a = x if rows is None else x[rows]
    rng = np.random.default_rng([seed, 2])
    q, _ = np.linalg.qr(a @ rng.standard_normal((a.shape[1], dims + 10)).astype(np.float32))
    for _ in range(n_iter):  # power iterations
        z, _ = np.linalg.qr(a.T @ q)
        q, _ = np.linalg.qr(a @ z)
    _, _, vt = np.linalg.svd(np.asarray((a.T @ q).T), full_matrices=False)
    return vt[:dims]


def topics_from_texts(texts, k: int, seed: int = 0, dims: int | None = 50,
                      fit_sample: int | None = 10_000, n_terms: int = 4) -> Topics:
    """K-means over the TF-IDF vectors of the query texts (strings or a pyarrow string array;
    ``tfidf``), reduced to ``dims`` LSA
    dimensions (None: the raw TF-IDF vectors, the paper's literal setting), fitted on a sample
    of ``fit_sample`` queries (see the module's docstring); each topic named by its centre's
    ``n_terms`` heaviest terms."""
    if not len(texts):
        raise LimelightError("no queries to cluster into topics")
    x, terms = tfidf(texts)
    if not len(terms):  # no term at all survives: one vocabulary-free dimension
        x, terms = sp.csr_matrix((len(texts), 1), dtype=np.float32), np.array(["(no terms)"], dtype=object)
    n_empty = int((np.diff(x.indptr) == 0).sum())
    back = None
    if dims is not None and 1 <= dims < min(x.shape) - 1:
        with _one_thread():
            back = _lsa(x, dims, seed, _sample(x.shape[0], dims, seed, fit_sample))
            x = _unit_rows(np.asarray(x @ back.T, dtype=np.float32))
    labels, centres, fitted = _kmeans(x, k, seed, fit_sample)
    weights = np.asarray(centres if back is None else centres @ back)  # the centres in term space
    m = min(n_terms, weights.shape[1])
    top = np.argpartition(-weights, m - 1, axis=1)[:, :m]
    top = np.take_along_axis(top, np.argsort(-np.take_along_axis(weights, top, axis=1), axis=1), axis=1)
    names = [" ".join(terms[j] for j in row if weights[i, j] > 0) or "(no terms)"
             for i, row in enumerate(top)]
    return Topics(labels, names, "kmeans-tfidf" + (f"-lsa{dims}" if back is not None else ""), seed,
                  {"n_terms": int(len(terms)), "n_empty": n_empty, "fitted_on": fitted})


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def topics_from_vectors(vectors: np.ndarray, k: int, seed: int = 0,
                        texts: Sequence[str] | None = None, fit_sample: int | None = 10_000) -> Topics:
    """K-means over query vectors (rows L2-normalised), fitted on a sample of ``fit_sample``
    rows; with ``texts``, each topic named by its query nearest the centre, else ``topic i``."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2 or not np.isfinite(x).all():
        raise LimelightError(f"query vectors must be a finite 2-D array, got shape {x.shape}")
    x = _unit_rows(x)
    labels, centres, fitted = _kmeans(x, k, seed, fit_sample)
    names = [f"topic {i}" for i in range(k)]
    if texts is not None:
        sim = x @ centres.T.astype(np.float32)
        for i in range(k):  # over the K topics
            members = np.flatnonzero(labels == i)
            if len(members):
                names[i] = str(texts[int(members[np.argmax(sim[members, i])])])
    return Topics(labels, names, "kmeans-vectors", seed, {"dim": int(x.shape[1]), "fitted_on": fitted})


# ---- topic-aware retrievability -------------------------------------------------------------


def topic_weight_table(top: int, c: int, weighting: str = "log", beta: float | None = None) -> np.ndarray:
    """f(k) for k = 0..top (f(0) = 0: not retrieved): ``log`` 1 / ln(1 + k) (``LogDiscount``'s
    1 / log2(1 + k) divided by ln 2), ``cumulative`` 1[k ≤ c], ``gravity`` 1[k ≤ c] / k^β; 0
    beyond c."""
    if weighting not in WEIGHTINGS:
        raise LimelightError(f"unknown weighting {weighting!r} ({', '.join(WEIGHTINGS)})")
    if weighting == "gravity" and beta is None:
        raise LimelightError("the gravity weighting needs beta")
    f = retrievability_discount(c, beta if weighting == "gravity" else None)  # checks c and β
    k = np.arange(1, top + 1)
    w = LogDiscount().weights(k) / np.log(2.0) * (k <= f.c) if weighting == "log" else f.weights(k)
    return np.concatenate([[0.0], w])


@dataclass
class TopicRetrievability:
    """Per-topic r_i(d), populations and Ginis (see the module's docstring).

    ``r`` and ``member``: topics × documents (dense arrays, or CSR when large); ``table``: one
    row per topic (``topic, name, n_queries, weight, n_docs, gini, r_total``) sorted by Gini,
    most unequal first; ``summary``: the settings and the aggregates."""

    r: np.ndarray | sp.csr_matrix
    member: np.ndarray | sp.csr_matrix
    retrievals: np.ndarray | sp.csr_matrix
    topics: Topics
    doc_ids: IdMap
    table: pd.DataFrame
    summary: dict

    def most_unequal(self, n: int = 5) -> pd.DataFrame:
        """The ``n`` topics with the highest Gini."""
        return self.table.head(n)

    def _long(self) -> pd.DataFrame:
        """(topic, doc, r) of every document in every topic's population."""
        if sp.issparse(self.member):
            m = self.member.tocoo()
            t, d = m.row.astype(np.int64), m.col.astype(np.int64)
            rr = np.asarray(self.r.tocsr()[t, d]).ravel()
        else:
            t, d = np.nonzero(self.member)
            rr = self.r[t, d]
        return pd.DataFrame({"topic": t, "doc": d, "r": rr})

    def standings(self) -> pd.DataFrame:
        """Every (document, topic) of the populations: ``docid, topic, name, r, rank, n_docs,
        below, share`` (rank 1 = most retrievable in the topic, ties share the best rank;
        ``below`` the fraction of the topic's documents with a lower r; ``share`` r over the
        topic's total). Vectorised: one sort of all the pairs."""
        df = self._long()
        t, rr = df["topic"].to_numpy(), df["r"].to_numpy()
        order = np.lexsort((rr, t))
        ts, rs = t[order], rr[order]
        n = len(ts)
        t_start = np.searchsorted(ts, ts, side="left")
        t_end = np.searchsorted(ts, ts, side="right")
        new = np.ones(n, dtype=bool)
        new[1:] = (ts[1:] != ts[:-1]) | (rs[1:] != rs[:-1])
        run = np.cumsum(new) - 1
        run_start = np.flatnonzero(new)
        run_end = np.append(run_start[1:], n)
        below = np.empty(n)
        rank = np.empty(n, dtype=np.int64)
        size = np.empty(n, dtype=np.int64)
        below[order] = (run_start[run] - t_start) / np.maximum(t_end - t_start, 1)
        rank[order] = 1 + t_end - run_end[run]
        size[order] = t_end - t_start
        tot = np.bincount(t, weights=rr, minlength=self.topics.k)
        out = pd.DataFrame({"docid": self.doc_ids.strings[df["doc"].to_numpy()], "topic": t,
                            "name": np.asarray(self.topics.names, dtype=object)[t], "r": rr,
                            "rank": rank, "n_docs": size, "below": below,
                            "share": np.divide(rr, tot[t], out=np.zeros(n), where=tot[t] > 0)})
        return out.sort_values(["docid", "rank"], ignore_index=True)

    def standing(self, docid: str) -> pd.DataFrame:
        """``standings`` of one document (an unknown id is a one-line error)."""
        d = int(self.doc_ids.encode([docid], missing=-1)[0])
        if d < 0:
            raise LimelightError(f"document {docid!r} is not in the collection")
        s = self.standings()
        return s[s["docid"] == docid].reset_index(drop=True)

    def group_names(self) -> list[str]:
        """Each topic's name as a group: ``t<i>: <name>`` on one line (whitespace runs, tabs
        included, become one space: a TSV cell)."""
        return [f"t{i}: {' '.join(str(n).split())}" for i, n in enumerate(self.topics.names)]

    def groups(self, mode: str = "share"):
        """Topics as a document-side ``limelight.exposure.fairness.Groups`` (see the module's
        docstring: ``share`` or ``home``)."""
        from limelight.exposure.fairness import NONE_GROUP, Groups

        if mode not in ("share", "home"):
            raise LimelightError(f"unknown topic-group mode {mode!r} (share, home)")
        ret = sp.csr_matrix(self.retrievals).T.tocsr()  # documents × topics
        ret.eliminate_zeros()
        n_docs, k = ret.shape
        tot = np.asarray(ret.sum(axis=1)).ravel()
        has = tot > 0
        if mode == "home":
            home = np.asarray(ret.argmax(axis=1)).ravel()
            ret = sp.csr_matrix((np.ones(int(has.sum())), (np.flatnonzero(has), home[has])),
                                shape=(n_docs, k))
            tot = has.astype(np.float64)
        a = sp.diags(np.divide(1.0, tot, out=np.zeros(n_docs), where=has)) @ ret
        names = self.group_names()
        if not has.all():
            a = sp.hstack([a, sp.csr_matrix((np.ones(int((~has).sum())), (np.flatnonzero(~has),
                          np.zeros(int((~has).sum()), dtype=np.int64))), shape=(n_docs, 1))])
            names.append(NONE_GROUP)
        a = sp.csr_matrix(a)
        a.sort_indices()
        return Groups(names, a, f"topics ({self.topics.method}, K={self.topics.k}, {mode})",
                      mode == "share" and bool((np.diff(a.indptr) > 1).any()))

    def write_groups_tsv(self, path: str | os.PathLike, overwrite: bool = False,
                         flag: str | None = None) -> None:
        """``docid<TAB>topic`` of each retrieved document's home topic (atomically; a file not
        written by limelight is refused unless ``overwrite``): ``limelight fairness --groups``."""
        from limelight._io import atomic_output_file

        a = self.groups("home").matrix.tocoo()
        keep = a.col < self.topics.k  # not (none): documents the file leaves out are (none) there
        df = pd.DataFrame({"docid": self.doc_ids.strings[a.row[keep]],
                           "topic": np.asarray(self.group_names(), dtype=object)[a.col[keep]]})
        with atomic_output_file(path, overwrite, flag) as tmp:
            df.to_csv(tmp, sep="\t", header=False, index=False)

    def to_dict(self, top: int = 5) -> dict:
        """JSON-ready: the summary and the ``top`` most unequal topics (NaN as None)."""
        def clean(x):
            if isinstance(x, float | np.floating):
                return float(x) if np.isfinite(x) else None
            return int(x) if isinstance(x, np.integer) else x

        rows = [{k: clean(v) for k, v in row.items()} for row in self.most_unequal(top).to_dict("records")]
        return {**{k: clean(v) for k, v in self.summary.items()}, "most_unequal": rows}


@numba.njit(cache=True, nogil=True)
def _topic_pass(ptr, order, d, rank, w, labels, f_table, s, n):  # pragma: no cover - numba
    """One pass over the pairs, query by query in ``order`` (the queries sorted by topic, so
    that the writes stay in one topic's row of documents at a time): s[t, d] += o_q f(k),
    n[t, d] += o_q (f(k) looked up in ``f_table``, 0 beyond its end)."""
    top = len(f_table) - 1
    for qi in order:
        t = labels[qi]
        wi = w[qi]
        for j in range(ptr[qi], ptr[qi + 1]):
            k = rank[j]
            n[t, d[j]] += wi
            if k <= top:
                s[t, d[j]] += wi * f_table[k]


def _per_topic(q, d, rank, w, labels, k: int, n_docs: int, table: np.ndarray):
    """Σ o_q f(k_qd) and Σ o_q 1[retrieved] per (topic, document): topics × documents, dense
    (one numba pass over the pairs grouped by query, a topic at a time) or CSR when larger than
    ``DENSE_CELLS`` or when the pairs are not grouped by ascending query code."""
    grouped = not len(q) or bool((q[1:] >= q[:-1]).all() and q[0] >= 0 and q[-1] < len(w))
    ptr = np.searchsorted(q, np.arange(len(w) + 1)) if grouped else None
    if k * n_docs <= DENSE_CELLS and grouped:
        s, n = np.zeros((k, n_docs)), np.zeros((k, n_docs))
        _topic_pass(ptr, np.argsort(labels, kind="stable"), d, rank, w, labels, table, s, n)
        return s, n
    t = labels[q]
    val = w[q] * table[np.minimum(rank, len(table) - 1)]
    s = sp.csr_matrix((val, (t, d)), shape=(k, n_docs))
    n = sp.csr_matrix((w[q], (t, d)), shape=(k, n_docs))
    s.sum_duplicates()
    n.sum_duplicates()
    if k * n_docs <= DENSE_CELLS:
        return s.toarray(), n.toarray()
    return s, n


def _topic_ginis(r, member, population: str) -> np.ndarray:
    """The Gini of each topic's row over its population (NaN: an empty population), by the
    collection Gini's formula (``retrievability.gini``). Documents outside a population have
    r = 0, so a row sorted ascending holds its population's N values at its end, zeros first:
    the nonzero value at 1-based position p of a row of n documents is the (N − n + p)-th of
    the population, G = Σ_p (2p − 2n + N − 1) s_p / (N Σ s) — every topic at once."""
    k, n_docs = r.shape
    if population == "collection":
        size = np.full(k, float(n_docs))
    else:
        size = np.asarray(member.sum(axis=1), dtype=np.float64).ravel()
    if sp.issparse(r):  # the stored values of each row: a loop over the K topics
        num, tot = np.zeros(k), np.zeros(k)
        for i in range(k):
            v = np.sort(r.data[r.indptr[i]:r.indptr[i + 1]])
            v = v[v > 0]
            pos = size[i] - len(v) + np.arange(1, len(v) + 1)  # their places in the population
            num[i], tot[i] = np.dot(2 * pos - size[i] - 1, v), v.sum()
    else:
        srt = np.sort(r, axis=1)
        tot = srt.sum(axis=1)
        num = 2 * (srt @ np.arange(1, n_docs + 1, dtype=np.float64)) + (size - 1 - 2 * n_docs) * tot
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.where(tot > 0, num / (size * tot), 0.0)
    return np.where(size > 0, g, np.nan)


def topic_retrievability(q: np.ndarray, d: np.ndarray, rank: np.ndarray, doc_ids: IdMap,
                         weights: np.ndarray, topics: Topics, c: int = 100, weighting: str = "log",
                         beta: float | None = None, population: str = "retrieved") -> TopicRetrievability:
    """T-Retrievability from parallel (query code, document code, 1-based rank) arrays, the
    queries' weights o_q and their ``topics`` (see the module's docstring)."""
    if population not in POPULATIONS:
        raise LimelightError(f"unknown population {population!r} ({', '.join(POPULATIONS)})")
    w = _check_weights(weights, len(weights))
    labels = np.asarray(topics.labels, dtype=np.int64)
    if labels.shape != w.shape:
        raise LimelightError(f"{len(labels):,} topic labels for {len(w):,} queries")
    k, n_docs = topics.k, len(doc_ids)
    if len(labels) and (labels.min() < 0 or labels.max() >= k):
        raise LimelightError(f"topic labels must lie in 0..{k - 1}")
    q, d, rank = np.asarray(q), np.asarray(d), np.asarray(rank)
    if len(q) and (d.min() < 0 or d.max() >= n_docs or q.min() < 0 or q.max() >= len(w)):
        raise LimelightError("a pair's document or query code is outside the collection or query set")
    top = int(rank.max()) if len(rank) else 1
    table = topic_weight_table(top, c, weighting, beta)
    s, n = _per_topic(q, d, rank, w, labels, k, n_docs, table)
    tw = np.bincount(labels, weights=w, minlength=k)
    scale = np.divide(1.0, tw, out=np.zeros(k), where=tw > 0)
    if sp.issparse(s):
        r = sp.csr_matrix(sp.diags(scale) @ s)
        member = sp.csr_matrix(n > 0)
    else:
        r = s * scale[:, None]
        member = n > 0
    ginis = _topic_ginis(r, member, population)
    table_df = pd.DataFrame({
        "topic": np.arange(k), "name": topics.names,
        "n_queries": np.bincount(labels, minlength=k), "weight": tw,
        "n_docs": np.full(k, n_docs) if population == "collection" else np.asarray(member.sum(axis=1)).ravel(),
        "gini": ginis, "r_total": np.asarray(r.sum(axis=1)).ravel()})
    table_df = table_df.sort_values(["gini", "weight", "topic"], ascending=[False, False, True],
                                    na_position="last", ignore_index=True)
    summary = _summary(ginis, tw, r, member, topics, c, weighting, beta, population, n_docs, len(w))
    return TopicRetrievability(r, member, n, topics, doc_ids, table_df, summary)


def _summary(ginis, tw, r, member, topics: Topics, c, weighting, beta, population, n_docs, n_queries) -> dict:
    """Settings and aggregates of the per-topic Ginis (finite ones only), and the collection's
    Gini under the same weighting (the K = 1 value: r(d) summed over every topic)."""
    ok = np.isfinite(ginis)
    g = ginis[ok]
    r_all = np.asarray((sp.diags(tw) @ r).sum(axis=0) if sp.issparse(r) else tw @ r).ravel()
    in_any = np.asarray(member.sum(axis=0)).ravel() > 0
    pool = r_all if population == "collection" else r_all[in_any]
    return {"topic_method": topics.method, "k": topics.k, "seed": topics.seed, **topics.info,
            "c": int(c), "weighting": weighting, "beta": beta, "log_base": "e" if weighting == "log" else None,
            "population": population, "n_docs": int(n_docs), "n_queries": int(n_queries),
            "n_topics_with_documents": int(ok.sum()),
            "gini_same_weighting": gini(pool) if len(pool) else float("nan"),
            "topic_gini_min": float(g.min()) if len(g) else float("nan"),
            "topic_gini_mean": float(g.mean()) if len(g) else float("nan"),
            "topic_gini_max": float(g.max()) if len(g) else float("nan"),
            "topic_gini_mean_weighted": float(np.average(g, weights=tw[ok])) if len(g) and tw[ok].sum() > 0
            else float("nan")}


def store_topic_retrievability(store, topics: Topics, c: int | None = None, weighting: str = "log",
                               beta: float | None = None, population: str = "retrieved") -> TopicRetrievability:
    """``topic_retrievability`` over every pair of an ``ExposureStore`` with its o_q (``c``
    defaults to min(100, the store's depth))."""
    c = min(100, store.depth) if c is None else c
    if c > store.depth:
        raise LimelightError(f"cutoff c={c} exceeds the store's depth {store.depth}")
    q, d, rank, _ = store.pair_arrays()
    res = topic_retrievability(q, d, rank, store.doc_ids, store.query_weights, topics, c,
                               weighting, beta, population)
    res.summary["store"] = str(store.path)
    return res


def sweep_topics(make_topics, ks: Sequence[int], q, d, rank, doc_ids: IdMap, weights: np.ndarray,
                 **kwargs) -> pd.DataFrame:
    """The aggregates of ``topic_retrievability`` for each K of ``ks`` (``make_topics(k)`` gives
    the topics: e.g. ``lambda k: topics_from_texts(texts, k, seed)``): one row per K."""
    rows = []
    for k in ks:  # over the values of K
        s = topic_retrievability(q, d, rank, doc_ids, weights, make_topics(int(k)), **kwargs).summary
        rows.append({"k": int(k), **{x: s[x] for x in ("n_topics_with_documents", "topic_gini_min",
                                                         "topic_gini_mean", "topic_gini_max",
                                                         "topic_gini_mean_weighted", "gini_same_weighting")}})
    return pd.DataFrame(rows)
