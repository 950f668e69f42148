"""Fair exposure for groups of documents (the providers' side) over a whole query log.

A store holds every log query's top n; a group assignment ``A`` (documents × groups, each row
summing to 1: one field value, a multi-valued field such as Debian ``tags`` split with equal
weights, or a user's TSV; documents with no value form the group ``(none)``) and optionally a
merit source (``Merit``: qrels grades, or the scores of a reference system — an assumption the
output states) give, for query q with weight o_q and browsing model μ (1-based rank k):

* **Exposure share.** E_q(g) = Σ_d A[d,g] μ(k_qd); the log's share of group g is
  s(g) = Σ_q o_q E_q(g) / Σ_q o_q E_q, with E_q = Σ_g E_q(g) the exposure q hands out.
* **Target share** t(g), each query's exposure E_q distributed by one of three rules:

  - ``uniform``: equally over the documents q retrieves (what the uniform shuffle of its
    top n gives: the ranking's position bias alone, not what it retrieves);
  - ``size``: equally over every document of the collection, i.e. in proportion to the
    group's (fractional) number of documents — retrieved or not;
  - ``merit``: in proportion to each document's merit for q (TREC Fair Ranking's target for a
    single fairness category, weighted by grade: binary qrels give the track's own).

  The gap s(g) − t(g) is negative for a deficit and positive for a surplus; half the sum of
  the gaps' absolute values is the total variation distance between the two distributions.
  The gap splits exactly over documents: document d adds A[d,g] (e_d − τ_d) / Σ_q o_q E_q,
  with e_d = Σ_q o_q μ(k_qd) and τ_d its target (``contributors``).
* **Singh & Joachims (KDD 2018)**, amortized over the log (their per-query averages replaced
  by o_q-weighted sums, as Biega et al. 2018 amortize): Exposure(G) = Σ_q o_q E_q(G) / |G|,
  U(G) = Σ_q o_q Σ_{d∈G} merit_qd / |G|, CTR(G) = Σ_q o_q Σ_{d∈G} merit_qd μ(k_qd) / |G| (|G|
  the fractional size). Per group against all documents: demographic parity
  ``dp`` = [Exposure(g)] / [Exposure(all)] (= s(g) / size share), disparate treatment
  ``dtr`` = [Exposure(g)/U(g)] / [Exposure(all)/U(all)] and disparate impact
  ``dir`` = [CTR(g)/U(g)] / [CTR(all)/U(all)]; 1 is parity. With two groups the paper's ratios
  are the first group's over the second's (``pairwise``).
* **AWRF** (attention-weighted rank fairness, TREC Fair Ranking 2021-22): per query the
  attention-weighted group distribution p_q = Σ_k a(k) A[d_k] / Σ_k a(k) (attention
  a(k) = 1 / log2(max(k, 2)), the track's) against the target distribution τ_q of the chosen
  rule; AWRF_q = 1 − JS(p_q, τ_q), JS the Jensen-Shannon divergence in nats (the track computes
  ``1 − jensenshannon(p, τ)²`` with scipy's default natural logarithm); averaged with o_q.
* **Expected exposure of groups** (Diaz et al. CIKM 2020; TREC Fair Ranking 2022 Task 2): per
  query the exposure of each group's *relevant* documents, ε_q(g) = Σ_{d: merit>0} A[d,g]
  μ(k_qd) (browsing model γ^(k−1) with γ = 0.5 by default), against the ideal policy's
  ε*_q(g) = Σ_d A[d,g] ε*_qd, ε*_qd the mean of μ over the positions of d's merit level when
  documents are ranked by merit (ties share them; non-relevant documents get nothing: the
  retrieval setting of diazf/expeval). ``ee_target="trec2022"`` is the track's variant:
  ε*_q normalized to a distribution and scaled to the exposure of a full ranking of
  ``ee_depth`` positions. EE-D = ||ε_q||², EE-R = ε_q·ε*_q, EE-L = ||ε_q − ε*_q||².

Every figure is a ratio of o_q-weighted sums (or an o_q-weighted mean) over the queries of the
log — those with merit when a merit source is given — so intervals come from one bootstrap
over queries: each resample redraws the queries with replacement (keeping o_q), and every
figure is recomputed from the same per-query matrices (one sparse product per block of
resamples, no loop over queries). Intervals are percentile intervals read from order statistics
at mirrored positions, so a ratio's interval inverts exactly when the labels swap.

``policy_curve`` is the intervention: Plackett-Luce policies over each query's stored top n at a
grid of temperatures, the largest group deficit against expected nDCG@10 and R@100.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp

from limelight.errors import LimelightError
from limelight.evaluation.discounts import Discount
from limelight.exposure.browsing import parse_browsing_model
from limelight.exposure.retrievability import _check_weights, as_labels

TARGETS = ("uniform", "size", "merit")
EE_TARGETS = ("ideal", "trec2022")
NONE_GROUP = "(none)"


# ---- browsing models ------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class TrecFairDiscount(Discount):
    """TREC Fair Ranking 2021-22's attention: μ = 1 / log2(max(rank, 2)) (1-based rank: ranks 1
    and 2 both get 1)."""

    name = "trec"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return 1.0 / np.log2(np.maximum(np.asarray(rho).astype(np.float64) + 1.0, 2.0))


def parse_discount(spec: str | Discount) -> Discount:
    """A browsing model: ``trec`` (TREC Fair Ranking's attention) or any
    ``limelight.exposure.browsing`` spelling (``rbp:γ``, ``dcg``, ``exhaustive``, ``cutoff:c``)."""
    if isinstance(spec, Discount):
        return spec
    return TrecFairDiscount() if spec.strip().lower() == "trec" else parse_browsing_model(spec)


# ---- groups -------------------------------------------------------------------------------------


@dataclass
class Groups:
    """A group assignment: ``matrix`` (documents × groups, CSR) whose rows sum to 1, the group
    ``names`` (columns) and where it came from (``source``)."""

    names: list[str]
    matrix: sp.csr_matrix
    source: str
    multi_valued: bool = False

    @property
    def n_groups(self) -> int:
        return len(self.names)

    @property
    def n_docs(self) -> int:
        return self.matrix.shape[0]

    def sizes(self) -> np.ndarray:
        """Each group's fractional number of documents (Σ_d A[d, g])."""
        return np.asarray(self.matrix.sum(axis=0)).ravel()

    @classmethod
    def from_labels(cls, labels: Sequence[Sequence[str]], source: str) -> Groups:
        """From each document's list of groups (empty: ``(none)``), equal weights within a
        document; groups sorted by name, ``(none)`` last."""
        labs = [list(dict.fromkeys(x)) or [NONE_GROUP] for x in labels]
        names = sorted({g for x in labs for g in x} - {NONE_GROUP})
        if any(x == [NONE_GROUP] for x in labs):
            names.append(NONE_GROUP)
        code = {g: i for i, g in enumerate(names)}
        lens = np.fromiter((len(x) for x in labs), dtype=np.int64, count=len(labs))
        indptr = np.zeros(len(labs) + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        cols = np.fromiter((code[g] for x in labs for g in x), dtype=np.int64, count=int(indptr[-1]))
        vals = np.repeat(1.0 / np.maximum(lens, 1), lens)
        m = sp.csr_matrix((vals, cols, indptr), shape=(len(labs), len(names)))
        m.sort_indices()
        return cls(names, m, source, bool((lens > 1).any()))

    @classmethod
    def from_values(cls, values: Sequence | np.ndarray, source: str = "values") -> Groups:
        """From one field value per document: a string, a list of strings (or a JSON-encoded
        list, as ``docs.parquet`` stores ``tags``) or nothing. Each distinct value is read once
        (a catalog's field has a few dozen)."""
        arr = values if isinstance(values, np.ndarray) and values.ndim == 1 else None
        if arr is None:  # element by element: lists stay lists, whatever their lengths
            items = values.tolist() if isinstance(values, np.ndarray) else list(values)
            arr = np.empty(len(items), dtype=object)
            for i, v in enumerate(items):
                arr[i] = v
        try:
            codes, uniq = pd.factorize(arr, use_na_sentinel=True)
        except TypeError:  # unhashable values (lists): one by one
            g = cls.from_labels([as_labels(v) for v in arr.tolist()], source)
        else:
            labels = [as_labels(u) for u in uniq.tolist()]
            if all(len(x) <= 1 for x in labels):
                g = cls._from_codes(np.asarray(codes, dtype=np.int64),
                                    [x[0] if x else "" for x in labels], source)
            else:
                labels.append([])  # code −1: no value
                g = cls.from_labels([labels[c] for c in codes.tolist()], source)
        if g.multi_valued:
            g.source += " (multi-valued: a document's groups share it equally)"
        return g

    @classmethod
    def _from_codes(cls, codes: np.ndarray, uniq: list[str], source: str) -> Groups:
        """``from_labels`` for one group per document: ``codes`` into the distinct names ``uniq``
        ("" or code −1: no value), vectorized."""
        names = sorted({u for u in uniq if u})
        at = {n: i for i, n in enumerate(names)}
        none = len(names)
        look = np.array([at.get(u, none) for u in uniq] + [none], dtype=np.int64)
        code = look[codes]  # code −1 reads the last entry: no value
        if (code == none).any():
            names.append(NONE_GROUP)
        n = len(code)
        m = sp.csr_matrix((np.ones(n), code, np.arange(n + 1)), shape=(n, len(names)))
        return cls(names, m, source, False)

    @classmethod
    def from_field(cls, store, field_name: str, index: str | os.PathLike | None = None) -> Groups:
        """The values of a document field read from the index the store was computed over
        (``index``, default the one its manifest records); an unknown field is a one-line error
        listing the fields."""
        from limelight.exposure.diff import field_values

        return cls.from_values(field_values(store, field_name, index), f"field {field_name!r}")

    @classmethod
    def from_tsv(cls, path: str | os.PathLike, doc_ids) -> Groups:
        """``docid<TAB>group`` lines (a document on several lines belongs to each group, with
        equal weights; ``#`` comments and blank lines skipped). Documents of ``doc_ids`` the file
        does not name form ``(none)``; a document the collection lacks is an error naming the
        first ones."""
        from limelight.data.formats import read_text

        docs, grps = [], []
        # one decoding path: a byte that is not UTF-8 is told with its line and column
        for lineno, line in enumerate(read_text(Path(path)).split("\n"), 1):
            s = line.rstrip("\r")
            if not s.strip() or s.lstrip().startswith("#"):
                continue
            parts = s.split("\t")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise LimelightError(f"{path}:{lineno}: expected 'docid<TAB>group', got {s[:60]!r}")
            docs.append(parts[0].strip())
            grps.append(parts[1].strip())
        if not docs:
            raise LimelightError(f"{path}: no 'docid<TAB>group' lines")
        codes = doc_ids.encode(docs, missing=-1)
        bad = codes < 0
        if bad.any():
            unknown = list(dict.fromkeys(np.asarray(docs, dtype=object)[bad].tolist()))
            raise LimelightError(f"{path}: {len(unknown):,} document(s) not in the collection "
                                 f"(first: {', '.join(map(repr, unknown[:5]))})")
        labels: list[list[str]] = [[] for _ in range(len(doc_ids))]
        for c, g in zip(codes.tolist(), grps, strict=True):
            labels[c].append(g)
        g = cls.from_labels(labels, f"file {Path(path).name}")
        if g.multi_valued:
            g.source += " (multi-valued: a document's groups share it equally)"
        return g


# ---- merit ----------------------------------------------------------------------------------------


@dataclass
class Merit:
    """merit_qd > 0 of (query, document) pairs in a store's query and document codes: ``matrix``
    (queries × documents, CSR, explicit entries > 0 only), its ``source`` and, when it is not a
    judgment, the ``assumption`` the output states."""

    matrix: sp.csr_matrix
    source: str
    assumption: str | None = None
    info: dict = field(default_factory=dict)

    def queries(self) -> np.ndarray:
        """The mask of queries with some merit."""
        return np.diff(self.matrix.indptr) > 0

    @classmethod
    def from_codes(cls, q: np.ndarray, d: np.ndarray, value: np.ndarray, n_queries: int,
                   n_docs: int, source: str, assumption: str | None = None) -> Merit:
        """From parallel arrays of codes and merit values (values ≤ 0 dropped)."""
        v = np.asarray(value, dtype=np.float64)
        keep = v > 0
        m = sp.csr_matrix((v[keep], (np.asarray(q)[keep], np.asarray(d)[keep])),
                          shape=(n_queries, n_docs))
        m.sum_duplicates()
        m.sort_indices()
        return cls(m, source, assumption)

    @classmethod
    def from_qrels(cls, qrels, store, source: str = "qrels") -> Merit:
        """Grades > 0 of ``qrels`` (a ``Qrels``) as merit, matched to ``store``'s queries by id
        and to its documents by id. A judged document the store's collection lacks (qrels of
        another collection) or no judged query among the store's is a one-line error."""
        judged = qrels.docids.strings[:qrels.n_own_docs]
        used = np.unique(qrels.d)
        dmap = store.doc_ids.encode(qrels.docids.strings[used].tolist(), missing=-1)
        if (dmap < 0).any():
            miss = qrels.docids.strings[used][dmap < 0].tolist()
            raise LimelightError(f"{source}: {len(miss):,} of the {len(used):,} judged documents are "
                                 f"not in the store's collection (first: {', '.join(map(repr, miss[:3]))}): "
                                 "qrels of another collection?")
        qmap = store.queries.ids.encode(qrels.qids.strings.tolist(), missing=-1)
        rel = qrels.rel > 0
        hit = rel & (qmap[qrels.q] >= 0)
        if not hit.any():
            raise LimelightError(f"{source}: none of its {len(qrels.qids):,} judged queries is in the "
                                 f"store's query set ({len(store.queries):,} queries, e.g. "
                                 f"{store.queries.ids[0]!r}): no overlap")
        full = np.full(max(len(qrels.docids), 1), -1, dtype=np.int64)
        full[used] = dmap
        m = cls.from_codes(qmap[qrels.q[hit]], full[qrels.d[hit]], qrels.rel[hit],
                           len(store.queries), len(store.doc_ids), source)
        m.info = {"judged_queries": int(len(qrels.qids)),
                  "matched_queries": int(m.queries().sum()), "judged_documents": len(judged)}
        return m

    @classmethod
    def from_reference(cls, reference, store, name: str | None = None) -> Merit:
        """The scores of a reference system's store over the same collection (``max(score, 0)``,
        0 outside its top n) as merit: an assumption, stated as such. A reference over another
        collection, or sharing no query with ``store``, is a one-line error."""
        name = name or str(reference.path)
        if reference.manifest.get("documents") != store.manifest.get("documents") or \
                len(reference.doc_ids) != len(store.doc_ids):
            raise LimelightError(f"reference store {name} is over another collection "
                                 f"({len(reference.doc_ids):,} documents vs {len(store.doc_ids):,})")
        same = reference.manifest.get("queries") == store.manifest.get("queries")
        qmap = np.arange(len(store.queries)) if same else store.queries.ids.encode(
            reference.queries.ids.strings.tolist(), missing=-1)
        if not (qmap >= 0).any():
            raise LimelightError(f"reference store {name} shares no query with {store.path}: no overlap")
        rq, rd, _, rs = reference.pair_arrays()
        keep = (qmap[rq] >= 0) & (rs > 0)
        if not keep.any():
            raise LimelightError(f"reference store {name}: no positive score on the store's queries: no overlap")
        qk = qmap[rq[keep]]
        order = None if same or not len(qk) or (np.diff(qk) >= 0).all() else np.argsort(qk, kind="stable")
        sel = (lambda a: a[keep] if order is None else a[keep][order])  # noqa: E731
        # the reference's rows stay in its rank order (scores non-increasing): its ideal
        # exposure needs no sort (``ideal_exposure``)
        mat = pair_matrix(qk if order is None else qk[order], sel(rd), sel(rs).astype(np.float64),
                          len(store.queries), len(store.doc_ids))
        m = cls(mat, f"reference:{name}",
                f"merit is assumed, not judged: a document's merit for a query is the score of the "
                f"reference system {name} (max(score, 0); 0 outside its top {reference.depth})")
        m.info = {"reference_queries": int(len(reference.queries)),
                  "matched_queries": int(m.queries().sum())}
        return m


# ---- per-query building blocks --------------------------------------------------------------------


def pair_matrix(q: np.ndarray, d: np.ndarray, values: np.ndarray, n_queries: int,
                n_docs: int) -> sp.csr_matrix:
    """Queries × documents CSR of per-pair ``values`` (pairs grouped by ascending query code, one
    pair per (query, document)); no copy of the pairs' order is sorted."""
    q = np.asarray(q)
    if len(q) and (np.diff(q) < 0).any():
        raise LimelightError("exposure pairs must be grouped by query (ascending codes)")
    indptr = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=n_queries), out=indptr[1:])
    return sp.csr_matrix((np.asarray(values, dtype=np.float64), np.asarray(d), indptr),
                         shape=(n_queries, n_docs))


