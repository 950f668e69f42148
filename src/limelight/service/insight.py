"""Why a search shows a document, which searches nearly do, where the document stands, and how
groups of documents share the attention: the answers of the document and groups pages.

Nothing is computed here that the library does not compute: explanations are
:func:`limelight.retrieval.explain.explain` (BM25 term shares, dense closest sentences, or the
sentence of a system answered from elsewhere), near misses
:class:`limelight.exposure.nearmiss.NearMisses` (BM25 systems: log queries ranking the document
between the store's depth + 1 and 1,000, with the terms they share), group fairness
:func:`limelight.exposure.fairness.group_fairness`. A system is asked for its capabilities
(``SystemKind.needs_index``, an opened BM25 retriever), never for its kind's name. Results are
cached per system (opened retrievers, the log's near-miss encoding) or per view (fairness tables,
in the service's byte-bounded view cache).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from limelight.errors import LimelightError

TOP_SEARCHES = 10  # bars of the "searches that show it most" chart
NEAR_MISSES = 20  # near-miss queries listed
FAIRNESS_BOOT = 100  # bootstrap resamples of the groups page's intervals
FAIRNESS_TOP = 3  # documents listed per group as carrying its gap
TARGETS = ("size", "uniform", "merit")


def system_retriever(service, sysm) -> Any | None:
    """The opened retriever of a served system over the audit's index (``None`` for a kind that
    does not rank over limelight's index: a run file, a live service); opened once."""
    from limelight.retrieval.spec import System

    spec = System.from_recorded(sysm.settings)
    kind = spec.registered
    if not kind.needs_index:
        return None

    def open_it():
        if spec.kind in service.search_models and spec == System.of(spec.kind):
            return service.retriever(spec.kind)  # the search page's, when the settings agree
        return spec.open(service.audit.index_dir, threads=service.threads)

    return service._resources.get(("system-retriever", sysm.name), open_it)


def explanation(service, docid: str, qid: str, system: str | None = None) -> dict:
    """Why the search ``qid`` shows ``docid`` under ``system``: ``explained`` with ``parts``
    (a BM25 part: matched terms, their contributions and shares of the score, ``query_html`` and
    ``doc_html`` with ``<mark>``; a dense part: the closest sentences with their cosine), or a
    ``reason`` sentence; plus the document's stored rank and score for the query (``None`` when
    the query does not put it in its top n)."""
    from limelight.retrieval.explain import explain
    from limelight.retrieval.spec import System

    row = service.doc_row(docid)  # who may see what is asked first, on every request
    sysm = service.system(system)
    q = service.query_row(sysm, qid)

    def compute() -> dict:  # the same for whoever may ask: kept in the view cache
        st = sysm.store
        query = str(st.queries.texts[q])
        text = str(service.docs.texts[row])
        kind = System.from_recorded(sysm.settings).registered
        rank = score = None
        qq, rk, sc = st.document_pairs(int(sysm.store_d[row]))
        hit = np.flatnonzero(np.asarray(qq) == q)
        if len(hit):
            rank, score = int(rk[hit[0]]), float(sc[hit[0]])
        try:
            res = explain(kind, system_retriever(service, sysm), query, docid, text)
        except LimelightError as e:  # e.g. an index without the document's postings
            res = {"explained": False, "reason": f"no explanation: {e}"}
        return {"docid": docid, "qid": qid, "query": query, "system": sysm.name, "rank": rank,
                "score": score, "explained": bool(res["explained"]), "reason": res.get("reason"),
                "parts": res.get("parts", [])}

    # a dense explanation encodes the document's sentences (30-50 ms): once per (system, document, query)
    return dict(service._views.get(("explain", sysm.name, row, q, docid, qid), compute))


def near_misses(service, docid: str, system: str | None = None, limit: int = NEAR_MISSES) -> dict:
    """The log's searches that rank ``docid`` just below what the store keeps (ranks
    ``depth + 1`` to 1,000), closest first, with the terms each shares with the document
    (:class:`~limelight.exposure.nearmiss.NearMisses`, built once per system). Systems without
    a BM25 index of their own get ``available: False`` and the reason."""
    from limelight.exposure.nearmiss import NEAR_MISS_DEPTH, NearMisses
    from limelight.retrieval.bm25 import BM25

    row = service.doc_row(docid)
    sysm = service.system(system)
    first = sysm.store.depth + 1
    out = {"docid": str(service.doc_ids[row]), "system": sysm.name, "first_rank": first,
           "last_rank": NEAR_MISS_DEPTH, "available": False, "reason": None, "total": 0, "queries": [],
           "privacy": None}
    retriever = system_retriever(service, sysm)
    if not isinstance(retriever, BM25):
        out["reason"] = ("near misses are found by re-running searches on a keyword (BM25) index; "
                         f"{sysm.name} has none")
        return out
    if first > NEAR_MISS_DEPTH:
        out["reason"] = f"the audit already keeps the top {sysm.store.depth} of every search"
        return out
    nm = service._resources.get(("near-misses", sysm.name),
                                lambda: NearMisses(sysm.store, retriever, NEAR_MISS_DEPTH))
    screen = service.query_screen(sysm)

    def compute() -> tuple[list[dict], int, dict | None]:
        # the searchers' privacy: the hidden ones are left out of the list and counted among
        # every near miss of the document, not only among those listed
        rows, every = nm.find(out["docid"], limit, None if screen is None else screen.hidden)
        return rows, int(len(every)), None if screen is None else screen.summary(every)

    # the same answer for every visitor under the same screen (30-150 ms for a popular
    # document): kept in the view cache, keyed by the screen (an admin's None, the owners' one)
    rows, out["total"], out["privacy"] = service._views.get(
        ("near-misses", sysm.name, row, limit, None if screen is None else id(screen)), compute)
    out["queries"] = [dict(r) for r in rows]
    out["available"] = True
    return out


