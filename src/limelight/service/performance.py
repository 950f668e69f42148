"""Search Console's performance figures for a content owner's documents (issue 54 item 4).

Per document, over the audit's log and one system (``c``: the cutoff, the results a searcher
sees, the audit's smallest by default):

- ``impressions``: times the document was shown in the top ``c``: Σ o_q over the searches that
  rank it within ``c`` (counting every time a search was issued, as Search Console counts);
- ``searches``: the distinct searches that show it in the top ``c``;
- ``average_position``: its rank averaged over those impressions (Σ o_q · rank / impressions);
- ``attention``: the searchers expected to look at it under the browsing model, over every
  stored rank (Σ o_q · μ(rank): the weighted exposure of the document page);
- clicks and CTR: the audit's query log has no clicks, so none are given (``clicks_note``).

Per owner (every document the principal owns; an admin: every document, or one owner's) the
same summed, with the average position over all of its impressions. Per owner key, for admins,
the table of every owner (:func:`owner_table`). Hidden queries (the searchers' privacy) count in
every figure here; these figures name no query.

An owner's top searches (:func:`top_queries`): the searches showing its documents in the top
``c``, through the privacy screen, ranked by one named count (times issued, or the DP release's
noisy distinct searchers when the operator serves one).

The routes (``/api/performance``, ``/api/performance/queries``, their CSV,
``/api/performance/owners``, ``/performance``) are ``limelight.service.app``'s; this module
computes what they answer.

Vectorized over the store's document table (``offsets``, ``q``, ``rank``: memory-mapped) when
it has one, else over its documents × queries rank matrix (built once per system).
"""

from __future__ import annotations

import io

import numpy as np

import limelight.service.policy as policy

CLICKS_NOTE = "the audit's query log has no clicks: clicks and CTR are not known"
COLUMNS = ["docid", "title", "owner", "impressions", "searches", "average_position", "attention"]
OWNER_COLUMNS = ["owner", "n_documents", "n_shown", "impressions", "average_position", "attention"]
QUERY_COLUMNS = ["qid", "query", "count", "documents", "best_position"]
DP_BASIS = "distinct searchers, noisy (DP release)"


