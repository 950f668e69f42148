"""The portal's access rules over the real test audit (issue 54): every route of the app (the
OpenAPI schema's and every HTML page) × {anonymous, owner A, owner B, admin} × {A's document,
B's document, an unknown id}, with k = 2 (the movies audit's log: 2,946 of its 3,000 queries
issued once); owners are the movies' ``Distributor``. Also CSRF, tokens, the login throttle,
the proxy header, and ``serve`` refusing a non-loopback address without authentication.

The app runs in-process (TestClient) over its own ``AuditService`` (the portal sets the
service's screen; the session's shared service stays as the other serve tests use it) and a
SQLite accounts database (the database itself is tested against PostgreSQL too:
test_portal_db.py)."""

from __future__ import annotations

import csv
import html
import io
import re
from urllib.parse import quote, unquote

import numpy as np
import pytest
import test_serve_support as support
from sqlalchemy import update

audit_dir = support.audit_dir

A, B = "Warner Bros.", "Sony Pictures"
K = 2
UNKNOWN = "no-such-document"
WHO = ("anonymous", "alice", "bob", "root")  # alice owns A's documents, bob B's, root is the admin
PASSWORDS = {"alice": "alice password", "bob": "bob password", "root": "root password",
             "carol": "carol password"}


@pytest.fixture(scope="module")
def portal(audit_dir, tmp_path_factory):
    from fastapi.testclient import TestClient

    from limelight.service.accounts import Accounts
    from limelight.service.app import create_app
    from limelight.service.core import AuditService
    from limelight.service.policy import Ownership, Policy
    from limelight.service.portal import PortalConfig, install

    service = AuditService(audit_dir)
    accounts = Accounts(f"sqlite:///{tmp_path_factory.mktemp('portal') / 'portal.db'}")
    accounts.add_user("alice", "owner", A, PASSWORDS["alice"])
    accounts.add_user("bob", "owner", B, PASSWORDS["bob"])
    accounts.add_user("root", "admin", password=PASSWORDS["root"])
    accounts.add_user("carol", "owner", A, PASSWORDS["carol"])  # for the throttle
    tokens = {name: accounts.issue_token(name)[0] for name in ("alice", "bob", "root")}
    ownership = Ownership.from_spec("field:Distributor", service.doc_ids, service.docs.fields)
    policy = Policy(ownership, K)
    app = install(create_app(service, max_body=256 * 1024, compare=AuditService(audit_dir)), service,
                  PortalConfig(accounts, policy))
    st = service.system("bm25").store
    n_exposing = st.n_exposing()

    def busiest(owner):
        rows = ownership.rows(owner)
        return str(service.doc_ids[int(rows[np.argmax(n_exposing[st.doc_ids.encode(service.doc_ids.decode(rows))])])])

    w = np.asarray(st.queries.weights)
    visible = set(st.queries.ids.decode(np.flatnonzero(w >= K)).tolist())
    with TestClient(app, follow_redirects=False) as client:
        yield {"app": app, "client": client, "service": service, "accounts": accounts, "tokens": tokens,
               "policy": policy, "docs": {"A": busiest(A), "B": busiest(B), "unknown": UNKNOWN},
               "visible": visible, "weights": dict(zip(st.queries.ids.strings.tolist(), w.tolist(), strict=True)),
               "texts": dict(zip(st.queries.ids.strings.tolist(), st.queries.texts.tolist(), strict=True))}
    accounts.close()


def _headers(portal, who: str) -> dict:
    return {} if who == "anonymous" else {"Authorization": f"Bearer {portal['tokens'][who]}"}


def _templates(app) -> set[tuple[str, str]]:
    """Every (method, path template) of the app: the OpenAPI schema's operations and the pages."""
    from starlette.routing import Mount

    out = set()
    for r in app.routes:
        for m in getattr(r, "methods", None) or (["GET"] if isinstance(r, Mount) else []):
            if m != "HEAD":
                out.add((m, r.path))
    return out


