"""Exposing queries of a pasted document, through :mod:`limelight.exposure.eqi`.

The service computes nothing itself here: the exact reverse search (``ExactReverse``: every query
of the system's query set scored against the new document and compared with the query's score at
rank n, frozen collection statistics) and the learned EQI models (``EQIModel``) are those of
``limelight.exposure.eqi``. This module only shapes their
answers into the two side-by-side lists of the page (``EqiList`` of ``schemas``): the exact list
is the ground truth, so each learned list is annotated with the rank the document would really
get for each of its queries (the y axis of the paper's Figure 1) and whether the query is in both
lists (its dotted bars).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from limelight.errors import LimelightError, with_article


def exact_reverse(service, sysm, text: str, k: int, screen=None) -> dict:
    """The exact exposing queries of ``text`` under system ``sysm`` (``ExactReverse``: every
    query counted, the top ``k`` by rank listed; with a privacy ``screen``
    (``limelight.service.privacy.QueryScreen``), the top ``k`` of those it lets through, and
    ``privacy`` saying how many of all it hid)."""
    if not exact_able(sysm):
        return {"method": "exact", "available": False, "queries": [], "n_exposing": None,
                "message": f"exact reverse search of a new document needs a system with a local index "
                           f"and exact reverse search ({', '.join(_exact_kinds())}); {sysm.name!r} is "
                           f"{with_article(system_kind(sysm))} system"}
    engine = _cached(service, ("exact", sysm.name), lambda: _released(_build_exact(service, sysm)))
    with service._exact_lock:
        q, rank, score = engine.add_documents([text], [NEW_DOCID]).lists(0)
    n_exposing, privacy, truth = int(len(q)), None, dict(zip(q.tolist(), zip(rank.tolist(), score.tolist(),
                                                                            strict=True), strict=True))
    if screen is not None:
        privacy = screen.summary(q)
        keep = ~screen.hidden[np.asarray(q, dtype=np.int64)]
        q, rank, score = q[keep], rank[keep], score[keep]
    qs = sysm.store.queries
    rows = [{"position": i + 1, "qid": str(qs.ids[j]), "query": str(qs.texts[j]), "weight": float(qs.weights[j]),
             "rank": int(r), "score": float(s), "in_both": False}
            for i, (j, r, s) in enumerate(zip(q[:k].tolist(), rank[:k].tolist(), score[:k].tolist(), strict=True))]
    return {"method": "exact", "available": True, "message": None, "n_exposing": n_exposing,
            "queries": rows, "privacy": privacy, "_truth": truth}


NEW_DOCID = "new-document"


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """At most ``n`` threads for the FAISS (OpenMP) and numba parallel regions this thread
    starts inside the block (``None``: leave them). Both settings belong to the calling thread
    only, so other requests are unaffected; they are restored at the end."""
    if n is None:
        yield
        return
    import faiss
    import numba

    old_faiss, old_numba = faiss.omp_get_max_threads(), numba.get_num_threads()
    faiss.omp_set_num_threads(max(1, min(n, old_faiss)))
    numba.set_num_threads(max(1, min(n, old_numba)))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(old_faiss)
        numba.set_num_threads(old_numba)


def prepare(service, sysm) -> None:
    """Build the exact reverse search engine of ``sysm`` now (query side, stored lists)."""
    if exact_able(sysm):
        exact_reverse(service, sysm, "warm up", 1)


def system_kind(sysm) -> str:
    """The kind of a served system (``bm25``, ``dense``, ``hybrid``, ``run``, ...), from its
    recorded settings (the audit's manifest: :meth:`~limelight.retrieval.spec.System.settings`,
    read back by :meth:`~limelight.retrieval.spec.System.from_recorded`)."""
    from limelight.retrieval.spec import System

    return System.from_recorded(sysm.settings).kind


def exact_able(sysm) -> bool:
    """Whether a system's kind has a local index and exact reverse search (the engine of a new
    document's exposing queries)."""
    from limelight.retrieval.systems import EXACT_REVERSE, LOCAL_INDEX, get_kind

    kind = get_kind(system_kind(sysm))
    return kind.has(EXACT_REVERSE) and kind.has(LOCAL_INDEX)


def _exact_kinds() -> list[str]:
    from limelight.retrieval.systems import EXACT_REVERSE, LOCAL_INDEX, get_kind, kind_names

    return [k for k in kind_names() if get_kind(k).has(EXACT_REVERSE) and get_kind(k).has(LOCAL_INDEX)]


def _cached(service, key, make):
    """``make()`` once per ``key`` (an engine, a model, a decision), computed outside any lock
    that other keys or requests wait for."""
    return service._resources.get(("eqi",) + key, make)


def _released(value):
    """``value``, after handing back the memory its build freed (``core.release_memory``)."""
    from limelight.service.concurrency import release_memory

    release_memory()
    return value


