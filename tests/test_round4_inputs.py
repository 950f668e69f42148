"""Issue 52 (a newcomer's fourth trial): each input it found answered wrongly, through the CLI
in-process (``limelight.cli.main`` under ``CliRunner``'s isolation: the one-line message and the
exit status a user sees) and through the served app (FastAPI's ``TestClient``)."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import _inproc
import pytest
import test_serve_support as support

from limelight.data import read_trec_run

audit_dir, service, client = support.audit_dir, support.service, support.client


def run_cli(*args) -> tuple[int, str, str]:
    """``limelight ARGS`` in this process (``tests/_inproc.py``): (exit status, stdout, stderr)."""
    p = _inproc.run_cli(*map(str, args))
    return p.returncode, p.stdout, p.stderr


def refused(res: tuple[int, str, str], *words: str) -> str:
    """The one-line refusal of a user error: exit 2, ``error: ...`` alone on stderr, no
    traceback, naming ``words``."""
    code, _out, err = res
    assert code == 2, res
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.fixture(scope="module")
def adi(tmp_path_factory, data_dir):
    """An adi BM25 index and a store of its 35 queries at depth 10, made through the CLI."""
    root = tmp_path_factory.mktemp("round4")
    assert run_cli("index", "--collection", "adi", "--out", root / "idx")[0] == 0
    code, out, err = run_cli("exposure", "compute", "--index", root / "idx", "--queries",
                             data_dir / "collections" / "adi" / "queries.tsv", "--out", root / "store",
                             "--depth", "10")
    assert code == 0, err
    return root


# ---- 2: fairness --groups FILE that is not UTF-8 -------------------------------------------------
def test_fairness_groups_not_utf8_names_file_line_and_byte(adi, tmp_path):
    groups = tmp_path / "groups.tsv"
    groups.write_bytes(b"1\tpress\n2\tpr\xe9ss\n")
    err = refused(run_cli("fairness", "--store", adi / "store", "--groups", groups, "--boot", "0"),
                  f"{groups}:2: not UTF-8 text (byte 0xe9 at column 5)")
    assert "UnicodeDecodeError" not in err


# ---- 3: index --out below a file -----------------------------------------------------------------
def test_index_out_below_a_file_is_one_line(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "FILE").write_text("mine")
    out = tmp_path / "a" / "FILE" / "idx"
    refused(run_cli("index", "--collection", "adi", "--out", out), str(out), "is a file, not a folder")
    assert (tmp_path / "a" / "FILE").read_text() == "mine"


# ---- 16: fairness's table: counts as counts, names whole ----------------------------------------
def test_fairness_table_counts_and_whole_group_names(adi, tmp_path, monkeypatch):
    """At 80 columns, with the default bootstrap's interval columns: the number of documents
    is a count (``41``, not ``41.0000``), and a group name breaks only between its words."""
    from limelight.exposure.store import ExposureStore

    monkeypatch.setenv("COLUMNS", "80")  # a terminal of 80 columns
    docs = ExposureStore.open(adi / "store").doc_ids.strings.tolist()
    names = ["information-retrieval-evaluation", "Concert/Performance"]
    groups = tmp_path / "groups.tsv"
    groups.write_text("".join(f"{d}\t{names[i % 2]}\n" for i, d in enumerate(docs)))
    code, out, err = run_cli("fairness", "--store", adi / "store", "--groups", groups, "--boot", "20")
    assert code == 0, err
    table = out[out.index("largest deficits"):out.index("largest surpluses")]
    assert max(map(len, table.splitlines())) <= 80, table
    cells = [ln.split("│")[1].strip() for ln in table.splitlines() if ln.startswith("│")]
    assert "".join(cells) in ("".join(names), "".join(names[::-1])), cells
    words = {w for n in names for w in n.replace("-", "- ").replace("/", "/ ").split()}
    assert set(cells) <= words, cells  # each line of a name is whole words of it
    counts = [ln.split("│")[2].strip() for ln in table.splitlines() if ln.startswith("│")]
    assert sorted(c for c in counts if c) == sorted(str(len(docs[k::2])) for k in (0, 1)), counts


# ---- 5: evaluate --alpha --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def adi_runs(adi, data_dir):
    """A BM25 run of adi (``retrieve``) and the same ranking with every score doubled."""
    run = adi / "bm25.run"
    code, _, err = run_cli("retrieve", "--index", adi / "idx", "--queries",
                           data_dir / "collections" / "adi" / "queries.tsv", "--k", "50", "--out", run)
    assert code == 0, err
    twin = adi / "twin.run"
    twin.write_text("".join(f"{q} Q0 {d} {r} {2 * float(s)!r} twin\n" for q, _, d, r, s, _ in
                            (ln.split() for ln in run.read_text().splitlines())))
    return run, twin, data_dir / "collections" / "adi" / "qrels.txt"


@pytest.mark.parametrize("alpha", ["5", "0", "1", "-0.05", "nan"])
def test_evaluate_refuses_an_alpha_outside_0_1(adi_runs, alpha):
    run, twin, qrels = adi_runs
    refused(run_cli("evaluate", run, twin, "--qrels", qrels, "--alpha", alpha), "--alpha", alpha)


@pytest.mark.parametrize("test", ["t", "wilcoxon"])
def test_identical_runs_are_never_significant(adi_runs, test):
    """The same ranking (scores doubled): every difference is zero, p = 1, no marker at any
    level below 1."""
    run, twin, qrels = adi_runs
    code, out, err = run_cli("evaluate", run, twin, "--qrels", qrels, "--alpha", "0.999", "--test", test,
                             "-m", "AP nDCG@10 P@5 LexiRecall")
    assert code == 0, err
    rows = [ln for ln in out.splitlines() if ln.startswith(("bm25.run", "twin.run"))]
    assert len(rows) == 2 and rows[0].split()[1:] == rows[1].split()[1:], out
    assert "*" not in rows[1], out


# ---- 6: retrievability --run ranks by score, as evaluate and exposure compute do -----------------
def test_retrievability_run_ranks_by_score_and_refuses_nan(adi, tmp_path):
    run = tmp_path / "reversed.run"
    # the rank column says a, b, c; the scores say c, b, a (formats.md: ranks come from scores)
    run.write_text("q1 Q0 a 1 0.1 t\nq1 Q0 b 2 0.5 t\nq1 Q0 c 3 0.9 t\nq2 Q0 a 1 0.2 t\nq2 Q0 c 2 0.3 t\n")
    code, out, err = run_cli("retrievability", "--run", run, "--c", "1", "--out", tmp_path / "r.tsv")
    assert code == 0, err
    r = dict(ln.split("\t") for ln in (tmp_path / "r.tsv").read_text().splitlines())
    assert {d: float(x) for d, x in r.items()} == {"a": 0.0, "b": 0.0, "c": 2.0}
    nan = tmp_path / "nan.run"
    nan.write_text("q1 Q0 a 1 0.1 t\nq1 Q0 b 2 NaN t\n")
    refused(run_cli("retrievability", "--run", nan), f"{nan}:2", "not a finite number")


# ---- 9: --out FILE of the user's is refused; limelight's own is replaced -------------------------
def test_retrieve_out_refuses_a_users_file_and_replaces_its_own(adi, data_dir, tmp_path):
    queries = data_dir / "collections" / "adi" / "queries.tsv"
    out = tmp_path / "mine.run"
    out.write_text("my notes, not a run\n")
    args = ("retrieve", "--index", adi / "idx", "--queries", queries, "--k", "5", "--out", out)
    refused(run_cli(*args), str(out), "not written by limelight", "--overwrite")
    assert out.read_text() == "my notes, not a run\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.run"]  # no temporary left
    assert run_cli(*args, "--overwrite")[0] == 0  # the user's say-so
    first = read_trec_run(out)
    assert first.n_queries == 35 and len(first) == 35 * 5
    code, _, err = run_cli(*args[:-4], "--k", "3", "--out", out)  # its own file: replaced, no flag
    assert code == 0, err
    assert len(read_trec_run(out)) == 35 * 3
    with out.open("a") as f:  # edited by the user since: theirs now
        f.write("# my comment\n")
    before = out.read_bytes()
    refused(run_cli(*args), str(out), "not written by limelight (or was changed since)")
    assert out.read_bytes() == before
    gz = tmp_path / "run.gz"  # compressed by its name, as before
    assert run_cli(*args[:-1], gz)[0] == 0 and read_trec_run(gz).n_queries == 35


def test_retrievability_out_refuses_a_users_file(adi, tmp_path):
    out = tmp_path / "r.tsv"
    out.write_text("keep me\n")
    refused(run_cli("retrievability", "--store", adi / "store", "--out", out), str(out),
            "not written by limelight")
    assert out.read_text() == "keep me\n"
    code, _, err = run_cli("retrievability", "--store", adi / "store", "--out", out, "--overwrite")
    assert code == 0, err  # the user's say-so
    assert len(out.read_text().splitlines()) == 82
    out.unlink()
    for _ in range(2):  # its own output is replaced
        code, _, err = run_cli("retrievability", "--store", adi / "store", "--out", out)
        assert code == 0, err
    assert len(out.read_text().splitlines()) == 82


# ---- 19: grammar -----------------------------------------------------------------------------------
def test_messages_count_and_article_right(adi, data_dir, tmp_path):
    q = tmp_path / "one.tsv"
    q.write_text("1\tinformation retrieval\n")
    code, out, err = run_cli("retrieve", "--index", adi / "idx", "--queries", q, "--k", "1",
                             "--out", tmp_path / "one.run")
    assert code == 0, err
    assert "wrote 1 line " in out and "1 of 1 query" in out, out
    cfg = tmp_path / "audit.toml"
    cfg.write_text('[audit]\nname = "x"\ndepth = "ten"\n\n[collection]\nsource = "adi"\n\n'
                   '[[systems]]\nname = "bm25"\nkind = "bm25"\n')
    err = refused(run_cli("audit", cfg, "--out", tmp_path / "a", "--check"), "must be an int")
    assert "a int" not in err
    cfg.write_text('[audit]\nname = "x"\ndepth = 10\n\n[collection]\nsource = "adi"\n\n'
                   '[[systems]]\nname = "bm25"\nkind = "bm25"\nk1 = "high"\n')
    refused(run_cli("audit", cfg, "--out", tmp_path / "a", "--check"), "must be an int or float")
    base = ("exposure", "compute", "--queries", q, "--out", tmp_path / "s")
    refused(run_cli(*base, "--url", "http://127.0.0.1:9", "--preset", "elasticsearch"),
            "an http system needs the collection")  # was "a http system"
    refused(run_cli(*base, "--model", "dense"), "a dense system needs --index")


# ---- 4, 17, 18: the served app ---------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    '{"text": NaN}',
    '{"text": "automatic indexing", "k": Infinity}',
    '{"text": "automatic indexing", "k": -Infinity}',
    '{"text": "automatic indexing", "k": 5, "extra": [1, {"deep": NaN}]}',
    '[NaN]',
])
def test_eqi_body_with_nan_or_infinity_is_422(client, body):
    r = client.post("/api/eqi", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "not a JSON number" in json.dumps(detail) and ("NaN" in r.text or "Infinity" in r.text)


def test_a_deeply_nested_body_is_422_not_400(client):
    deep = b"[" * 100_000 + b"]" * 100_000
    r = client.post("/api/eqi", content=deep, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert "nested too deeply" in r.text


def test_validation_errors_never_echo_non_json_numbers():
    """The 422 handler's own answer is JSON even when the rejected input holds a non-finite
    number (``_jsonable``; the handler itself failed with a 500 on them)."""
    from limelight.service.app import _jsonable

    got = _jsonable([{"type": "x", "loc": ("body", "k"), "msg": "bad", "input": [math.nan, math.inf, -math.inf]}])
    assert json.loads(json.dumps(got, allow_nan=False))[0]["input"] == ["NaN", "Infinity", "-Infinity"]


def test_a_bad_browsing_value_is_told_in_words(client, service):
    doc = str(service.system("bm25").store.doc_ids[0])
    page = client.get(f"/documents/{doc}", params={"browsing": "rbp:7"})
    assert page.status_code == 422
    assert "rbp:γ" in page.text and "^(" not in page.text and "[0-9]" not in page.text
    api = client.get(f"/api/documents/{doc}", params={"browsing": "rbp:7"})
    assert api.status_code == 422 and "^(" not in api.text and "rbp:γ" in api.text
    order = client.get("/api/retrievability/documents", params={"order": "best"})
    assert order.status_code == 422 and "one of most or least" in order.text


def test_unknown_query_parameters_are_422_on_every_api_route(client, service):
    """``/api/search?...&k=3`` (the manual's old call) silently gave 10 results."""
    r = client.get("/api/search", params={"q": "star wars", "k": 3})
    assert r.status_code == 422
    [err] = r.json()["detail"]
    assert err["loc"] == ["query", "k"] and "unknown query parameter 'k'" in err["msg"] and "limit" in err["msg"]
    assert len(client.get("/api/search", params={"q": "star wars", "limit": 3}).json()["results"]) == 3
    doc = str(service.system("bm25").store.doc_ids[0])
    routes = [("get", "/api/info"), ("get", "/api/queries"), ("get", f"/api/documents/{doc}"),
              ("get", "/api/retrievability"), ("get", "/api/retrievability/documents"),
              ("get", f"/api/explain?docid={doc}&qid=x"), ("post", "/api/eqi")]
    for method, url in routes:
        sep = "&" if "?" in url else "?"
        r = getattr(client, method)(f"{url}{sep}limt=5", **({"json": {"text": "star"}} if method == "post" else {}))
        assert r.status_code == 422 and "unknown query parameter 'limt'" in r.text, (url, r.text)
    # the pages take what links from elsewhere add
    assert client.get("/", params={"q": "star", "utm_source": "mail"}).status_code == 200


def test_the_manual_calls_only_parameters_the_api_takes(client):
    text = (Path(__file__).resolve().parents[1] / "docs" / "manual" / "content-owner.md").read_text()
    assert "/api/search?q=computer+indexing&limit=3" in text and "&k=" not in text


# ---- 7: a service's NaN score ------------------------------------------------------------------------
class _NanService(BaseHTTPRequestHandler):
    """An Elasticsearch-like service that scores its first hit NaN."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = (b'{"hits": {"hits": [{"_id": "1", "_score": NaN}, {"_id": "2", "_score": 3.5}, '
                b'{"_id": "3", "_score": 2.0}]}}')
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST  # noqa: N815

    def log_message(self, *args):
        pass


def test_a_services_nan_score_is_refused_naming_url_and_query(adi, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NanService)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/adi/_search"
        q = tmp_path / "q.tsv"
        q.write_text("q7\tcomputer indexing\n")
        out = tmp_path / "store"
        err = refused(run_cli("exposure", "compute", "--url", url, "--preset", "elasticsearch",
                              "--collection", "adi", "--queries", q, "--out", out, "--depth", "5"),
                      url, "score nan of document '1' is not a finite number", "'q7'")
        assert "Traceback" not in err
    finally:
        server.shutdown()
        server.server_close()
    assert not (out / "manifest.json").exists()
