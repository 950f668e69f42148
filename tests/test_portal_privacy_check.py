"""The leak detector of benchmarks/portal_privacy.py (issue 54's privacy acceptance on the demo
audit) on the small movies test audit, k = 2: it finds the queries issued once in the admin's
answers, none in an owner's, and it finds unequal totals; every route it asks of an owner answers.

The app runs in-process (TestClient) with the portal installed, owners the movies' Distributor."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import test_serve_support as support

audit_dir = support.audit_dir

ROOT = Path(__file__).resolve().parents[1]
K = 2
OWNER = "Warner Bros."


def _script():
    spec = importlib.util.spec_from_file_location("portal_privacy", ROOT / "benchmarks" / "portal_privacy.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("portal_privacy", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def setup(audit_dir, tmp_path_factory):
    from fastapi.testclient import TestClient

    from limelight.service.accounts import Accounts
    from limelight.service.app import create_app
    from limelight.service.core import AuditService
    from limelight.service.policy import Ownership, Policy
    from limelight.service.portal import PortalConfig, install

    service = AuditService(audit_dir)
    accounts = Accounts(f"sqlite:///{tmp_path_factory.mktemp('privacy') / 'portal.db'}")
    accounts.add_user("alice", "owner", OWNER)
    accounts.add_user("root", "admin")
    tokens = {n: accounts.issue_token(n)[0] for n in ("alice", "root")}
    ownership = Ownership.from_spec("field:Distributor", service.doc_ids, service.docs.fields)
    app = install(create_app(service), service, PortalConfig(accounts, Policy(ownership, K)))
    st = service.system("bm25").store
    rows = ownership.rows(OWNER)
    n_exp = st.n_exposing()[st.doc_ids.encode(service.doc_ids.decode(rows))]
    doc = str(service.doc_ids[int(rows[np.argmax(n_exp)])])
    ids = st.queries.ids.strings.tolist()
    weights = dict(zip(ids, [float(w) for w in st.queries.weights], strict=True))
    texts = dict(zip(ids, st.queries.texts.tolist(), strict=True))
    visible = {t for q, t in texts.items() if weights[q] >= K}
    once_only = {t for q, t in texts.items() if weights[q] < K} - visible
    with TestClient(app, follow_redirects=False) as client:
        yield {"client": client, "service": service, "doc": doc, "weights": weights, "once_only": once_only,
               "texts": texts, "headers": {n: {"Authorization": f"Bearer {t}"} for n, t in tokens.items()}}
    accounts.close()


def test_the_detector_finds_what_the_admin_sees_and_nothing_in_an_owners_answers(setup):
    pp = _script()
    client, doc, h = setup["client"], setup["doc"], setup["headers"]
    full = client.get(f"/api/documents/{quote(doc, safe='')}", params={"limit": 1000}, headers=h["root"]).json()
    once = [q for q in pp.qids_of(full) if setup["weights"][q] < K]
    shown = next(q for q in pp.qids_of(full) if setup["weights"][q] >= K)
    assert len(once) > 10
    candidates = {setup["texts"][q] for q in once}
    candidates = {t for t in candidates if t in setup["once_only"] and len(t.split()) >= 2}
    text = str(setup["service"].docs.texts[setup["service"].doc_ids.lookup(doc)])
    found_admin = checked = 0
    for label, method, path, kw in pp.doc_requests(doc, shown, once[0], text, ["bm25", "bm25-classic"]) \
            + pp.owner_requests(OWNER):
        if "data" in kw:  # the /eqi form needs a session's CSRF token: its API twin is asked
            continue
        mine = client.request(method, path, headers=h["alice"], **kw)
        admin = client.request(method, path, headers=h["root"], **kw)
        if "issued once" in label:  # asking by the id of a query issued once: as an unknown id
            assert mine.status_code == 404, (label, mine.status_code)
            continue
        assert mine.status_code == admin.status_code == 200, (label, mine.status_code, mine.text[:200])
        ct = mine.headers["content-type"]
        assert pp.leaks(ct, mine.text, setup["weights"], K, setup["once_only"], candidates) == [], label
        found_admin += len(pp.leaks(admin.headers["content-type"], admin.text, setup["weights"], K,
                                    setup["once_only"], candidates))
        if ct.startswith("application/json") and path != "/api/me":
            assert pp.totals_differ(mine.json(), admin.json()) == [], label
        checked += 1
    assert checked >= 12 and found_admin > 50  # the detector fires on the unscreened answers


def test_the_detector_reads_ids_texts_and_totals_in_every_format(setup):
    pp = _script()
    w, once_only = setup["weights"], setup["once_only"]
    q1 = next(q for q, x in w.items() if x < K and setup["texts"][q] in once_only
              and len(setup["texts"][q].split()) >= 2)
    t1 = setup["texts"][q1]
    assert pp.leaks("application/json", json.dumps({"queries": [{"qid": q1, "text": t1}]}), w, K, once_only) \
        == [f"id:{q1}", f"text:{t1}"]
    assert pp.leaks("text/csv; charset=utf-8", f"qid,text\r\n{q1},x\r\n", w, K, once_only) == [f"id:{q1}"]
    page = f'<a href="/documents/d?why={quote(q1, safe="")}">why?</a><td data-raw>{t1}</td>'
    assert pp.leaks("text/html", page, w, K, once_only) == [f"id:{q1}", f"text:{t1}"]
    assert pp.leaks("text/html", f'<p title="{t1}">x</p>', w, K, set(), {t1}) == [f"text:{t1}"]
    assert pp.leaks("text/html", f"<td>why {t1} now</td>", w, K, set(), {t1}) == []  # within a longer text
    assert pp.totals_differ({"total": 5, "privacy": {"hidden": 3}, "queries": [1]},
                            {"total": 5, "privacy": None, "queries": [1, 2]}) == []
    assert pp.totals_differ({"exact": {"n_exposing": 4}}, {"exact": {"n_exposing": 5}}) == [".exact.n_exposing: 4 != 5"]