def _rows(m: sp.spmatrix) -> np.ndarray:
    return np.asarray(m.sum(axis=1)).ravel()


def _row_scale(m: sp.csr_matrix, s: np.ndarray) -> sp.csr_matrix:
    """diag(s) @ m without a product: each row's stored values times s[row]."""
    m = m.tocsr(copy=True)
    m.data *= np.repeat(s, np.diff(m.indptr))
    return m


def ideal_exposure(merit: sp.csr_matrix, discount: Discount, block: int = 1 << 20) -> sp.csr_matrix:
    """The ideal policy's expected exposure ε*_qd of every document with merit (same pattern as
    ``merit``): per query, documents ranked by merit, descending; the ``m`` documents of one merit
    level at 0-based positions ``b..b+m−1`` share their exposure, ε* = Σ_{i=b}^{b+m−1} μ(i) / m
    (for γ^i: (γ^b − γ^(b+m)) / (m (1 − γ)), Diaz et al. 2020 and diazf/expeval). Documents
    without merit get nothing (the retrieval setting). Computed over blocks of whole queries of
    about ``block`` stored values each (each query's figures alone: the same for any block), so
    that the temporaries stay small: over the Debian demo's 11 M reference pairs at once they
    took 1.1 GB (the groups page's merit target, the demo's peak, issue 53)."""
    m = merit.tocsr()
    nnz = m.nnz
    if not nnz:
        return m.copy()
    counts = np.diff(m.indptr)
    cum = np.concatenate([[0.0], np.cumsum(discount.weights(np.arange(1, int(counts.max()) + 1)))])
    out = np.empty(nnz)
    r0, nrows = 0, m.shape[0]
    while r0 < nrows:
        r1 = max(r0 + 1, int(np.searchsorted(m.indptr, m.indptr[r0] + block, side="right")) - 1)
        r1 = min(r1, nrows)
        lo, hi = int(m.indptr[r0]), int(m.indptr[r1])
        if hi > lo:
            out[lo:hi] = _ideal_rows(m.indptr, m.data[lo:hi], counts, r0, r1, lo, cum)
        r0 = r1
    return sp.csr_matrix((out, m.indices.copy(), m.indptr.copy()), shape=m.shape)


