"""The portal's searcher-privacy acceptance on a real audit (issue 54): with k = 2, no query issued
once reaches an owner by any route, and every total equals the unfiltered (admin's) total.

    .venv/bin/python benchmarks/portal_privacy.py --audit demo-out            # make demo first
    .venv/bin/python benchmarks/portal_privacy.py --audit DIR [--owners field:source] [--random-owners 30]
                                                  [--seed 0] [--max-seconds 900] [--json docs/portal_privacy.json]

The server is the real command, ``limelight serve --audit DIR --db sqlite:///TMP --owners
field:NAME --min-searches 2 --workers 1``, on loopback, over a fresh SQLite database under a
folder of its own in ``.cache/bench/`` (an admin and one owner account per owner drawn; the
audit's own portal.db is never opened), stopped at the end (and after ``--max-seconds``). The
owners: those of the 20 most exposed documents of the first system and ``--random-owners`` more
drawn (seeded) among the owners of exposed documents (``serve_portal.pick_documents``).

Each owner logs in through the login form, and for each of its documents drawn asks every route
an owner can reach about it: the document page (HTML, also with ``why=`` a shown query and
``why=`` a query issued once), its JSON, the near misses, ``/api/explain`` (a shown query, and a
query issued once), EQI on a draft (the document's own text: ``POST /api/eqi``, and the ``/eqi``
form), the comparison with the audit's second system (JSON, CSV, page); and once per owner its
performance (``/performance``, ``/api/performance`` JSON + CSV), its top searches
(``/api/performance/queries`` JSON + CSV) and ``/api/me`` (``/api/performance/owners``, every
owner's figures, is the admin's only: 403 to an owner). The admin asks the same requests.

A leak: a query id of a query issued fewer than k times (the audit's query table, its weights)
in an owner's JSON answer (any ``qid``), CSV export (its ``qid`` column) or HTML page (its
``why=`` and ``/queries/`` links); a query text shown (a JSON or CSV field, an HTML table cell)
that only such queries of the log have; or the text of such a query (two words or more, that the
admin's answers about the same document show, not part of the document's own text or fields) found
anywhere in an owner's answer but within no query text it shows. Totals: every number of the
owner's JSON answer outside its lists and its ``privacy`` note (and ``listed``, what the screen
lets through) equals the admin's answer to the same request (HTML pages: their leaks only). After
all owners it writes the JSON, prints each leak (``LEAK owner: route (label) params: id:QID`` or
``text:TEXT``, the first 10) and each unequal total, and exits 1 if there is any (or an owner's
answer's status differs from the admin's, or ``--max-seconds`` cut the sample short).

The result goes to ``--json`` and, as one figure, to ``make bench``'s table (``_summary.record``).
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, unquote

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _summary import record  # noqa: E402
from serve import free_port, load_avg, start_server  # noqa: E402
from serve_portal import CSRF, PASSWORD, TOP, make_accounts, pick_documents  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r'(?:why=|/queries/)([^"&#?\s<>]+)')
NOT_TOTALS = {"privacy", "listed"}  # what the screen lets through, and its note: differ by design


def qids_of(value) -> list[str]:
    """Every ``qid`` string in a JSON answer."""
    if isinstance(value, dict):
        own = [value["qid"]] if isinstance(value.get("qid"), str) else []
        return [*own, *(q for v in value.values() for q in qids_of(v))]
    if isinstance(value, list):
        return [q for v in value for q in qids_of(v)]
    return []


def texts_of(value) -> list[str]:
    """Every query text (``text`` or ``query`` beside a ``qid``) in a JSON answer."""
    if isinstance(value, dict):
        own = [value[k] for k in ("text", "query") if "qid" in value and isinstance(value.get(k), str)]
        return [*own, *(t for v in value.values() for t in texts_of(v))]
    if isinstance(value, list):
        return [t for v in value for t in texts_of(v)]
    return []


def ids_in(content_type: str, body: str) -> list[str]:
    """The query ids an answer carries: JSON ``qid``s, a CSV's ``qid`` column, an HTML page's links."""
    if content_type.startswith("application/json"):
        return qids_of(json.loads(body))
    if content_type.startswith("text/csv"):
        return [row["qid"] for row in csv.DictReader(io.StringIO(body)) if row.get("qid")]
    return [unquote(x) for x in LINK.findall(body)]


NODE = re.compile(r">([^<]+)<")


def shown_texts(content_type: str, body: str) -> list[str]:
    """The query texts an answer shows: JSON ``text``/``query`` beside a ``qid``, a CSV's
    ``text``/``query`` column; an HTML page's text nodes (every one, stripped)."""
    if content_type.startswith("application/json"):
        return texts_of(json.loads(body))
    if content_type.startswith("text/csv"):
        return [row[c] for row in csv.DictReader(io.StringIO(body)) for c in ("text", "query") if row.get(c)]
    return [html.unescape(x).strip() for x in NODE.findall(body) if x.strip()]


