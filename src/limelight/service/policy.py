"""Who may see what in ``limelight serve``: the one place that decides (issue 54).

A request is made by a :class:`Principal`: anonymous, the ``owner`` of some documents, or an
``admin`` (the platform team). The :class:`Policy` answers, for every route and every object:

- **routes** (:data:`ROUTE_ACCESS`): each route of the app has one access level; the portal's
  middleware asks :meth:`Policy.route_verdict` before the route runs, and a route with no entry
  is refused (fail closed: a new route must be given a level here before anyone can reach it);
- **documents**: an owner sees the detail of its own documents (exposing queries, near misses,
  "why", the EQI form filled with its text); another owner's document answers exactly as an
  unknown id does (404, same message), so nothing leaks beyond what search shows; an admin sees
  every document (:meth:`Policy.document_visible`);
- **queries**: the raw log (``/queries``) is for admins; every other list of log queries that
  reaches an owner passes the searchers' privacy screen (:mod:`limelight.service.privacy`:
  issued at least k times, no personal data, and with a DP release only the released ones),
  hidden rows still counted in the totals (:meth:`Policy.query_screen`);
- **aggregates** (retrievability, Lorenz curves, groups, fairness) are for everyone logged in;
  **search** results are public when the platform allows anonymous search.

Ownership comes from the audit's data (:class:`Ownership`): a document field (``field:NAME``, e.g.
Debian's ``source``) or a TSV of owner → document ids or id patterns.

The service asks the policy through ``AuditService.screen`` (``doc_row``, the document, near
misses, EQI and query lists), for the principal of the request being answered: the portal's
middleware sets it in :data:`current_principal` (a context variable, so each request, in
whichever thread FastAPI runs it, sees its own).
"""

from __future__ import annotations

import contextvars
import enum
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import limelight.service.privacy as P
from limelight.errors import FormatError, LimelightError


@dataclass(frozen=True)
class Principal:
    """Who is asking: ``role`` anonymous, owner or admin; ``name`` the account; ``owner`` the
    owner key whose documents an owner sees."""

    role: str = "anonymous"
    name: str | None = None
    owner: str | None = None

    @property
    def logged_in(self) -> bool:
        return self.role != "anonymous"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


ANONYMOUS = Principal()
#: the principal of the request being answered (the portal's middleware sets it); unset: anonymous
current_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("limelight_principal",
                                                                              default=ANONYMOUS)


class Access(enum.Enum):
    """A route's access level."""

    PUBLIC = "anyone"
    SEARCH = "anyone when anonymous search is allowed, else logged in"
    MEMBER = "logged in (owners and admins)"
    DOCUMENT = "logged in; the document's detail for its owner and admins only (else 404)"
    ADMIN = "admins only"


class Verdict(enum.Enum):
    """What the middleware does with a request before the route runs."""

    ALLOW = 200
    LOGIN = 401  # log in first (the HTML pages redirect to the login page)
    FORBIDDEN = 403