def _ideal_rows(indptr: np.ndarray, data: np.ndarray, counts: np.ndarray, r0: int, r1: int,
                lo: int, cum: np.ndarray) -> np.ndarray:
    """``ideal_exposure`` of rows ``r0..r1−1`` (their stored values ``data``, from ``lo``)."""
    q = np.repeat(np.arange(r0, r1), counts[r0:r1])
    step = np.diff(data)
    if (step[q[1:] == q[:-1]] <= 0).all():  # every row already by merit, descending
        order = None
        qs, vs = q, data
    else:
        order = np.lexsort((-data, q))
        qs, vs = q[order], data[order]
    del q, step
    pos = np.arange(lo, lo + len(data)) - indptr[qs]
    new = np.ones(len(data), dtype=bool)
    new[1:] = (qs[1:] != qs[:-1]) | (vs[1:] != vs[:-1])
    del qs, vs
    run = np.cumsum(new) - 1
    start = pos[new]
    del pos, new
    size = np.bincount(run)
    per_run = (cum[start + size] - cum[start]) / size
    if order is None:
        return per_run[run]
    out = np.empty(len(data))
    out[order] = per_run[run]
    return out


@numba.njit(cache=True, nogil=True, parallel=True)
def _group_sums_kernel(ptr, d, key, tables, a_ptr, a_idx, a_val, n_groups, n_chunks):  # pragma: no cover - numba
    """Σ_d A[d,g] tables[v, key_qd] per (query, group) for every row v of ``tables``, as CSR
    (``indptr``, ascending ``cols``, values ``out[:, v]``). Two passes over the pairs, each split
    into ``n_chunks`` blocks of queries run in parallel: the number of groups of each query, then
    its groups' sums (each group given a slot on first sight; the row's slots are put in
    ascending order by insertion at the end of the row: a query has a few dozen groups)."""
    nq = len(ptr) - 1
    nv = tables.shape[0]
    bounds = np.linspace(0, nq, n_chunks + 1).astype(np.int64)
    counts = np.zeros(nq + 1, np.int64)
    for c in numba.prange(n_chunks):
        mark = np.full(n_groups, -1, np.int64)
        for i in range(bounds[c], bounds[c + 1]):
            n = 0
            for j in range(ptr[i], ptr[i + 1]):
                for t in range(a_ptr[d[j]], a_ptr[d[j] + 1]):
                    if mark[a_idx[t]] != i:
                        mark[a_idx[t]] = i
                        n += 1
            counts[i + 1] = n
    indptr = np.cumsum(counts)
    cols = np.empty(indptr[nq], np.int64)
    out = np.empty((indptr[nq], nv))
    for c in numba.prange(n_chunks):
        mark = np.full(n_groups, -1, np.int64)
        slot = np.zeros(n_groups, np.int64)
        row = np.empty(nv)
        for i in range(bounds[c], bounds[c + 1]):
            lo = indptr[i]
            n = lo
            for j in range(ptr[i], ptr[i + 1]):
                for t in range(a_ptr[d[j]], a_ptr[d[j] + 1]):
                    g = a_idx[t]
                    if mark[g] != i:
                        mark[g] = i
                        slot[g] = n
                        cols[n] = g
                        for v in range(nv):
                            out[n, v] = 0.0
                        n += 1
                    s = slot[g]
                    for v in range(nv):
                        out[s, v] += a_val[t] * tables[v, key[j]]
            for k in range(lo + 1, n):  # the row's groups in ascending order
                g = cols[k]
                if cols[k - 1] < g:
                    continue
                for v in range(nv):
                    row[v] = out[k, v]
                m = k
                while m > lo and cols[m - 1] > g:
                    cols[m] = cols[m - 1]
                    for v in range(nv):
                        out[m, v] = out[m - 1, v]
                    m -= 1
                cols[m] = g
                for v in range(nv):
                    out[m, v] = row[v]
    return indptr, cols, out


