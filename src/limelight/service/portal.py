"""The portal: ``limelight serve`` for a platform's content owners (issue 54).

:func:`install` turns the app of :func:`limelight.service.app.create_app` into the portal: it
sets the service's screen to the :class:`~limelight.service.policy.Policy` and adds

- **who is asking** (:class:`PortalMiddleware`): an ``Authorization: Bearer`` API token (an
  invalid, expired or revoked one is refused: 401), else with ``--auth proxy`` the user header
  set by an authenticating reverse proxy, trusted from the configured proxy addresses only, else
  the login session of a signed cookie (Starlette's ``SessionMiddleware``: itsdangerous-signed,
  HttpOnly, SameSite=Lax, Secure with ``https_only``); the principal is set for the request
  (``policy.current_principal``) and the route's access level asked
  (``Policy.route_verdict``) before the route runs;
- **CSRF protection** on every request that changes state (POST) and carries a cookie rather
  than a token: the form's ``csrf_token`` (or an ``X-CSRF-Token`` header) must equal the one in
  the signed session, and a cross-site ``Origin`` or ``Sec-Fetch-Site`` is refused;
- the **login page** (``/login``, throttled: :class:`~limelight.service.accounts.Throttled` →
  429), ``/logout``, ``/api/me``, and an **access log** row per request (method, path without
  its query string, status, user, address).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import quote, urlsplit

import anyio
from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Match

import limelight.service.policy as policy
from limelight.service.accounts import Account, Accounts, Throttled

AUTH_MODES = ("password", "proxy", "none")
SESSION_COOKIE = "limelight_session"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class PortalConfig:
    """How the portal authenticates (``auth``: password or proxy) and decides (``policy``)."""

    accounts: Accounts
    policy: policy.Policy
    auth: str = "password"
    proxy_header: str = "x-remote-user"
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    session_hours: float = 8.0
    https_only: bool = False
    _networks: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        if self.auth not in ("password", "proxy"):
            raise ValueError(f"the portal authenticates by password or proxy, not {self.auth!r}")
        self.proxy_header = self.proxy_header.lower()
        self._networks = [ipaddress.ip_network(p, strict=False) for p in self.trusted_proxies]

    def trusted(self, host: str | None) -> bool:
        """Whether a request from ``host`` comes from a configured proxy."""
        try:
            ip = ipaddress.ip_address(host or "")
        except ValueError:
            return False
        return any(ip in n for n in self._networks)


def principal_of(account: Account | None) -> policy.Principal:
    """The principal of an account (``None``: anonymous)."""
    if account is None:
        return policy.ANONYMOUS
    return policy.Principal(account.role, account.name, account.owner)


def install(app: FastAPI, service, config: PortalConfig) -> FastAPI:
    """Make ``app`` (serving ``service``) the portal of ``config``: the service asks the policy,
    and the login routes and middleware are added (before the app starts)."""
    service.screen = config.policy
    _add_routes(app, service, config)
    # inside create_app's body limit and security headers: the session, then who is asking
    app.user_middleware.append(Middleware(SessionMiddleware, secret_key=config.accounts.secret_key(),
                                          session_cookie=SESSION_COOKIE, same_site="lax",
                                          https_only=config.https_only,
                                          max_age=int(config.session_hours * 3600)))
    app.user_middleware.append(Middleware(PortalMiddleware, config=config, routes=app.router.routes,
                                          templates=app.state.templates, service=service))
    return app


def _is_api(path: str) -> bool:
    return path == "/api/me" or path.startswith("/api/") or path == "/openapi.json"


class PortalMiddleware:
    """ASGI middleware: who is asking, CSRF, the route's access level, the access log."""

    def __init__(self, app, config: PortalConfig, routes, templates, service):
        self.app, self.config, self.routes, self.templates, self.service = app, config, routes, templates, service

    def route_template(self, scope) -> str | None:
        """The path template of the route that answers ``scope`` (``None``: no route does)."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return route.path
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 500}

        async def send_logged(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        principal = policy.ANONYMOUS
        try:
            principal, denial, receive = await self.gate(scope, receive)
            if denial is not None:
                return await denial(scope, receive, send_logged)
            token = policy.current_principal.set(principal)
            try:
                return await self.app(scope, receive, send_logged)
            finally:
                policy.current_principal.reset(token)
        finally:
            entry = {"user_name": principal.name, "method": scope["method"][:10],
                     "path": scope["path"][:2000], "status": status["code"],
                     "address": (scope.get("client") or ("", 0))[0][:100]}
            await anyio.to_thread.run_sync(self.config.accounts.log_access, [entry])

    async def gate(self, scope, receive):
        """``(principal, denial response or None, receive)`` of a request."""
        path, method = scope["path"], scope["method"]
        session = scope.setdefault("session", {})
        csrf = session.get("csrf")
        if not csrf:
            csrf = session["csrf"] = secrets.token_urlsafe(32)
        state = scope.setdefault("state", {})
        state["csrf_token"] = csrf
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        account, by_token, why = await self.who(scope, headers, session)
        principal = principal_of(account)
        state["principal"] = principal
        if why is not None:
            return principal, self.refuse(scope, 401, why, {"www-authenticate": 'Bearer error="invalid_token"'}), receive
        template = self.route_template(scope)
        if template is None:  # no route: the app answers 404 or 405 itself
            return principal, None, receive
        verdict = self.config.policy.route_verdict(principal, method, template)
        if verdict is policy.Verdict.ALLOW and method in UNSAFE and not by_token:
            receive, bad = await self.check_csrf(scope, receive, headers, csrf)
            if bad is not None:
                return principal, self.refuse(scope, 403, bad), receive
        if verdict is policy.Verdict.LOGIN:
            if _is_api(path) or method != "GET":
                return principal, self.refuse(scope, 401, "log in first: send Authorization: Bearer TOKEN",
                                              {"www-authenticate": "Bearer"}), receive
            target = path + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
            return principal, RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303), receive
        if verdict is policy.Verdict.FORBIDDEN:
            what = "admins only" if policy.Policy.route_access(method, template) else "no access rule"
            return principal, self.refuse(scope, 403, f"{method} {path}: {what}"), receive
        return principal, None, receive

    async def who(self, scope, headers: dict, session: dict) -> tuple[Account | None, bool, str | None]:
        """``(account, by token, refusal)``: a bearer token, else the proxy's user header (from
        a trusted proxy only), else the login session."""
        accounts = self.config.accounts
        auth = headers.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None, True, "the Authorization header must be: Bearer TOKEN"
            account = await anyio.to_thread.run_sync(accounts.token_account, token.strip())
            if account is None:
                return None, True, "invalid, expired or revoked token"
            return account, True, None
        if self.config.auth == "proxy":
            name = headers.get(self.config.proxy_header)
            if name and self.config.trusted((scope.get("client") or ("",))[0]):
                account = await anyio.to_thread.run_sync(accounts.get, name.strip())
                if account is None:
                    return None, False, f"no account {name.strip()!r} on this portal"
                return account, False, None
            return None, False, None
        sid = session.get("sid")
        if not sid:
            return None, False, None
        account = await anyio.to_thread.run_sync(accounts.session_account, sid)
        if account is None:
            session.pop("sid", None)
        return account, False, None

    async def check_csrf(self, scope, receive, headers: dict, expected: str):
        """``(receive replaying the body, refusal or None)`` of a state-changing request."""
        origin = headers.get("origin")
        host = headers.get("host", "")
        if origin not in (None, "null") and urlsplit(origin).netloc != host:
            return receive, f"cross-site request refused (Origin {origin})"
        if origin == "null" or headers.get("sec-fetch-site") == "cross-site":
            return receive, "cross-site request refused"
        chunks, more = [], True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                break
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        given = headers.get("x-csrf-token")
        ctype = headers.get("content-type", "")
        if given is None and ctype.split(";")[0].strip() in ("application/x-www-form-urlencoded",
                                                            "multipart/form-data"):
            once = False

            async def body_once():
                nonlocal once
                once = True
                return {"type": "http.request", "body": body, "more_body": False}

            form = await Request({**scope, "type": "http"}, body_once).form()
            value = form.get("csrf_token")
            given = value if isinstance(value, str) else None
        if not given or not hmac.compare_digest(given, expected):
            return replay, "missing or wrong CSRF token: reload the form and send it again"
        return replay, None

    def refuse(self, scope, status: int, message: str, headers: dict | None = None):
        """The refusal as the app answers errors: JSON under /api, an error page elsewhere."""
        if _is_api(scope["path"]):
            return JSONResponse({"detail": message}, status_code=status, headers=headers)
        return self.templates.TemplateResponse(Request(scope), "error.html", {
            "info": self.service.info(), "status": status, "message": message}, status_code=status,
            headers=headers)


def _safe_next(target: str | None) -> str:
    """Where to go after logging in: a path of this site only."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _add_routes(app: FastAPI, service, config: PortalConfig) -> None:
    """/login (GET, POST), /logout (POST), /api/me."""
    templates = app.state.templates
    accounts = config.accounts

    def login_page(request: Request, status: int = 200, message: str | None = None, next_: str = "/",
                   headers: dict | None = None):
        return templates.TemplateResponse(request, "login.html", {
            "info": service.info(), "message": message, "next": _safe_next(next_),
            "proxy": config.auth == "proxy"}, status_code=status, headers=headers)

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_form(request: Request, next: str = "/"):  # noqa: A002 - the query parameter's name
        return login_page(request, next_=next)

    @app.post("/login", response_class=HTMLResponse, include_in_schema=False)
    def login(request: Request, name: Annotated[str, Form(max_length=100)],
              password: Annotated[str, Form(max_length=1000)], next: Annotated[str, Form(max_length=2000)] = "/"):  # noqa: A002
        if config.auth != "password":
            return login_page(request, 404, "log in through your organisation's sign-in", next)
        address = request.client.host if request.client else ""
        try:
            account = accounts.check_password(name, password, address)
        except Throttled as e:
            return login_page(request, 429, str(e), next, {"retry-after": str(e.retry_after)})
        if account is None:
            return login_page(request, 401, "wrong user name or password", next)
        request.session.clear()  # a new session id and CSRF token: no fixation
        request.session["sid"] = accounts.open_session(account, config.session_hours)
        request.session["csrf"] = secrets.token_urlsafe(32)
        return RedirectResponse(_safe_next(next), status_code=303)

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request):
        sid = request.session.get("sid")
        if sid:
            accounts.close_session(sid)
        request.session.clear()
        return RedirectResponse("/", status_code=303)

    @app.get("/api/me", tags=["account"])
    def me() -> dict:
        """Who is asking: user name, role, owner key and how many documents it owns (nulls when
        anonymous)."""
        p = policy.current_principal.get()
        n = len(config.policy.ownership.rows(p.owner)) if p.role == "owner" else (
            len(service.doc_ids) if p.is_admin else 0)
        return {"user": p.name, "role": p.role, "owner": p.owner, "documents": n}
