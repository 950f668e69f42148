"""Searchers' privacy in the portal (issue 54): a generated query log with planted personal
data (e-mail addresses, phone, card numbers, URLs with ids), every planted query issued often
enough to pass k, over a tiny real audit (adi: 82 documents, BM25 at depth 10): none reaches an
owner by any route that lists queries, while the admin sees them; the documented patterns, and
ownership from a TSV of ids and patterns."""

from __future__ import annotations

import json
from urllib.parse import quote

import numpy as np
import pytest

from limelight.errors import LimelightError

PLANTED = ["jane.roe{i}@example.org", "+1 555 {i:03d} 4{i:03d}", "4111 1111 1111 {i:04d}",
           "https://shop.example.com/order?id={i}"]
K = 2


def _generated_log(queries):
    """Each query of ``queries`` issued 3 times, and four planted twins of it, each carrying
    one kind of personal data, issued 5 times (so k alone would show them)."""
    from limelight.data import Queries

    ids, texts, weights = [], [], []
    for i, (qid, text) in enumerate(zip(queries.ids.strings.tolist(), queries.texts.tolist(), strict=True)):
        ids.append(qid), texts.append(text), weights.append(3)
        for j, p in enumerate(PLANTED):
            ids.append(f"{qid}-pii{j}"), texts.append(f"{p.format(i=i + 100)} {text}"), weights.append(5)
    return Queries.from_lists(ids, texts, weights, name="generated")


@pytest.fixture(scope="module")
def pii_portal(tmp_path_factory):
    from fastapi.testclient import TestClient

    from limelight.audit import AuditDir
    from limelight.data import load_dataset
    from limelight.exposure.compute import compute_exposure
    from limelight.retrieval.index_dir import build_index, open_retriever
    from limelight.service.accounts import Accounts
    from limelight.service.app import create_app
    from limelight.service.core import AuditService
    from limelight.service.policy import Ownership, Policy
    from limelight.service.portal import PortalConfig, install

    root = tmp_path_factory.mktemp("pii")
    ds = load_dataset("adi")
    ad = AuditDir(root / "audit")
    build_index(ds.collection, ad.index_dir)
    log = _generated_log(ds.queries)
    compute_exposure(open_retriever(ad.index_dir, "bm25"), log, ad.store_dir("bm25"), depth=10)
    ad.manifest_path.write_text(json.dumps({
        "format": "limelight-audit/1", "name": "pii", "complete": True,
        "collection": {"source": "adi", "name": "adi", "n_docs": len(ds.collection)},
        "queries": {"source": "generated", "n_queries": len(log)}, "depth": 10, "cutoffs": [10],
        "systems": [{"name": "bm25", "kind": "bm25"}]}))
    service = AuditService(ad.path)
    owners = root / "owners.tsv"
    owners.write_text("# owner\tdocument id or pattern\nlab\t*\n")
    accounts = Accounts(str(root / "portal.db"))
    accounts.add_user("lab", "owner")
    accounts.add_user("root", "admin")
    tokens = {n: {"Authorization": f"Bearer {accounts.issue_token(n)[0]}"} for n in ("lab", "root")}
    policy = Policy(Ownership.from_spec(str(owners), service.doc_ids, service.docs.fields), K)
    app = install(create_app(service), service, PortalConfig(accounts, policy))
    with TestClient(app) as client:
        yield client, service, tokens, log
    accounts.close()


def _planted(text: str) -> bool:
    return any(m in text for m in ("@example.org", "+1 555", "4111 1111", "shop.example.com"))