def _group_sums(q: np.ndarray | None, d: np.ndarray, key: np.ndarray, tables: np.ndarray,
                groups: Groups, n_queries: int, ptr: np.ndarray | None = None) -> list[sp.csr_matrix]:
    """Σ_d A[d,g] v_qd per (query, group), one queries × groups CSR matrix (sorted indices) per
    row of ``tables``, the pair's value v_qd = tables[v, key_qd]: position weights looked up by
    rank (``key`` the ranks) or per-pair values (``key`` 0..P−1). Pairs grouped by ascending
    query code ``q`` (or given by their offsets ``ptr``); no loop over queries in Python."""
    if ptr is None:
        ptr = np.searchsorted(q, np.arange(n_queries + 1))
    indptr, cols, out = _group_sums_kernel(
        np.asarray(ptr, dtype=np.int64), np.asarray(d), np.asarray(key),
        np.ascontiguousarray(np.atleast_2d(tables), dtype=np.float64), *_a_arrays(groups),
        groups.n_groups, max(1, min(64, n_queries // 256)))
    return [sp.csr_matrix((np.ascontiguousarray(out[:, v]), cols, indptr),
                          shape=(n_queries, groups.n_groups)) for v in range(out.shape[1])]


@numba.njit(cache=True, nogil=True)
def _query_ptr(q, n_queries):  # pragma: no cover - numba
    """Where each query's pairs begin (``n_queries + 1`` offsets) and whether the pairs are
    grouped by ascending query code within ``0..n_queries − 1`` (one pass)."""
    ptr = np.zeros(n_queries + 1, np.int64)
    prev = 0
    for j in range(len(q)):
        x = q[j]
        if x < prev or x >= n_queries:
            return ptr, False
        ptr[x + 1] += 1
        prev = x
    for i in range(n_queries):
        ptr[i + 1] += ptr[i]
    return ptr, True


@numba.njit(cache=True, nogil=True, inline="always")
def _touch(touched, mark, n, g, i):  # pragma: no cover - numba
    """Group ``g`` seen in query ``i``: it enters ``touched`` (of ``n`` so far) on its first
    pair (branch-free: the slot is written every time, kept only when new). Returns the new
    ``n``."""
    touched[n] = g
    n += mark[g] != i
    mark[g] = i
    return n


@numba.njit(cache=True, nogil=True, parallel=True)
def _query_pass(ptr, d, key, mu, att, w, uniform, t_dense, t_ptr, t_d, t_key, t_table, t_via_a,
                a_ptr, a_idx, a_val, n_groups, n_docs, n_chunks):  # pragma: no cover - numba
    """One pass over the pairs, query by query (pair j of query i at position ``key[j]``):

    * per document, e[d] = Σ_i w_i mu[key] and, when ``uniform``, u[d] = Σ_i w_i E_i / n_i (query
      i's exposure spread equally over its n_i documents);
    * per query, E_i = Σ_j mu[key_j] and n_i;
    * per query, AWRF_i = 1 − JS(p_i, τ_i): p_i the attention Σ_j att[key_j] A[d_j] normalized,
      τ_i ``t_dense`` (one distribution for every query, when not empty) or the query's target
      pairs (``t_ptr``/``t_d``, values ``t_table[t_key]``, through A when ``t_via_a``, else group
      codes) normalized; NaN where p_i or τ_i is empty. JS in nats over a scratch row of groups
      (only the groups the query touches are visited).

    ``n_chunks`` blocks of queries (of about equal numbers of pairs) run in parallel, each adding
    into its own row of document sums, added up in block order at the end: the figures depend on
    ``n_chunks``, never on the number of threads. When every document has exactly one group
    (weight 1), the loop reads its group code without a loop over the row of A. Long because
    it is one numba kernel: splitting the pass would read the pairs twice, the cost the
    single pass exists to avoid."""
    single = True
    for i in range(len(a_ptr) - 1):
        if a_ptr[i + 1] - a_ptr[i] != 1 or a_val[a_ptr[i]] != 1.0:
            single = False
            break
    nq = len(ptr) - 1
    e_c = np.zeros((n_chunks, n_docs))
    u_c = np.zeros((n_chunks, n_docs if uniform else 0))
    etot = np.zeros(nq)
    n_ret = np.zeros(nq)
    out = np.full(nq, np.nan)
    dense = len(t_dense) > 0
    half = np.zeros(n_groups)  # (τ/2) log(τ/2) of the dense target
    ht = 0.0
    base = 0.0
    if dense:
        for g in range(n_groups):
            x = t_dense[g]
            if x > 0:
                ht += x * np.log(x)
                half[g] = 0.5 * x * np.log(0.5 * x)
                base += half[g]
    bounds = np.searchsorted(ptr, np.linspace(0, ptr[nq], n_chunks + 1))
    bounds[0], bounds[n_chunks] = 0, nq
    for c in numba.prange(n_chunks):
        e = e_c[c]
        u = u_c[c]
        p = np.zeros(n_groups)
        t = np.zeros(n_groups)
        mark = np.full(n_groups, -1, np.int64)
        touched = np.empty(n_groups + 1, np.int64)
        for i in range(bounds[c], bounds[c + 1]):
            wi = w[i]
            n = 0
            tot = 0.0
            ei = 0.0
            # a group enters ``touched`` on its first pair (``_touch``)
            if single:
                for j in range(ptr[i], ptr[i + 1]):
                    k = key[j]
                    dj = d[j]
                    m = mu[k]
                    ei += m
                    e[dj] += wi * m
                    v = att[k]
                    g = a_idx[dj]
                    n = _touch(touched, mark, n, g, i)
                    p[g] += v
                    tot += v
            else:
                for j in range(ptr[i], ptr[i + 1]):
                    k = key[j]
                    ei += mu[k]
                    e[d[j]] += wi * mu[k]
                    v = att[k]
                    for s in range(a_ptr[d[j]], a_ptr[d[j] + 1]):
                        g = a_idx[s]
                        n = _touch(touched, mark, n, g, i)
                        p[g] += a_val[s] * v
                        tot += a_val[s] * v
            nr = ptr[i + 1] - ptr[i]
            etot[i] = ei
            n_ret[i] = nr
            if uniform and nr > 0:
                per = wi * ei / nr
                for j in range(ptr[i], ptr[i + 1]):
                    u[d[j]] += per
            ttot = 0.0
            if not dense:
                for j in range(t_ptr[i], t_ptr[i + 1]):
                    v = t_table[t_key[j]]
                    if t_via_a and not single:
                        for s in range(a_ptr[t_d[j]], a_ptr[t_d[j] + 1]):
                            g = a_idx[s]
                            n = _touch(touched, mark, n, g, i)
                            t[g] += a_val[s] * v
                            ttot += a_val[s] * v
                    else:
                        g = a_idx[t_d[j]] if t_via_a else t_d[j]
                        n = _touch(touched, mark, n, g, i)
                        t[g] += v
                        ttot += v
            hp = 0.0
            hq = 0.0
            mix = 0.0
            for m in range(n):
                g = touched[m]
                x = p[g] / tot if tot > 0.0 else 0.0
                y = t_dense[g] if dense else (t[g] / ttot if ttot > 0.0 else 0.0)
                p[g] = 0.0
                t[g] = 0.0
                if x > 0.0:
                    hp += x * np.log(x)
                if not dense and y > 0.0:
                    hq += y * np.log(y)
                z = 0.5 * (x + y)
                if z > 0.0:
                    mix += z * np.log(z)
                if dense:
                    mix -= half[g]
            if tot <= 0.0 or (not dense and ttot <= 0.0):
                continue
            js = 0.5 * (hp + ht) - (base + mix) if dense else 0.5 * (hp + hq) - mix
            out[i] = 1.0 - max(js, 0.0)
    e = np.zeros(n_docs)
    u = np.zeros(n_docs if uniform else 0)
    for c in range(n_chunks):
        e += e_c[c]
        u += u_c[c]
    return e, u, etot, n_ret, out


def _n_chunks(n_pairs: int, n_docs: int) -> int:
    """Blocks of queries for ``_query_pass``: one per million pairs, at most 8, and at most
    2^24 document sums in all (a fixed number: the figures never depend on the threads)."""
    return int(max(1, min(8, n_pairs // 1_000_000, (1 << 24) // max(n_docs, 1))))


def _a_arrays(groups: Groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = groups.matrix
    return a.indptr.astype(np.int64), a.indices.astype(np.int64), a.data.astype(np.float64)


_NO_TARGET = (np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), False)


def awrf_rows(attention: sp.csr_matrix, groups: Groups,
              target: sp.csr_matrix | np.ndarray) -> np.ndarray:
    """AWRF_q = 1 − JS(p_q, τ_q) per query: p_q the attention-weighted group distribution of the
    query's documents (``attention`` queries × documents), τ_q the rows of ``target`` (queries ×
    groups, or one distribution for all); NaN for a query with no attention or no target. The
    same pass ``group_fairness`` makes over a store's pairs."""
    att = attention.tocsr()
    nq = att.shape[0]
    if isinstance(target, np.ndarray):
        t_dense = np.asarray(target, dtype=np.float64) / float(np.sum(target))
        tgt = _NO_TARGET
    else:
        tm = target.tocsr()
        if tm.shape != (nq, groups.n_groups):
            raise LimelightError(f"the target is {tm.shape}, not queries × groups {(nq, groups.n_groups)}")
        t_dense = np.zeros(0)
        tgt = (tm.indptr.astype(np.int64), tm.indices.astype(np.int64), np.arange(tm.nnz),
               tm.data.astype(np.float64), False)
    key = np.arange(att.nnz)
    data = att.data.astype(np.float64)
    return _query_pass(att.indptr.astype(np.int64), att.indices.astype(np.int64), key, data, data,
                       np.zeros(nq), False, t_dense, *tgt, *_a_arrays(groups), groups.n_groups,
                       groups.n_docs, _n_chunks(att.nnz, groups.n_docs))[4]


def group_ee_rows(exposure: sp.csr_matrix, merit: sp.csr_matrix, groups: Groups,
                  discount: Discount, target: str = "ideal",
                  depth: int | None = None) -> dict[str, np.ndarray]:
    """Per query EE-D, EE-R and EE-L of group exposure (see the module's docstring).

    ``exposure``: queries × documents expected exposures under ``discount`` (a deterministic
    ranking: μ(rank)); only documents with merit count (TREC 2022 and expeval's group mode).
    ``target``: ``ideal`` (the ideal policy's group exposure) or ``trec2022`` (its distribution
    scaled to the exposure of ``depth`` positions)."""
    rel = merit.copy()
    rel.data = np.ones_like(rel.data)
    eps = (exposure.tocsr().multiply(rel).tocsr() @ groups.matrix).tocsr()
    star = (ideal_exposure(merit, discount) @ groups.matrix).tocsr()
    return _ee_groups(eps, star, discount, target, depth)


def _ee_groups(eps: sp.csr_matrix, star: sp.csr_matrix, discount: Discount, target: str,
               depth: int | None) -> dict[str, np.ndarray]:
    """``group_ee_rows`` from the group exposures ε and the ideal ε* (queries × groups)."""
    if target not in EE_TARGETS:
        raise LimelightError(f"unknown expected-exposure target {target!r} ({', '.join(EE_TARGETS)})")
    if target == "trec2022":
        if depth is None or depth < 1:
            raise LimelightError("the trec2022 target needs the ranking depth (positions of a full ranking)")
        tot = _rows(star)
        avail = float(discount.weights(np.arange(1, depth + 1)).sum())
        star = _row_scale(star, np.divide(avail, tot, out=np.zeros_like(tot), where=tot > 0))
    diff = (eps - star).tocsr()
    return {"EE-D": _rows(eps.multiply(eps)), "EE-R": _rows(eps.multiply(star)),
            "EE-L": _rows(diff.multiply(diff))}


@numba.njit(cache=True, nogil=True)
def _gather_by_query(a_ptr, a_d, a_val, b_ptr, b_d, n_docs):  # pragma: no cover - numba
    """The value ``a_val`` of each ``b`` pair's (query, document) among the ``a`` pairs (0 where
    ``a`` has none): both grouped by query (``*_ptr``); per query, ``a``'s values are written
    into a scratch array over the documents, read at ``b``'s, then cleared. The store's rank of
    each merit pair, or the merit of each store pair."""
    out = np.zeros(len(b_d), a_val.dtype)
    scratch = np.zeros(n_docs, a_val.dtype)
    for i in range(len(a_ptr) - 1):
        for j in range(a_ptr[i], a_ptr[i + 1]):
            scratch[a_d[j]] = a_val[j]
        for j in range(b_ptr[i], b_ptr[i + 1]):
            out[j] = scratch[b_d[j]]
        for j in range(a_ptr[i], a_ptr[i + 1]):
            scratch[a_d[j]] = 0
    return out


def _merit_at(ptr: np.ndarray, d: np.ndarray, mm, n_docs: int) -> np.ndarray:
    """The merit (``mm``, a query × document CSR matrix) of each store pair (documents ``d``
    grouped by query by ``ptr``), 0 where the pair has none."""
    return _gather_by_query(mm.indptr.astype(np.int64), mm.indices.astype(np.int64),
                            np.asarray(mm.data, np.float64), ptr, np.asarray(d, np.int64), n_docs)


# ---- the report -----------------------------------------------------------------------------------


@dataclass
class GroupFairness:
    """Fair exposure for groups over a store's log: ``groups`` (one row per group: size, exposure
    and target shares, their gap, Singh & Joachims' ratios, each with ``_lo``/``_hi`` interval
    columns), ``summary`` (settings, queries used, total variation distance, AWRF, group
    EE-D/EE-R/EE-L, pairwise ratios for two groups, assumptions) and ``contributors`` (the
    documents that contribute most to each group's deficit or surplus)."""

    groups: pd.DataFrame
    summary: dict
    contributors: pd.DataFrame

    def to_dict(self) -> dict:
        """JSON-ready (NaN becomes None)."""
        def clean(x):
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list | tuple):
                return [clean(v) for v in x]
            if isinstance(x, float | np.floating):
                return None if not np.isfinite(x) else float(x)
            if isinstance(x, np.integer):
                return int(x)
            return x
        return clean({"summary": self.summary, "groups": self.groups.to_dict("records"),
                      "contributors": self.contributors.to_dict("records")})

    def table(self) -> pd.DataFrame:
        """One tidy row per group: the columns of ``groups`` (figures and their ``_lo``/``_hi``
        intervals), ``direction`` (``deficit`` or ``surplus``), and the documents carrying its
        gap in that direction, most first: ``top_docids`` and ``top_contributions`` (lists, share
        points, summing with every other document of the group to its gap). ``attrs["summary"]``
        holds the summary (settings, scalar figures, assumptions)."""
        df = self.groups.copy()
        df["direction"] = np.where(df["gap"].to_numpy() < 0, "deficit", "surplus")
        c = self.contributors
        by: dict[str, tuple[list, list]] = {}
        if len(c):
            for name, part in c.sort_values(["group", "rank"]).groupby("group", sort=False):
                by[str(name)] = (part["docid"].tolist(), part["contribution"].tolist())
        df["top_docids"] = [by.get(str(g), ([], []))[0] for g in df["group"]]
        df["top_contributions"] = [by.get(str(g), ([], []))[1] for g in df["group"]]
        df.attrs["summary"] = self.summary
        return df

    def group(self, name: str) -> dict:
        """The row of group ``name``."""
        rows = self.groups[self.groups["group"] == name]
        if not len(rows):
            raise LimelightError(f"no group {name!r} (groups: {', '.join(self.groups['group'][:10])})")
        return rows.iloc[0].to_dict()


@dataclass
class _Parts:
    """What every figure is computed from: per group, the o_q-weighted sums over the queries of
    each linear block (``totals``: exposure E, target T, merit U, merit × exposure C); per query,
    the non-linear figures (``scalars``: AWRF, group EE); and, for a bootstrap, the per-query
    blocks themselves (``blocks``, queries × groups). ``e_doc``/``tu_doc``: the weighted exposure
    of each document and, for the uniform target, its weighted target (the contributors')."""

    totals: dict[str, np.ndarray]
    blocks: dict[str, sp.csr_matrix]
    scalars: dict[str, np.ndarray]
    size_share: np.ndarray
    etot: np.ndarray
    n_ret: np.ndarray
    e_doc: np.ndarray
    tu_doc: np.ndarray


def _parts(d, rank, ptr, w, groups: Groups, merit: Merit | None, target: str, disc: Discount,
           awrf_disc: Discount, ee_disc: Discount, ee_target: str, ee_depth: int | None,
           per_query: bool) -> _Parts:
    """One pass over the store's pairs (``_query_pass``: each document's weighted exposure, each
    query's exposure and AWRF) and one over the merit pairs (U, C, the merit target and group
    EE per query); the store's per-query group blocks only when ``per_query`` (a bootstrap)."""
    nq = len(ptr) - 1
    top = int(rank.max()) if len(rank) else 1
    table = lambda dsc: np.concatenate([[0.0], dsc.weights(np.arange(1, top + 1))])  # noqa: E731
    size_share = groups.sizes() / groups.n_docs
    mm = merit.matrix if merit is not None else None
    t_dense, tgt = np.zeros(0), _NO_TARGET
    if target == "size":
        t_dense = size_share
    elif target == "uniform":  # each query's documents, equally
        tgt = (ptr, d, rank, np.ones(top + 1), True)
    else:  # each query's documents with merit, by merit
        tgt = (mm.indptr.astype(np.int64), mm.indices.astype(np.int64), np.arange(mm.nnz),  # type: ignore[union-attr]
               mm.data.astype(np.float64), True)  # type: ignore[union-attr]
    e_doc, tu_doc, etot, n_ret, aw = _query_pass(
        ptr, d, rank, table(disc), table(awrf_disc), w, target == "uniform", t_dense, *tgt,
        *_a_arrays(groups), groups.n_groups, groups.n_docs, _n_chunks(len(d), groups.n_docs))
    a = groups.matrix
    totals = {"E": a.T @ e_doc}
    blocks: dict[str, sp.csr_matrix] = {}
    if per_query:
        mats = _group_sums(None, d, rank, np.stack([table(disc), np.ones(top + 1)]), groups, nq, ptr)
        blocks["E"] = mats[0]
        if target == "uniform":  # E_q spread equally over the query's documents
            blocks["T"] = _row_scale(mats[1], np.divide(etot, n_ret, out=np.zeros_like(etot),
                                                        where=n_ret > 0))
    if target == "uniform":
        totals["T"] = a.T @ tu_doc
    scalars: dict[str, np.ndarray] = {"awrf": np.nan_to_num(aw, nan=0.0),
                                      "awrf_n": np.isfinite(aw).astype(np.float64)}
    if mm is not None:
        # the five per-pair values, each written into its row of one array (not built side by
        # side and stacked: over the Debian demo's 11 M merit pairs each is 92 MB)
        vals = np.empty((5, mm.nnz))
        vals[0] = mm.data
        # each merit pair's rank in the store (0: not retrieved), in the ranks' own integer type
        mrank = _gather_by_query(ptr, d, rank if rank.dtype.kind in "iu" else rank.astype(np.int64),
                                 mm.indptr.astype(np.int64),
                                 mm.indices.astype(np.int64), groups.n_docs)
        np.take(table(disc), mrank, out=vals[1])
        vals[1] *= mm.data
        np.take(table(ee_disc), mrank, out=vals[2])
        del mrank
        vals[3] = ideal_exposure(mm, ee_disc).data
        mtot = _rows(mm)
        per = np.divide(etot, mtot, out=np.zeros_like(etot), where=mtot > 0)
        vals[4] = np.repeat(per, np.diff(mm.indptr))
        vals[4] *= mm.data
        u, c, eps, star, tm = _group_sums(None, mm.indices, np.arange(mm.nnz), vals, groups, nq,
                                          mm.indptr)
        del vals
        blocks["U"], blocks["C"] = u, c
        if target == "merit":  # E_q spread over the query's documents by merit
            blocks["T"] = tm
        for k in ("U", "C") + (("T",) if target == "merit" else ()):
            totals[k] = blocks[k].T @ w
        scalars.update(_ee_groups(eps, star, ee_disc, ee_target, ee_depth))
    return _Parts(totals, blocks, scalars, size_share, etot, n_ret, e_doc, tu_doc)


_BLOCKS = ("E", "T", "U", "C")


def _layout(parts: _Parts) -> dict[str, slice]:
    """Where each block's groups and each scalar sit in the vector of weighted sums."""
    where, at = {}, 0
    for k in _BLOCKS:
        if k in parts.totals:
            n = len(parts.totals[k])
            where[k] = slice(at, at + n)
            at += n
    for i, k in enumerate(parts.scalars):
        where[k] = slice(at + i, at + i + 1)
    return where


def _point_sums(parts: _Parts, w: np.ndarray) -> np.ndarray:
    """The weighted sums every point figure is read from (F × 1, in ``_layout``'s order)."""
    vals = [parts.totals[k] for k in _BLOCKS if k in parts.totals]
    vals.append(np.array([float(np.dot(w, v)) for v in parts.scalars.values()]))
    return np.concatenate(vals)[:, None]


def _per_query(parts: _Parts, pop: np.ndarray) -> sp.csr_matrix:
    """The per-query values of the queries ``pop`` side by side (F × queries, ``_layout``'s
    order of rows): what a bootstrap re-weights."""
    cols = [parts.blocks[k][pop] for k in _BLOCKS if k in parts.totals]
    cols.append(sp.csr_matrix(np.column_stack([v[pop] for v in parts.scalars.values()])))
    return sp.hstack(cols, format="csr").T.tocsr()


def _stats(s: np.ndarray, where: dict[str, slice], size_share: np.ndarray, pop: np.ndarray
           ) -> dict[str, np.ndarray]:
    """Every figure from the weighted sums ``s`` (F × b: one column per weighting of the
    queries); ``pop`` the summed query weights (b,)."""
    e = s[where["E"]]
    etot = e.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = e / etot
        tshare = s[where["T"]] / s[where["T"]].sum(axis=0) if "T" in where else \
            np.broadcast_to(size_share[:, None], e.shape)
        out = {"exposure_share": share, "target_share": tshare, "gap": share - tshare,
               "ratio": share / tshare, "dp": share / size_share[:, None]}
        out["tvd"] = 0.5 * np.abs(out["gap"]).sum(axis=0)
        if "U" in where:
            u, c = s[where["U"]], s[where["C"]]
            out["dtr"] = (e / u) / (etot / u.sum(axis=0))
            out["dir"] = (c / u) / (c.sum(axis=0) / u.sum(axis=0))
            for k in ("EE-D", "EE-R", "EE-L"):
                out[k] = s[where[k]][0] / pop
        out["awrf"] = s[where["awrf"]][0] / s[where["awrf_n"]][0]
    return out


def _bootstrap(zt: sp.csr_matrix, w: np.ndarray, where, size_share, n_boot: int, seed: int,
               chunk: int = 50) -> dict[str, np.ndarray]:
    """``_stats`` on ``n_boot`` resamples of the queries (with replacement, o_q kept): the
    resample counts of a block of resamples drawn at once, one sparse product per block."""
    rng = np.random.default_rng(seed)
    nq = len(w)
    out: dict[str, list] = {}
    for s0 in range(0, n_boot, chunk):
        b = min(chunk, n_boot - s0)
        idx = rng.integers(0, nq, size=(b, nq)) + (np.arange(b) * nq)[:, None]
        counts = np.bincount(idx.ravel(), minlength=b * nq).reshape(b, nq)
        wb = counts.T * w[:, None]
        st = _stats(np.asarray(zt @ wb), where, size_share, wb.sum(axis=0))
        for k, v in st.items():
            out.setdefault(k, []).append(v)
    return {k: np.concatenate(v, axis=-1) for k, v in out.items()}


def _interval(samples: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval along the last axis from order statistics (the lower one at α/2, the
    higher one at 1 − α/2: mirror positions, so the interval of 1/x or −x is exactly the mirrored
    interval of x); NaN-aware, NaN where every sample is NaN."""
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(samples).any(axis=-1)
        fill = np.where(np.isfinite(samples), samples, np.nan)
        lo = np.full(samples.shape[:-1], np.nan)
        hi = np.full(samples.shape[:-1], np.nan)
        if ok.any():
            lo[ok] = np.nanquantile(fill[ok], alpha / 2, axis=-1, method="lower")
            hi[ok] = np.nanquantile(fill[ok], 1 - alpha / 2, axis=-1, method="higher")
    return lo, hi


def _contributors(w, parts: _Parts, groups: Groups, merit: Merit | None, target: str,
                  gap: np.ndarray, doc_ids, top: int) -> pd.DataFrame:
    """Per group, the ``top`` documents whose exposure minus target (A[d,g] (e_d − τ_d), in
    share points) adds most to the group's gap, in the gap's direction; the sums over every
    document of a group equal its gap exactly."""
    n = groups.n_docs
    e, tu = parts.e_doc, parts.tu_doc
    total = float(e.sum())
    if target == "uniform":
        tau = tu
    elif target == "size":
        tau = np.full(n, total / n)
    else:
        mm = merit.matrix  # type: ignore[union-attr]
        mtot = _rows(mm)
        scale = np.divide(w * parts.etot, mtot, out=np.zeros_like(mtot), where=mtot > 0)
        tau = np.asarray(_row_scale(mm, scale).sum(axis=0)).ravel()
    delta = (e - tau) / total if total > 0 else np.zeros(n)
    a = groups.matrix.tocsc()
    rows = []
    for g, name in enumerate(groups.names):
        lo, hi = a.indptr[g], a.indptr[g + 1]
        docs = a.indices[lo:hi]
        contrib = a.data[lo:hi] * delta[docs]
        sign = -1.0 if gap[g] < 0 else 1.0
        k = min(top, len(docs))
        if k == 0:
            continue
        pick = np.argpartition(-sign * contrib, k - 1)[:k] if k < len(docs) else np.arange(len(docs))
        pick = pick[np.lexsort((docs[pick], -sign * contrib[pick]))]
        for i, j in enumerate(pick.tolist(), 1):
            rows.append({"group": name, "direction": "deficit" if sign < 0 else "surplus",
                         "rank": i, "docid": str(doc_ids[int(docs[j])]),
                         "contribution": float(contrib[j]),
                         "fraction_of_gap": float(contrib[j] / gap[g]) if gap[g] != 0 else np.nan})
    return pd.DataFrame(rows, columns=["group", "direction", "rank", "docid", "contribution",
                                       "fraction_of_gap"])


# ---- the measures over a log ----------------------------------------------------------------------


def _check_settings(target: str, merit: Merit | None, n_boot: int, alpha: float, top: int) -> None:
    if target not in TARGETS:
        raise LimelightError(f"unknown target {target!r} ({', '.join(TARGETS)})")
    if target == "merit" and merit is None:
        raise LimelightError("the merit target needs a merit source (qrels or a reference system)")
    if n_boot < 0:
        raise LimelightError(f"the number of bootstrap resamples must be ≥ 0, got {n_boot}")
    if not 0 < alpha < 1:
        raise LimelightError(f"alpha must lie in (0, 1), got {alpha}")
    if top < 0:
        raise LimelightError(f"top must be ≥ 0, got {top}")


def _group_table(groups: Groups, point: dict, boot: dict | None, alpha: float) -> pd.DataFrame:
    """One row per group: the point figures and, with a bootstrap, their intervals."""
    df = pd.DataFrame({"group": groups.names, "n_docs": groups.sizes()})
    df["size_share"] = df["n_docs"] / groups.n_docs
    for k in ("exposure_share", "target_share", "gap", "ratio", "dp", "dtr", "dir"):
        if k not in point:
            continue
        df[k] = point[k][:, 0]
        if boot is not None:
            df[f"{k}_lo"], df[f"{k}_hi"] = _interval(boot[k], alpha)
    return df


def _scalar(point: dict, boot: dict | None, key: str, alpha: float) -> dict:
    v = float(point[key][0]) if np.ndim(point[key]) else float(point[key])
    if boot is None:
        return {"value": v}
    lo, hi = _interval(boot[key][None, :], alpha)
    return {"value": v, "lo": float(lo[0]), "hi": float(hi[0])}


def _pairwise(point: dict, boot: dict | None, names: list[str], alpha: float) -> dict:
    """Singh & Joachims' two-group ratios, first group over second (inverted, and their logs
    negated, when the labels swap)."""
    out = {"groups": names[:2]}
    for k in ("dp", "dtr", "dir"):
        if k not in point:
            continue
        v = point[k]
        with np.errstate(divide="ignore", invalid="ignore"):  # a group with no exposure: inf
            entry = {"value": float(np.divide(v[0, 0], v[1, 0]))}
        if boot is not None:
            lo, hi = _interval((boot[k][0] / boot[k][1])[None, :], alpha)
            entry.update(lo=float(lo[0]), hi=float(hi[0]))
        out[k] = entry
    return out


def fairness_from_pairs(q: np.ndarray, d: np.ndarray, rank: np.ndarray, weights: np.ndarray,
                        groups: Groups, merit: Merit | None = None, target: str = "size",
                        browsing: str | Discount = "dcg", awrf_browsing: str | Discount = "trec",
                        ee_browsing: str | Discount = "rbp:0.5", ee_target: str = "ideal",
                        ee_depth: int | None = None, n_boot: int = 200, alpha: float = 0.05,
                        seed: int = 0, top: int = 5, doc_ids=None) -> GroupFairness:
    """Group fairness of exposure from parallel pair arrays (``q`` grouped by ascending query
    code, 1-based ``rank``), query weights o_q and a group assignment; see the module's
    docstring for every figure. With ``merit``, the queries with merit only (and the S&J
    treatment and impact ratios, the merit target and group expected exposure); without, every
    query. ``n_boot`` resamples of those queries give percentile intervals (0: none)."""
    _check_settings(target, merit, n_boot, alpha, top)
    w = np.asarray(_check_weights(weights, len(weights)), dtype=np.float64).copy()
    nq = len(w)
    q, d, rank = np.asarray(q), np.asarray(d), np.asarray(rank)
    if len(d) and (int(d.max()) >= groups.n_docs or int(d.min()) < 0 or int(rank.min()) < 0):
        raise LimelightError("a pair's document code is outside the groups' documents (or its rank < 0)")
    ptr, ok = _query_ptr(q, nq)
    if not ok:
        raise LimelightError("exposure pairs must be grouped by query (ascending codes within the query set)")
    if merit is not None:
        if merit.matrix.shape != (nq, groups.n_docs):
            raise LimelightError(f"merit is over {merit.matrix.shape} queries × documents, the pairs "
                                 f"over {(nq, groups.n_docs)}")
        w = np.where(merit.queries(), w, 0.0)
        if not (w > 0).any():
            raise LimelightError(f"{merit.source}: no query with merit has a weight > 0: no overlap")
    disc = parse_discount(browsing)
    parts = _parts(d, rank, ptr, w, groups, merit, target, disc, parse_discount(awrf_browsing),
                   parse_discount(ee_browsing), ee_target, ee_depth, per_query=n_boot > 0)
    where = _layout(parts)
    point = _stats(_point_sums(parts, w), where, parts.size_share, np.array([w.sum()]))
    pop = w > 0
    boot = _bootstrap(_per_query(parts, pop), w[pop], where, parts.size_share, n_boot, seed) \
        if n_boot else None
    table = _group_table(groups, point, boot, alpha)
    ids = doc_ids if doc_ids is not None else np.arange(groups.n_docs).astype(str)
    contrib = _contributors(w, parts, groups, merit, target, point["gap"][:, 0], ids, top) \
        if top else pd.DataFrame()
    summary = _summary(point, boot, table, parts, w, groups, merit, target, disc, awrf_browsing,
                       ee_browsing, ee_target, ee_depth, n_boot, alpha, seed)
    return GroupFairness(table, summary, contrib)


def _summary(point, boot, table, parts, w, groups, merit, target, disc, awrf_browsing,
             ee_browsing, ee_target, ee_depth, n_boot, alpha, seed) -> dict:
    """The settings, the queries used and the scalar figures."""
    gap = table["gap"].to_numpy()
    out = {"target": target, "browsing": disc.name, "groups_source": groups.source,
           "n_groups": groups.n_groups, "n_docs": groups.n_docs,
           "n_queries": int(len(w)), "n_queries_used": int((w > 0).sum()),
           "weight_used": float(w.sum()),
           "n_queries_without_results": int(((w > 0) & (parts.n_ret == 0)).sum()),
           "merit": merit.source if merit is not None else None,
           "assumptions": [merit.assumption] if merit is not None and merit.assumption else [],
           "bootstrap": {"n_boot": n_boot, "alpha": alpha, "seed": seed,
                         "interval": "percentile (order statistics), queries resampled with replacement"},
           "tvd": _scalar(point, boot, "tvd", alpha),
           "largest_deficit": {"group": str(table["group"].iloc[int(np.argmin(gap))]),
                               "gap": float(gap.min())} if len(gap) else None,
           "largest_surplus": {"group": str(table["group"].iloc[int(np.argmax(gap))]),
                               "gap": float(gap.max())} if len(gap) else None,
           "awrf": {**_scalar(point, boot, "awrf", alpha),
                    "browsing": parse_discount(awrf_browsing).name,
                    "target": {"uniform": "each query's retrieved documents' groups",
                               "size": "the collection's group sizes",
                               "merit": "the merit-weighted groups of each query's documents with merit"}[target]}}
    if merit is not None:
        out["expected_exposure"] = {
            "browsing": parse_discount(ee_browsing).name, "target": ee_target,
            **({"depth": ee_depth} if ee_target == "trec2022" else {}),
            **{k: _scalar(point, boot, k, alpha) for k in ("EE-D", "EE-R", "EE-L")}}
    if groups.n_groups == 2:
        out["pairwise"] = _pairwise(point, boot, groups.names, alpha)
    return out


def group_fairness(store, groups: Groups, merit: Merit | None = None, target: str = "size",
                   browsing: str | Discount = "dcg", awrf_browsing: str | Discount = "trec",
                   ee_browsing: str | Discount = "rbp:0.5", ee_target: str = "ideal",
                   ee_depth: int | None = None, n_boot: int = 200, alpha: float = 0.05,
                   seed: int = 0, top: int = 5) -> GroupFairness:
    """``fairness_from_pairs`` over every pair of an ``ExposureStore`` with its o_q (the
    ``trec2022`` expected-exposure target defaults to the store's depth)."""
    if groups.n_docs != len(store.doc_ids):
        raise LimelightError(f"the groups cover {groups.n_docs:,} documents, the store "
                             f"{len(store.doc_ids):,}")
    q, d, rank, _ = store.pair_arrays()
    res = fairness_from_pairs(q, d, rank, store.queries.weights, groups, merit, target, browsing,
                              awrf_browsing, ee_browsing, ee_target,
                              ee_depth if ee_depth is not None else store.depth, n_boot, alpha,
                              seed, top, store.doc_ids)
    res.summary["store"] = str(store.path)
    return res


def fairness_table(store, groups: Groups, merit: Merit | None = None, target: str = "size", *,
                   browsing: str | Discount = "dcg", n_boot: int = 200, alpha: float = 0.05,
                   seed: int = 0, top: int = 3) -> pd.DataFrame:
    """Group fairness of an audit's store as one tidy table: a row per group with its exposure
    and target shares, gap, ratio and Singh & Joachims' ratios, each with its bootstrap interval
    (``_lo``/``_hi``; ``n_boot`` resamples of the queries, 0: none), whether it is in deficit or
    surplus, and the ``top`` documents carrying that gap (``GroupFairness.table``); the summary
    (TVD, AWRF, group EE with merit, assumptions) in ``attrs["summary"]``. ``groups``: e.g.
    ``Groups.from_field(store, "section")`` or ``Groups.from_values(values)``; ``merit``: None,
    ``Merit.from_qrels`` or ``Merit.from_reference``."""
    return group_fairness(store, groups, merit, target, browsing=browsing, n_boot=n_boot,
                          alpha=alpha, seed=seed, top=top).table()


# ---- changing it: Plackett-Luce policies -----------------------------------------------------------


def policy_curve(store, groups: Groups, merit: Merit, temperatures: Sequence[float],
                 browsing: str | Discount = "dcg", n_samples: int = 32, seed: int = 0,
                 block: int = 4096) -> pd.DataFrame:
    """Group fairness against effectiveness for Plackett-Luce policies over each query's stored
    top n (``limelight.exposure.stochastic``, temperature relative to the query's score spread;
    T = 0 the ranker, ``inf`` the uniform shuffle): per temperature, the expected exposure share
    of every group against the merit target (each query's exposure spread by merit), the total
    variation distance, the largest deficit and its group, and the expected nDCG@10 (trec_eval's
    linear gains) and R@100 over the queries with merit, o_q-weighted. R@100 moves only when the
    store is deeper than 100 (the policy then draws documents from below rank 100). Seeded: the
    noise depends on the query, the sample and the position only."""
    from limelight.exposure.stochastic import expected_weights

    disc = parse_discount(browsing)
    q, d, rank, score = store.pair_arrays()
    nq, n, k = len(store.queries), groups.n_docs, store.depth
    mm = merit.matrix
    w = np.where(merit.queries(), store.queries.weights, 0.0)
    ptr = np.searchsorted(q, np.arange(nq + 1)).astype(np.int64)
    mval = _merit_at(ptr, d, mm, n)
    pos = np.arange(1, k + 1)
    tables = np.stack([disc.weights(pos), parse_discount("cutoff:10").weights(pos) /
                       np.log2(pos + 1.0), (pos <= 100).astype(float)])
    idcg = _rows(ideal_exposure(mm, _Dcg10()).multiply(mm))
    n_rel = np.diff(mm.indptr).astype(np.float64)
    # the merit target does not depend on T: every policy over a query's top n hands out the
    # same total exposure Σ_k μ(k) over its n documents
    etot = np.bincount(q, weights=disc.weights(rank), minlength=nq)
    mtot = _rows(mm)
    tgt = np.asarray(_row_scale(mm, np.divide(w * etot, mtot, out=np.zeros(nq), where=mtot > 0))
                     .sum(axis=0)).ravel() @ groups.matrix
    tshare = tgt / tgt.sum()
    rows = []
    for t in temperatures:
        e_doc, dcg, rec = np.zeros(n), np.zeros(nq), np.zeros(nq)
        for b0 in range(0, nq, block):
            b1 = min(nq, b0 + block)
            lo, hi = ptr[b0], ptr[b1]
            qb, rb = q[lo:hi] - b0, np.asarray(rank[lo:hi], np.int64) - 1
            docs = np.full((b1 - b0, k), -1, dtype=np.int32)
            sc = np.full((b1 - b0, k), -np.inf)
            docs[qb, rb], sc[qb, rb] = d[lo:hi], score[lo:hi]
            ex = expected_weights(docs, sc, t, tables, n_samples, seed, np.arange(b0, b1))[:, qb, rb]
            e_doc += np.bincount(d[lo:hi], weights=w[q[lo:hi]] * ex[0], minlength=n)
            dcg[b0:b1] = np.bincount(qb, weights=mval[lo:hi] * ex[1], minlength=b1 - b0)
            rec[b0:b1] = np.bincount(qb, weights=(mval[lo:hi] > 0) * ex[2], minlength=b1 - b0)
        share = e_doc @ groups.matrix
        share = share / share.sum()
        gap = share - tshare
        g = int(np.argmin(gap))
        ws = w.sum()
        rows.append({"temperature": float(t), "tvd": float(0.5 * np.abs(gap).sum()),
                     "largest_deficit": float(gap[g]), "deficit_group": groups.names[g],
                     "ndcg@10": float(np.dot(w, np.divide(dcg, idcg, out=np.zeros(nq), where=idcg > 0)) / ws),
                     "r@100": float(np.dot(w, np.divide(rec, n_rel, out=np.zeros(nq), where=n_rel > 0)) / ws),
                     **{f"gap:{name}": float(x) for name, x in zip(groups.names, gap, strict=True)}})
    return pd.DataFrame(rows)


def ranking_effectiveness(q: np.ndarray, d: np.ndarray, rank: np.ndarray, weights: np.ndarray,
                          merit: Merit) -> dict[str, float]:
    """nDCG@10 (trec_eval's linear gains: the merit values) and R@100 of a deterministic ranking
    given as parallel pair arrays (``q`` grouped by ascending query code, 1-based ``rank``),
    o_q-weighted over the queries with merit (``policy_curve``'s figures at T = 0)."""
    mm = merit.matrix
    nq = mm.shape[0]
    w = np.where(merit.queries(), np.asarray(weights, dtype=np.float64), 0.0)
    ptr, ok = _query_ptr(np.asarray(q), nq)
    if not ok:
        raise LimelightError("exposure pairs must be grouped by query (ascending codes within the query set)")
    mval = _merit_at(ptr, d, mm, mm.shape[1])
    r = np.asarray(rank, dtype=np.float64)
    dcg = np.bincount(q, weights=mval * np.where(r <= 10, 1.0 / np.log2(r + 1.0), 0.0), minlength=nq)
    rec = np.bincount(q, weights=((mval > 0) & (r <= 100)).astype(np.float64), minlength=nq)
    idcg = _rows(ideal_exposure(mm, _Dcg10()).multiply(mm))
    n_rel = np.diff(mm.indptr).astype(np.float64)
    ws = w.sum()
    return {"ndcg@10": float(np.dot(w, np.divide(dcg, idcg, out=np.zeros(nq), where=idcg > 0)) / ws),
            "r@100": float(np.dot(w, np.divide(rec, n_rel, out=np.zeros(nq), where=n_rel > 0)) / ws)}


@dataclass(frozen=True, repr=False)
class _Dcg10(Discount):
    """nDCG@10's discount 1[rank ≤ 10] / log2(rank + 1) (for the ideal DCG)."""

    name = "dcg@10"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        r = np.asarray(rho).astype(np.float64)
        return np.where(r < 10, 1.0 / np.log2(r + 2.0), 0.0)
