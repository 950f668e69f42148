"""``limelight serve``: the JSON API and the pages over a real audit (movies × 3,000 log queries).

Every figure is checked against the library computed independently (ExposureStore lookups, BM25
retrieval, retrievability, browsing models), never against numbers written here.
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import numpy as np
import pytest
import test_serve_support as support
from _inproc import run_cli

from limelight.exposure.browsing import parse_browsing_model
from limelight.exposure.retrievability import lorenz

# the session-wide test audit and clients (fixtures of test_serve_support)
audit_dir, dense_audit_dir = support.audit_dir, support.dense_audit_dir
service, client = support.service, support.client


def _busy_doc(service, system="bm25"):
    """A document exposed by many queries (the most retrievable one)."""
    st = service.system(system).store
    return str(st.doc_ids[int(np.argmax(st.n_exposing()))])


def test_info_lists_the_audit(client, service):
    j = client.get("/api/info").json()
    assert j["collection"] == "movies" and j["n_docs"] == len(service.doc_ids)
    assert [s["name"] for s in j["systems"]] == ["bm25", "bm25-classic"]
    assert j["search_models"] == ["bm25"] and j["rerank"] is False and j["eqi_methods"] == []
    assert "Major Genre" in j["group_fields"]


def test_search_matches_bm25_and_highlights_terms(client, service):
    from limelight.retrieval.index_dir import open_retriever

    j = client.get("/api/search", params={"q": "star wars", "limit": 7}).json()
    docs, scores = open_retriever(service.audit.index_dir, "bm25").search_batch(["star wars"], 7)
    assert [r["docid"] for r in j["results"]] == service.doc_ids.decode(docs[0][docs[0] >= 0]).tolist()
    assert np.allclose([r["score"] for r in j["results"]], scores[0][: len(j["results"])])
    top = j["results"][0]
    marked = {top["snippet"][s:e].lower() for s, e in top["highlights"]}
    assert marked and marked <= {"star", "wars"}
    # pagination: page 2 continues page 1
    p2 = client.get("/api/search", params={"q": "star wars", "limit": 3, "offset": 3}).json()
    assert [r["docid"] for r in p2["results"]] == [r["docid"] for r in j["results"][3:6]]
    assert [r["rank"] for r in p2["results"]] == [4, 5, 6]


def test_search_without_snippets_gives_the_same_results(client):
    """``snippets=false`` (what an ``http`` system's ``limelight`` preset asks: a replay reads
    ids and scores): the same results, rank for rank, with no snippet built."""
    from limelight.retrieval.kinds.http import PRESETS

    assert PRESETS["limelight"]["params"]["snippets"] == "false"
    params = {"q": "star wars", "limit": 20}
    full = client.get("/api/search", params=params).json()
    bare = client.get("/api/search", params={**params, "snippets": "false"}).json()
    keys = ("rank", "docid", "title", "score")
    assert [[r[k] for k in keys] for r in bare["results"]] == [[r[k] for k in keys] for r in full["results"]]
    assert len(full["results"]) == 20 and all(r["snippet"] and r["highlights"] for r in full["results"])
    assert all(r["snippet"] is None and r["highlights"] is None for r in bare["results"])
    assert bare["total"] == full["total"]


@pytest.mark.parametrize("browsing", ["rbp:0.8", "dcg", "cutoff:10", "exhaustive"])
def test_document_exposing_queries_and_exposure(client, service, browsing):
    docid = _busy_doc(service)
    st = service.system("bm25").store
    truth = st.exposing_queries(docid)  # rank, then qid
    j = client.get(f"/api/documents/{quote(docid)}", params={"browsing": browsing, "limit": 1000}).json()
    assert j["n_exposing"] == len(truth) > 20
    assert [(q["qid"], q["rank"]) for q in j["queries"]] == [(t["qid"], t["rank"]) for t in truth]
    model = parse_browsing_model(browsing)
    ranks = np.array([t["rank"] for t in truth])
    w = st.queries.weights[st.queries.ids.encode([t["qid"] for t in truth])]
    assert j["exposure"] == pytest.approx(model.weights(ranks).sum())
    assert j["weighted_exposure"] == pytest.approx((w * model.weights(ranks)).sum())
    assert [q["exposure"] for q in j["queries"]] == pytest.approx(model.weights(ranks).tolist())
    # Figure 1 bars: the top 100, height n − ρ
    assert [b["height"] for b in j["chart"]] == [st.depth - (r - 1) for r in ranks[:100]]
    # pages tile the list
    a = client.get(f"/api/documents/{quote(docid)}", params={"limit": 5}).json()["queries"]
    b = client.get(f"/api/documents/{quote(docid)}", params={"limit": 5, "offset": 5}).json()["queries"]
    assert [q["qid"] for q in a + b] == [t["qid"] for t in truth[:10]]


@pytest.mark.parametrize("browsing", ["rbp:0.8", "cutoff:10"])
def test_document_under_every_system_side_by_side(client, service, browsing):
    """The document page's per-system table, recomputed per system from each store's own
    exposing-query list and r(d), for a document the two systems expose differently."""
    docid = _busy_doc(service, "bm25-classic")
    j = client.get(f"/api/documents/{quote(docid)}", params={"browsing": browsing, "system": "bm25"}).json()
    assert [s["system"] for s in j["systems"]] == ["bm25", "bm25-classic"]
    model = parse_browsing_model(browsing)
    seen = []
    for row in j["systems"]:
        st = service.system(row["system"]).store
        truth = st.exposing_queries(docid)
        ranks = np.array([t["rank"] for t in truth], dtype=np.int64)
        c = min(100, st.depth)
        assert row["depth"] == st.depth and row["c"] == c
        assert row["n_exposing"] == len(truth) and row["n_exposing_c"] == int((ranks <= c).sum())
        assert row["best_rank"] == (int(ranks.min()) if len(ranks) else None)
        assert row["exposure"] == pytest.approx(model.weights(ranks).sum())
        assert row["r"] == pytest.approx(st.retrievability(c=c).r[st.doc_ids.lookup(docid)])
        seen.append((row["n_exposing"], row["best_rank"], round(row["r"], 6)))
    assert seen[0] != seen[1]  # the two systems really differ on this document
    # the row of the page's own system equals the page's headline figures
    assert j["systems"][0]["n_exposing"] == j["n_exposing"]
    assert j["systems"][0]["exposure"] == pytest.approx(j["exposure"])
    page = client.get(f"/documents/{quote(docid)}", params={"system": "bm25-classic"}).text
    assert 'id="document-systems"' in page and page.count('<tr class="current">') == 1
    assert "bm25-classic</a> (shown)" in page and "bm25</a> (shown)" not in page


def test_query_page_data_is_the_stored_top_n(client, service):
    st = service.system("bm25-classic").store
    docid = _busy_doc(service, "bm25-classic")
    qid = st.exposing_queries(docid)[0]["qid"]
    j = client.get(f"/api/queries/{quote(qid)}", params={"system": "bm25-classic", "limit": 1000}).json()
    truth = st.exposed_documents(qid)
    assert [(d["docid"], d["rank"]) for d in j["documents"]] == [(t["docid"], t["rank"]) for t in truth]
    assert j["total"] == len(truth) and j["query"] == st.queries.texts[st.queries.ids.lookup(qid)]


def test_find_queries_escapes_like_patterns(client, service):
    texts = service.system("bm25").store.queries.texts
    j = client.get("/api/queries", params={"search": "wars", "limit": 1000}).json()
    assert j["total"] == sum("wars" in t.lower() for t in texts) > 0
    assert all("wars" in q["query"].lower() for q in j["queries"])
    w = [q["weight"] for q in j["queries"]]
    assert w == sorted(w, reverse=True)
    # % and _ are literal characters, not wildcards
    j = client.get("/api/queries", params={"search": "%"}).json()
    assert j["total"] == sum("%" in t for t in texts)


def test_retrievability_matches_the_store(client, service):
    for system in ("bm25", "bm25-classic"):
        res = service.system(system).store.retrievability(c=10)
        j = client.get("/api/retrievability", params={"system": system, "c": 10}).json()
        assert j["gini"] == pytest.approx(res.gini) and j["retrievable_fraction"] == pytest.approx(res.retrievable_fraction)
        x, y = lorenz(res.r)
        assert np.allclose(j["lorenz"]["y"], np.interp(j["lorenz"]["x"], x, y))
        most = client.get("/api/retrievability/documents", params={"system": system, "c": 10, "limit": 5}).json()
        r_most = [d["r"] for d in most["documents"]]
        assert r_most[0] == pytest.approx(res.r.max()) and r_most == sorted(r_most, reverse=True)
        least = client.get("/api/retrievability/documents",
                           params={"system": system, "c": 10, "order": "least", "limit": 5}).json()
        assert least["documents"][0]["r"] == pytest.approx(res.r.min())


def test_groups_match_group_retrievability(client, service):
    from limelight.exposure.retrievability import group_retrievability

    res = service.system("bm25").store.retrievability(c=100)
    truth = group_retrievability(res.r, service.docs.fields["Major Genre"])
    j = client.get("/api/retrievability/groups", params={"field": "Major Genre", "limit": 1000}).json()
    assert [g["group"] for g in j["groups"]] == truth["group"].tolist()
    assert [g["r_mean"] for g in j["groups"]] == pytest.approx(truth["r_mean"].tolist())


def test_exact_reverse_search_of_a_known_document(client, service):
    """Pasting the text of a document of the collection (BM25): the copy scores, bit for bit,
    what the original scores for each query, and is ranked first among the documents tied with
    it (trec_eval's order: score, then id descending; 'new-document' sorts after 'movie…')."""
    st = service.system("bm25").store
    docid = _busy_doc(service)
    text = service.docs.texts[service.doc_row(docid)]
    j = client.post("/api/eqi", json={"text": text, "system": "bm25", "k": 1000}).json()
    exact = {q["qid"]: q for q in j["exact"]["queries"]}
    truth = st.exposing_queries(docid)
    assert j["exact"]["available"] and j["exact"]["n_exposing"] == len(exact)
    # where the original sits at rank n of a full list the copy only ties the threshold, and
    # a new document enters a full list only above it (ExactReverse follows the engine there)
    thr = st.thresholds()
    truth = [t for t in truth if not (t["rank"] == st.depth and not np.isnan(thr[st.queries.ids.lookup(t["qid"])]))]
    assert len(truth) > 20 and len(exact) >= len(truth)
    for t in truth:
        stored = np.float32([x["score"] for x in st.exposed_documents(t["qid"])])
        assert exact[t["qid"]]["score"] == t["score"]
        assert exact[t["qid"]]["rank"] == 1 + (stored > np.float32(t["score"])).sum() <= t["rank"]
    assert j["learned"] == [] and "no learned EQI model" in j["note"]


def test_exact_reverse_search_dense(dense_audit_dir):
    """The same for a dense system and its stored query vectors, up to the encoder's noise."""
    from fastapi.testclient import TestClient

    from limelight.service.app import create_app
    from limelight.service.core import AuditService

    svc = AuditService(dense_audit_dir)
    assert svc.search_models == ["bm25", "dense", "hybrid"]
    st = svc.system("dense").store
    docid = str(st.doc_ids[int(np.argmax(st.n_exposing()))])
    with TestClient(create_app(svc)) as c:
        for model in ("dense", "hybrid"):
            j = c.get("/api/search", params={"q": "information retrieval", "model": model, "limit": 5}).json()
            assert len(j["results"]) == 5 and j["model"] == model
        j = c.post("/api/eqi", json={"text": svc.docs.texts[svc.doc_row(docid)], "system": "dense", "k": 1000}).json()
    exact = {q["qid"]: q for q in j["exact"]["queries"]}
    # the pasted text is encoded alone; a quantized (onnx-int8) encoder's vector of a text depends
    # a little on the batch it was encoded in. Query vectors are the stored unit vectors, so by
    # Cauchy-Schwarz the copy's score is within ‖e_alone − e_indexed‖ of the original's.
    r = svc.retriever("dense")
    row = svc.doc_row(docid)
    tol = float(np.linalg.norm(r.encoder.encode([svc.docs.texts[row]])[0] - r.index.embeddings[row])) + 1e-6
    thr = st.thresholds()
    n = 0
    for t in st.exposing_queries(docid):
        e = exact.get(t["qid"])
        if t["score"] - tol > np.nan_to_num(thr[st.queries.ids.lookup(t["qid"])], nan=-np.inf):
            assert e is not None and e["score"] == pytest.approx(t["score"], abs=tol)
            n += 1
    assert n > 10
    for e in j["exact"]["queries"]:  # ranks are consistent with the stored lists
        stored = np.float32([x["score"] for x in st.exposed_documents(e["qid"])])
        s = np.float32(e["score"])
        assert 1 + (stored > s).sum() <= e["rank"] <= min(1 + (stored >= s).sum(), st.depth)


def test_learned_model_side_by_side(dense_audit_dir):
    """A learned EQI model of the audit: its list next to the exact one, each of its queries
    annotated with the rank exact reverse search gives the document there."""
    from fastapi.testclient import TestClient

    from limelight.exposure.eqi import EQIModel
    from limelight.service.app import create_app
    from limelight.service.core import AuditService

    svc = AuditService(dense_audit_dir)
    assert svc.eqi_methods() == ["residual"]
    text = "automatic indexing and retrieval of documents by computer"
    with TestClient(create_app(svc)) as c:
        j = c.post("/api/eqi", json={"text": text, "system": "dense", "k": 15}).json()
        page = c.post("/eqi", data={"text": text, "system": "dense", "k": "15"}).text
    (lst,) = j["learned"]
    assert lst["method"] == "residual" and lst["available"] and j["note"] is None
    st = svc.system("dense").store
    model = EQIModel.load(svc.audit.eqi_dir("residual")).index_queries(
        st.queries, np.load(svc.audit.query_vectors), svc.retriever("dense").encoder)
    codes = model.search(texts=[text], k=15)[0][0]
    assert [q["qid"] for q in lst["queries"]] == st.queries.ids.decode(codes[codes >= 0]).tolist()
    exact = {q["qid"]: q for q in j["exact"]["queries"]}
    for q in lst["queries"]:
        assert q["in_both"] == (q["qid"] in exact)
        if q["qid"] in exact:
            assert q["rank"] == exact[q["qid"]]["rank"]
    learned_ids = {q["qid"] for q in lst["queries"]}
    assert all(q["in_both"] == (q["qid"] in learned_ids) for q in j["exact"]["queries"])
    assert 'id="panel-exact"' in page and 'id="panel-residual"' in page and "Learned model: residual" in page
    # under the portal's privacy screen (k = 2, an owner asking): the first 3 queries the screen
    # shows (5 of the 300 here), in the model's order over the whole log, not what is left of its
    # top 3
    from limelight.service.policy import Ownership, Policy, Principal, current_principal

    svc.screen = Policy(Ownership({}, len(svc.doc_ids), "none"), 2)
    token = current_principal.set(Principal("owner", "o", "o"))
    try:
        screen = svc.query_screen(svc.system("dense"))
        (owned,) = svc.eqi(text, "dense", 3)["learned"]
    finally:
        current_principal.reset(token)
        svc.screen = None
    every = model.search(texts=[text], k=len(st.queries))[0][0]
    every = every[every >= 0]
    shown = every[~screen.hidden[every]]
    assert len(shown) >= 3 and screen.hidden[every[:3]].any()  # the old list had fewer than 3
    assert [q["qid"] for q in owned["queries"]] == st.queries.ids.decode(shown[:3]).tolist()
    cut = int(np.flatnonzero(~screen.hidden[every])[2]) + 1
    assert owned["privacy"]["hidden"] == int(screen.hidden[every[:cut]].sum())


def test_unknown_ids_are_404_with_a_message(client):
    for url in ("/api/documents/no-such-doc", "/api/queries/no-such-query", "/documents/no-such-doc",
                "/queries/no-such-query"):
        r = client.get(url)
        assert r.status_code == 404
        assert "no-such" in r.text and "unknown" in r.text
    r = client.get("/api/retrievability", params={"system": "nope"})
    assert r.status_code == 404 and "unknown system 'nope'" in r.json()["detail"]
    r = client.get("/api/retrievability/groups", params={"field": "nope"})
    assert r.status_code == 404 and "unknown document field" in r.json()["detail"]
    assert client.get("/no/such/page").status_code == 404


def test_bad_values_are_4xx(client):
    bad = [("/api/search", {"q": ""}), ("/api/search", {"q": "x", "model": "dense"}),
           ("/api/search", {"q": "x", "limit": 0}), ("/api/search", {"q": "x" * 1001}),
           ("/api/search", {"q": "x", "rerank": "true"}),
           ("/api/documents/movie00001", {"browsing": "rbp:2"}), ("/api/documents/movie00001", {"browsing": "zipf"}),
           ("/api/documents/movie00001", {"limit": 100000}), ("/api/retrievability", {"c": 101}),
           ("/api/retrievability/documents", {"order": "middle"})]
    for url, params in bad:
        r = client.get(url, params=params)
        assert 400 <= r.status_code < 500 and r.status_code != 404, (url, params, r.status_code)
        assert r.json()["detail"]


def test_bodies_malformed_or_too_large_are_4xx(client):
    assert client.post("/api/eqi", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422
    assert client.post("/api/eqi", json={"text": "x", "extra": 1}).status_code == 422
    assert client.post("/api/eqi", json={"text": ""}).status_code == 422
    assert client.post("/api/eqi", json={"text": "x", "k": 0}).status_code == 422
    assert client.post("/api/eqi", json={"text": "x" * 100_001}).status_code == 422
    big = client.post("/api/eqi", json={"text": "word " * 60_000})  # 300 kB > the 256 kB limit
    assert big.status_code == 413 and "request body over" in big.json()["detail"]

    def chunks():  # no Content-Length: counted as it streams
        for _ in range(300):
            yield b"x" * 1024

    assert client.post("/api/eqi", content=chunks(), headers={"content-type": "application/json"}).status_code == 413
    assert client.post("/eqi", data={"text": "w " * 150_000}).status_code == 413
    assert client.post("/eqi", data={"k": "5"}).status_code == 422


def test_script_injection_is_inert(client):
    payload = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
    r = client.post("/eqi", data={"text": payload + " star wars", "k": "5"})
    assert r.status_code == 200
    assert "<script>alert" not in r.text and "<img src=x" not in r.text
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in r.text
    r = client.get("/", params={"q": payload})
    assert r.status_code == 200 and "<script>alert" not in r.text and "&lt;script&gt;" in r.text
    r = client.get("/documents/" + quote(payload, safe=""))
    assert r.status_code == 404 and "<script>alert" not in r.text
    csp = r.headers["content-security-policy"]
    assert "script-src 'none'" in csp and r.headers["x-content-type-options"] == "nosniff"


def test_no_file_system_path_is_taken_from_a_request(client, audit_dir):
    for url in ("/static/../../audit.json", "/static/%2e%2e/%2e%2e/audit.json", "/static/..%2F..%2Faudit.json"):
        r = client.get(url)
        assert r.status_code == 404 and '"format"' not in r.text
    r = client.get("/api/retrievability", params={"system": "../../etc"})
    assert r.status_code == 404
    r = client.get("/api/documents/" + quote(str(audit_dir / "audit.json"), safe=""))
    assert r.status_code == 404 and "unknown document id" in r.json()["detail"]


def test_every_page_renders(client, service):
    docid = _busy_doc(service)
    qid = service.system("bm25").store.exposing_queries(docid)[0]["qid"]
    pages = {"/": "Search", "/?q=star+wars": "results for", f"/documents/{quote(docid)}": "appears in the top",
             "/queries?search=wars": "distinct searches of the log", f"/queries/{quote(qid)}": "People typed",
             "/retrievability": "Lorenz", "/retrievability?system=bm25-classic&c=10&field=MPAA+Rating": "MPAA Rating",
             "/eqi": "Which searches show my page?", f"/eqi?docid={quote(docid)}": "Find exposing queries",
             "/groups": "fairness-table", "/glossary": "glossary-retrievability"}
    for url, needle in pages.items():
        r = client.get(url)
        assert r.status_code == 200 and needle in r.text, url
    r = client.post("/eqi", data={"text": service.docs.texts[service.doc_row(docid)], "k": "10"})
    assert r.status_code == 200 and 'id="panel-exact"' in r.text and "no learned EQI model" in r.text
    assert r.text.count('class="bar') >= 10


def test_openapi_documents_the_api(client):
    spec = client.get("/openapi.json").json()
    paths = set(spec["paths"])
    assert {"/api/search", "/api/documents/{docid}", "/api/queries/{qid}", "/api/queries", "/api/info",
            "/api/retrievability", "/api/retrievability/documents", "/api/retrievability/groups",
            "/api/eqi"} <= paths
    assert not any(p.startswith(("/documents", "/eqi", "/retrievability")) for p in paths)


def test_cli_serve_errors_are_one_line(tmp_path):
    r = run_cli("serve", "--audit", str(tmp_path))  # in this process (tests/_inproc.py)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "not an audit directory" in r.stderr


# ---- issue 24: items 9 and 15 ---------------------------------------------------------------------
def test_cli_serve_port_in_use_fails_before_announcing(tmp_path):
    """Item 9: the port is bound before the audit is loaded and before "serving on ..." is
    printed; a busy port is a one-line error at once."""
    import json
    import socket

    (tmp_path / "audit.json").write_text(json.dumps({"format": "limelight-audit/1", "systems": []}))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "limelight.cli", "serve", "--audit", str(tmp_path),
                            "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in r.stderr
    assert "serving" not in r.stderr + r.stdout


def test_blank_search_query_is_rejected_as_by_the_cli(client, service, audit_dir):
    """Item 15: one rule for a blank query, the CLI's (``limelight search``: "empty query")."""
    from limelight.service.core import BadRequest

    for q in ("   ", "\t \u3000"):
        r = client.get("/api/search", params={"q": q})
        assert r.status_code == 422, q
        (err,) = r.json()["detail"]
        assert err["msg"].startswith("empty query") and "pattern" not in r.text
    with pytest.raises(BadRequest, match="^empty query"):
        service.search("  ")
    cli = run_cli("search", "  ", "--index", str(audit_dir / "index"))  # in this process
    assert cli.returncode == 2 and "empty query" in cli.stderr
    assert client.get("/", params={"q": "   "}).status_code == 200  # the search form, no results


def test_blank_eqi_text_is_named_not_a_regex(client):
    r = client.post("/api/eqi", json={"text": " \n\t "})
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["loc"] == ["body", "text"] and err["msg"].startswith("empty text")
    assert "pattern" not in r.text and "\\s" not in r.text


def test_validation_error_does_not_echo_a_large_input(service):
    """Item 15: a ~1 MB body under the size limit gets a short 422, not the input back."""
    from fastapi.testclient import TestClient

    from limelight.service.app import MAX_BODY, MAX_ECHO, create_app

    text = "word " * 200_000
    assert len(text) + 20 < MAX_BODY
    with TestClient(create_app(service)) as c:
        r = c.post("/api/eqi", json={"text": text})
        assert r.status_code == 422
        assert len(r.content) < 2 * MAX_ECHO + 1000
        (err,) = r.json()["detail"]
        assert err["input"].startswith("word word") and "1,000,000 characters" in err["input"]
        r = c.post("/api/eqi", json={"txt": text})  # a missing field echoes the whole body object
        assert r.status_code == 422 and len(r.content) < 4 * MAX_ECHO + 1000


def test_method_not_allowed_says_which_are(client):
    for url, allowed in (("/api/info", "GET"), ("/api/eqi", "POST"), ("/", "GET")):
        r = client.request("TRACE", url)
        assert r.status_code == 405, url
        assert allowed in r.headers["allow"], url
    r = client.request("TRACE", "/api/info")
    assert r.json()["detail"] == "method TRACE not allowed on /api/info"
