"""The read-only model behind ``limelight serve``: everything the web pages and the JSON API show.

An :class:`AuditService` opens an audit directory through :class:`limelight.audit.AuditDir` once
(the index's stored documents and every system's ExposureStore, read-only: a document's
exposing queries come from the store's per-document index, memory-mapped, a query's top-n from
its rows, and the query search from the query set's lower-cased texts in one Arrow array) and
answers the questions of the pages: search, which queries expose a document, what a query
exposes, retrievability and its inequality, and exposing queries of a pasted document. Nothing
here takes a file-system path from a request: systems, models and EQI methods are names looked
up among those the audit holds.

Memory: what is read-only and large is mapped, not copied (the BM25 index, the stores' index
pieces, the audit's query vectors, copy-on-write), Arrow's pool hands back the buffers of
Parquet decoding, the hybrid search fuses the BM25 and dense retrievers already open, and the
exact reverse search engines (about 650 MB on the Debian demo audit) are built on the first EQI
search of their system unless ``warm(eqi=True)``.

Ranks are 1-based everywhere here (as in files and reports); exposure under a browsing model is
``BrowsingModel.weights(rank)``, which converts to the 0-based ρ of the EQI paper itself.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from limelight.audit import AuditDir, NotAnAuditError
from limelight.errors import LimelightError, UnknownIdError
from limelight.exposure.browsing import BrowsingModel, parse_browsing_model
from limelight.service.concurrency import Gate, SingleFlight, ViewCache, release_memory
from limelight.service.snippets import make_snippet

TITLE_FIELDS = ("title", "Title", "name", "summary")
RERANK_DEPTH = 50
CHART_QUERIES = 100  # n_{d→q} of the paper's Figure 1
VIEW_CACHE_BYTES = 256 << 20  # derived retrievability views kept (LRU), bytes
VIEW_WORKERS = 2  # r(d) computations at once: each reads a whole store (transient memory)
VIEW_PENDING = 8  # distinct views computing or waiting to; a new one beyond: 429
EQI_QUEUE = 4  # EQI searches waiting behind the running one; one more: 429
EQI_TIMEOUT = 30.0  # seconds an EQI search may wait for its turn; longer: 503
EQI_THREADS = 1  # FAISS/numba threads of an EQI search (2 on 2 cores: +35% speed, every request waits)


class NotFound(LimelightError):
    """An id or name the audit does not hold (served as HTTP 404 with this message)."""


class BadRequest(LimelightError):
    """A request value outside what the audit supports (served as HTTP 422 with this message)."""


def check_query(text: str) -> str:
    """The rule for a search query, as ``limelight search`` applies it: a blank text (empty or
    whitespace only) is an error, never a search with no results."""
    from limelight.data.queries import check_query_text

    try:
        return check_query_text(text)
    except LimelightError as e:
        raise BadRequest(str(e)) from None


@dataclass
class _System:
    name: str
    settings: dict
    store: Any  # ExposureStore
    doc_rows: np.ndarray  # store d -> row in the served documents
    store_d: np.ndarray  # served row -> store d (-1: not in the store)


def _by_rank(rank: np.ndarray, weights: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ranks of a document's exposing queries (ascending), how many queries put it
    at each (float) and, with ``weights``, the sum of their weights o_q."""
    rank = np.asarray(rank, dtype=np.int64)
    if not len(rank):
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    counts = np.bincount(rank).astype(np.float64)
    ranks = np.flatnonzero(counts)
    wsum = np.bincount(rank, weights=weights)[ranks] if weights is not None else np.zeros(len(ranks))
    return ranks, counts[ranks], wsum


def _to_py(v: Any) -> Any:
    """A JSON-friendly scalar (NaN/None -> None)."""
    if v is None:
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v