#: every route of the app (method, path template) -> its access level; HEAD is GET's
ROUTE_ACCESS: dict[tuple[str, str], Access] = {
    ("GET", "/api/info"): Access.PUBLIC,
    ("GET", "/api/search"): Access.SEARCH,
    ("GET", "/api/documents/{docid:path}"): Access.DOCUMENT,
    ("GET", "/api/queries"): Access.ADMIN,
    ("GET", "/api/queries/{qid:path}"): Access.ADMIN,
    ("GET", "/api/retrievability"): Access.MEMBER,
    ("GET", "/api/retrievability/documents"): Access.MEMBER,
    ("GET", "/api/retrievability/groups"): Access.MEMBER,
    ("POST", "/api/eqi"): Access.MEMBER,
    ("GET", "/api/explain"): Access.DOCUMENT,
    ("GET", "/api/near-misses"): Access.DOCUMENT,
    ("GET", "/api/fairness"): Access.MEMBER,
    ("GET", "/api/topics"): Access.MEMBER,  # with docid: that document's standing, for its owner only
    ("GET", "/"): Access.SEARCH,
    ("GET", "/documents/{docid:path}"): Access.DOCUMENT,
    ("GET", "/queries"): Access.ADMIN,
    ("GET", "/queries/{qid:path}"): Access.ADMIN,
    ("GET", "/retrievability"): Access.MEMBER,
    ("GET", "/eqi"): Access.MEMBER,  # with ?docid=: the document's text, for its owner only
    ("POST", "/eqi"): Access.MEMBER,
    ("GET", "/groups"): Access.MEMBER,
    ("GET", "/topics"): Access.MEMBER,
    ("GET", "/glossary"): Access.PUBLIC,
    ("GET", "/api"): Access.PUBLIC,
    ("GET", "/openapi.json"): Access.PUBLIC,
    ("GET", "/favicon.ico"): Access.PUBLIC,
    ("GET", "/docs"): Access.PUBLIC,
    ("GET", "/redoc"): Access.PUBLIC,
    ("GET", "/static"): Access.PUBLIC,  # the mount of the style sheet and icon
    ("GET", "/login"): Access.PUBLIC,
    ("POST", "/login"): Access.PUBLIC,
    ("POST", "/logout"): Access.PUBLIC,
    ("GET", "/api/me"): Access.PUBLIC,
    # Search Console's figures (limelight.service.performance): an owner's own documents
    ("GET", "/api/performance"): Access.MEMBER,
    ("GET", "/api/performance/owners"): Access.ADMIN,  # every owner's totals: competitors' figures
    ("GET", "/performance"): Access.MEMBER,
    ("GET", "/api/performance/queries"): Access.MEMBER,  # the searches showing its own documents, screened
    # two audits side by side (limelight.service.compare): its own documents; with docid, that
    # document only, for its owner (another's answers as an unknown id)
    ("GET", "/api/compare"): Access.MEMBER,
    ("GET", "/compare"): Access.MEMBER,
}