def test_planted_personal_data_never_reaches_an_owner(pii_portal):
    client, service, tokens, log = pii_portal
    seen = {"lab": 0, "root": 0}
    listed = {"lab": 0, "root": 0}
    st = service.system("bm25").store
    busiest = st.doc_ids.decode(np.argsort(-st.n_exposing(), kind="stable")[:12]).tolist()
    for docid in busiest:  # the documents most searches show: the most planted queries
        for who in ("lab", "root"):
            j = client.get(f"/api/documents/{quote(docid, safe='')}", params={"limit": 1000},
                           headers=tokens[who]).json()
            texts = [q["query"] for q in j["queries"]] + [t["query"] for t in j["top_searches"]]
            nm = client.get("/api/near-misses", params={"docid": docid}, headers=tokens[who]).json()
            texts += [q["query"] for q in nm["queries"]]
            seen[who] += sum(map(_planted, texts))
            listed[who] += len(texts)
            if who == "lab" and j["privacy"]:
                assert j["privacy"]["personal_data"] == j["n_exposing"] - len(j["queries"])
    assert seen["lab"] == 0 and listed["lab"] > 50  # the owner sees the unplanted ones
    assert seen["root"] > 50  # the planted queries do rank the documents
    text = service.docs.texts[0]
    for who in ("lab", "root"):
        res = client.post("/api/eqi", json={"text": str(text), "k": 200}, headers=tokens[who]).json()
        n = sum(_planted(q["query"]) for q in res["exact"]["queries"])
        assert (n == 0) if who == "lab" else (n > 0)
    page = client.get(f"/documents/{quote(service.doc_ids.strings[0], safe='')}", headers=tokens["lab"]).text
    assert "may carry personal data" in page and "@example.org" not in page
    qid = f"{log.ids.strings[0]}-pii0"  # a planted query by id: as unknown as a made-up one
    r = client.get("/api/explain", params={"docid": service.doc_ids.strings[0], "qid": qid}, headers=tokens["lab"])
    assert r.status_code == 404 and r.json()["detail"] == f"unknown query id {qid!r} in system 'bm25'"
    assert client.get("/api/explain", params={"docid": service.doc_ids.strings[0], "qid": qid},
                      headers=tokens["root"]).status_code == 200


def test_the_documented_patterns():
    from limelight.service.privacy import personal_data, screen_queries

    hidden = ["mail john.doe@example.com", "call 555-123-4567", "(555) 123-4567 plumber", "+44 20 7946 0958",
              "card 4111 1111 1111 1111", "ssn 123-45-6789", "account 12345678",
              "http://site.com/user?id=42", "www.shop.com/item/123456"]
    shown = ["windows 2000", "star wars", "ipod 4 8gb", "route 66 map", "www.google.com",
             "https://example.org/about", "covid-19 vaccine"]
    assert personal_data(hidden).all() and not personal_data(shown).any()
    s = screen_queries(hidden + shown, np.asarray([5] * len(hidden) + [1, 2, 2, 2, 2, 2, 2]), 2)
    assert s.hidden.tolist() == [True] * len(hidden) + [True] + [False] * 6
    summary = s.summary(np.arange(len(hidden) + len(shown)))
    assert (summary["hidden"], summary["fewer_than_k"], summary["personal_data"]) == (10, 1, 9)
    assert "1 issued fewer than 2 times" in summary["note"] and "9 that may carry personal data" in summary["note"]
    by_searchers = screen_queries(["a b", "c d"], np.asarray([9, 9]), 3, searchers=np.asarray([1, 3]))
    assert by_searchers.basis == "distinct searchers" and by_searchers.hidden.tolist() == [True, False]
    assert "by fewer than 3 searchers" in by_searchers.summary(np.asarray([0]))["note"]


def test_ownership_from_a_tsv_of_ids_and_patterns(tmp_path):
    from limelight.data.ids import IdMap
    from limelight.service.policy import Ownership

    ids = IdMap(["pkg-a", "pkg-b", "lib-x", "lib-y"], kind="document")
    p = tmp_path / "owners.tsv"
    p.write_text("# who\tdocuments\nalice\tpkg-*\n\nbob\tlib-x\nbob\tpkg-b\n")
    o = Ownership.from_spec(str(p), ids, {})
    assert o.rows("alice").tolist() == [0, 1] and o.rows("bob").tolist() == [1, 2]
    assert o.owns("bob", 1) and not o.owns("bob", 3) and not o.owns("carol", 0) and o.owners == ["alice", "bob"]
    f = Ownership.from_spec("field:src", ids, {"src": np.asarray(["a", "b", "a", None], dtype=object)})
    assert f.rows("a").tolist() == [0, 2] and f.rows("b").tolist() == [1] and f.owners == ["a", "b"]
    for body, message in [("alice\tnope\n", f"{p}:1: unknown document id 'nope'"),
                          ("alice\tzz-*\n", f"{p}:1: the pattern 'zz-*' matches no document id"),
                          ("ok\tpkg-a\nalice pkg-a\n", f"{p}:2: expected OWNER<TAB>DOCUMENT-ID-OR-PATTERN")]:
        p.write_text(body)
        with pytest.raises(LimelightError) as e:
            Ownership.from_spec(str(p), ids, {})
        assert str(e.value) == message
    with pytest.raises(LimelightError, match="no field 'nope'"):
        Ownership.from_spec("field:nope", ids, {"src": np.asarray(["a"] * 4, dtype=object)})
    with pytest.raises(LimelightError, match="no such file"):
        Ownership.from_spec(str(tmp_path / "none.tsv"), ids, {})