def prepare_near_misses(service, sysm) -> None:
    """Build the near-miss finder of a BM25 system and its score ladder now (one search of the
    whole log: ~25 s for the Debian log on 2 cores) rather than on the first document page."""
    from limelight.exposure.nearmiss import NEAR_MISS_DEPTH, NearMisses
    from limelight.retrieval.bm25 import BM25

    retriever = system_retriever(service, sysm)
    if isinstance(retriever, BM25) and sysm.store.depth < NEAR_MISS_DEPTH:
        nm = service._resources.get(("near-misses", sysm.name),
                                    lambda: NearMisses(sysm.store, retriever, NEAR_MISS_DEPTH))
        nm.ladder()
        retriever.doc_matrix()  # a document's terms, read by every near-miss answer


def top_searches(q: np.ndarray, rank: np.ndarray, weights: np.ndarray, mu: np.ndarray, qs,
                 k: int = TOP_SEARCHES) -> list[dict]:
    """The ``k`` searches giving a document the most attention over the log (o_q · μ of its
    rank; ties by rank, then query code): ``qid``, ``query``, ``weight``, ``rank``,
    ``exposure`` (μ) and ``attention`` (o_q · μ)."""
    att = weights * mu
    if len(att) > 4 * k > 0:  # only the candidates (every tie of the k-th largest kept): same order
        cand = np.flatnonzero(att >= np.partition(att, len(att) - k)[len(att) - k])
        order = cand[np.lexsort((q[cand], rank[cand], -att[cand]))][:k]
    else:
        order = np.lexsort((q, rank, -att))[:k]
    return [{"qid": str(qs.ids[int(q[i])]), "query": str(qs.texts[int(q[i])]),
             "weight": float(weights[i]), "rank": int(rank[i]), "exposure": float(mu[i]),
             "attention": float(att[i])} for i in order.tolist()]


def standing(r: np.ndarray, row: int) -> dict:
    """Where document ``row`` stands among every document's r(d) (``r``): its value, the median,
    how many documents are at zero, the share of documents below it, and a histogram over
    power-of-two bins (0, 1, 2-3, 4-7, ...) with the document's bin marked."""
    r = np.asarray(r, dtype=np.float64)
    v = float(r[row])
    top = float(r.max(initial=0.0))
    n_bins = 1 + (int(np.floor(np.log2(top))) + 1 if top >= 1 else 0)
    edges = [0.0, *(float(2 ** i) for i in range(n_bins))]  # [0,1), [1,2), [2,4), ... > top
    counts = np.histogram(r, bins=edges)[0] if n_bins > 1 else np.array([len(r)])
    bins = []
    for i, n in enumerate(counts.tolist()):
        lo = edges[i]
        hi = edges[i + 1] if i + 1 < len(edges) else 1.0
        label = "0" if i == 0 else (f"{int(lo):,}" if hi - lo <= 1 else f"{int(lo):,}–{int(hi) - 1:,}")
        bins.append({"label": label, "n": int(n), "here": bool(lo <= v < hi)})
    return {"r": v, "median": float(np.median(r)) if len(r) else 0.0, "n_docs": int(len(r)),
            "n_zero": int((r == 0).sum()), "share_below": float((r < v).mean()) if len(r) else 0.0,
            "share_above": float((r > v).mean()) if len(r) else 0.0, "bins": bins}


def fairness(service, field: str, system: str | None = None, target: str = "size",
             merit_system: str | None = None) -> dict:
    """Each group of document field ``field``: its share of the attention over the log against
    its target share (``size``: its share of documents; ``uniform``: each search's attention
    spread evenly over what it retrieves; ``merit``: in proportion to merit, here the scores of
    another audited system ``merit_system``, an assumption the answer states), with bootstrap
    intervals over queries, and the documents carrying each group's gap
    (:func:`~limelight.exposure.fairness.group_fairness`, cached per view)."""
    from limelight.exposure.fairness import Groups, Merit, group_fairness

    service.check_group_field(field)
    if target not in TARGETS:
        raise LimelightError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    sysm = service.system(system)
    ref = None
    if merit_system not in (None, ""):
        ref = service.system(merit_system)
        if ref.name == sysm.name:
            raise LimelightError("the merit system must differ from the system audited")
    if target == "merit" and ref is None:
        raise LimelightError("the merit target needs a merit source: choose another audited system "
                             "whose scores stand in for relevance")

    def compute() -> dict:
        values = np.asarray(service.docs.fields[field], dtype=object)[sysm.doc_rows]
        groups = Groups.from_values(values, f"field {field!r}")
        merit = Merit.from_reference(ref.store, sysm.store, ref.name) if ref is not None else None
        res = group_fairness(sysm.store, groups, merit, target=target, n_boot=FAIRNESS_BOOT,
                             top=FAIRNESS_TOP).to_dict()
        res["summary"].pop("store", None)  # a file-system path: not shown
        return res

    res = service._views.get(("fairness", sysm.name, field, target, ref.name if ref else None),
                             compute, heavy=True)
    return {"system": sysm.name, "field": field, "target": target,
            "merit_system": ref.name if ref else None, **res}

