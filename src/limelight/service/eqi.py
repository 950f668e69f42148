"""Exposing queries of a pasted document, through :mod:`limelight.exposure.eqi`.

The service computes nothing itself here: the exact reverse search (every query of the system's
query set scored against the new document and compared with the query's score at rank n) and the
learned EQI models are those of ``limelight.exposure.eqi``. This module only shapes their
answers into the two side-by-side lists of the page (``EqiList`` of ``schemas``): the exact list
is the ground truth, so each learned list is annotated with the rank the document would really
get for each of its queries (the y axis of the paper's Figure 1) and whether the query is in both
lists (its dotted bars).
"""

from __future__ import annotations

import numpy as np

from limelight.errors import LimelightError


def exact_reverse(service, sysm, text: str, k: int) -> dict:
    """The exact exposing queries of ``text`` under system ``sysm``: every query counted, the
    top ``k`` (by the rank the document would get, then query id) listed.

    The new document is scored against every query of the system's query set with the system's
    own scoring (BM25 with the index's statistics, or the dense model's inner product) and kept
    where it beats the query's score at rank n (or the query retrieved fewer than n documents;
    for BM25, with a score above 0). Its rank is 1 + the stored documents scoring at least as
    much (ties go to the stored documents). The collection's statistics are those of the index
    (adding one document is assumed not to move idf or the mean length), so terms the collection
    never saw do not count."""
    kind = system_kind(sysm)
    if kind not in ("bm25", "dense"):
        return {"method": "exact", "available": False, "queries": [], "n_exposing": None,
                "message": f"exact reverse search of a new document is implemented for bm25 and dense "
                           f"systems; {sysm.name!r} is {kind}"}
    scores = _scores_bm25(service, sysm, text) if kind == "bm25" else _scores_dense(service, sysm, text)
    q, rank, score = _exposing(service, sysm, scores, positive_only=kind == "bm25")
    qs = sysm.store.queries
    rows = [{"position": i + 1, "qid": str(qs.ids[j]), "query": str(qs.texts[j]), "weight": float(qs.weights[j]),
             "rank": int(r), "score": float(s), "in_both": False}
            for i, (j, r, s) in enumerate(zip(q[:k].tolist(), rank[:k].tolist(), score[:k].tolist(), strict=True))]
    return {"method": "exact", "available": True, "message": None, "n_exposing": int(len(q)),
            "queries": rows, "_truth": dict(zip(q.tolist(), zip(rank.tolist(), score.tolist(), strict=True),
                                                strict=True))}


def prepare(service, sysm) -> None:
    """Load what exact reverse search of ``sysm`` needs (query vectors, thresholds, pairs)."""
    kind = system_kind(sysm)
    if kind == "bm25":
        _scores_bm25(service, sysm, "warm up")
    elif kind == "dense":
        _scores_dense(service, sysm, "warm up")
    else:
        return
    _exposing(service, sysm, np.zeros(len(sysm.store.queries), np.float32), positive_only=True)


def system_kind(sysm) -> str:
    """``bm25``, ``dense`` or ``hybrid`` from the audit manifest (``kind``)."""
    return str(sysm.settings.get("kind") or sysm.settings.get("model") or "bm25")


def _cached(service, key, make):
    with service._lock:
        if key not in service._eqi:
            service._eqi[key] = make()
        return service._eqi[key]


def _scores_bm25(service, sysm, text: str) -> np.ndarray:
    """s(q, d_new) of every query: the query's term counts · the document's BM25 weights."""
    from limelight.retrieval.index_dir import open_retriever

    k1 = float(sysm.settings.get("k1", 0.9))
    b = float(sysm.settings.get("b", 0.4))
    bm25 = _cached(service, ("bm25", k1, b), lambda: open_retriever(service.audit.index_dir, "bm25", k1=k1, b=b))
    qv = _cached(service, ("qvec", sysm.name, k1, b),
                 lambda: bm25.query_vectors(sysm.store.queries.texts.tolist()).tocsr())
    idx = bm25.index
    toks = idx.analyzer.tokenize(text)
    w = np.zeros(idx.n_terms, dtype=np.float32)
    if toks:
        codes = idx.vocabulary.encode(toks, missing=-1)
        terms, tf = np.unique(codes[codes >= 0], return_counts=True)
        norm = bm25.k1 * ((1.0 - bm25.b) + bm25.b * len(toks) / idx.avgdl)
        tf = tf.astype(np.float64)
        w[terms] = (idx.idf[terms].astype(np.float64) * (tf / (norm + tf))).astype(np.float32)
    return np.asarray(qv @ w, dtype=np.float32).ravel()


