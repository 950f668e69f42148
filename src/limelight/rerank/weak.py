"""Weak supervision for the kernel re-rankers (issue 25): training triples without judgments.

Two sources, both deterministic (seeded) and blind to relevance judgments by construction (no
function here takes qrels):

* :func:`bm25_log_triples` — Dehghani et al. (SIGIR 2017): real queries from the shared query
  log are issued against the collection with BM25; the BM25 top ``n_pos`` are pseudo-relevant,
  ranks ``neg_from``..``depth`` pseudo-non-relevant. Queries that retrieve fewer than
  ``min_hits`` documents are dropped (most web queries do not match an aeronautics corpus).
* :func:`title_body_triples` — MacAvaney et al. (SIGIR 2019), content-based weak supervision:
  a document's title is the query, its body (the text without the title) the relevant
  document; BM25-hard negatives are the other bodies BM25 ranks highest for the title.

Leakage guard: ``exclude`` takes query texts that must never become training queries (the
test fold's queries, or — what the CLI passes — every query of the collection). Texts are
compared after lowercasing and collapsing whitespace (:func:`normalise`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from limelight.data.collection import Collection
from limelight.data.queries import Queries
from limelight.errors import LimelightError
from limelight.rerank.train import TripleSet

SOURCES = ("bm25-log", "title-body")


def normalise(text: str) -> str:
    """Lowercase and collapse whitespace (how the log is de-duplicated, too)."""
    return " ".join(str(text).lower().split())


def _excluded(texts: np.ndarray, exclude: Iterable[str] | None) -> np.ndarray:
    """Boolean mask of ``texts`` whose normalised form is in ``exclude``."""
    bad = {normalise(t) for t in (exclude if exclude is not None else ())}
    if not bad:
        return np.zeros(len(texts), dtype=bool)
    return np.fromiter((normalise(t) in bad for t in texts), dtype=bool, count=len(texts))


def _bm25_top(collection: Collection, texts: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
    """BM25 (limelight's, the shared defaults) top ``depth`` collection rows of ``texts``
    (``-1`` padding) and their scores."""
    from limelight.retrieval.bm25 import BM25, BM25Index

    bm25 = BM25(BM25Index.build(collection))
    rows_of = collection.ids.encode(bm25.doc_ids.strings, missing=-1)
    out_d, out_s = [], []
    for s in range(0, len(texts), 4096):
        d, sc = bm25.search_batch(texts[s:s + 4096], depth)
        d = np.asarray(d)
        out_d.append(np.where(d >= 0, rows_of[np.where(d >= 0, d, 0)], -1))
        out_s.append(np.asarray(sc, dtype=np.float64))
    return np.concatenate(out_d), np.concatenate(out_s)


def bm25_log_triples(collection: Collection, log: Queries, n_queries: int = 20000, seed: int = 0,
                     exclude: Iterable[str] | None = None, depth: int = 100, n_pos: int = 1,
                     neg_from: int = 11, min_hits: int = 20) -> TripleSet:
    """BM25 pseudo-labels over ``n_queries`` log queries sampled (seeded, without replacement)
    from ``log`` minus the ``exclude`` texts. Positives: BM25 ranks 1..``n_pos``; negatives:
    ranks ``neg_from``..``depth``; queries with fewer than ``min_hits`` retrieved documents
    are dropped."""
    if not 1 <= n_pos < neg_from <= depth:
        raise LimelightError(f"need 1 ≤ n_pos < neg_from ≤ depth, got {n_pos}, {neg_from}, {depth}")
    if n_queries < 1:
        raise LimelightError(f"n_queries must be ≥ 1, got {n_queries}")
    texts = np.asarray(log.texts, dtype=object)
    ok = ~_excluded(texts, exclude) & np.fromiter((bool(str(t).strip()) for t in texts), bool, len(texts))
    pool = np.flatnonzero(ok)
    if len(pool) == 0:
        raise LimelightError("empty training set: no log query left after the exclusions")
    pick = np.sort(np.random.default_rng(seed).choice(pool, size=min(n_queries, len(pool)), replace=False))
    qtexts = texts[pick]
    rows, _ = _bm25_top(collection, qtexts.tolist(), depth)
    hits = (rows >= 0).sum(1)
    keep = np.flatnonzero(hits >= max(min_hits, neg_from))
    pos = {i: rows[q, :n_pos] for i, q in enumerate(keep)}
    neg = {i: rows[q, neg_from - 1:hits[q]] for i, q in enumerate(keep)}
    return TripleSet(qtexts[keep], collection.texts, pos, neg, name=f"bm25-log({len(keep)} queries)")


def bodies(collection: Collection) -> tuple[np.ndarray, np.ndarray]:
    """``(titles, bodies)``: each document's title and its text without a leading copy of the
    title (cranfield's texts repeat the title; scifact's do not). No ``title`` field → error."""
    if "title" not in collection.fields or "text" not in collection.fields:
        raise LimelightError(f"collection {collection.name!r} has no title and text fields "
                             "(title-body weak supervision needs titles)")
    titles = np.asarray(["" if t is None else str(t).strip() for t in collection.fields["title"]], dtype=object)
    texts = [("" if t is None else str(t)).strip() for t in collection.fields["text"]]
    out = np.asarray([x[len(t):].strip() if t and x.startswith(t) else x
                      for t, x in zip(titles.tolist(), texts, strict=True)], dtype=object)
    return titles, out


def title_body_triples(collection: Collection, seed: int = 0, exclude: Iterable[str] | None = None,
                       depth: int = 50, min_title_terms: int = 3, max_docs: int | None = None) -> TripleSet:
    """Title → body pairs with BM25-hard negatives: for every document with a title of at least
    ``min_title_terms`` words and a non-empty body (``max_docs`` of them at most, seeded
    sample), the query is the title, the positive its own body, the negatives the other
    bodies in BM25's top ``depth`` for the title over the bodies."""
    titles, body = bodies(collection)
    ok = (np.fromiter((len(t.split()) >= min_title_terms for t in titles), bool, len(titles))
          & np.fromiter((bool(b) for b in body), bool, len(body)) & ~_excluded(titles, exclude))
    docs = np.flatnonzero(ok)
    if max_docs is not None and len(docs) > max_docs:
        docs = np.sort(np.random.default_rng(seed).choice(docs, size=max_docs, replace=False))
    if len(docs) == 0:
        raise LimelightError(f"empty training set: no document of {collection.name!r} has a usable title and body")
    body_coll = Collection(collection.ids, body, {}, f"{collection.name}-bodies")
    rows, _ = _bm25_top(body_coll, titles[docs].tolist(), depth + 1)
    pos = {i: np.asarray([d]) for i, d in enumerate(docs)}
    neg = {}
    for i, d in enumerate(docs):  # at most depth+1 columns per title: a short loop per document
        r = rows[i]
        neg[i] = r[(r >= 0) & (r != d)][:depth]
    return TripleSet(titles[docs], body, pos, neg, name=f"title-body({len(docs)} documents)")