def _build_exact(service, sysm):
    from limelight.exposure.eqi import ExactReverse
    from limelight.retrieval.spec import System
    from limelight.retrieval.systems import QUERY_VECTORS

    spec = System.from_recorded(sysm.settings)
    if spec.registered.has(QUERY_VECTORS):  # vectors: the audit's dense index and its encoder
        retriever = service.retriever(spec.kind)
        return ExactReverse.build(sysm.store, retriever, query_embeddings=_stored_query_vectors(service, sysm))
    same = spec.kind in service.search_models and spec == System.of(spec.kind)
    # the search page's retriever when the settings are the defaults (one index in memory)
    retriever = service.retriever(spec.kind) if same else spec.open(service.audit.index_dir)
    return ExactReverse.build(sysm.store, retriever)


def _stored_query_vectors(service, sysm):
    """The audit's query vectors (those its dense stores were computed from), when they fit:
    memory-mapped copy-on-write (writable for torch, shared with the page cache, never written
    back), one mapping for every system and model of the server."""
    p = service.audit.query_vectors
    if not p.exists():
        return None
    v = service._resources.get(("query-vectors",), lambda: np.load(p, mmap_mode="c"))
    if v.shape[0] == len(sysm.store.queries) and v.dtype == np.float32 and v.flags.c_contiguous:
        return v
    if v.shape[0] == len(sysm.store.queries):
        return np.array(v, dtype=np.float32)
    return None


def _query_embeddings(service, sysm, enc) -> np.ndarray:
    v = _stored_query_vectors(service, sysm)
    if v is not None:
        return v
    from limelight.exposure.eqi import encode_queries_cached

    return encode_queries_cached(sysm.store.queries, enc)


def _encoder(service):
    """The encoder of the audit's dense index (same model and variant as its vectors)."""
    return service.retriever("dense").encoder


def learned(service, sysm, method: str, text: str, k: int, exact: dict, screen=None) -> dict:
    """The ranked list of a learned EQI model of the audit, annotated with the exact ranks (with
    a privacy ``screen``: less the queries it hides, ``privacy`` saying how many)."""
    reason = why_not(service, sysm, method)
    if reason is not None:
        return {"method": method, "available": False, "queries": [], "message": reason}
    n = len(sysm.store.queries)
    want = min(k, n)
    try:
        model = _cached(service, ("learned", sysm.name, method),
                        lambda: _released(_load_learned(service, sysm, method)))
        while True:  # with a screen, deeper until k queries it shows (or the whole log) are found
            q = np.asarray(model.search(texts=[text], k=want)[0][0])
            q = q[q >= 0]
            if screen is None or len(q) < want or want >= n or int((~screen.hidden[q]).sum()) >= k:
                break
            want = min(n, want * 4)
    except LimelightError as e:
        return {"method": method, "available": False, "queries": [], "message": str(e)}
    privacy = None
    if screen is not None:  # the hidden ones among those ranked above the k-th shown
        shown = np.flatnonzero(~screen.hidden[q])
        q = q[:int(shown[k - 1]) + 1] if len(shown) >= k else q
        privacy = screen.summary(q)
        q = q[~screen.hidden[q]]
    truth = exact.get("_truth", {})
    exact_top = {r["qid"] for r in exact["queries"]}
    qs = sysm.store.queries
    rows = []
    for i, j in enumerate(q.tolist()):
        rk, sc = truth.get(j, (None, None))
        qid = str(qs.ids[j])
        rows.append({"position": i + 1, "qid": qid, "query": str(qs.texts[j]), "weight": float(qs.weights[j]),
                     "rank": rk, "score": sc, "in_both": qid in exact_top})
    return {"method": method, "available": True, "message": None, "queries": rows, "privacy": privacy}


def model_meta(service, method: str) -> dict:
    """``model.json`` of the audit's EQI model ``method`` (``{}`` when unreadable)."""
    import json

    def read() -> dict:
        try:
            return json.loads((service.audit.eqi_dir(method) / "model.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    return _cached(service, ("meta", method), read)


def why_not(service, sysm, method: str) -> str | None:
    """Why the audit's learned model ``method`` does not answer for system ``sysm`` (``None``
    when it does). A model predicts exposure under the system whose exposure store it was
    trained on (``system`` in its ``model.json``, written by the audit's EQI stage; for models
    without it, the store it records)."""
    from limelight.errors import IndexMismatchError
    from limelight.exposure.eqi.base import check_store

    def decide() -> str | None:
        meta = model_meta(service, method)
        trained = meta.get("system")
        if not exact_able(sysm) and trained != sysm.name:
            return (f"{sysm.name!r} is {with_article(system_kind(sysm))} system: the audit trains EQI models on the exposure "
                    "of dense systems only (fused and re-ranked systems have no exact reverse search "
                    "to train and evaluate them against)")
        if trained is not None and trained != sysm.name:
            return f"the {method} model was trained on the exposure of system {trained!r}, not {sysm.name!r}"
        try:
            check_store(sysm.store, meta.get("store") or {}, f"the {method} model")
        except IndexMismatchError as e:
            return str(e) if trained is not None else \
                f"the {method} model was trained on another system's exposure than {sysm.name!r}'s"
        return None

    return _cached(service, ("why-not", sysm.name, method), decide)


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
