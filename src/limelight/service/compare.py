"""Two audits side by side, per document and per owner (issue 54 item 4), as Search Console
compares two date ranges: engine version A against version B, or two periods of the log.

Side A is the served audit's system ``system``; side B is either another system of the same
audit (``system_b``, by default the first other than A's) or a system of the audit the operator names with ``serve --compare DIR``
(by default the system of the same name there, else its first). Both sides are counted on the
same cutoff ``c`` and browsing model, over the documents of the request (an owner's own; an
admin's every document or one owner's; with ``docid`` that document only, under the document
rule: another owner's document answers as an unknown id), with the figures of
:mod:`limelight.service.performance` (impressions, average position, attention) for A and B and
the difference B − A. A document of A that audit B does not hold is marked ``in_b: false``
(its B figures empty). The searches listed for each side pass the same privacy screen (the
policy's, for each side's own query set): hidden ones are counted, never named.

Both figures are exact counts over each side's log (no sampling), so a difference of zero is
called equal and any other difference is a difference.
"""

from __future__ import annotations

import numpy as np

import limelight.service.performance as PF

FIGURES = ("impressions", "average_position", "attention")
COLUMNS = ["docid", "title", "owner", "in_b",
           *(f"{f}_{s}" for f in ("impressions", "searches", "average_position", "attention") for s in ("a", "b", "diff"))]


def sides(service, other, system: str | None, system_b: str | None):
    """``(side A's system, side B's service, side B's system)``: B from ``other`` (the
    ``--compare`` audit) when there is one, else another system of this audit (by default the
    first other than A's; an audit of one system has nothing to compare: 404)."""
    from limelight.service.core import NotFound

    sys_a = service.system(system)
    if other is None:
        if system_b is None:
            system_b = next((n for n in service.systems if n != sys_a.name), None)
            if system_b is None:
                raise NotFound(f"nothing to compare: the audit has one system ({sys_a.name}) and the server "
                               "no second audit (serve --compare DIR)")
        return sys_a, service, service.system(system_b)
    name = system_b if system_b is not None else (sys_a.name if sys_a.name in other.systems else None)
    return sys_a, other, other.system(name)


def _label(service, sysm) -> str:
    return f"{service.manifest.get('name') or service.audit.path.name} · {sysm.name}"


def _side(service, sysm, rows: np.ndarray, model, c: int) -> dict[str, np.ndarray]:
    """Per row of ``rows`` (served rows of ``service``; -1: not in it): impressions, searches,
    average position (NaN: none) and attention."""
    rows = np.asarray(rows, dtype=np.int64)
    inside = rows >= 0
    out = {k: np.zeros(len(rows)) for k in ("impressions", "searches", "position_sum", "attention")}
    if inside.any():
        m = PF.metrics(service, sysm, rows[inside], model, c)
        for k in out:
            out[k][inside] = m[k]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["average_position"] = np.where(out["impressions"] > 0, out["position_sum"] / out["impressions"], np.nan)
    return out


def _num(v: float) -> float | None:
    return None if v != v else float(v)


def _totals(m: dict[str, np.ndarray], keep: np.ndarray | None = None) -> dict:
    sel = np.ones(len(m["impressions"]), dtype=bool) if keep is None else keep
    imp = float(m["impressions"][sel].sum())
    return {"impressions": imp, "searches": None,
            "average_position": PF._avg(float(m["position_sum"][sel].sum()), imp),
            "attention": float(m["attention"][sel].sum()), "n_shown": int((m["impressions"][sel] > 0).sum())}


def _diff(a, b):
    return None if a is None or b is None else float(b) - float(a)


def compare(service, other, system: str | None = None, system_b: str | None = None,
            browsing: str = "rbp:0.8", c: int | None = None, owner: str | None = None,
            docid: str | None = None, limit: int = 100, offset: int = 0) -> dict:
    """Side A against side B (see the module's docstring): the totals of the request's
    documents and a page of documents, the largest change in impressions first."""
    sys_a, svc_b, sys_b = sides(service, other, system, system_b)
    model = service.browsing(browsing)
    if c is None:
        c = min(service.lead_cutoff(sys_a), svc_b.lead_cutoff(sys_b))
    c = PF._cutoff(sys_a, c)
    c = PF._cutoff(sys_b, c)
    rows, key = PF._rows_for(service, owner)
    if docid is not None:
        rows = np.asarray([service.doc_row(docid)], dtype=np.int64)  # the document rule: 404 as unknown
    rows = np.asarray(rows, dtype=np.int64)
    ids = service.doc_ids.decode(rows) if len(rows) else np.zeros(0, dtype=object)
    rows_b = rows if svc_b is service else (
        svc_b.doc_ids.encode(list(ids), missing=-1) if len(rows) else np.zeros(0, np.int64))
    ma, mb = _side(service, sys_a, rows, model, c), _side(svc_b, sys_b, rows_b, model, c)
    in_b = np.asarray(rows_b) >= 0
    change = np.abs(mb["impressions"] - ma["impressions"])
    order = np.lexsort((ids, -np.abs(mb["attention"] - ma["attention"]), -change)) if len(rows) else np.zeros(0, np.int64)
    page = order[offset:offset + limit]
    docs = []
    for i in page.tolist():
        a = {"impressions": float(ma["impressions"][i]), "searches": int(ma["searches"][i]),
             "average_position": _num(ma["average_position"][i]), "attention": float(ma["attention"][i])}
        b = ({"impressions": float(mb["impressions"][i]), "searches": int(mb["searches"][i]),
              "average_position": _num(mb["average_position"][i]), "attention": float(mb["attention"][i])}
             if in_b[i] else {"impressions": None, "searches": None, "average_position": None, "attention": None})
        docs.append({**service.doc_summary(int(rows[i])), "in_b": bool(in_b[i]), "a": a, "b": b,
                     "diff": {k: _diff(a[k], b[k]) for k in a}})
    ta, tb = _totals(ma), _totals(mb, in_b)
    policy = service.screen
    screen_a = service.query_screen(sys_a)
    screen_b = policy.query_screen(sys_b.store) if policy is not None else None
    return {"a": {"audit": _label(service, sys_a), "system": sys_a.name, **ta,
                  "total_weight": float(np.asarray(sys_a.store.queries.weights, dtype=np.float64).sum()),
                  "top_queries": PF.query_table(service, sys_a, rows, c, screen_a, 10, 0)},
            "b": {"audit": _label(svc_b, sys_b), "system": sys_b.name, **tb,
                  "total_weight": float(np.asarray(sys_b.store.queries.weights, dtype=np.float64).sum()),
                  "top_queries": PF.query_table(svc_b, sys_b, rows_b[in_b], c, screen_b, 10, 0)},
            "diff": {k: _diff(ta[k], tb[k]) for k in ("impressions", "average_position", "attention", "n_shown")},
            "same_audit": svc_b is service, "browsing_model": model.name, "c": c, "owner": key,
            "docid": docid, "n_documents": int(len(rows)), "n_in_b": int(in_b.sum()),
            "offset": offset, "limit": limit, "documents": docs}


def csv_rows(res: dict) -> list[dict]:
    """The documents of a comparison as flat CSV records (:data:`COLUMNS`)."""
    out = []
    for d in res["documents"]:
        row = {"docid": d["docid"], "title": d["title"], "owner": res["owner"] or "", "in_b": d["in_b"]}
        for f in ("impressions", "searches", "average_position", "attention"):
            for side in ("a", "b", "diff"):
                v = d[side][f]
                row[f"{f}_{side}"] = "" if v is None else v
        out.append(row)
    return out