class AuditService:
    """An audit directory opened for serving (read-only, thread-safe).

    ``reranker`` is an optional re-ranker checkpoint (``limelight rerank`` output) given by the
    operator on the command line; the search page offers re-ranking only when one is loaded.

    Concurrency (``limelight.service.concurrency``): no lock is held while anything is computed.
    What is opened once (retrievers, EQI engines and models, ``info``) is a per-key
    ``SingleFlight``; derived retrievability views are a ``ViewCache`` bounded in bytes
    (``view_cache_bytes``, LRU) computing at most ``view_workers`` r(d) at once; EQI searches
    pass a ``Gate``: one at a time, ``eqi_queue`` waiting at most, each waiting at most
    ``eqi_timeout`` seconds (``Busy``/``QueueTimeout`` beyond: HTTP 429/503), on at most
    ``eqi_threads`` FAISS and numba threads (``None``: theirs), so that the other cores keep
    answering the rest of the API.
    """

    def __init__(self, audit: str | os.PathLike | AuditDir, reranker: str | os.PathLike | None = None,
                 threads: int | None = None, view_cache_bytes: int = VIEW_CACHE_BYTES,
                 view_workers: int = VIEW_WORKERS, eqi_queue: int = EQI_QUEUE,
                 eqi_timeout: float = EQI_TIMEOUT, eqi_threads: int | None = EQI_THREADS):
        from limelight.retrieval.index_dir import load_docs, read_meta

        self.audit = audit if isinstance(audit, AuditDir) else AuditDir(audit)
        self.manifest = self.audit.manifest  # NotAnAuditError when absent
        if not self.audit.index_dir.exists():
            raise NotAnAuditError(f"{self.audit.path}: the audit has no index/ directory")
        self.index_meta = read_meta(self.audit.index_dir)
        self.docs = load_docs(self.audit.index_dir)
        release_memory()  # the Parquet decoding's buffers: ~175 MB kept by Arrow's pool otherwise
        self.doc_ids = self.docs.ids
        self.threads = threads
        self.title_field = next((f for f in TITLE_FIELDS if f in self.docs.fields), None)
        self.group_fields = [f for f in self.docs.fields
                             if f != self.title_field and self._is_categorical(self.docs.fields[f])]
        self._resources = SingleFlight()  # retrievers, EQI engines and models, info: opened once
        self._views = ViewCache(view_cache_bytes, view_workers, VIEW_PENDING)  # r(d), Lorenz, orders, groups
        # EQI searches one at a time: each uses every core (FAISS, numba); run side by side under
        # load they thrash (34 concurrent dense searches: p99 40 s, measured). A bounded queue.
        self.eqi_gate = Gate(1, eqi_queue, eqi_timeout, what="EQI searches")
        self.eqi_threads = eqi_threads
        self._exact_lock = threading.Lock()  # ExactReverse.add_documents is not thread-safe
        self._rerank_lock = threading.Lock()  # the torch model is not shared across threads
        self.systems: dict[str, _System] = {}
        # who may see what (limelight.service.policy.Policy, set by the portal): None serves every
        # document and query to every visitor (a researcher's server on loopback)
        self.screen: Any = None
        settings = {s.get("name"): s for s in self.manifest.get("systems", []) if isinstance(s, dict)}
        shared_queries: dict[str, Any] = {}  # one query set in memory per fingerprint
        docs_fp = None
        for name in self.audit.systems:
            store = self.audit.store(name)
            # a server holds every system's store: lookups keep the score column, not the pairs
            store.keep_pairs = False
            qfp = store.manifest.get("queries")
            if qfp in shared_queries:
                store.queries = shared_queries[qfp]
            elif qfp:
                shared_queries[qfp] = store.queries
            if docs_fp is None:
                from limelight.exposure.fingerprints import ids_fingerprint

                docs_fp = ids_fingerprint(self.doc_ids)
            if store.manifest.get("documents") == docs_fp:
                store.doc_ids = self.doc_ids  # the served documents, in the store's order
            rows = self.doc_ids.encode(store.doc_ids.strings, missing=-1)
            if (rows < 0).any():
                raise NotAnAuditError(f"{self.audit.store_dir(name)}: documents missing from the "
                                      f"audit's index (e.g. {store.doc_ids[int(np.flatnonzero(rows < 0)[0])]!r})")
            inv = np.full(len(self.doc_ids), -1, dtype=np.int64)
            inv[rows] = np.arange(len(rows))
            self.systems[name] = _System(name, settings.get(name, {}), store, rows, inv)
        if not self.systems:
            raise NotAnAuditError(f"{self.audit.path}: the audit has no systems with exposure stores")
        self.reranker = None
        if reranker is not None:
            from limelight.rerank import KernelReranker, NeuralRanker

            self.reranker = KernelReranker(NeuralRanker.load(reranker), self.docs, depth=RERANK_DEPTH)

    @property
    def group_field(self) -> str | None:
        """The audit's group field (``collection.group_field``), else the first categorical one."""
        coll = self.manifest.get("collection")
        f = coll.get("group_field") if isinstance(coll, dict) else self.manifest.get("group_field")
        if f in self.docs.fields:
            return f
        return self.group_fields[0] if self.group_fields else None

    def warm(self, eqi: bool = False) -> None:
        """Load the search models and r(d) of every system (at c = 100 and the audit's cutoffs,
        with the groups of the audit's group field) and the near-miss ladder of every BM25 system
        (one search of the whole log each) now rather than on first request; with ``eqi``, the
        exact reverse search engines too (else the first EQI search of each system builds its
        engine: seconds, and 160-340 MB each on the Debian demo audit)."""
        for m in self.search_models:
            self.retriever(m).search_batch(["warm up"], 10)
        import limelight.service.eqi as _eqi
        import limelight.service.insight as _insight

        cutoffs = [c for c in self.manifest.get("cutoffs", []) if isinstance(c, int)]
        for name, s in self.systems.items():
            for c in sorted({min(100, s.store.depth), *(c for c in cutoffs if 1 <= c <= s.store.depth)}):
                self.retrievability(name, c)  # the pages' default c and the audit's own cutoffs
                if self.group_field is not None:  # and the dashboard's groups at those cutoffs
                    self.groups(self.group_field, name, c, limit=1)
            _insight.prepare_near_misses(self, s)  # the document page's near misses: their ladder
            if eqi:
                _eqi.prepare(self, s)
        release_memory()

    # ---- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _is_categorical(values: np.ndarray) -> bool:
        """A field with few distinct values (or list-valued tags): a grouping field."""
        sample = [v for v in values[: min(len(values), 5000)].tolist() if v not in (None, "")]
        if not sample:
            return False
        if all(isinstance(v, str) and v.startswith("[") for v in sample[:50]):
            return True
        return len(set(sample)) <= max(50, len(sample) // 20)

    def system(self, name: str | None) -> _System:
        """A system by name (the first one when ``None``)."""
        if name is None or name == "":
            return next(iter(self.systems.values()))
        try:
            return self.systems[name]
        except KeyError:
            raise NotFound(f"unknown system {name!r} (systems: {', '.join(self.systems)})") from None

    def browsing(self, spec: str) -> BrowsingModel:
        try:
            return parse_browsing_model(spec)
        except LimelightError as e:
            raise BadRequest(str(e)) from None

    def doc_row(self, docid: str) -> int:
        """The row of a document whose detail the request may see: an unknown id, and under the
        portal a document the principal may not see, are the same ``NotFound``."""
        try:
            row = self.doc_ids.lookup(docid)
        except UnknownIdError:
            row = None
        if row is None or (self.screen is not None and not self.screen.document_visible(row)):
            raise NotFound(f"unknown document id {docid!r}")
        return row

    def query_screen(self, sysm: _System):
        """The privacy screen of the system's queries for the request (``QueryScreen``), or
        ``None`` when every query may be shown."""
        return None if self.screen is None else self.screen.query_screen(sysm.store)

    def title(self, row: int) -> str:
        if self.title_field is None:
            return str(self.doc_ids[row])
        v = self.docs.fields[self.title_field][row]
        return str(v) if v not in (None, "") else str(self.doc_ids[row])

    def doc_summary(self, row: int) -> dict:
        return {"docid": str(self.doc_ids[row]), "title": self.title(row)}

    @property
    def search_models(self) -> list[str]:
        """The kinds the search box offers: those an index directory serves alone
        (:func:`~limelight.retrieval.spec.models`) whose index parts this audit's index holds."""
        from limelight.retrieval.spec import System, models
        from limelight.retrieval.systems import get_kind

        return [m for m in models()
                if get_kind(m).needs_index and System.of(m).index_holds(self.index_meta)]

    def info(self) -> dict:
        """What the audit holds: collection, systems, search models, EQI methods, fields (built
        once: the audit is read-only while served; callers must not change it)."""
        return self._resources.get(("info",), self._info)

    def _info(self) -> dict:
        return {
            "audit": self.audit.path.name,
            "collection": self.index_meta.get("collection"),
            "n_docs": len(self.doc_ids),
            "systems": [{"name": s.name, "depth": s.store.depth, "n_queries": len(s.store.queries),
                         "settings": {k: _to_py(v) for k, v in s.settings.items()
                                      if isinstance(v, str | int | float | bool)},
                         **dict(zip(("eqi_methods", "eqi_note"), self.eqi_for(s), strict=True))}
                        for s in self.systems.values()],
            "search_models": self.search_models,
            "rerank": self.reranker is not None,
            "eqi_methods": self.eqi_methods(),
            "group_fields": list(self.group_fields),
        }

    # ---- search ----------------------------------------------------------------------------------
    def import_libraries(self) -> None:
        """Import the libraries the search models' retrievers load (their kinds' ``preload``),
        opening none of them: a pre-fork server calls it before it forks, so that each worker
        opens its models without importing their libraries again."""
        from limelight.retrieval.spec import System

        for m in self.search_models:
            preload = System.of(m).registered.preload
            if preload is not None:
                preload()

    def retriever(self, model: str):
        """The search retriever of ``model`` (one of :attr:`search_models`) over the audit's
        index, with the default settings (opened once; a kind made of others, the hybrid, fuses
        the retrievers of its parts already open here rather than opening two more)."""
        from limelight.retrieval.spec import models

        if model not in models():
            raise BadRequest(f"unknown model {model!r} ({', '.join(models())})")
        if model not in self.search_models:
            raise BadRequest(f"the audit's index has no dense index, so model {model!r} is unavailable")

        def open_model():
            from limelight.retrieval.spec import System

            return System.of(model).open(self.audit.index_dir, threads=self.threads,
                                                shared=self.retriever)

        return self._resources.get(("retriever", model), open_model)

    def search(self, text: str, model: str = "bm25", limit: int = 10, offset: int = 0,
               rerank: bool = False, snippets: bool = True) -> dict:
        """Top results of ``text`` under ``model`` (optionally re-ranked), with snippets unless
        ``snippets`` is false (a client that reads only ids and scores, such as an ``http``
        system's replay: a snippet costs ~0.1 ms a hit, most of a 100-hit answer)."""
        check_query(text)
        if rerank and self.reranker is None:
            raise BadRequest("no re-ranker is loaded (start the server with --reranker CHECKPOINT)")
        retriever = self.retriever(model)
        want = offset + limit
        k = max(want, RERANK_DEPTH) if rerank else want
        docs, scores = retriever.search_batch([text], k)
        docs, scores = np.asarray(docs)[0], np.asarray(scores, dtype=np.float64)[0]
        keep = docs >= 0
        docs, scores = docs[keep], scores[keep]
        # retriever codes -> served document rows (the index's own order; recoded to be safe)
        rows = self.doc_ids.encode(retriever.doc_ids.decode(docs)) if len(docs) else docs
        if rerank and len(rows):
            rows, scores = self._rerank(text, rows, scores)
        total = len(rows)
        page_rows, page_scores = rows[offset:want], scores[offset:want]
        results = []
        for i, (r, s) in enumerate(zip(page_rows.tolist(), page_scores.tolist(), strict=True)):
            snip = make_snippet(self.docs.texts[r], text) if snippets else {}
            results.append({"rank": offset + i + 1, **self.doc_summary(r), "score": float(s), **snip})
        return {"query": text, "model": model, "rerank": bool(rerank), "total": total,
                "offset": offset, "limit": limit, "results": results}

    def _rerank(self, text: str, rows: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from limelight.data.ids import IdMap
        from limelight.data.queries import Queries
        from limelight.data.run import Run

        qs = Queries(IdMap(["q"], kind="query"), np.asarray([text], dtype=object))
        run = Run.from_codes(qs.ids, self.doc_ids, np.zeros(len(rows), dtype=np.int32),
                             rows.astype(np.int32), scores, "first-stage")
        with self._rerank_lock:  # the torch model is not shared across threads
            out = self.reranker.transform(qs, run)
        return out.d.astype(np.int64), out.score.astype(np.float64)

    # ---- exposure: documents and queries ---------------------------------------------------------
    def document(self, docid: str, system: str | None = None, browsing: str = "rbp:0.8",
                 limit: int = 50, offset: int = 0) -> dict:
        """A document, the queries that expose it (rank order) with their exposure under the
        browsing model, its total exposure, and the Figure 1 bars of its top exposing queries."""
        row = self.doc_row(docid)
        sysm = self.system(system)
        model = self.browsing(browsing)
        st = sysm.store
        self._scores_in_memory(sysm)
        q, rank, score = st.document_pairs(int(sysm.store_d[row]))  # by rank, then query id
        weights = np.asarray(st.queries.weights, dtype=np.float64)[q]
        ranks, counts, wsum = _by_rank(rank, weights)  # the totals count every query
        mu_r = model.weights(ranks) if len(ranks) else np.zeros(0)
        screen, privacy = self.query_screen(sysm), None
        if screen is not None:  # the lists show what the screen lets through
            privacy = screen.summary(q)
            keep = ~screen.hidden[np.asarray(q, dtype=np.int64)]
            q, rank, score, weights = q[keep], rank[keep], score[keep], weights[keep]

        def entries(sel: slice) -> list[tuple]:
            qq = q[sel]
            return list(zip(st.queries.ids.decode(qq).tolist(), st.queries.texts[qq].tolist(),
                            weights[sel].tolist(), rank[sel].tolist(), score[sel].tolist(), strict=True))

        page = entries(slice(offset, offset + limit))
        chart_rows = entries(slice(0, CHART_QUERIES))
        mu_page = model.weights(np.asarray([r[3] for r in page], dtype=np.int64))
        queries = [{"qid": q, "query": t, "weight": float(w), "rank": int(rk), "score": float(s),
                    "exposure": float(m)} for (q, t, w, rk, s), m in zip(page, mu_page.tolist(), strict=True)]
        depth = st.depth
        import limelight.service.insight as _insight

        c = self.lead_cutoff(sysm)
        all_mu = model.weights(np.asarray(rank, dtype=np.int64)) if len(rank) else np.zeros(0)
        return {
            **self.doc_summary(row),
            "text": str(self.docs.texts[row]),
            "fields": {k: _to_py(v[row]) for k, v in self.docs.fields.items()},
            "system": sysm.name, "browsing_model": model.name, "depth": depth,
            "n_exposing": int(counts.sum()),
            "exposure": float(mu_r @ counts),
            "weighted_exposure": float(mu_r @ wsum),
            "total": int(counts.sum()), "offset": offset, "limit": limit,
            "queries": queries, "privacy": privacy,
            "chart": [{"position": i + 1, "qid": q, "query": t, "rank": int(rk), "height": depth - (int(rk) - 1)}
                      for i, (q, t, _w, rk, _s) in enumerate(chart_rows)],
            "systems": self.document_systems(row, model),
            "top_searches": _insight.top_searches(q, np.asarray(rank), weights, all_mu, st.queries),
            "standing": {"c": c, "n_queries": int(len(st.queries)),
                         "total_weight": float(np.asarray(st.queries.weights, dtype=np.float64).sum()),
                         **_insight.standing(self._served_r(sysm, c), row)},
        }

    def lead_cutoff(self, sysm: _System) -> int:
        """The cutoff the pages' first sentence speaks of: the audit's smallest cutoff (the first
        page of results), else 10, within the store's depth."""
        cutoffs = [c for c in self.manifest.get("cutoffs", []) if isinstance(c, int) and c >= 1]
        return min(min(cutoffs, default=10), sysm.store.depth)

    def document_systems(self, row: int, model: BrowsingModel, c: int = 100) -> list[dict]:
        """One document's exposure under every audited system, side by side: the number of
        queries exposing it (in the store's top-n and in the top ``c``), its best rank, its
        exposure Σμ under ``model`` and r(d) at ``c`` (``c`` capped at each store's depth)."""
        out = []
        for sysm in self.systems.values():
            cs = min(c, sysm.store.depth)
            ranks, counts, _ = _by_rank(sysm.store.document_ranks(int(sysm.store_d[row])))
            mu = model.weights(ranks) if len(ranks) else np.zeros(0)
            out.append({"system": sysm.name, "depth": sysm.store.depth, "c": cs,
                        "n_exposing": int(counts.sum()), "n_exposing_c": int(counts[ranks <= cs].sum()),
                        "best_rank": int(ranks.min()) if len(ranks) else None,
                        "exposure": float(mu @ counts), "r": float(self._served_r(sysm, cs)[row])})
        return out

    def _scores_in_memory(self, sysm: _System) -> None:
        """Load the system's score column once (4 bytes a pair: 46 MB for 11.5M pairs), on its
        first document request: a document's exposing pairs are spread over every shard, and
        reading their row groups each time cost 25 ms a request, most of the document page.
        A store with lookup tables reads a document's own rows only: nothing to load."""
        if sysm.store.has_lookup_tables:
            return
        self._resources.get(("scores", sysm.name), lambda: sysm.store.scores() is not None)

    def query_row(self, sysm: _System, qid: str) -> int:
        """The code of a log query the request may see: an unknown id, and under the portal a
        query the privacy screen hides, are the same ``NotFound``."""
        try:
            q = sysm.store.queries.ids.lookup(qid)
        except UnknownIdError:
            q = None
        screen = self.query_screen(sysm) if q is not None else None
        if q is None or (screen is not None and screen.hidden[q]):
            raise NotFound(f"unknown query id {qid!r} in system {sysm.name!r}")
        return q

    def query(self, qid: str, system: str | None = None, browsing: str = "rbp:0.8",
              limit: int = 50, offset: int = 0) -> dict:
        """A log query and the documents it exposes (its stored top-n), with exposure μ(rank)."""
        sysm = self.system(system)
        q = self.query_row(sysm, qid)
        model = self.browsing(browsing)
        st = sysm.store
        d_all, rank_all, score_all = _query_pairs(st, q)
        sel = slice(max(offset, 0), max(offset, 0) + max(limit, 0))
        d = np.asarray(d_all[sel], dtype=np.int64)
        ranks = np.asarray(rank_all[sel], dtype=np.int64)
        mu = model.weights(ranks)
        rows = sysm.doc_rows[d]
        docs = [{**self.doc_summary(int(r)), "rank": int(rk), "score": float(s), "exposure": float(m)}
                for r, rk, s, m in zip(rows.tolist(), ranks.tolist(), np.asarray(score_all[sel]).tolist(),
                                       mu.tolist(), strict=True)]
        return {"qid": qid, "query": str(st.queries.texts[q]), "weight": float(st.queries.weights[q]),
                "system": sysm.name, "browsing_model": model.name, "depth": st.depth,
                "total": int(len(d_all)), "threshold": _to_py(st.query_threshold(q)), "offset": offset,
                "limit": limit, "documents": docs}

    def _query_search_index(self, sysm: _System) -> tuple[Any, np.ndarray]:
        """The system's query texts lower-cased (an Arrow array: searched off the GIL) and the
        queries' order by weight, heaviest first, then code; one per query set."""
        def build() -> tuple[Any, np.ndarray]:
            import pyarrow as pa
            import pyarrow.compute as pc

            qs = sysm.store.queries
            lower = pc.utf8_lower(pa.array(qs.texts.tolist(), pa.string()))
            w = np.asarray(qs.weights, dtype=np.float64)
            return lower, np.lexsort((np.arange(len(w)), -w))

        key = sysm.store.manifest.get("queries") or sysm.name
        return self._resources.get(("query-search", key, len(sysm.store.queries)), build)

    def find_queries(self, text: str, system: str | None = None, limit: int = 50, offset: int = 0) -> dict:
        """Log queries whose text contains ``text`` (case-insensitive; every character literal),
        heaviest first, then by code."""
        import pyarrow as pa
        import pyarrow.compute as pc

        sysm = self.system(system)
        lower, order = self._query_search_index(sysm)
        if text:
            needle = pc.utf8_lower(pa.scalar(text, pa.string())).as_py()
            hit = pc.match_substring(lower, needle).to_numpy(zero_copy_only=False)
            order = order[hit[order]]
        screen = self.query_screen(sysm)
        if screen is not None:
            order = order[~screen.hidden[order]]
        page = order[offset:offset + limit]
        qs, n_ret = sysm.store.queries, sysm.store.n_retrieved()
        return {"search": text, "system": sysm.name, "total": int(len(order)), "offset": offset, "limit": limit,
                "queries": [{"qid": a, "query": b, "weight": float(w), "n_retrieved": int(n)}
                            for a, b, w, n in zip(qs.ids.decode(page).tolist(), qs.texts[page].tolist(),
                                                  np.asarray(qs.weights)[page].tolist(), n_ret[page].tolist(),
                                                  strict=True)]}

    # ---- retrievability --------------------------------------------------------------------------
    def retrievability(self, system: str | None = None, c: int = 100):
        """``ExposureStore.retrievability(c)`` of a system (a view: computed once per key outside
        any shared lock, kept in the byte-bounded cache)."""
        sysm = self.system(system)
        if not 1 <= c <= sysm.store.depth:
            raise BadRequest(f"cutoff c must be between 1 and the store depth {sysm.store.depth}, got {c}")
        def compute():
            try:
                return sysm.store.retrievability(c=c)
            finally:
                release_memory()  # the pairs were read for this view only

        return self._views.get(("retrievability", sysm.name, c), compute, heavy=True)

    def _memoize(self, key: tuple, make):
        """A view derived from others (``make`` may look them up), cached as they are."""
        return self._views.get(key, make)

    def cache_stats(self) -> dict:
        """The view cache (entries, bytes, bound, hits, misses, evictions) and the EQI queue."""
        return {"views": self._views.stats(), "eqi": self.eqi_gate.stats()}

    def _served_r(self, sysm: _System, c: int) -> np.ndarray:
        """r(d) in the served documents' order."""
        res = self.retrievability(sysm.name, c)

        def make():
            r = np.zeros(len(self.doc_ids))
            r[sysm.doc_rows] = res.r
            return r

        return self._memoize(("r", sysm.name, c), make)

    def retrievability_summary(self, system: str | None = None, c: int = 100, points: int = 101) -> dict:
        """Gini (every document and retrieved-only), coverage and the Lorenz curve (``points``
        points, read off the exact curve at evenly spaced document shares)."""
        from limelight.exposure.retrievability import lorenz

        sysm = self.system(system)
        res = self.retrievability(sysm.name, c)
        grid = np.linspace(0.0, 1.0, points)
        ly = self._memoize(("lorenz", sysm.name, c, points), lambda: np.interp(grid, *lorenz(res.r)))
        return {"system": sysm.name, "c": c, "gini": res.gini, "gini_retrieved_only": res.gini_retrieved_only,
                "retrievable_fraction": res.retrievable_fraction, "n_docs": res.n_docs,
                "n_queries": res.n_queries, "lorenz": {"x": grid.tolist(), "y": ly.tolist()}}

    def ranked_documents(self, system: str | None = None, c: int = 100, order: str = "most",
                         limit: int = 20, offset: int = 0) -> dict:
        """Documents by r(d): ``most`` (descending) or ``least`` (ascending) retrievable; ties by
        document id."""
        if order not in ("most", "least"):
            raise BadRequest(f"order must be 'most' or 'least', got {order!r}")
        sysm = self.system(system)
        r = self._served_r(sysm, c)
        ids = self.doc_ids.strings
        # lexsort: last key is primary
        idx = self._memoize(("order", sysm.name, c, order),
                            lambda: np.lexsort((ids, -r)) if order == "most" else np.lexsort((ids, r)))
        page = idx[offset:offset + limit]
        return {"system": sysm.name, "c": c, "order": order, "total": len(r), "offset": offset, "limit": limit,
                "documents": [{"rank": offset + i + 1, **self.doc_summary(int(j)), "r": float(r[j])}
                              for i, j in enumerate(page.tolist())]}

    def check_field(self, field: str) -> None:
        """``NotFound`` (404) naming the fields when ``field`` is not a document field."""
        if field not in self.docs.fields:
            raise NotFound(f"unknown document field {field!r} (fields: {', '.join(self.docs.fields) or 'none'})")

    def check_group_field(self, field: str) -> None:
        """``check_field``, and ``BadRequest`` (422) for a field with too many distinct values
        to group documents by (the grouping fields listed)."""
        self.check_field(field)
        if field not in self.group_fields:
            raise BadRequest(f"field {field!r} has too many distinct values to group documents by "
                             f"(grouping fields: {', '.join(self.group_fields) or 'none'})")

    def groups(self, field: str, system: str | None = None, c: int = 100, limit: int = 50,
               offset: int = 0) -> dict:
        """Retrievability per group of a document field (``group_retrievability``)."""
        from limelight.exposure.retrievability import group_retrievability

        self.check_field(field)
        sysm = self.system(system)
        df = self._memoize(("groups", sysm.name, c, field),
                           lambda: group_retrievability(self._served_r(sysm, c), self.docs.fields[field]))
        page = df.iloc[offset:offset + limit]
        return {"system": sysm.name, "c": c, "field": field, "total": len(df), "offset": offset, "limit": limit,
                "groups": [{k: _to_py(v) for k, v in rec.items()} for rec in page.to_dict("records")]}

    # ---- EQI: exposing queries of a pasted document -----------------------------------------------
    def eqi_methods(self) -> list[str]:
        """Learned EQI models stored in the audit (``eqi/<method>/model.json``; read once: the
        audit is read-only while served)."""
        def scan() -> list[str]:
            root = self.audit.eqi_root
            if not root.is_dir():
                return []
            return sorted(p.name for p in root.iterdir()
                          if not p.name.startswith(".") and (p / "model.json").is_file())

        return list(self._resources.get(("eqi-methods",), scan))

    def eqi_for(self, sysm: _System) -> tuple[list[str], str | None]:
        """The learned EQI models that answer for ``sysm``, and why there are none (or ``None``)."""
        import limelight.service.eqi as _eqi

        methods = self.eqi_methods()
        if not methods:
            return [], "no learned EQI model in this audit (eqi/ is empty): only the exact reverse search is shown"
        reasons = {m: _eqi.why_not(self, sysm, m) for m in methods}
        ok = [m for m in methods if reasons[m] is None]
        return ok, None if ok else "; ".join(dict.fromkeys(reasons.values()))

    def eqi_system(self) -> _System:
        """The system the EQI page starts with: the first one a learned model answers for."""
        return next((s for s in self.systems.values() if self.eqi_for(s)[0]), self.system(None))

    def eqi(self, text: str, system: str | None = None, k: int = 20) -> dict:
        """Exposing queries of a new or edited document ``text``: exact reverse search over the
        system's query set, and each learned EQI model of the audit, side by side. One search at
        a time through ``eqi_gate`` (``Busy`` when its queue is full, ``QueueTimeout`` after
        waiting too long)."""
        import limelight.service.eqi as _eqi

        sysm = self.eqi_system() if system in (None, "") else self.system(system)
        screen = self.query_screen(sysm)
        with self.eqi_gate.slot(), _eqi.threads(self.eqi_threads):
            exact = _eqi.exact_reverse(self, sysm, text, k, screen)
            learned = [_eqi.learned(self, sysm, m, text, k, exact, screen) for m in self.eqi_methods()]
        _eqi.mark_shared(exact, learned)
        note = self.eqi_for(sysm)[1]
        return {"system": sysm.name, "depth": sysm.store.depth, "k": k, "exact": exact,
                "learned": learned, "note": note}


def _query_pairs(store, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(d, rank, score)`` of query code ``q``'s stored top-n (``ExposureStore.query_pairs``),
    decoding only the row groups of its shard that hold its rows, not the whole shard."""
    import pyarrow.parquet as pq

    qoff = store.query_offsets()
    s, e = int(qoff[q]), int(qoff[q + 1])
    size = int(store.manifest["shard_size"])
    i = q // size
    start, stop = s - int(qoff[i * size]), e - int(qoff[i * size])  # rows inside the shard
    cols = ("d", "rank", "score")
    if stop <= start:
        return np.zeros(0, np.int32), np.zeros(0, np.int16), np.zeros(0, np.float32)
    f = pq.ParquetFile(store.shard_files()[i])
    md = f.metadata
    bounds = np.zeros(md.num_row_groups + 1, dtype=np.int64)
    np.cumsum([md.row_group(g).num_rows for g in range(md.num_row_groups)], out=bounds[1:])
    g0 = int(np.searchsorted(bounds, start, side="right")) - 1
    g1 = int(np.searchsorted(bounds, stop - 1, side="right")) - 1
    t = f.read_row_groups(list(range(g0, g1 + 1)), columns=list(cols))
    a = start - int(bounds[g0])
    return tuple(t.column(c).to_numpy()[a:a + stop - start] for c in cols)  # type: ignore[return-value]


def open_service(audit: str | os.PathLike, reranker: str | os.PathLike | None = None,
                 **limits: Any) -> AuditService:
    """Open ``audit`` for serving (errors name the directory); ``limits``: the queue and cache
    bounds of ``AuditService``."""
    p = Path(audit)
    if not p.is_dir():
        raise NotAnAuditError(f"{p}: no such directory")
    return AuditService(p, reranker, **limits)