def leaks(content_type: str, body: str, weights: dict[str, float], k: int, once_only: set[str],
          candidates: set[str] = frozenset()) -> list[str]:
    """What an owner's answer shows that it must not: ``id:QID`` for each query issued fewer than
    ``k`` times whose id it carries; ``text:TEXT`` for each text shown (a JSON or CSV field; an
    HTML text node of two words or more: single words and numbers are the page's own) that only
    such queries have (``once_only``), and for each of ``candidates`` (texts of such queries)
    found anywhere in it (as the page escapes it) but within no text it shows (a longer text
    node is itself checked against ``once_only``)."""
    out = [f"id:{q}" for q in ids_in(content_type, body) if weights.get(q, k) < k]
    shown = shown_texts(content_type, body)
    page = content_type.startswith("text/html")
    out += [f"text:{t}" for t in shown if t in once_only and (not page or len(t.split()) >= 2)]
    out += [f"text:{t}" for t in sorted(candidates) if (html.escape(t) if page else t) in body
            and not any(t in v for v in shown)]
    return out


def totals_differ(mine, admin, path: str = "") -> list[str]:
    """The numbers of an owner's JSON answer (outside its lists and privacy note) that differ
    from the admin's answer to the same request: ``path: owner != admin``."""
    out = []
    if isinstance(mine, dict) and isinstance(admin, dict):
        for key, v in mine.items():
            if key in NOT_TOTALS or key not in admin:
                continue
            out += totals_differ(v, admin[key], f"{path}.{key}")
    elif isinstance(mine, (int, float)) and not isinstance(mine, bool):
        if not (isinstance(admin, (int, float)) and (mine == admin or (mine != mine and admin != admin))):
            out.append(f"{path}: {mine} != {admin}")
    return out


class Client:
    """A logged-in session (the login form and its cookie, as a browser)."""

    def __init__(self, base: str, name: str):
        import httpx

        self.http = httpx.Client(base_url=base, timeout=300, follow_redirects=False)
        m = CSRF.search(self.http.get("/login").text)
        self.csrf = m.group(1) if m else ""
        r = self.http.post("/login", data={"name": name, "password": PASSWORD, "next": "/", "csrf_token": self.csrf})
        if r.status_code != 303:
            raise SystemExit(f"login as {name}: {r.status_code} {r.text[:200]}")
        page = self.http.get("/eqi").text
        m = CSRF.search(page)
        self.csrf = m.group(1) if m else self.csrf
        self.requests = 0

    def ask(self, method: str, path: str, kw: dict):
        self.requests += 1
        if method == "POST" and "data" in kw:
            kw = {**kw, "data": {**kw["data"], "csrf_token": self.csrf}}
        return self.http.request(method, path, **kw)


def doc_requests(doc: str, shown_qid: str | None, once_qid: str | None, text: str, systems: list[str]):
    """(label, method, path, kwargs) of every owner route about document ``doc``."""
    d = quote(doc, safe="")
    out = [("document page", "GET", f"/documents/{d}", {}),
           ("document JSON", "GET", f"/api/documents/{d}", {"params": {"limit": 1000}}),
           ("near misses", "GET", "/api/near-misses", {"params": {"docid": doc, "limit": 100}}),
           ("EQI draft (API)", "POST", "/api/eqi", {"json": {"text": text, "k": 100}}),
           ("EQI draft (page)", "POST", "/eqi", {"data": {"text": text, "k": "100"}}),
           ("EQI form", "GET", "/eqi", {"params": {"docid": doc}})]
    for label, q in (("shown", shown_qid), ("issued once", once_qid)):
        if q:
            out += [(f"why ({label}) page", "GET", f"/documents/{d}", {"params": {"why": q}}),
                    (f"explain ({label})", "GET", "/api/explain", {"params": {"docid": doc, "qid": q}})]
    if len(systems) > 1:
        cmp = {"docid": doc, "system": systems[0], "system_b": systems[1]}
        out += [("compare JSON", "GET", "/api/compare", {"params": cmp}),
                ("compare CSV", "GET", "/api/compare", {"params": {**cmp, "format": "csv"}}),
                ("compare page", "GET", "/compare", {"params": cmp})]
    return out