def _request(portal, method: str, template: str, doc: str, csv: bool = False) -> tuple[str, str, dict]:
    """A concrete request of a route about document ``doc`` (where the route takes one); with
    ``csv``, its CSV export (``format=csv``)."""
    visible_qid = sorted(portal["visible"])[0]
    text = portal["service"].docs.texts[portal["service"].doc_ids.lookup(portal["docs"]["A"])]
    path = template.replace("{docid:path}", quote(doc, safe="")).replace("{qid:path}", quote(visible_qid, safe=""))
    params = {"/api/search": {"q": "star wars"}, "/": {"q": "star wars"},
              "/api/retrievability/groups": {"field": "Major Genre"}, "/api/fairness": {"field": "Major Genre"},
              "/groups": {"field": "Major Genre"}, "/api/explain": {"docid": doc, "qid": visible_qid},
              "/api/near-misses": {"docid": doc}, "/eqi": {"docid": doc} if method == "GET" else {},
              "/api/compare": {"docid": doc, "system_b": "bm25-classic"},
              "/compare": {"docid": doc, "system_b": "bm25-classic"}}.get(template, {})
    kw: dict = {"params": params}
    if (method, template) == ("POST", "/api/eqi"):
        kw = {"json": {"text": text, "k": 50}}
    elif (method, template) == ("POST", "/eqi"):
        kw = {"data": {"text": text, "k": "50"}}
    if template == "/static":
        path = "/static/style.css"
    if csv:
        kw["params"] = {**kw["params"], "format": "csv"}
    return method, path, kw


#: routes tested on their own (a form that changes state), not in the matrix
OWN_TESTS = {("POST", "/login"), ("POST", "/logout")}
#: routes whose answer depends on a document id (path or query parameter)
DOC_ROUTES = {"/api/documents/{docid:path}", "/documents/{docid:path}", "/api/explain", "/api/near-misses",
              "/api/compare", "/compare"}
#: routes with a CSV export (``format=csv``): in the matrix as ``"TEMPLATE csv"``
CSV_ROUTES = {"/api/performance", "/api/performance/owners", "/api/performance/queries", "/api/compare"}


def _expected(portal, method: str, template: str, who: str, case: str) -> int:
    from limelight.service.policy import Access, Policy

    template = template.removesuffix(" csv")
    access = Policy.route_access(method, template)
    doc_dependent = template in DOC_ROUTES or (method, template) == ("GET", "/eqi")
    if access in (Access.PUBLIC, Access.SEARCH):
        return 307 if template in ("/docs", "/redoc", "/favicon.ico") else 200  # redirects to /api, the icon
    if who == "anonymous":
        return 303 if method == "GET" and not template.startswith("/api") else 401
    if access is Access.ADMIN:
        return 200 if who == "root" else 403
    if not doc_dependent:
        return 200
    if case == "unknown":
        return 404
    if who == "root":
        return 200
    return 200 if (who, case) in (("alice", "A"), ("bob", "B")) else 404


@pytest.fixture(scope="module")
def matrix(portal):
    """Every route × principal × document case: ``{(method, template, who, case): response}``."""
    client = portal["client"]
    out = {}
    routes = sorted(_templates(portal["app"]) - OWN_TESTS)
    for method, template in routes + [("GET", f"{t} csv") for t in sorted(CSV_ROUTES)]:
        bare = template.removesuffix(" csv")
        doc_dependent = bare in DOC_ROUTES or (method, bare) == ("GET", "/eqi")
        for who in WHO:
            for case in (("A", "B", "unknown") if doc_dependent else ("A",)):
                m, path, kw = _request(portal, method, bare, portal["docs"][case], csv=bare != template)
                client.cookies.clear()
                out[(method, template, who, case)] = client.request(m, path, headers=_headers(portal, who), **kw)
    return out