def _pairs_of(service, sysm, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row of d, q, rank)`` of every stored pair of the store documents ``d`` (codes)."""
    st = sysm.store
    lt = st.lookup_tables()
    if lt is not None:
        indptr, qs, ranks = lt["offsets"], lt["q"], lt["rank"]
    else:
        m = service._resources.get(("rank-matrix", sysm.name), st.ranks)
        indptr, qs, ranks = m.indptr, m.indices, m.data
    lo, hi = np.asarray(indptr[d], dtype=np.int64), np.asarray(indptr[d + 1], dtype=np.int64)
    lens = hi - lo
    starts = np.cumsum(lens) - lens
    idx = np.repeat(lo - starts, lens) + np.arange(int(lens.sum()), dtype=np.int64)
    return (np.repeat(np.arange(len(d)), lens), np.asarray(qs[idx], dtype=np.int64),
            np.asarray(ranks[idx], dtype=np.int64))


def metrics(service, sysm, rows: np.ndarray, browsing, c: int) -> dict[str, np.ndarray]:
    """The figures of the served document ``rows`` (arrays aligned with ``rows``)."""
    rows = np.asarray(rows, dtype=np.int64)
    d = sysm.store_d[rows]
    inside = d >= 0
    n = len(rows)
    out = {k: np.zeros(n) for k in ("impressions", "searches", "position_sum", "attention")}
    if inside.any():
        at, q, rank = _pairs_of(service, sysm, d[inside])
        w = np.asarray(sysm.store.queries.weights, dtype=np.float64)[q]
        shown = rank <= c
        k = int(inside.sum())
        pos = np.flatnonzero(inside)
        out["impressions"][pos] = np.bincount(at, weights=w * shown, minlength=k)
        out["searches"][pos] = np.bincount(at, weights=shown.astype(np.float64), minlength=k)
        out["position_sum"][pos] = np.bincount(at, weights=w * rank * shown, minlength=k)
        out["attention"][pos] = np.bincount(at, weights=w * browsing.weights(rank), minlength=k)
    return out


def _avg(pos_sum: float, impressions: float) -> float | None:
    return float(pos_sum / impressions) if impressions > 0 else None


def _rows_for(service, owner: str | None) -> tuple[np.ndarray, str | None]:
    """The document rows of the request: an owner's own; an admin's (or, with no portal,
    anyone's) every document, or owner key ``owner``'s. An owner naming another owner gets the
    404 of an unknown owner."""
    from limelight.service.core import NotFound

    p = policy.current_principal.get()
    pol = service.screen
    if pol is not None and not p.is_admin:
        if owner not in (None, "", p.owner):
            raise NotFound(f"unknown owner {owner!r}")
        return pol.ownership.rows(p.owner), p.owner
    if owner in (None, ""):
        return np.arange(len(service.doc_ids)), None
    if pol is None or owner not in pol.ownership.owners:
        raise NotFound(f"unknown owner {owner!r}" + ("" if pol is not None else
                                                     " (the server has no --owners)"))
    return pol.ownership.rows(owner), owner


def performance(service, system: str | None = None, browsing: str = "rbp:0.8", c: int | None = None,
                owner: str | None = None, limit: int = 100, offset: int = 0) -> dict:
    """The performance of the request's documents (see the module's docstring): the totals
    and a page of documents, most impressions first (then attention, then id)."""
    from limelight.service.core import BadRequest

    sysm = service.system(system)
    model = service.browsing(browsing)
    c = service.lead_cutoff(sysm) if c is None else int(c)
    if not 1 <= c <= sysm.store.depth:
        raise BadRequest(f"cutoff c must be between 1 and the store depth {sysm.store.depth}, got {c}")
    rows, key = _rows_for(service, owner)
    m = metrics(service, sysm, rows, model, c)
    ids = service.doc_ids.decode(rows) if len(rows) else np.zeros(0, dtype=object)
    order = np.lexsort((ids, -m["attention"], -m["impressions"])) if len(rows) else np.zeros(0, np.int64)
    page = order[offset:offset + limit]
    imp = float(m["impressions"].sum())
    docs = [{**service.doc_summary(int(rows[i])), "impressions": float(m["impressions"][i]),
             "searches": int(m["searches"][i]), "average_position": _avg(m["position_sum"][i], m["impressions"][i]),
             "attention": float(m["attention"][i])} for i in page.tolist()]
    return {"system": sysm.name, "browsing_model": model.name, "c": c, "depth": sysm.store.depth,
            "owner": key, "n_documents": int(len(rows)), "n_shown": int((m["impressions"] > 0).sum()),
            "impressions": imp, "average_position": _avg(float(m["position_sum"].sum()), imp),
            "attention": float(m["attention"].sum()), "clicks": None, "ctr": None, "clicks_note": CLICKS_NOTE,
            "total_weight": float(np.asarray(sysm.store.queries.weights, dtype=np.float64).sum()),
            "offset": offset, "limit": limit, "documents": docs}


def owner_table(service, system: str | None = None, browsing: str = "rbp:0.8", c: int | None = None,
                limit: int = 100, offset: int = 0) -> dict:
    """Per owner key (admins): its documents, how many are shown in the top ``c``, impressions,
    average position and attention summed over its documents; most impressions first."""
    from limelight.service.core import BadRequest, NotFound

    pol = service.screen
    if pol is None:
        raise NotFound("the server has no --owners: there are no owners to sum over")
    sysm = service.system(system)
    model = service.browsing(browsing)
    c = service.lead_cutoff(sysm) if c is None else int(c)
    if not 1 <= c <= sysm.store.depth:
        raise BadRequest(f"cutoff c must be between 1 and the store depth {sysm.store.depth}, got {c}")
    keys = pol.ownership.owners
    parts = [pol.ownership.rows(k) for k in keys]
    rows = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    who = np.repeat(np.arange(len(keys)), [len(p) for p in parts])
    m = metrics(service, sysm, rows, model, c)
    k = len(keys)
    agg = {name: np.bincount(who, weights=m[name], minlength=k)
           for name in ("impressions", "position_sum", "attention")}
    n_docs = np.bincount(who, minlength=k)
    n_shown = np.bincount(who, weights=(m["impressions"] > 0).astype(np.float64), minlength=k)
    names = np.asarray(keys, dtype=object)
    order = np.lexsort((names, -agg["attention"], -agg["impressions"])) if k else np.zeros(0, np.int64)
    page = order[offset:offset + limit]
    return {"system": sysm.name, "browsing_model": model.name, "c": c, "total": k, "offset": offset,
            "limit": limit, "clicks_note": CLICKS_NOTE,
            "owners": [{"owner": str(names[i]), "n_documents": int(n_docs[i]), "n_shown": int(n_shown[i]),
                        "impressions": float(agg["impressions"][i]),
                        "average_position": _avg(agg["position_sum"][i], agg["impressions"][i]),
                        "attention": float(agg["attention"][i])} for i in page.tolist()]}


def to_csv(records: list[dict], columns: list[str]) -> str:
    """``records`` as CSV text with a header (``columns``; missing values empty)."""
    import csv

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(records)
    return buf.getvalue()


def top_queries(service, system: str | None = None, c: int | None = None, owner: str | None = None,
                limit: int = 20, offset: int = 0) -> dict:
    """The searches that show the request's documents (an owner's own) in the top ``c``: per
    search, how many of the documents it shows there and the best position; privacy-screened
    (an owner sees only what the screen lets through, the hidden ones counted in ``total``).

    Ranked by one count, named in ``basis``: times issued (o_q), or with the operator's DP
    release (``--dp-epsilon``) the release's noisy count of distinct searchers, the only count an
    owner then sees (``dp`` states its epsilon and delta)."""
    sysm = service.system(system)
    c = _cutoff(sysm, service.lead_cutoff(sysm) if c is None else c)
    rows, key = _rows_for(service, owner)
    return {"system": sysm.name, "c": c, "owner": key,
            **query_table(service, sysm, rows, c, service.query_screen(sysm), limit, offset)}


def _cutoff(sysm, c: int) -> int:
    from limelight.service.core import BadRequest

    if not 1 <= int(c) <= sysm.store.depth:
        raise BadRequest(f"cutoff c must be between 1 and the store depth {sysm.store.depth}, got {c}")
    return int(c)


def query_table(service, sysm, rows: np.ndarray, c: int, screen, limit: int = 20, offset: int = 0) -> dict:
    """The searches showing documents ``rows`` (served rows of ``service``) in the top ``c`` of
    ``sysm``, through ``screen`` (``None``: every search): see :func:`top_queries`."""
    d = sysm.store_d[np.asarray(rows, dtype=np.int64)]
    d = d[d >= 0]
    if len(d):
        _, q, rank = _pairs_of(service, sysm, d)
        shown = rank <= c
        q, rank = q[shown], rank[shown]
    else:
        q = rank = np.zeros(0, np.int64)
    uq, inv = np.unique(q, return_inverse=True)
    n_docs = np.bincount(inv, minlength=len(uq))
    best = np.full(len(uq), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, inv, rank)
    qs = sysm.store.queries
    privacy = screen.summary(uq) if screen is not None else None
    keep = ~screen.hidden[uq] if screen is not None else np.ones(len(uq), dtype=bool)
    if screen is not None and screen.noisy is not None:
        count, basis, dp = screen.noisy[uq].astype(np.float64), DP_BASIS, screen.dp
    else:
        count, basis, dp = np.asarray(qs.weights, dtype=np.float64)[uq], "times issued", None
    sel = np.flatnonzero(keep)
    order = sel[np.lexsort((uq[sel], best[sel], -count[sel]))]
    page = order[offset:offset + limit]
    ids = qs.ids.decode(uq[page]).tolist() if len(page) else []
    return {"basis": basis, "total": int(len(uq)), "listed": int(len(sel)), "privacy": privacy, "dp": dp,
            "offset": offset, "limit": limit,
            "queries": [{"qid": str(qid), "query": str(qs.texts[int(uq[i])]), "count": float(count[i]),
                         "documents": int(n_docs[i]), "best_position": int(best[i])}
                        for qid, i in zip(ids, page.tolist(), strict=True)]}