def owner_requests(key: str):
    """(label, method, path, kwargs) of the owner-wide routes."""
    out = [("performance page", "GET", "/performance", {"params": {"owner": key}}),
           ("me", "GET", "/api/me", {})]
    for label, path in (("performance", "/api/performance"), ("top searches", "/api/performance/queries")):
        out += [(f"{label} JSON", "GET", path, {"params": {"owner": key, "limit": 100}}),
                (f"{label} CSV", "GET", path, {"params": {"owner": key, "format": "csv"}})]
    return out


def check(base: str, svc, by_owner: dict[str, list[str]], names: dict[str, str], k: int, deadline: float) -> dict:
    """Every owner's answers against the admin's: leaks and unequal totals (the first few of each)."""
    st = next(iter(svc.systems.values())).store
    ids = st.queries.ids.strings.tolist()
    w = [float(x) for x in st.queries.weights]
    weights = dict(zip(ids, w, strict=True))
    texts = dict(zip(ids, st.queries.texts.tolist(), strict=True))
    visible_texts = {t for q, t in texts.items() if weights[q] >= k}
    once_only = {t for q, t in texts.items() if weights[q] < k} - visible_texts
    n_once = sum(x < k for x in w)
    systems = list(svc.systems)
    admin = Client(base, "admin")
    res = {"owners": 0, "documents": 0, "owner_requests": 0, "admin_requests": 0, "qids_seen": 0,
           "distinct_qids_seen": 0, "texts_checked": 0, "admin_once_qids": 0, "leaks": [], "unequal_totals": [],
           "errors": [], "routes": set(), "queries_in_log": len(ids), "issued_once": n_once}
    seen: set[str] = set()
    admin_once: set[str] = set()

    def compare(label, method, path, kw, mine, theirs, candidates, key):
        ct = mine.headers.get("content-type", "")
        res["routes"].add(label)
        if mine.status_code != 200 or theirs.status_code != 200:
            if mine.status_code != theirs.status_code and "issued once" not in label:
                res["errors"].append(f"{label} {path} {kw.get('params', '')}: owner {mine.status_code}, "
                                     f"admin {theirs.status_code}")
            return
        got = ids_in(ct, mine.text)
        res["qids_seen"] += len(got)
        seen.update(got)
        admin_once.update(q for q in ids_in(theirs.headers.get("content-type", ""), theirs.text) if weights.get(q, k) < k)
        bad = leaks(ct, mine.text, weights, k, once_only, candidates)
        for b in bad:
            res["leaks"].append({"owner": key, "route": f"{method} {path}", "label": label,
                                 "params": kw.get("params", {}), "leak": b})
        if ct.startswith("application/json") and path != "/api/me":  # /api/me: the account, not a total
            for diff in totals_differ(mine.json(), theirs.json()):
                res["unequal_totals"].append({"owner": key, "route": f"{method} {path}", "label": label,
                                              "params": kw.get("params", {}), "diff": diff})

    for name, key in names.items():
        if not key:
            continue
        if time.monotonic() > deadline:
            res["stopped_early"] = f"--max-seconds reached after {res['owners']} owners"
            break
        me = Client(base, name)
        res["owners"] += 1
        for doc in by_owner[key]:
            res["documents"] += 1
            row = svc.doc_ids.lookup(doc)
            text = str(svc.docs.texts[row])
            context = " ".join([text, *map(str, (v[row] for v in svc.docs.fields.values()))]).lower()
            full = admin.ask("GET", f"/api/documents/{quote(doc, safe='')}", {"params": {"limit": 1000}}).json()
            nm = admin.ask("GET", "/api/near-misses", {"params": {"docid": doc, "limit": 100}}).json()
            listed = [q for q in qids_of(full) + qids_of(nm) if q in weights]
            shown = next((q for q in listed if weights[q] >= k), None)
            once = next((q for q in listed if weights[q] < k), None)
            # the texts of queries issued once that the admin sees about this document
            cand = {texts[q] for q in listed if weights[q] < k}
            cand = {t for t in cand if len(t.split()) >= 2 and t not in visible_texts and t.lower() not in context}
            for label, method, path, kw in doc_requests(doc, shown, once, text[:4000], systems):
                res["texts_checked"] += len(cand)
                compare(label, method, path, kw, me.ask(method, path, kw), admin.ask(method, path, kw), cand, key)
        for label, method, path, kw in owner_requests(key):
            compare(label, method, path, kw, me.ask(method, path, kw), admin.ask(method, path, kw), set(), key)
        res["owner_requests"] += me.requests
        me.http.close()
        print(f"  {res['owners']:>3} owners, {res['owner_requests']} owner requests, leaks {len(res['leaks'])}, "
              f"unequal totals {len(res['unequal_totals'])}", flush=True)
    res["admin_requests"] = admin.requests
    admin.http.close()
    res["distinct_qids_seen"] = len(seen)
    res["admin_once_qids"] = len(admin_once)
    res["routes"] = sorted(res["routes"])
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audit", default="demo-out")
    ap.add_argument("--owners", default=None, help="field:NAME or a TSV (default: field:source if the documents "
                                                   "have it, else the audit's group field)")
    ap.add_argument("--min-searches", type=int, default=2)
    ap.add_argument("--random-owners", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=900, help="stop asking after this long (the server too)")
    ap.add_argument("--json", default=str(ROOT / "docs" / "portal_privacy.json"))
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from limelight.service.core import AuditService

    t0 = time.monotonic()
    svc = AuditService(a.audit)
    owners = a.owners or ("field:source" if "source" in svc.docs.fields else f"field:{svc.group_field}")
    _, top = pick_documents(svc, owners, 0, a.seed)  # the owners of the TOP most exposed documents
    _, by_owner = pick_documents(svc, owners, len(top) + a.random_owners, a.seed)
    (ROOT / ".cache" / "bench").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="privacy-", dir=ROOT / ".cache" / "bench"))
    db_url = f"sqlite:///{work / 'portal.db'}"
    names = make_accounts(db_url, list(by_owner))
    load_before = load_avg()
    print(f"audit {a.audit}: {len(by_owner)} owners ({len(top)} of the {TOP} most exposed documents, "
          f"{len(by_owner) - len(top)} drawn, seed {a.seed}; {owners}), k = {a.min_searches}; load {load_before}",
          flush=True)
    port = free_port()
    proc = start_server(a.audit, port, work / "server.log", ("--db", db_url, "--owners", owners, "--min-searches",
                                                              str(a.min_searches), "--workers", "1"), wait_s=600)
    try:
        res = check(f"http://127.0.0.1:{port}", svc, by_owner, names, a.min_searches, t0 + a.max_seconds)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except Exception:  # noqa: BLE001 - stop it whatever
            proc.kill()
        log_tail = (work / "server.log").read_text(errors="replace")[-2000:]
        shutil.rmtree(work)
    ok = not res["leaks"] and not res["unequal_totals"] and not res["errors"] and "stopped_early" not in res
    out = {"audit": str(a.audit), "owners_spec": owners, "k": a.min_searches, "seed": a.seed,
           "top_owners": len(top), "random_owners": len(by_owner) - len(top), **res,
           "leaks": res["leaks"][:50], "unequal_totals": res["unequal_totals"][:50], "errors": res["errors"][:50],
           "n_leaks": len(res["leaks"]), "n_unequal_totals": len(res["unequal_totals"]), "n_errors": len(res["errors"]),
           "passed": ok, "wall_s": round(time.monotonic() - t0, 1), "load_before": load_before,
           "load_after": load_avg(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{out['owners']} owners ({out['documents']} documents), {out['owner_requests']} owner requests and "
          f"{out['admin_requests']} admin requests over {len(out['routes'])} routes; {out['qids_seen']} query ids in "
          f"the owners' answers ({out['distinct_qids_seen']} distinct; the admin's: {out['admin_once_qids']} issued "
          f"once); {out['texts_checked']} text checks; leaks {out['n_leaks']}, unequal totals "
          f"{out['n_unequal_totals']}, errors {out['n_errors']}; {out['wall_s']} s, load {out['load_after']}")
    record(f"portal privacy (k = {a.min_searches}), {out['owners']} owners of {a.audit}: queries issued once in "
           "owners' answers", out["n_leaks"], anchor=f"the admin's answers: {out['admin_once_qids']} such queries",
           target="0, every total = the admin's", met=ok,
           note=f"{out['owner_requests']} owner requests, {len(out['routes'])} routes, {out['qids_seen']} query ids "
                f"seen; unequal totals {out['n_unequal_totals']}")
    for item in res["leaks"][:10]:
        print(f"LEAK {item['owner']}: {item['route']} ({item['label']}) {item['params']}: {item['leak']}")
    for item in res["unequal_totals"][:10]:
        print(f"TOTAL {item['owner']}: {item['route']} ({item['label']}) {item['params']}: {item['diff']}")
    for e in res["errors"][:10]:
        print(f"ERROR {e}")
    if not ok:
        print(f"server log (tail):\n{log_tail}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
