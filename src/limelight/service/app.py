"""The FastAPI application of ``limelight serve``: HTML pages and a JSON API over one audit.

Pages (server-rendered, Jinja2 with autoescaping, no script):
``/`` search · ``/documents/{docid}`` exposing queries and a Figure 1 chart · ``/queries``,
``/queries/{qid}`` what a query exposes · ``/retrievability`` Lorenz curves, most and least
retrievable documents, groups · ``/eqi`` paste a document, exact vs learned exposing queries.

The JSON API under ``/api`` answers the same questions (``/openapi.json`` documents it, and the
page ``/api`` reads it, offline: ``/docs`` and ``/redoc``, whose Swagger UI and ReDoc assets come
from a CDN, lead there). Unknown ids answer 404 with a message; values outside the audit, query
parameters a route does not take, and bodies that are not UTF-8 JSON (NaN and Infinity, which
JSON lacks, or nesting past Python's parser) 422; bodies over the size limit 413; a full EQI queue 429 and a
queued EQI search that waited too long 503, both with Retry-After; nothing in a request is ever
used as a file-system path.
"""


import json
import math
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

import numpy as np
from fastapi import Depends, FastAPI, Form, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

import limelight.report.glossary as G
import limelight.service.fmt as F
import limelight.service.insight as I
import limelight.service.performance as PF
import limelight.service.schemas as S  # by full name: no edge to the package __init__
from limelight.errors import LimelightError
from limelight.service.charts import exposure_bars, hbars, histogram, lorenz_paths
from limelight.service.concurrency import Busy, QueueTimeout
from limelight.service.core import AuditService, BadRequest, NotFound
from limelight.service.snippets import segments
from limelight.service.topics import add_topic_routes

HERE = Path(__file__).parent
MAX_BODY = 1 << 20  # bytes of a request body (a pasted document is at most MAX_TEXT characters)

API_ERRORS = {404: {"model": S.Error, "description": "unknown id or name"},
              422: {"description": "invalid value"}}