def _scores_dense(service, sysm, text: str) -> np.ndarray:
    """Inner product of every query's embedding with the document's (the dense index's model)."""
    enc = _encoder(service)
    qe = _cached(service, ("qemb", sysm.name), lambda: _query_embeddings(service, sysm, enc))
    e = enc.encode([text], show_progress=False)
    return (qe @ np.asarray(e, dtype=np.float32)[0]).astype(np.float32)


def _encoder(service):
    """The encoder of the audit's dense index (same model and variant as its vectors)."""
    return service.retriever("dense").encoder


def _query_embeddings(service, sysm, enc) -> np.ndarray:
    qs = sysm.store.queries
    p = service.audit.query_vectors
    if p.exists():
        v = np.load(p, mmap_mode="r")
        if v.shape[0] == len(qs):
            return np.asarray(v, dtype=np.float32)
    from limelight.data.collection import Collection

    return enc.encode_collection(Collection(qs.ids, qs.texts, name=qs.name or "queries"),
                                 cache_dir=".cache/embeddings")


def _exposing(service, sysm, s: np.ndarray, positive_only: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queries (codes) the new document would enter the top n of, its rank there and score,
    sorted by rank then query id."""
    store = sysm.store
    thr = _cached(service, ("thr", sysm.name), store.thresholds).astype(np.float32)
    qp, _, _, sp_ = _cached(service, ("pairs", sysm.name), store.pair_arrays)
    beats = np.isnan(thr) | (s > np.nan_to_num(thr, nan=-np.inf))
    if positive_only:
        beats &= s > 0
    q = np.flatnonzero(beats)
    cand = beats[qp]
    ahead = np.bincount(qp[cand][sp_[cand] >= s[qp[cand]]], minlength=len(s))
    rank = ahead[q] + 1
    order = np.lexsort((store.queries.ids.strings[q], rank))
    return q[order], rank[order], s[q][order]


def learned(service, sysm, method: str, text: str, k: int, exact: dict) -> dict:
    """The ranked list of a learned EQI model of the audit, annotated with the exact ranks."""
    try:
        model = _cached(service, ("learned", sysm.name, method), lambda: _load_learned(service, sysm, method))
        q = np.asarray(model.search(texts=[text], k=k)[0][0])
    except LimelightError as e:
        return {"method": method, "available": False, "queries": [], "message": str(e)}
    q = q[q >= 0]
    truth = exact.get("_truth", {})
    exact_top = {r["qid"] for r in exact["queries"]}
    qs = sysm.store.queries
    rows = []
    for i, j in enumerate(q.tolist()):
        rk, sc = truth.get(j, (None, None))
        qid = str(qs.ids[j])
        rows.append({"position": i + 1, "qid": qid, "query": str(qs.texts[j]), "weight": float(qs.weights[j]),
                     "rank": rk, "score": sc, "in_both": qid in exact_top})
    return {"method": method, "available": True, "message": None, "queries": rows}


def _load_learned(service, sysm, method: str):
    """An EQI model of the audit (``eqi/<method>/``) with the system's query set indexed."""
    from limelight.exposure.eqi.learned import EQIModel
    model = EQIModel.load(service.audit.eqi_dir(method))
    enc = _encoder(service)
    return model.index_queries(sysm.store.queries, _query_embeddings(service, sysm, enc), enc)


def mark_shared(exact: dict, learned_lists: list[dict]) -> None:
    """Flag the exact list's queries that some learned list also returns; drop internals."""
    found = {r["qid"] for lst in learned_lists for r in lst["queries"]}
    for r in exact["queries"]:
        r["in_both"] = r["qid"] in found
    exact.pop("_truth", None)
