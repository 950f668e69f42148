"""The topics view (issue 56): topic-aware retrievability of a served system — the collection's
Gini beside the Gini within each topic of the log's searches, the most unequal topics, and a
document's standing within its topics — as ``/api/topics`` (JSON) and the ``/topics`` page.

Nothing is computed here that the library does not compute: the topics are
:func:`limelight.exposure.topics.topics_from_texts` over the system's query texts (K-means over
TF-IDF, LSA-reduced, seeded by the audit's seed), the measure
:func:`limelight.exposure.topics.store_topic_retrievability` at the audit's ``topics`` stage's c
(else 100; at most the store's depth),
both kept in the service's byte-bounded view cache. K defaults to the audit's ``topics`` stage's
when it ran, else 20. A topic is named by its heaviest words (each in two searches or more); under the portal's privacy
screen (an owner, with searches hidden from them) the names are withheld ("topic 3"), since the
words may come from searches issued fewer than k times. A document's standing is asked through
``service.doc_row``, so an owner sees only their own documents'.
"""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse

DEFAULT_K = 20
MAX_K = 200
TOPICS_SHOWN = 10  # most unequal topics on the page (the JSON has them all)

SystemQ = Annotated[str | None, Query(max_length=200, description="audited system (default: the first)")]
K = Annotated[int | None, Query(ge=1, le=MAX_K, description="number of topics K the log's searches are "
                                                         "clustered into (default: the audit's, else 20)")]
Doc = Annotated[str | None, Query(max_length=1000, description="a document whose standing within its topics "
                                                               "is asked")]


def _audit_topics(service) -> dict:
    """The audit's ``topics`` stage result (``{}`` when it did not run)."""
    try:
        for s in service.audit.manifest.get("stages", []):
            if s.get("name") == "topics" and s.get("status") in ("done", "cached"):
                return s.get("result") or {}
    except (OSError, ValueError, AttributeError):
        pass
    return {}


def default_k(service) -> int:
    return int(_audit_topics(service).get("k") or DEFAULT_K)


def _clean(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if hasattr(v, "item"):  # numpy scalars
        return _clean(v.item())
    return v


def _row(r: dict, named: bool) -> dict:
    out = {key: _clean(v) for key, v in r.items()}
    if not named:
        out["name"] = f"topic {out['topic']}"
    return out


def topic_view(service, system: str | None = None, k: int | None = None, docid: str | None = None) -> dict:
    """Topic-aware retrievability of ``system`` with ``k`` topics: the collection's Gini, the
    per-topic aggregates, every topic (most unequal first) and, with ``docid``, that document's
    standing within its topics (``None`` for a document no search of any topic finds)."""
    from limelight.errors import LimelightError
    from limelight.exposure.topics import store_topic_retrievability, topics_from_texts

    sysm = service.system(system)
    row = service.doc_row(docid) if docid else None  # who may see what is asked first
    st = sysm.store
    k = default_k(service) if k is None else int(k)
    n_q = len(st.query_weights)
    if not 1 <= k <= n_q:
        raise LimelightError(f"k must lie in 1..{n_q} (the searches), got {k}")
    seed = int(_audit_topics(service).get("seed") or (service.audit.manifest.get("seed") or 0))
    c = min(int(_audit_topics(service).get("c") or 100), st.depth)

    def compute():
        topics = service._views.get(("topic-model", sysm.name, k, seed),
                                    lambda: topics_from_texts(st.queries_table().column("text"), k, seed),
                                    heavy=True)
        return store_topic_retrievability(st, topics, c)

    res = service._views.get(("topics", sysm.name, k, seed), compute, heavy=True)
    s = res.summary
    named = service.query_screen(sysm) is None  # names withheld from a screened principal
    out = {"system": sysm.name, "k": k, "c": c, "seed": seed, "method": res.topics.method,
           "weighting": "1 / ln(1 + rank)", "population": "documents some search of the topic finds",
           "collection_gini": float(st.retrievability(c=c).gini),
           **{key: _clean(s[key]) for key in ("gini_same_weighting", "topic_gini_min", "topic_gini_mean",
                                               "topic_gini_max", "topic_gini_mean_weighted",
                                               "n_topics_with_documents")},
           "names_withheld": not named,
           "topics": [_row(r, named) for r in res.table.to_dict("records")],
           "docid": None, "standing": None}
    if row is not None:
        stand = res.standing(docid)
        out["docid"] = docid
        out["standing"] = [_row(r, named) for r in stand.drop(columns="docid").to_dict("records")]
    return out


def add_topic_routes(app: FastAPI, service, page, responses: dict | None = None) -> None:
    """``/api/topics`` and the ``/topics`` page."""
    @app.get("/api/topics", tags=["retrievability"], responses=responses)
    def api_topics(system: SystemQ = None, k: K = None, docid: Doc = None) -> dict:
        """Topic-aware retrievability (T-Retrievability): the collection's Gini beside the Gini
        within each of K topics of the log's searches, and a document's standing within them."""
        return topic_view(service, system, k, docid or None)

    @app.get("/topics", response_class=HTMLResponse, include_in_schema=False)
    def topics_page(request: Request, system: SystemQ = None, k: K = None, doc: Doc = None):
        res = topic_view(service, system, k, doc or None)
        shown = [t for t in res["topics"] if t["gini"] is not None][:TOPICS_SHOWN]
        others = []
        for name in service.systems:
            if name != res["system"]:
                o = topic_view(service, name, res["k"])
                others.append({"system": name, "collection_gini": o["collection_gini"],
                               "topic_gini_mean": o["topic_gini_mean"], "topic_gini_min": o["topic_gini_min"],
                               "topic_gini_max": o["topic_gini_max"]})
        return page(request, "topics.html", res=res, shown=shown, others=others, system=res["system"],
                    doc=doc or "")