def test_every_route_has_an_access_rule_and_is_in_the_matrix(portal, matrix):
    from limelight.service.policy import ROUTE_ACCESS

    routes = _templates(portal["app"])
    assert routes <= set(ROUTE_ACCESS), sorted(routes - set(ROUTE_ACCESS))
    schema = {(m.upper(), p) for p, ops in portal["app"].openapi()["paths"].items() for m in ops}
    assert {(m, p.replace("{docid}", "{docid:path}").replace("{qid}", "{qid:path}")) for m, p in schema} <= routes
    assert {(m, t.removesuffix(" csv")) for m, t, _, _ in matrix} == routes - OWN_TESTS
    assert {t for _, t, _, _ in matrix if t.endswith(" csv")} == {f"{t} csv" for t in CSV_ROUTES}
    assert len(matrix) > 100


def test_a_route_without_an_access_rule_is_refused(audit_dir, tmp_path):
    """Fail closed: a route added to the app without a rule in the policy answers 403, even to
    an admin."""
    from fastapi.testclient import TestClient

    from limelight.service.accounts import Accounts
    from limelight.service.app import create_app
    from limelight.service.core import AuditService
    from limelight.service.policy import Ownership, Policy
    from limelight.service.portal import PortalConfig, install

    service = AuditService(audit_dir)
    accounts = Accounts(str(tmp_path / "p.db"))
    accounts.add_user("root", "admin")
    token = accounts.issue_token("root")[0]
    app = create_app(service)
    app.get("/api/new-thing")(lambda: {"secret": 1})
    install(app, service, PortalConfig(accounts, Policy(Ownership({}, len(service.doc_ids), "none"))))
    with TestClient(app) as c:
        r = c.get("/api/new-thing", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 403 and "no access rule" in r.json()["detail"]
        assert c.get("/api/info", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    accounts.close()


def test_every_route_answers_each_principal_as_the_policy_says(portal, matrix):
    wrong = []
    for (method, template, who, case), r in matrix.items():
        want = _expected(portal, method, template, who, case)
        if r.status_code != want:
            wrong.append(f"{method} {template} {who} {case}: {r.status_code} (want {want}) {r.text[:120]}")
        elif want == 303:
            assert r.headers["location"].startswith("/login?next=")
    assert wrong == [], "\n".join(wrong)


def test_another_owners_document_answers_exactly_as_an_unknown_id(portal, matrix):
    docs = portal["docs"]
    compared = 0
    for (method, template, who, case), r in matrix.items():
        if who not in ("alice", "bob") or case == "unknown" or (method, template, who, "unknown") not in matrix:
            continue
        own = (who, case) in (("alice", "A"), ("bob", "B"))
        if own:
            continue
        unknown = matrix[(method, template, who, "unknown")]
        assert r.status_code == unknown.status_code == 404
        assert r.headers["content-type"] == unknown.headers["content-type"]
        mine = r.text.replace(quote(docs[case], safe=""), "ID").replace(docs[case], "ID")
        assert _no_csrf(mine) == _no_csrf(unknown.text.replace(UNKNOWN, "ID")), (method, template, who)
        compared += 1
    assert compared == 2 * 8  # two owners × the routes that take a document id (the comparison's CSV too)


def _no_csrf(page: str) -> str:
    """A page less its session's random CSRF token."""
    return re.sub(r'name="csrf_token" value="[^"]*"', 'name="csrf_token"', page)


def _qids(value) -> list[str]:
    """Every ``qid`` in a JSON answer."""
    if isinstance(value, dict):
        own = [value["qid"]] if isinstance(value.get("qid"), str) else []
        return [*own, *(q for v in value.values() for q in _qids(v))]
    if isinstance(value, list):
        return [q for v in value for q in _qids(v)]
    return []


def test_no_query_issued_once_reaches_an_owner_by_any_route(portal, matrix):
    """k = 2: no log query issued once appears in any answer to an owner, JSON (by query id)
    or HTML (its links by id, and its text where the admin's page of the same request shows it);
    the admin's answers do show such queries, so the check can fail."""
    weights, texts, service = portal["weights"], portal["texts"], portal["service"]
    once_texts = {t for q, t in texts.items() if weights[q] < K and len(t.split()) >= 2}
    visible_texts = [texts[q] for q in portal["visible"]]
    seen_by_admin = caught = 0
    for (method, template, who, case), r in matrix.items():
        if who not in ("alice", "bob") or r.status_code != 200:
            continue
        admin = matrix[(method, template, "root", case)]
        if r.headers["content-type"].startswith("application/json"):
            shown = _qids(r.json())
            assert all(weights[q] >= K for q in shown if q in weights), (method, template, who)
            seen_by_admin += sum(weights.get(q, K) < K for q in _qids(admin.json()))
            continue
        if r.headers["content-type"].startswith("text/csv"):  # the exports: their qid column, then their text
            shown = [row["qid"] for row in csv.DictReader(io.StringIO(r.text)) if row.get("qid")]
            assert all(weights[q] >= K for q in shown if q in weights), (method, template, who)
            seen_by_admin += sum(weights.get(row.get("qid") or "", K) < K
                                 for row in csv.DictReader(io.StringIO(admin.text)))
        linked = [unquote(x) for x in re.findall(r'(?:why=|/queries/)([^"&#?]+)', r.text)]
        assert all(weights.get(q, K) >= K for q in linked), (method, template, who)
        doc = portal["docs"][case]
        row = service.doc_ids.lookup(doc)
        context = " ".join([str(service.docs.texts[row]), *map(str, (v[row] for v in service.docs.fields.values()))]).lower()
        candidates = [t for t in once_texts if html.escape(t) in admin.text and t.lower() not in context
                      and not any(t in v for v in visible_texts)]
        caught += len(candidates)
        leaked = [t for t in candidates if html.escape(t) in r.text]
        assert leaked == [], (method, template, who, leaked[:5])
    assert seen_by_admin > 100 and caught > 50  # what the admin sees and the owners do not


def test_hidden_queries_count_in_every_total(portal, matrix):
    for who, case in (("alice", "A"), ("bob", "B")):
        mine = matrix[("GET", "/api/documents/{docid:path}", who, case)].json()
        admin = matrix[("GET", "/api/documents/{docid:path}", "root", case)].json()
        assert admin["privacy"] is None and mine["privacy"]["hidden"] > 0
        for key in ("n_exposing", "exposure", "weighted_exposure", "total", "standing", "systems"):
            assert mine[key] == admin[key], key
        full = portal["client"].get(f"/api/documents/{quote(portal['docs'][case], safe='')}",
                                    params={"limit": 1000}, headers=_headers(portal, who)).json()
        assert len(full["queries"]) == full["n_exposing"] - full["privacy"]["hidden"]
        assert mine["privacy"]["fewer_than_k"] == sum(
            portal["weights"][q["qid"]] < K for q in portal["client"].get(
                f"/api/documents/{quote(portal['docs'][case], safe='')}", params={"limit": 1000},
                headers=_headers(portal, "root")).json()["queries"])
        page = matrix[("GET", "/documents/{docid:path}", who, case)].text
        assert 'id="privacy-note"' in page and f"fewer than {K} times" in page
    eqi_owner = matrix[("POST", "/api/eqi", "alice", "A")].json()["exact"]
    eqi_admin = matrix[("POST", "/api/eqi", "root", "A")].json()["exact"]
    assert eqi_owner["n_exposing"] == eqi_admin["n_exposing"] and eqi_owner["privacy"]["hidden"] > 0


def _login(client, name: str, password: str, **headers):
    client.cookies.clear()
    form = client.get("/login").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    return client.post("/login", data={"name": name, "password": password, "csrf_token": csrf},
                       headers=headers), csrf


def test_login_session_cookie_and_logout(portal):
    client = portal["client"]
    r, _ = _login(client, "alice", PASSWORDS["alice"])
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "limelight_session=" in cookie
    assert client.get("/api/me").json()["user"] == "alice"
    page = client.get(f"/documents/{quote(portal['docs']['A'], safe='')}")
    assert page.status_code == 200 and 'id="who"' in page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    assert client.post("/logout", data={"csrf_token": csrf}).status_code == 303
    assert client.get("/api/me").json()["user"] is None
    client.cookies.clear()


def test_cross_site_form_posts_are_refused(portal):
    client = portal["client"]
    _, _ = _login(client, "bob", PASSWORDS["bob"])
    page = client.get("/eqi").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    form = {"text": "a spy thriller in paris", "k": "5"}
    assert client.post("/eqi", data=form).status_code == 403  # no token
    assert client.post("/eqi", data={**form, "csrf_token": "forged"}).status_code == 403
    r = client.post("/eqi", data={**form, "csrf_token": csrf}, headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and "cross-site" in r.text
    r = client.post("/eqi", data={**form, "csrf_token": csrf}, headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    r = client.post("/api/eqi", json={"text": "a spy thriller"})  # the session's cookie, no token
    assert r.status_code == 403
    r = client.post("/eqi", data={**form, "csrf_token": csrf}, headers={"origin": "http://testserver"})
    assert r.status_code == 200 and 'id="eqi-results"' in r.text
    client.cookies.clear()
    r, _ = _login(client, "bob", PASSWORDS["bob"], origin="https://evil.example")  # login CSRF
    assert r.status_code == 403
    client.cookies.clear()


def test_revoked_or_expired_tokens_are_refused_on_their_next_request(portal):
    import limelight.service.db as db

    accounts, client = portal["accounts"], portal["client"]
    client.cookies.clear()
    token, tid, _ = accounts.issue_token("alice", days=1)
    auth = {"Authorization": f"Bearer {token}"}
    doc = f"/api/documents/{quote(portal['docs']['A'], safe='')}"
    assert client.get(doc, headers=auth).status_code == 200
    accounts.revoke("alice", tid)
    r = client.get(doc, headers=auth)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert client.get("/api/info", headers=auth).status_code == 401  # refused, not anonymous
    token, tid, _ = accounts.issue_token("alice", days=1)
    auth = {"Authorization": f"Bearer {token}"}
    assert client.get(doc, headers=auth).status_code == 200
    with accounts.Session.begin() as s:
        s.execute(update(db.ApiToken).where(db.ApiToken.id == tid).values(expires_at=db.utcnow()))
    assert client.get(doc, headers=auth).status_code == 401
    assert client.get(doc, headers={"Authorization": "Basic YWxpY2U6eA=="}).status_code == 401


def test_the_sixth_wrong_password_within_a_minute_gets_429(portal):
    client = portal["client"]
    for _ in range(5):
        r, _ = _login(client, "carol", "wrong password")
        assert r.status_code == 401 and "wrong user name or password" in r.text
    r, _ = _login(client, "carol", "wrong password")
    assert r.status_code == 429 and r.headers["retry-after"] == "60"
    r, _ = _login(client, "carol", PASSWORDS["carol"])  # the right one too, within the minute
    assert r.status_code == 429
    assert _login(client, "alice", PASSWORDS["alice"])[0].status_code == 303  # per account
    client.cookies.clear()


def test_the_proxy_header_is_trusted_from_the_proxy_only(portal, audit_dir):
    from fastapi.testclient import TestClient

    from limelight.service.app import create_app
    from limelight.service.core import AuditService
    from limelight.service.portal import PortalConfig, install

    service = AuditService(audit_dir)
    app = install(create_app(service), service, PortalConfig(portal["accounts"], portal["policy"], "proxy",
                                                             "X-Remote-User", ("10.1.2.3",)))
    doc = f"/api/documents/{quote(portal['docs']['A'], safe='')}"
    with TestClient(app, client=("10.1.2.3", 5000)) as proxy, TestClient(app, client=("10.9.9.9", 5000)) as direct:
        assert proxy.get("/api/me", headers={"X-Remote-User": "alice"}).json()["user"] == "alice"
        assert proxy.get(doc, headers={"X-Remote-User": "alice"}).status_code == 200
        assert proxy.get(doc, headers={"X-Remote-User": "bob"}).status_code == 404
        assert proxy.get(doc, headers={"X-Remote-User": "mallory"}).status_code == 401
        assert direct.get("/api/me", headers={"X-Remote-User": "root"}).json()["user"] is None
        assert direct.get("/api/queries", headers={"X-Remote-User": "root"}).status_code == 401
        token = {"Authorization": f"Bearer {portal['tokens']['root']}"}
        assert direct.get("/api/queries", headers=token).status_code == 200  # tokens work too


def test_serve_refuses_a_non_loopback_address_without_authentication(audit_dir, tmp_path):
    from typer.testing import CliRunner

    from limelight.cli import app
    from limelight.errors import LimelightError

    runner = CliRunner()
    for args, message in [(["--host", "0.0.0.0"], "refusing to serve 0.0.0.0 without authentication"),
                          (["--host", "0.0.0.0", "--auth", "none"], "refusing to serve"),
                          (["--auth", "password"], "--auth password needs --db URL"),
                          (["--owners", "field:Distributor"], "take effect with --auth password or proxy")]:
        r = runner.invoke(app, ["serve", "--audit", str(audit_dir), "--no-preload", *args])
        assert isinstance(r.exception, LimelightError) and message in str(r.exception), (args, r.output)
    r = runner.invoke(app, ["serve", "--audit", str(audit_dir), "--db", str(tmp_path / "p.db"),
                            "--owners", str(tmp_path / "missing.tsv"), "--port", "0", "--no-preload"])
    assert isinstance(r.exception, LimelightError) and "missing.tsv: no such file" in str(r.exception)


def test_an_owners_page_counts_every_near_miss_and_links_only_where_it_may_go(portal, matrix):
    """An owner's document page does not link its searches to the raw log (``/queries/...``,
    admins only: a 403 for it), the admin's does; the near misses hidden for the searchers'
    privacy are counted among every near miss of the document (``total``), not among the few
    listed, and the page says so when none may be shown."""
    owner = matrix[("GET", "/documents/{docid:path}", "alice", "A")].text
    admin = matrix[("GET", "/documents/{docid:path}", "root", "A")].text
    assert 'href="/queries/' not in owner and 'href="/queries/' in admin
    doc, client = portal["docs"]["A"], portal["client"]
    full = client.get("/api/near-misses", params={"docid": doc, "limit": 100}, headers=_headers(portal, "root")).json()
    mine = client.get("/api/near-misses", params={"docid": doc, "limit": 5}, headers=_headers(portal, "alice")).json()
    assert full["privacy"] is None and full["total"] == len(full["queries"]) == mine["total"] > 5
    once = sum(portal["weights"][q["qid"]] < K for q in full["queries"])
    assert mine["privacy"]["fewer_than_k"] == once > 5
    assert len(mine["queries"]) == min(5, mine["total"] - mine["privacy"]["hidden"])
    if not mine["queries"]:
        assert f"{mine['total']:,} distinct searches rank it between" in owner


def test_performance_per_document_and_per_owner_as_search_console_counts(portal):
    """/api/performance (issue 54 item 4): an owner's documents and no other's; impressions are
    r(d) at c (times shown in the top c, counting every time a search was issued), attention the
    document page's weighted exposure, the average position the impressions' mean rank; the CSV
    holds the same rows; per-owner totals are the admin's only and add up to the documents'."""
    import csv
    import io

    service, client, policy = portal["service"], portal["client"], portal["policy"]
    sysm = service.system("bm25")
    mine = client.get("/api/performance", params={"system": "bm25", "limit": 1000}, headers=_headers(portal, "alice")).json()
    rows = policy.ownership.rows(A)
    c = mine["c"]
    assert mine["owner"] == A and mine["n_documents"] == len(rows) == len(mine["documents"])
    r = service._served_r(sysm, c)
    assert mine["impressions"] == pytest.approx(float(r[rows].sum()))
    by_id = {d["docid"]: d for d in mine["documents"]}
    assert {k: v["impressions"] for k, v in by_id.items()} == pytest.approx(
        {str(service.doc_ids[i]): float(r[i]) for i in rows.tolist()})
    doc = portal["docs"]["A"]
    page = client.get(f"/api/documents/{quote(doc, safe='')}", params={"system": "bm25", "limit": 1000},
                      headers=_headers(portal, "root")).json()
    assert by_id[doc]["attention"] == pytest.approx(page["weighted_exposure"])
    shown = [(q["weight"], q["rank"]) for q in page["queries"] if q["rank"] <= c]
    assert by_id[doc]["searches"] == len(shown) > 0
    assert by_id[doc]["average_position"] == pytest.approx(sum(w * k for w, k in shown) / sum(w for w, _ in shown))
    assert mine["clicks"] is None and "no clicks" in mine["clicks_note"]
    # another owner's key answers as an unknown one; the admin sees A's as alice does
    assert client.get("/api/performance", params={"owner": A}, headers=_headers(portal, "bob")).status_code == 404
    admin_a = client.get("/api/performance", params={"system": "bm25", "limit": 1000, "owner": A},
                         headers=_headers(portal, "root")).json()
    assert admin_a == mine
    text = client.get("/api/performance", params={"system": "bm25", "format": "csv"}, headers=_headers(portal, "alice"))
    assert text.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(text.text)))
    assert len(table) == len(rows) and {t["owner"] for t in table} == {A}
    assert sum(float(t["impressions"]) for t in table) == pytest.approx(mine["impressions"])
    # per owner: the admin's only
    assert client.get("/api/performance/owners", headers=_headers(portal, "alice")).status_code == 403
    owners = client.get("/api/performance/owners", params={"system": "bm25", "limit": 1000},
                        headers=_headers(portal, "root")).json()
    by_owner = {o["owner"]: o for o in owners["owners"]}
    assert by_owner[A]["impressions"] == pytest.approx(mine["impressions"]) and by_owner[A]["n_documents"] == len(rows)
    assert sum(o["n_documents"] for o in owners["owners"]) == sum(len(policy.ownership.rows(k))
                                                                  for k in policy.ownership.owners)
    html_page = client.get("/performance", headers=_headers(portal, "alice")).text
    assert 'id="performance-table"' in html_page and html.escape(A) in html_page


def test_users_add_owners_makes_one_account_per_owner_key(audit_dir, tmp_path):
    """``limelight users add-owners`` (the demo's accounts): one owner account per owner key of
    the audit's documents, named after the key (characters a name may not hold become ``-``),
    without a password; a second run adds none."""
    from typer.testing import CliRunner

    from limelight.cli import app
    from limelight.service.accounts import Accounts
    from limelight.service.core import AuditService

    url = f"sqlite:///{tmp_path / 'owners.db'}"
    args = ["users", "add-owners", "--audit", str(audit_dir), "--owners", "field:Distributor", "--db", url]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    keys = {str(v) for v in AuditService(audit_dir).docs.fields["Distributor"].tolist() if v not in (None, "")}
    accounts = Accounts(url)
    try:
        users = {u["name"]: u for u in accounts.list_users()}
        assert {u["owner"] for u in users.values()} == keys and len(users) == len(keys)
        wb = users["Warner-Bros."]
        assert (wb["owner"], wb["role"], wb["password"]) == (A, "owner", False)
    finally:
        accounts.close()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and again.output.startswith("added 0 owner accounts")