class Ownership:
    """Which documents each owner key owns, from the audit's data.

    ``field:NAME``: a document's owner is its value of field ``NAME`` (e.g. Debian's ``source``
    package, the movies' ``Distributor``). A TSV file: one ``OWNER<TAB>ID`` per line, where ``ID``
    is a document id or a pattern (``*`` any characters, ``?`` one); blank lines and lines
    starting with ``#`` are skipped; a document may have several owners.
    """

    def __init__(self, rows_by_owner: dict[str, np.ndarray], n_docs: int, source: str):
        self.source = source
        self.n_docs = n_docs
        self._rows = rows_by_owner
        self._sets: dict[str, Any] = {}

    @classmethod
    def from_spec(cls, spec: str, doc_ids, fields: dict) -> Ownership:
        """``field:NAME`` or the path of a TSV file (``doc_ids``: the served documents' IdMap,
        ``fields``: their fields)."""
        if spec.startswith("field:"):
            name = spec[len("field:"):]
            if name not in fields:
                raise LimelightError(f"--owners {spec}: the documents have no field {name!r} "
                                     f"(fields: {', '.join(fields) or 'none'})")
            return cls.from_values(np.asarray(fields[name], dtype=object), spec)
        return cls.from_tsv(Path(spec), doc_ids)

    @classmethod
    def from_values(cls, values: np.ndarray, source: str) -> Ownership:
        """Owners from one value per document (missing or empty: no owner)."""
        keep = np.flatnonzero([v not in (None, "") for v in values.tolist()])
        keys = np.asarray([str(v) for v in values[keep].tolist()], dtype=object)
        order = keep[np.argsort(keys, kind="stable")]
        sorted_keys = keys[np.argsort(keys, kind="stable")]
        uniq, starts = np.unique(sorted_keys, return_index=True)
        bounds = [*starts.tolist(), len(order)]
        rows = {str(k): np.sort(order[bounds[i]:bounds[i + 1]]) for i, k in enumerate(uniq.tolist())}
        return cls(rows, len(values), source)

    @classmethod
    def from_tsv(cls, path: Path, doc_ids) -> Ownership:
        """Owners from a TSV of ``OWNER<TAB>ID-or-pattern`` lines (errors name the line)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not path.is_file():
            raise LimelightError(f"--owners {path}: no such file (give a TSV file or field:NAME)")
        ids = doc_ids.strings if hasattr(doc_ids, "strings") else np.asarray(list(doc_ids), dtype=object)
        arrow_ids = pa.array(np.asarray(ids, dtype=object).tolist(), pa.string())
        parts: dict[str, list[np.ndarray]] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise FormatError(path, None, f"not UTF-8 text ({e.reason})") from None
        for i, line in enumerate(lines, 1):
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
                raise FormatError(path, i, "expected OWNER<TAB>DOCUMENT-ID-OR-PATTERN")
            owner, ident = cols[0].strip(), cols[1].strip()
            if any(c in ident for c in "*?"):
                regex = "^" + "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in ident) + "$"
                rows = np.flatnonzero(pc.match_substring_regex(arrow_ids, regex).to_numpy(zero_copy_only=False))
                if not len(rows):
                    raise FormatError(path, i, f"the pattern {ident!r} matches no document id")
            else:
                row = doc_ids.encode([ident], missing=-1)[0] if hasattr(doc_ids, "encode") else -1
                if row < 0:
                    raise FormatError(path, i, f"unknown document id {ident!r}")
                rows = np.asarray([row])
            parts.setdefault(owner, []).append(rows)
        return cls({k: np.unique(np.concatenate(v)) for k, v in parts.items()}, len(ids), str(path))

    @property
    def owners(self) -> list[str]:
        """Every owner key, sorted."""
        return sorted(self._rows)

    def rows(self, owner: str | None) -> np.ndarray:
        """The document rows ``owner`` owns (sorted; empty for an unknown owner)."""
        return self._rows.get(owner, np.zeros(0, dtype=np.int64)) if owner is not None else np.zeros(0, np.int64)

    def owns(self, owner: str | None, row: int) -> bool:
        """Whether ``owner`` owns document ``row``."""
        rows = self.rows(owner)
        i = int(np.searchsorted(rows, row))
        return i < len(rows) and int(rows[i]) == int(row)


class Policy:
    """The decisions of the portal (see the module's docstring): routes, documents, queries."""

    def __init__(self, ownership: Ownership, min_searches: int = 2, anonymous_search: bool = True,
                 dp=None):
        if min_searches < 1:
            raise LimelightError(f"--min-searches must be at least 1, got {min_searches}")
        self.ownership = ownership
        self.k = int(min_searches)
        self.anonymous_search = bool(anonymous_search)
        #: an optional DP release of the log (``limelight.service.dprelease.DPRelease``, drawn
        #: once): then a query reaches an owner only when released, ranked by its noisy count
        self.dp = dp
        self._screens: dict[Any, P.QueryScreen] = {}

    # ---- routes ----------------------------------------------------------------------------------
    @staticmethod
    def route_access(method: str, template: str) -> Access | None:
        """The access level of a route (``None``: the route has none, so it is refused)."""
        return ROUTE_ACCESS.get(("GET" if method == "HEAD" else method, template))

    def route_verdict(self, principal: Principal, method: str, template: str) -> Verdict:
        """Whether ``principal`` may call the route ``method template`` at all (the per-document
        and per-query decisions come after, from the service)."""
        access = self.route_access(method, template)
        if access is None:
            return Verdict.FORBIDDEN
        if access is Access.PUBLIC or (access is Access.SEARCH and self.anonymous_search):
            return Verdict.ALLOW
        if not principal.logged_in:
            return Verdict.LOGIN
        if access is Access.ADMIN and not principal.is_admin:
            return Verdict.FORBIDDEN
        return Verdict.ALLOW

    # ---- documents and queries (asked by the service for the current request) --------------------
    def document_visible(self, row: int, principal: Principal | None = None) -> bool:
        """Whether the principal (default: the current request's) may see document ``row``'s
        detail."""
        p = current_principal.get() if principal is None else principal
        if p.is_admin:
            return True
        return p.role == "owner" and self.ownership.owns(p.owner, row)

    def query_screen(self, store, principal: Principal | None = None) -> P.QueryScreen | None:
        """The privacy screen of ``store``'s query set for the principal (``None``: every query
        may be shown, for an admin); built once per query set."""
        p = current_principal.get() if principal is None else principal
        if p.is_admin:
            return None
        key = (store.manifest.get("queries") or id(store), len(store.queries))
        screen = self._screens.get(key)
        if screen is None:
            qs = store.queries
            searchers = qs.fields.get("n_searchers") if getattr(qs, "fields", None) else None
            screen = P.screen_queries(qs.texts, qs.weights, self.k, searchers, self.dp)
            self._screens[key] = screen
        return screen