BUSY = {429: {"model": S.Error, "description": "too much of this work is queued: retry after the "
                                              "Retry-After header's seconds",
              "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}}}
VIEW_ERRORS = {**API_ERRORS, **BUSY}
EQI_ERRORS = {**API_ERRORS, **BUSY,
              413: {"model": S.Error, "description": "request body over the size limit"},
              503: {"model": S.Error, "description": "waited too long in the EQI queue: retry after the "
                                                     "Retry-After header's seconds",
                    "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}}}

Limit = Annotated[int, Query(ge=1, le=S.MAX_LIMIT, description="rows per page")]
Offset = Annotated[int, Query(ge=0, le=S.MAX_OFFSET, description="rows to skip")]
SystemQ = Annotated[str | None, Query(max_length=200, description="audited system (default: the first)")]
BROWSING_PATTERN = r"^(rbp(:(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?))?|dcg|exhaustive|exh|cutoff(:[1-9][0-9]{0,5})?)$"
Browsing = Annotated[str, Query(max_length=40, pattern=BROWSING_PATTERN,
                                description="browsing model μ_{q→d}: rbp:γ (0 < γ ≤ 1), dcg, exhaustive, cutoff:c")]


class BodyLimit:
    """ASGI middleware: a request body over ``max_body`` bytes gets 413 before the app reads it
    (by its Content-Length, or by counting a chunked body); a JSON body that is not text in the
    encodings JSON allows (UTF-8, or UTF-16/32 with their marks) gets 422 naming the byte, and
    one nested deeper than the parser goes gets 422, where FastAPI would answer an undocumented
    400; one holding NaN or ±Infinity (not JSON, though Python's parser takes them) gets 422
    naming it."""

    def __init__(self, app, max_body: int = MAX_BODY):
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    return await _plain(send, 400, "malformed Content-Length header")
                if n > self.max_body:
                    return await _plain(send, 413, f"request body over {self.max_body} bytes")
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_body:
                return await _plain(send, 413, f"request body over {self.max_body} bytes")
            chunks.append(body)
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        bad = _not_json_text(scope, body)
        if bad is not None:
            return await _plain(send, 422, [{"type": "json_invalid", "loc": ["body"], "msg": bad,
                                             "input": None}])
        replay = {"type": "http.request", "body": body, "more_body": False}
        sent = False

        async def receive_again():
            nonlocal sent
            if not sent:
                sent = True
                return replay
            return await receive()

        return await self.app(scope, receive_again, send)


def _not_json_text(scope, body: bytes) -> str | None:
    """Why a JSON request's ``body`` cannot be decoded as JSON text (``None`` when it can, or
    when the request does not say it is JSON)."""
    ctype = next((v for k, v in scope.get("headers", []) if k == b"content-type"), b"")
    media = ctype.split(b";", 1)[0].strip().lower()
    if not body or not (media == b"application/json" or media.endswith(b"+json")):
        return None
    try:
        text = body.decode(json.detect_encoding(body))
    except UnicodeDecodeError as e:
        return (f"the body is not UTF-8 text: byte 0x{body[e.start]:02x} at offset {e.start} "
                f"({e.reason}); send JSON encoded as UTF-8")
    try:
        json.loads(text, parse_constant=_not_json_number)
    except _NotJsonNumber as e:
        return f"the body holds {e}, which is not a JSON number (JSON has no NaN or Infinity); send finite numbers"
    except RecursionError:
        return "the body is nested too deeply (arrays and objects within each other); send a flatter JSON body"
    except ValueError:  # malformed JSON: FastAPI's own 422 (json_invalid) says where
        return None
    return None


class _NotJsonNumber(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a JSON text (Python's ``json`` accepts them)."""


def _not_json_number(name: str):
    raise _NotJsonNumber(name)


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every response that does not set them itself. A
    plain ASGI wrapper of ``send``: Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``)
    streams each response through a task and a memory stream, a cost every request paid on
    the event loop's thread."""

    def __init__(self, app):
        self.app = app
        self.extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *((k, v) for k, v in self.extra if k not in have)]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


async def _plain(send, status: int, detail: str | list) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


PAGE_CSP = ("default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
            "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {  # every response: pages, the API and its description alike (no CDN is used)
    "content-security-policy": PAGE_CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def create_app(service: AuditService, max_body: int = MAX_BODY, compare: AuditService | None = None) -> FastAPI:
    """The application serving ``service`` (an opened audit); ``compare``: a second audit the
    comparison pages set against it (``serve --compare DIR``)."""
    app = FastAPI(title="limelight", version="1", docs_url=None, redoc_url=None,
                  dependencies=[Depends(_known_query_params)],
                  description="Who search puts in the limelight: search, exposing queries, what a query "
                              "exposes and retrievability over one limelight audit (read-only).")
    app.state.service = service
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals.update(quote=lambda s: quote(str(s), safe=""), segments=segments, **F.GLOBALS)
    templates.env.filters.update(F.FILTERS)
    app.state.templates = templates  # the portal's pages (limelight.service.portal) render with them
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    _add_error_handlers(app, service, templates)
    _add_api(app, service)
    page = _page_renderer(service, templates)
    _add_pages(app, service, page)
    _add_tool_pages(app, service, page)
    _add_insight(app, service, page)
    _add_performance(app, service, page, compare)
    add_topic_routes(app, service, page, VIEW_ERRORS)
    if max_body:
        app.add_middleware(BodyLimit, max_body=max_body)
    app.add_middleware(SecurityHeaders)
    return app


def _query_names(route) -> frozenset[str]:
    """The query parameters an API route takes (its own and its dependencies'; a walk over a
    few objects, per request)."""
    names: set[str] = set()
    todo = [getattr(route, "dependant", None)]
    while todo:
        d = todo.pop()
        if d is not None:
            names.update(p.alias for p in d.query_params)
            todo.extend(d.dependencies)
    return frozenset(names)


def _known_query_params(request: Request) -> None:
    """Every API route (a dependency of the app): a query parameter the route does not take is
    a 422 naming it and the ones it takes (a misspelt ``limit`` or a ``k`` the API lacks is
    not silently ignored). Pages ignore unknown parameters, as links from elsewhere carry
    them."""
    if not request.url.path.startswith("/api/"):
        return
    names = _query_names(request.scope.get("route"))
    extra = [k for k in dict.fromkeys(request.query_params.keys()) if k not in names]
    if extra:
        takes = ", ".join(sorted(names)) or "no query parameters"
        raise RequestValidationError([
            {"type": "extra_forbidden", "loc": ("query", k), "input": request.query_params[k],
             "msg": f"unknown query parameter {k!r}; {request.url.path} takes {takes}"} for k in extra])


def _pattern_words(pattern: str | None) -> str | None:
    """What a parameter's regular expression accepts, in words (``None`` when unknown)."""
    if pattern == BROWSING_PATTERN:
        return "a browsing model: rbp:γ (0 < γ ≤ 1), dcg, exhaustive or cutoff:c"
    m = re.fullmatch(r"\^\(([\w|-]+)\)\$", pattern or "")
    if m:
        alts = m.group(1).split("|")
        return "one of " + ", ".join(alts[:-1]) + " or " + alts[-1] if len(alts) > 1 else alts[0]
    return None


def _cutoff_type(service: AuditService):
    """What the schema allows is what this audit can answer: c ≤ the smallest store depth."""
    return Annotated[int, Query(ge=1, le=min(s.store.depth for s in service.systems.values()),
                                description="retrievability cutoff c (≤ the store depth)")]


def _page_renderer(service: AuditService, templates: Jinja2Templates):
    def page(request: Request, name: str, **ctx):
        return templates.TemplateResponse(request, name, {"info": service.info(), **ctx})

    return page


def _add_error_handlers(app: FastAPI, service: AuditService, templates: Jinja2Templates) -> None:
    """Errors as JSON under /api, as an error page elsewhere."""

    def is_api(request: Request) -> bool:
        return request.url.path.startswith("/api")

    def error_page(request: Request, status: int, message: str):
        if is_api(request):
            return JSONResponse({"detail": message}, status_code=status)
        return templates.TemplateResponse(request, "error.html", {"info": service.info(), "status": status,
                                                                  "message": message}, status_code=status)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound):
        return error_page(request, 404, str(exc))

    @app.exception_handler(Busy)
    async def busy(request: Request, exc: Busy):
        response = error_page(request, 503 if isinstance(exc, QueueTimeout) else 429, str(exc))
        response.headers["retry-after"] = str(exc.retry_after)
        return response

    @app.exception_handler(LimelightError)
    async def bad_value(request: Request, exc: LimelightError):
        return error_page(request, 422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        if is_api(request):
            return JSONResponse({"detail": _jsonable(exc.errors())}, status_code=422)
        first = _jsonable(exc.errors()[:1])[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x not in ("query", "path", "body"))
        return error_page(request, 422, f"invalid {where or 'request'}: {first.get('msg', 'bad value')}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        msg = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 404 and msg == "Not Found":
            msg = f"no page at {request.url.path}"
        if exc.status_code == 405:
            msg = f"method {request.method} not allowed on {request.url.path}"
        response = error_page(request, exc.status_code, msg)
        for k, v in (exc.headers or {}).items():  # 405's Allow header, among others
            response.headers[k] = v
        return response


def _add_api(app: FastAPI, service: AuditService) -> None:
    """The JSON API (/api/...), described by the OpenAPI schema."""
    Cutoff = _cutoff_type(service)
    Model = Literal[tuple(service.search_models)]  # type: ignore[valid-type]
    has_reranker = service.reranker is not None

    @app.get("/api/info", response_model=S.Info, tags=["audit"])
    def api_info() -> dict:
        """What the audit holds: collection, systems, search models, EQI methods, group fields."""
        return service.info()

    @app.get("/api/search", response_model=S.SearchResults, responses=API_ERRORS, tags=["search"])
    def api_search(q: Annotated[str, Query(min_length=1, max_length=S.MAX_QUERY, pattern=S.NONBLANK,
                                           description="query text (not blank)")],
                   model: Annotated[Model, Query(description="retrieval model")] = "bm25",
                   limit: Annotated[int, Query(ge=1, le=100)] = 10, offset: Annotated[int, Query(ge=0, le=900)] = 0,
                   rerank: Annotated[bool, Query(include_in_schema=has_reranker,
                                                 description="re-rank the top 50 with the loaded re-ranker")] = False,
                   snippets: Annotated[bool, Query(description="each result's snippet and highlights "
                                                   "(false: null, for clients that read ids and scores)")] = True
                   ) -> dict:
        """Search the audited collection; results with snippets and highlighted query terms."""
        return service.search(q, model, limit, offset, rerank, snippets)

    @app.get("/api/documents/{docid:path}", response_model=S.Document, responses=VIEW_ERRORS, tags=["exposure"])
    def api_document(docid: Annotated[str, PathParam(max_length=1000)], system: SystemQ = None,
                     browsing: Browsing = "rbp:0.8", limit: Limit = 50, offset: Offset = 0) -> dict:
        """A document and the queries that expose it (by rank), with exposure under ``browsing``."""
        return service.document(docid, system, browsing, limit, offset)

    @app.get("/api/queries", response_model=S.QueryList, responses=API_ERRORS, tags=["exposure"])
    def api_find_queries(search: Annotated[str, Query(max_length=S.MAX_QUERY)] = "", system: SystemQ = None,
                         limit: Limit = 50, offset: Offset = 0) -> dict:
        """Log queries containing ``search`` (case-insensitive), most frequent first."""
        return service.find_queries(search, system, limit, offset)

    @app.get("/api/queries/{qid:path}", response_model=S.Query, responses=API_ERRORS, tags=["exposure"])
    def api_query(qid: Annotated[str, PathParam(max_length=1000)], system: SystemQ = None,
                  browsing: Browsing = "rbp:0.8", limit: Limit = 50, offset: Offset = 0) -> dict:
        """What a log query exposes: its stored top-n documents."""
        return service.query(qid, system, browsing, limit, offset)

    @app.get("/api/retrievability", response_model=S.RetrievabilitySummary, responses=VIEW_ERRORS,
             tags=["retrievability"])
    def api_retrievability(system: SystemQ = None, c: Cutoff = 100) -> dict:
        """Gini of r(d) over every document, retrieved-only Gini, coverage and the Lorenz curve."""
        return service.retrievability_summary(system, _c(service, system, c))

    @app.get("/api/retrievability/documents", response_model=S.RankedDocuments, responses=VIEW_ERRORS,
             tags=["retrievability"])
    def api_ranked(system: SystemQ = None, c: Cutoff = 100,
                   order: Annotated[str, Query(pattern="^(most|least)$")] = "most",
                   limit: Limit = 20, offset: Offset = 0) -> dict:
        """The most (or least) retrievable documents, r(d) at cutoff ``c``."""
        return service.ranked_documents(system, _c(service, system, c), order, limit, offset)

    @app.get("/api/retrievability/groups", response_model=S.Groups, responses=VIEW_ERRORS, tags=["retrievability"])
    def api_groups(field: Annotated[str, Query(min_length=1, max_length=200)], system: SystemQ = None,
                   c: Cutoff = 100, limit: Limit = 50, offset: Offset = 0) -> dict:
        """Retrievability per group of a document field (a document counts in each of its groups)."""
        return service.groups(field, system, _c(service, system, c), limit, offset)

    @app.post("/api/eqi", response_model=S.EqiResults, responses=EQI_ERRORS, tags=["exposure"])
    def api_eqi(body: S.EqiRequest) -> dict:
        """Exposing queries of a new or edited document: exact reverse search and the audit's
        learned EQI models, side by side."""
        return service.eqi(body.text, body.system, body.k)


def _add_pages(app: FastAPI, service: AuditService, page) -> None:
    """The HTML pages: search, a document, the queries, a query, retrievability."""
    Cutoff = _cutoff_type(service)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def search_page(request: Request, q: Annotated[str, Query(max_length=S.MAX_QUERY)] = "",
                    model: Annotated[str, Query(max_length=20)] = "bm25", rerank: bool = False,
                    offset: Annotated[int, Query(ge=0, le=900)] = 0):
        res = service.search(q, model, 10, offset, rerank) if q.strip() else None
        return page(request, "search.html", q=q, model=model, rerank=rerank, res=res)

    @app.get("/documents/{docid:path}", response_class=HTMLResponse, include_in_schema=False)
    def document_page(request: Request, docid: Annotated[str, PathParam(max_length=1000)], system: SystemQ = None,
                      browsing: Browsing = "rbp:0.8", offset: Offset = 0,
                      why: Annotated[str | None, Query(max_length=1000)] = None):
        doc = service.document(docid, system, browsing, 50, offset)
        st = doc["standing"]
        top = hbars([{"label": t["query"], "value": t["attention"], "content": True}
                     for t in doc["top_searches"]])
        sys_chart = hbars([{"label": s["system"], "value": s["r"], "current": s["system"] == doc["system"]}
                           for s in doc["systems"]])
        why_qid = why or next((t["qid"] for t in doc["top_searches"]), None)
        near = I.near_misses(service, doc["docid"], doc["system"])
        if why_qid is None and near["queries"]:
            why_qid = near["queries"][0]["qid"]
        explained = I.explanation(service, doc["docid"], why_qid, doc["system"]) if why_qid else None
        return page(request, "document.html", doc=doc, browsing=browsing, st_chart=histogram(st["bins"]),
                    top_chart=top, sys_chart=sys_chart, why=explained, near=near)

    @app.get("/queries", response_class=HTMLResponse, include_in_schema=False)
    def queries_page(request: Request, search: Annotated[str, Query(max_length=S.MAX_QUERY)] = "",
                     system: SystemQ = None, offset: Offset = 0):
        res = service.find_queries(search, system, 50, offset)
        return page(request, "queries.html", res=res, search=search)

    @app.get("/queries/{qid:path}", response_class=HTMLResponse, include_in_schema=False)
    def query_page(request: Request, qid: Annotated[str, PathParam(max_length=1000)], system: SystemQ = None,
                   browsing: Browsing = "rbp:0.8", offset: Offset = 0):
        res = service.query(qid, system, browsing, 50, offset)
        return page(request, "query.html", res=res, browsing=browsing)

    @app.get("/retrievability", response_class=HTMLResponse, include_in_schema=False)
    def retrievability_page(request: Request, system: SystemQ = None, c: Cutoff = 100,
                            field: Annotated[str | None, Query(max_length=200)] = None, offset: Offset = 0):
        sysm = service.system(system)
        c = _c(service, sysm.name, c)
        curves = {}
        summaries = []
        for name, s in service.systems.items():
            summ = service.retrievability_summary(name, min(c, s.store.depth))
            summaries.append(summ)
            curves[name] = (summ["lorenz"]["x"], summ["lorenz"]["y"])
        field = field or service.group_field
        if field is not None and field not in service.docs.fields:
            raise NotFound(f"unknown document field {field!r}")
        n_zero = int((service._served_r(sysm, c) == 0).sum())
        cur = next(s for s in summaries if s["system"] == sysm.name)
        return page(request, "retrievability.html", system=sysm.name, c=c, summaries=summaries,
                    lorenz=lorenz_paths(curves), n_zero=n_zero,
                    half_share=float(np.interp(0.5, cur["lorenz"]["x"], cur["lorenz"]["y"])),
                    most=service.ranked_documents(sysm.name, c, "most", 20, offset),
                    least=service.ranked_documents(sysm.name, c, "least", 20, offset),
                    least_shown=service.ranked_documents(sysm.name, c, "least", 10, n_zero)
                    if 0 < n_zero < len(service.doc_ids) else None,
                    groups=service.groups(field, sysm.name, c, 50, 0) if field else None, field=field)


def _add_tool_pages(app: FastAPI, service: AuditService, page) -> None:
    """The HTML pages of the EQI form, the API description, and the favicon."""

    @app.get("/eqi", response_class=HTMLResponse, include_in_schema=False)
    def eqi_form(request: Request, docid: Annotated[str | None, Query(max_length=1000)] = None):
        text = ""
        if docid:
            text = service.docs.texts[service.doc_row(docid)]
        return page(request, "eqi.html", text=text, res=None, system=service.eqi_system().name, k=20)

    @app.post("/eqi", response_class=HTMLResponse, include_in_schema=False)
    def eqi_page(request: Request, text: Annotated[str, Form(max_length=S.MAX_TEXT)],
                 system: Annotated[str | None, Form(max_length=200)] = None,
                 k: Annotated[int, Form(ge=1, le=S.MAX_EQI_K)] = 20):
        res = service.eqi(text, system, k)
        panels = []
        for lst in [res["exact"], *res["learned"]]:
            heights = [None if r["rank"] is None else res["depth"] - (r["rank"] - 1) for r in lst["queries"]]
            panels.append({"list": lst, "chart": exposure_bars(heights, res["depth"],
                                                                [r["in_both"] for r in lst["queries"]], n_slots=k)})
        return page(request, "eqi.html", text=text, res=res, panels=panels, system=res["system"], k=k)

    @app.get("/api", response_class=HTMLResponse, include_in_schema=False)
    def api_page(request: Request):
        """The JSON API, read from the OpenAPI schema (works offline, unlike /docs's CDN assets)."""
        ops = []
        for path, methods in app.openapi()["paths"].items():
            for method, op in methods.items():
                params = [{"name": p["name"], "in": p["in"], "required": p.get("required", False),
                           "type": _type_of(p.get("schema", {})), "description": p.get("description", "")}
                          for p in op.get("parameters", [])]
                body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
                ops.append({"method": method.upper(), "path": path, "summary": op.get("summary", ""),
                            "description": op.get("description", ""), "params": params,
                            "body": body.get("$ref", "").rsplit("/", 1)[-1],
                            "responses": sorted(op.get("responses", {}))})
        return page(request, "api.html", ops=ops)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon():
        return RedirectResponse("/static/favicon.svg")

    @app.get("/docs", include_in_schema=False)
    @app.get("/redoc", include_in_schema=False)
    def interactive_docs():
        """The API's description that works offline (Swagger UI and ReDoc load from a CDN)."""
        return RedirectResponse("/api")


def _c(service: AuditService, system: str | None, c: int) -> int:
    depth = service.system(system).store.depth
    if c > depth:
        raise BadRequest(f"cutoff c={c} exceeds the store depth {depth}")
    return c


def _type_of(schema: dict) -> str:
    if "anyOf" in schema:
        return " | ".join(_type_of(x) for x in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(map(str, schema["enum"]))
    t = schema.get("type", "")
    bounds = [f"{k} {schema[k]}" for k in ("minimum", "maximum", "maxLength") if k in schema]
    return t + (f" ({', '.join(bounds)})" if bounds else "")


MAX_ECHO = 200  # characters of a rejected input echoed back in a validation error


def _jsonable(errors: list) -> list:
    """Validation errors without non-JSON values (exceptions in ``ctx``, raw bytes input), with
    the rejected input cut to ``MAX_ECHO`` characters (a 1 MB body is not sent back), NaN and
    ±Infinity as strings (JSON has no such numbers), and a value that misses a parameter's
    regular expression told by what the parameter accepts, in words, not by the expression."""
    out = []
    for e in errors:
        e = dict(e)
        ctx = e.pop("ctx", None) or {}
        if e.get("type") == "string_pattern_mismatch" and ctx.get("pattern") == S.NONBLANK:
            what = "query" if e.get("loc", ())[-1:] == ("q",) else "text"
            e["type"], e["msg"] = "blank", f"empty {what}: the {what} is blank (whitespace only)"
        elif e.get("type") == "string_pattern_mismatch" and (words := _pattern_words(ctx.get("pattern"))):
            e["msg"] = f"{str(e.get('input'))[:MAX_ECHO]!r} is not {words}"
        if isinstance(e.get("input"), bytes):
            e["input"] = e["input"].decode("utf-8", "replace")
        e.pop("url", None)
        e = _finite(json.loads(json.dumps(e, default=str)))
        if "input" in e:
            v = e["input"]
            text = v if isinstance(v, str) else json.dumps(v)
            if len(text) > MAX_ECHO:
                e["input"] = f"{text[:MAX_ECHO]}… ({len(text):,} characters in all)"
        out.append(e)
    return out


def _finite(v):
    """``v`` (parsed JSON) with NaN and ±Infinity as the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``: a response must be JSON, which has no such numbers."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, list):
        return [_finite(x) for x in v]
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    return v


Target = Annotated[str, Query(pattern="^(size|uniform|merit)$",
                              description="the fair share a group is compared with: size (its share of "
                                          "documents), uniform (each search's attention spread evenly over what "
                                          "it retrieves) or merit (another system's scores as relevance)")]


def _add_insight(app: FastAPI, service: AuditService, page) -> None:
    """Why a search shows a document, near misses, groups' fair shares (API and pages), and
    the glossary page."""

    @app.get("/api/explain", response_model=S.Explanation, responses=API_ERRORS, tags=["exposure"])
    def api_explain(docid: Annotated[str, Query(max_length=1000)], qid: Annotated[str, Query(max_length=1000)],
                    system: SystemQ = None) -> dict:
        """Why the log query ``qid`` shows ``docid``: BM25 matched terms with their shares of the
        score, the closest sentences for a dense system, or why there is no explanation."""
        return I.explanation(service, docid, qid, system)

    @app.get("/api/near-misses", response_model=S.NearMisses, responses=API_ERRORS, tags=["exposure"])
    def api_near_misses(docid: Annotated[str, Query(max_length=1000)], system: SystemQ = None,
                        limit: Annotated[int, Query(ge=1, le=100)] = 20) -> dict:
        """Log queries ranking ``docid`` just below the stored depth (ranks n + 1 to 1,000), with
        the terms they share with it (systems with a BM25 index)."""
        return I.near_misses(service, docid, system, limit)

    @app.get("/api/fairness", response_model=S.Fairness, responses=VIEW_ERRORS, tags=["retrievability"])
    def api_fairness(field: Annotated[str, Query(min_length=1, max_length=200)], system: SystemQ = None,
                     target: Target = "size",
                     merit: Annotated[str | None, Query(max_length=200, description="another audited system "
                                                        "whose scores stand in for relevance")] = None) -> dict:
        """Each group's share of the attention over the log against its fair share, with
        intervals, and the documents that carry each group's gap."""
        return I.fairness(service, field, system, target, merit)

    @app.get("/groups", response_class=HTMLResponse, include_in_schema=False)
    def groups_page(request: Request, system: SystemQ = None,
                    field: Annotated[str | None, Query(max_length=200)] = None, target: Target = "size",
                    merit: Annotated[str | None, Query(max_length=200)] = None):
        field = field or service.group_field
        sysm = service.system(system)
        res = I.fairness(service, field, sysm.name, target, merit or None) if field else None
        chart = None
        if res is not None:
            rows = sorted(res["groups"], key=lambda g: -g["size_share"])[:GROUPS_SHOWN]
            chart = hbars([{"label": g["group"], "value": g["exposure_share"], "ref": g["target_share"],
                            "content": True} for g in rows])
        return page(request, "groups.html", res=res, field=field, system=sysm.name, target=target,
                    merit=merit or "", chart=chart)

    @app.get("/glossary", response_class=HTMLResponse, include_in_schema=False)
    def glossary_page(request: Request):
        return page(request, "glossary.html", terms=list(G.TERMS.values()), choices=G.BROWSING_CHOICES)


def _csv_response(text: str, name: str) -> Response:
    return Response(text, media_type="text/csv; charset=utf-8",
                    headers={"content-disposition": f'attachment; filename="{name}"'})


def _add_performance(app: FastAPI, service: AuditService, page, compare: AuditService | None = None) -> None:
    """Search Console's figures (issue 54, ``limelight.service.performance``): ``/api/performance``
    (JSON, or every row as CSV), ``/api/performance/queries`` (your top searches, JSON or CSV),
    ``/api/performance/owners`` (admins), ``/api/compare`` (two audits or systems side by side,
    ``limelight.service.compare``; JSON or CSV) and the ``/performance`` and ``/compare``
    pages."""
    responses = {**VIEW_ERRORS, 200: {"description": "JSON, or with format=csv every row as CSV",
                                      "content": {"text/csv": {"schema": {"type": "string"}}}}}
    depth = min(s.store.depth for s in service.systems.values())
    Cut = Annotated[int | None, Query(ge=1, le=depth, description="the cutoff: impressions are times shown "
                                                                   "in the top c (default: the audit's smallest)")]
    Fmt = Annotated[str, Query(pattern="^(json|csv)$", description="json, or csv: every row, no paging")]
    Owner = Annotated[str | None, Query(max_length=1000, description="an owner key (admins; an owner: its own)")]

    @app.get("/api/performance", response_model=S.Performance, responses=responses, tags=["performance"])
    def api_performance(system: SystemQ = None, browsing: Browsing = "rbp:0.8", c: Cut = None, owner: Owner = None,
                        limit: Limit = 100, offset: Offset = 0, format: Fmt = "json"):  # noqa: A002 - its name
        """Impressions, average position and attention of your documents (an admin: every
        document, or ``owner``'s), with their totals; ``format=csv``: every document as CSV."""
        if format == "csv":
            res = PF.performance(service, system, browsing, c, owner, S.MAX_OFFSET, 0)
            rows = [{**d, "owner": res["owner"] or ""} for d in res["documents"]]
            return _csv_response(PF.to_csv(rows, PF.COLUMNS), f"performance-{res['system']}-top{res['c']}.csv")
        return PF.performance(service, system, browsing, c, owner, limit, offset)

    @app.get("/api/performance/owners", response_model=S.OwnerPerformance, responses=responses,
             tags=["performance"])
    def api_owner_performance(system: SystemQ = None, browsing: Browsing = "rbp:0.8", c: Cut = None,
                              limit: Limit = 100, offset: Offset = 0, format: Fmt = "json"):  # noqa: A002
        """Every owner's documents summed (admins): impressions, average position, attention."""
        if format == "csv":
            res = PF.owner_table(service, system, browsing, c, S.MAX_OFFSET, 0)
            return _csv_response(PF.to_csv(res["owners"], PF.OWNER_COLUMNS), f"owners-{res['system']}-top{res['c']}.csv")
        return PF.owner_table(service, system, browsing, c, limit, offset)

    @app.get("/performance", response_class=HTMLResponse, include_in_schema=False)
    def performance_page(request: Request, system: SystemQ = None, browsing: Browsing = "rbp:0.8", c: Cut = None,
                         owner: Owner = None, offset: Offset = 0):
        res = PF.performance(service, system, browsing, c, owner, 100, offset)
        top = PF.top_queries(service, res["system"], res["c"], owner, TOP_QUERIES, 0)
        return page(request, "performance.html", res=res, browsing=browsing, top=top)

    @app.get("/api/performance/queries", response_model=S.OwnerQueries, responses=responses, tags=["performance"])
    def api_top_queries(system: SystemQ = None, c: Cut = None, owner: Owner = None, limit: Limit = 100,
                        offset: Offset = 0, format: Fmt = "json"):  # noqa: A002 - its name
        """The searches that show your documents in the top c (an admin: every document's, or
        ``owner``'s), privacy-screened (hidden ones counted, never named), by times issued, or
        by the DP release's noisy count of searchers when the operator enabled one (its epsilon
        and delta in ``dp``); ``format=csv``: every listed search as CSV."""
        if format == "csv":
            res = PF.top_queries(service, system, c, owner, S.MAX_OFFSET, 0)
            return _csv_response(PF.to_csv(res["queries"], PF.QUERY_COLUMNS),
                                 f"searches-{res['system']}-top{res['c']}.csv")
        return PF.top_queries(service, system, c, owner, limit, offset)

    _add_compare(app, service, page, compare, responses)


def _add_compare(app: FastAPI, service: AuditService, page, compare: AuditService | None, responses: dict) -> None:
    """``/api/compare`` (JSON or CSV) and the ``/compare`` page: two audits, or two systems of
    this one, side by side (``limelight.service.compare``)."""
    import limelight.service.compare as CMP

    Fmt = Annotated[str, Query(pattern="^(json|csv)$", description="json, or csv: every row, no paging")]
    Owner = Annotated[str | None, Query(max_length=1000, description="an owner key (admins; an owner: its own)")]
    SystemB = Annotated[str | None, Query(max_length=200, description="side B's system: of the --compare audit "
                                                                       "(default: A's name, else its first), or "
                                                                       "another system of this audit")]
    DocQ = Annotated[str | None, Query(max_length=1000, description="one document (yours) instead of all")]
    depth = min(s.store.depth for svc in (service, compare) if svc is not None for s in svc.systems.values())
    CmpCut = Annotated[int | None, Query(ge=1, le=depth, description="the cutoff of both sides (≤ each side's "
                                                                     "depth; default: the smaller lead cutoff)")]

    @app.get("/api/compare", response_model=S.Comparison, responses=responses, tags=["performance"])
    def api_compare(system: SystemQ = None, system_b: SystemB = None, browsing: Browsing = "rbp:0.8",
                    c: CmpCut = None, owner: Owner = None, docid: DocQ = None, limit: Limit = 100,
                    offset: Offset = 0, format: Fmt = "json"):  # noqa: A002 - its name
        """Side A (this audit's ``system``) against side B (the ``--compare`` audit, or this
        audit's ``system_b``, by default its first other system) per document and in total: impressions, average position,
        attention, and B − A; each side's top searches privacy-screened; ``format=csv``: every
        document as CSV."""
        if format == "csv":
            res = CMP.compare(service, compare, system, system_b, browsing, c, owner, docid or None, S.MAX_OFFSET, 0)
            return _csv_response(PF.to_csv(CMP.csv_rows(res), CMP.COLUMNS),
                                 f"compare-{res['a']['system']}-{res['b']['system']}-top{res['c']}.csv")
        return CMP.compare(service, compare, system, system_b, browsing, c, owner, docid or None, limit, offset)

    @app.get("/compare", response_class=HTMLResponse, include_in_schema=False)
    def compare_page(request: Request, system: SystemQ = None, system_b: SystemB = None, browsing: Browsing = "rbp:0.8",
                     c: CmpCut = None, owner: Owner = None, docid: DocQ = None, offset: Offset = 0):
        if compare is None and len(service.systems) == 1:  # one system, no second audit: the page says so
            return page(request, "compare.html", res=None, browsing=browsing, systems_b=[], has_compare=False)
        res = CMP.compare(service, compare, system, system_b, browsing, c, owner, docid or None, 100, offset)
        systems_b = list((compare or service).systems)
        return page(request, "compare.html", res=res, browsing=browsing, systems_b=systems_b,
                    has_compare=compare is not None)


GROUPS_SHOWN = 12  # groups drawn in the groups page's picture (the largest)
TOP_QUERIES = 20  # searches listed on the performance page
