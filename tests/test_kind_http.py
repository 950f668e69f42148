"""Kind ``http``: a live search service replayed over HTTP, against real servers on loopback.

Two real engines, each started and stopped here as processes of their own: ``limelight serve``
over a small audit (movies, 300 log queries, BM25), and PISA BM25 (``pyterrier-pisa``) behind a
minimal ASGI app speaking Elasticsearch's ``_search``/``_msearch`` and Solr's ``/select``
(``_search_engine.py``). Each sits behind a fault-injecting proxy (``_fault_proxy.py``: 503 and
429 with Retry-After, delays past the client's timeout, reset connections, 5 % of the requests
in all) and is killed (SIGKILL) and restarted mid-replay. Every time the finished store equals
the fault-free store pair for pair, and no query reaches a service again once an answer to it
was delivered: for PISA by the engine's own count, for ``limelight serve`` (which keeps no
count) by the proxy's log, the only way in. Ctrl-C and a rerun give the fault-free store too; a
service that stays down stops the replay after the failure budget with one line (URL, last
status), exit status 2, finished shards kept. Credentials come from the environment and are
found in no file of the audit and in no output.

``limelight serve`` is started once for the module (a test that kills it starts it again on
its port); the audits whose process is not the point (the base audit, reruns, bad
configurations, the PISA replay) run in-process (``tests/_inproc.py``), the Ctrl-C'd and the
failing replays in processes of their own.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from _inproc import run_cli
from _shared import stop_process

from limelight.errors import LimelightError
from limelight.exposure.compute import compute_exposure
from limelight.exposure.store import ExposureStore
from limelight.retrieval.kinds.http import Template, _render_json, compile_path, resolve
from limelight.retrieval.replay import ClientOptions, _retry_after, replay_summaries
from limelight.retrieval.spec import System
from limelight.retrieval.systems import (
    DETERMINISTIC,
    EXACT_REVERSE,
    LOCAL_INDEX,
    NEW_QUERIES,
    REMOTE,
    get_kind,
)

HERE = Path(__file__).resolve().parent
PY = sys.executable
N_QUERIES, DEPTH, SHARD = 300, 20, 50
#: the client under faults: quick retries, and a timeout the proxy's delays outlast. Not shorter:
#: on a loaded machine (CI, load 3-4) an answer the proxy delivered can take over a second to be
#: read, the client would time out on an answer the proxy counts as delivered and ask again. The
#: retries of one request wait 10.6-21 s in all (backoff doubling from 0.05 s to 3 s): longer than
#: a killed engine's restart takes on a loaded machine (with 8 retries capped at 1 s, 2.3-4.6 s, a
#: PISA engine restarted under three workers came back after 11 queries had spent their retries,
#: 2026-11-29); the waits are spent only while a service is down
CLIENT = {"timeout": 4.0, "retries": 12, "backoff": 0.05, "max_backoff": 3.0, "concurrency": 4}
#: 5 % of the requests fail, 1.25 % each way; seed 67 draws every kind among the first 36
#: requests (a replay in batches of 8 sends 38), so each test meets each fault
FAULTS = {"p503": 0.0125, "p429": 0.0125, "pdelay": 0.0125, "preset": 0.0125, "seed": 67}
TOKEN_ENV = "LIMELIGHT_TEST_ENGINE_TOKEN"
WAIT = 90


# ---- processes ------------------------------------------------------------------------------------
def _until(cond, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _port_file(path: Path) -> int:
    _until(path.exists, f"{path.name}")
    return int(path.read_text())


class Server:
    """A server process (``limelight serve`` or the PISA engine) that a test can kill and
    restart on the same port."""

    def __init__(self, argv: list[str], folder: Path, env: dict | None = None, port: int = 0):
        self.argv, self.folder, self.env, self.port = argv, folder, env, port
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.start()

    def start(self) -> None:
        self.starts += 1
        pf = self.folder / f"port-{id(self)}-{self.starts}"
        argv = [a.replace("{port}", str(self.port)).replace("{port_file}", str(pf)) for a in self.argv]
        self.log = open(self.folder / f"server-{id(self)}-{self.starts}.log", "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        if "{port_file}" in " ".join(self.argv):
            self.port = _port_file(pf)
        else:  # limelight serve: the line it prints once listening
            text = Path(self.log.name).read_text
            _until(lambda: "serving" in text() or self.proc.poll() is not None, "limelight serve")
            line = text()
            assert "serving" in line, line
            self.port = int(line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(WAIT)
        self.log.close()

    def stop(self) -> None:
        stop_process(self.proc, 10)
        self.log.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def serving(argv: list[str], folder: Path, env: dict | None = None):
    s = Server(argv, folder, env)
    try:
        yield s
    finally:
        s.stop()


def serve_argv(audit: Path) -> list[str]:
    return [PY, "-m", "limelight.cli", "serve", "--audit", str(audit), "--port", "{port}", "--no-preload"]


def engine_argv(folder: Path, token_env: str | None = None) -> list[str]:
    return [PY, str(HERE / "_search_engine.py"), "--index-dir", str(folder / "pisa-index"),
            "--port-file", "{port_file}", "--port", "{port}", "--count", str(folder / "engine-count.jsonl"),
            *(["--token-env", token_env] if token_env else [])]


def proxy_argv(upstream: str, log: Path, faults: dict) -> list[str]:
    return [PY, str(HERE / "_fault_proxy.py"), "--upstream", upstream, "--port-file", "{port_file}",
            "--log", str(log), "--delay", str(CLIENT["timeout"] + 0.5),
            *[a for k, v in faults.items() for a in (f"--{k}", str(v))]]


def kill_and_restart_when(server: Server, cond, pause: float = 0.5) -> threading.Thread:
    """In the background: once ``cond()`` holds, SIGKILL ``server``, wait ``pause``, start it
    again on the same port."""
    def run() -> None:
        _until(cond, "the replay to get going")
        server.kill()
        time.sleep(pause)
        server.start()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


# ---- what the proxy and the engine saw -------------------------------------------------------------
def _events(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def _queries_of(ev: dict) -> list[str]:
    """The query texts one logged request asked (limelight GET, _search, _msearch, Solr)."""
    if ev["method"] == "GET":
        return parse_qs(urlsplit(ev["target"]).query)["q"]
    lines = [json.loads(x) for x in ev["body"].splitlines() if x.strip()]
    bodies = lines[1::2] if ev["target"].endswith("_msearch") else lines
    return [b["query"]["multi_match"]["query"] for b in bodies]


def asked_again(log: Path, since: int = 0) -> list[str]:
    """Queries forwarded to the service after an answer to them had been delivered (events
    from line ``since`` on; answers delivered before it count as delivered)."""
    done: set[str] = set()
    again = []
    for n, ev in enumerate(_events(log)):
        qs = _queries_of(ev)
        if ev["ev"] == "forward" and n >= since:
            again += [q for q in qs if q in done]
        elif ev["ev"] == "delivered" and ev["status"] == 200:
            done.update(qs)
    return again


def _delivered(log: Path) -> int:
    return sum(e["ev"] == "delivered" for e in _events(log))


def same_pairs(a: ExposureStore, b: ExposureStore) -> bool:
    return (a.queries.ids == b.queries.ids and a.doc_ids == b.doc_ids
            and all(np.array_equal(x, y) for x, y in zip(a.pair_arrays(), b.pair_arrays(), strict=True)))


# ---- fixtures -------------------------------------------------------------------------------------
BASE_TOML = f"""
[audit]
name = "replay-test"
depth = {DEPTH}
cutoffs = [10, {DEPTH}]
shard_size = {SHARD}
[collection]
source = "movies"
[queries]
source = "log"
sample = {N_QUERIES}
[stages]
eqi = false
ctrlqgen = false
"""


def audit_cmd(cfg: Path, out: Path) -> subprocess.CompletedProcess:
    """``limelight audit CFG --out OUT`` in this process (``tests/_inproc.py``): what it answers
    (exit status, one-line errors, the store) is the point, not a process of its own."""
    return run_cli("audit", cfg, "--out", out)


def http_config(folder: Path, name: str, system: dict) -> Path:
    """An audit configuration with one http system ``svc`` (``system``: its parameters)."""
    def toml(v):
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {toml(x)}" for k, x in v.items()) + "}"
        return json.dumps(v)

    lines = "\n".join(f"{k} = {toml(v)}" for k, v in system.items())
    p = folder / f"{name}.toml"
    p.write_text(BASE_TOML + f'\n[[systems]]\nname = "svc"\nkind = "http"\n{lines}\n')
    return p


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A small audit (movies, 300 log queries, BM25 at depth 20): what ``limelight serve`` serves,
    and its BM25 store, which a replay of the server must equal."""
    folder = tmp_path_factory.mktemp("http-base")
    cfg = folder / "base.toml"
    cfg.write_text(BASE_TOML + '\n[[systems]]\nname = "bm25"\nkind = "bm25"\n')
    r = audit_cmd(cfg, folder / "audit")
    assert r.returncode == 0, r.stderr[-3000:]
    return folder / "audit"


@pytest.fixture(scope="module")
def _serve(base, tmp_path_factory):
    """``limelight serve`` over the base audit, started once for the module (each start: a new
    interpreter and the audit opened)."""
    with serving(serve_argv(base), tmp_path_factory.mktemp("serve")) as s:
        yield s


@pytest.fixture
def srv(_serve) -> Server:
    """The module's ``limelight serve``, running: a test that killed it (and failed before it
    started it again) leaves it to be started here."""
    if _serve.proc.poll() is not None:
        _serve.log.close()
        _serve.start()
    return _serve


@pytest.fixture(scope="module")
def bm25_store(base) -> ExposureStore:
    return ExposureStore.open(base / "systems" / "bm25" / "exposure")


@pytest.fixture(scope="module")
def collection():
    from limelight.data import load_catalog

    return load_catalog("movies")


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("http-engine")


REF_TOKEN = "ref-token-7f3c"


@pytest.fixture(scope="module")
def ref_engine(engine_dir):
    """The PISA engine with token ``REF_TOKEN``, started once for the module (the reference
    store and the presets ask it; the faults test kills and restarts an engine of its own)."""
    with serving(engine_argv(engine_dir, TOKEN_ENV), engine_dir, {**os.environ, TOKEN_ENV: REF_TOKEN}) as eng:
        yield eng


@pytest.fixture(scope="module")
def pisa_store(ref_engine, bm25_store, collection, tmp_path_factory) -> ExposureStore:
    """The fault-free store of the PISA engine (Elasticsearch preset, one request per query)."""
    out = tmp_path_factory.mktemp("pisa-ref")
    with _env(TOKEN_ENV, REF_TOKEN):
        return replay(f"{ref_engine.url}/movies", bm25_store.queries, collection, out, preset="elasticsearch",
                      headers={"Authorization": f"Bearer env:{TOKEN_ENV}"})[0]


def replay(url: str, queries, collection, out: Path, work: Path | None = None,
           **params) -> tuple[ExposureStore, object]:
    """The store of an http system at ``url`` (``params``) over ``queries`` in ``out/store``, its
    journal in ``work`` (default ``out/work``); and the opened system."""
    r = System.of("http", url=url, **params).open(None, collection=collection,
                                                         work_dir=work or out / "work")
    return compute_exposure(r, queries, out / "store", depth=DEPTH, shard_size=SHARD), r


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


# ---- the kind -------------------------------------------------------------------------------------
def test_kind_capabilities_and_settings_without_secrets(monkeypatch):
    kind = get_kind("http")
    assert kind.capabilities == {NEW_QUERIES, REMOTE} and not kind.needs_index
    assert not any(kind.has(c) for c in (EXACT_REVERSE, LOCAL_INDEX, DETERMINISTIC))
    monkeypatch.setenv("ES_TOKEN", "s3cr3t-value")
    spec = System.of("http", url="http://127.0.0.1:9/idx", preset="elasticsearch",
                            headers={"Authorization": "ApiKey env:ES_TOKEN"})
    assert spec.settings()["headers"] == {"Authorization": "ApiKey env:ES_TOKEN"}
    t = Template(dict(spec.params))
    assert t.headers == {"Authorization": "ApiKey s3cr3t-value"} and t.secrets == ["s3cr3t-value"]
    assert "s3cr3t" not in json.dumps(spec.settings())


@pytest.mark.parametrize("params, message", [
    ({"url": "http://h:1/s", "params": {"q": "fixed"}}, r"no \{query\} placeholder"),
    ({"url": "http://h:1", "preset": "limelight", "params": {"q": "all"}}, r"no \{query\} placeholder"),
    ({"url": "http://h:1", "preset": "lucene"}, "unknown preset 'lucene' .elasticsearch, opensearch, solr, limelight"),
    ({"url": "ftp://h/x", "params": {"q": "{query}"}}, "must be an http:// or https:// URL"),
    ({"url": "http://me:pw@h/s", "params": {"q": "{query}"}}, "holds a user or password"),
    ({"url": "http://h/s?api_key=abc", "params": {"q": "{query}"}}, "query string holds api_key"),
    ({"url": "http://h/s", "params": {"q": "{query}"}, "headers": {"Authorization": "Bearer abc"}},
     "headers.Authorization is written out; credentials come from the environment only"),
    ({"url": "http://h/s", "params": {"q": "{query}", "access_token": "abc"}}, "params.access_token is written out"),
    ({"url": "http://h/s", "method": "POST", "body": {"q": "{query}", "auth": {"token": "abc"}}},
     "body.auth.token is written out"),
    ({"url": "http://h/s", "params": {"q": "{query}"}, "headers": {"X-Api-Key": "env:LIMELIGHT_UNSET_VAR"}},
     r"environment variable LIMELIGHT_UNSET_VAR \(headers.X-Api-Key\) is not set"),
    ({"url": "http://h/s", "preset": "solr", "batch_size": 4}, "batch_size > 1 needs a batch template"),
    ({"url": "http://h/s", "params": {"q": "{query}"}, "max_page": 10}, r"max_page pages with \{offset\}"),
])
def test_bad_templates_are_one_line_errors(params, message):
    with pytest.raises(LimelightError, match=message) as e:
        Template(params)
    assert "\n" not in str(e.value)


def test_paths_and_placeholders():
    doc = {"hits": {"hits": [{"_id": 7, "a/b": {"~x": 1.5}}]}, "l": [[1, 2]]}
    assert resolve(doc, compile_path("/hits/hits/0/_id", "id")) == 7
    assert resolve(doc, compile_path("hits.hits.0._id", "id")) == 7
    assert resolve(doc, compile_path("/hits/hits/0/a~1b/~0x", "score")) == 1.5  # RFC 6901 escapes
    assert resolve(doc, compile_path("/l/0/1", "x")) == 2 and resolve(doc, compile_path("", "x")) is doc
    assert resolve(doc, compile_path("/hits/nope", "x")) is not None  # the missing marker, not None
    # one pass: a query holding quotes, backslashes and another placeholder stays as typed
    body = json.dumps({"q": "{query}", "size": "{k}", "from": "{offset}", "tag": "id-{qid}"})
    out = json.loads(_render_json(body, {"query": 'say "hi" \\ {qid}', "qid": "q1", "k": 10, "offset": 20}))
    assert out == {"q": 'say "hi" \\ {qid}', "size": 10, "from": 20, "tag": "id-q1"}
    t = Template({"url": "http://h:1/search/{query}", "params": {"n": "{k}"}})
    method, url, params, _, content = t.request([("q1", "a/b c")], 5, 0)
    assert (method, url, params, content) == ("GET", "http://h:1/search/a%2Fb%20c", {"n": "5"}, None)


def test_answers_settled_at_once_read_as_one_by_one():
    """The ids of many answers are coded at once (``Template.settle``): every answer reads as
    the general reading has it, one by one: codes where every id is the collection's, the ids
    kept where one is not (or is a number), a one-line error in the place of an answer whose
    id or score is of the wrong type; in a batch (``_msearch``) as alone."""
    strings = [f"doc{i}" for i in range(200)]

    def answer(hits) -> bytes:
        return json.dumps({"hits": {"hits": hits}}).encode()

    good = [{"_id": f"doc{i}", "_score": 10.0 - i} for i in (5, 0, 199)]
    bodies = [answer(good), answer([]), answer([{"_id": "doc3", "_score": 2}, {"_id": "nope", "_score": 1.0}]),
              answer([{"_id": 7, "_score": 1.5}]), answer([{"_id": None, "_score": 1.0}]),
              answer([{"_id": "doc1", "_score": "high"}]), answer([{"_id": "doc2"}]), answer(good[::-1])]
    t = Template({"url": "http://h/i", "preset": "elasticsearch"})
    t.set_collection(strings)
    t.reset()
    def read_all(template, bodies):  # an answer that is none: its error, at reading or settling
        read = []
        for b in bodies:
            try:
                read.append(template.read(200, "application/json", b, 1)[0])
            except LimelightError as e:
                read.append(e)
        return template.settle(read)

    got = read_all(t, bodies)
    slow = Template({"url": "http://h/i", "preset": "elasticsearch"})
    slow.set_collection(strings)
    for b, g in zip(bodies, got, strict=True):
        doc = json.loads(b)
        try:
            want = slow._hits(doc, b, fast=False)
        except LimelightError as e:
            assert isinstance(g, LimelightError) and str(g) == str(e) and "\n" not in str(g)
            continue
        assert (g[0] is None) == (want[0] is None or min(want[2].tolist(), default=0) >= 0)
        assert (g[0] or [strings[c] for c in g[2]]) == (want[0] or [])
        assert list(g[1]) == list(want[1]) and g[2].tolist() == want[2].tolist()
    assert got[0][0] is None and got[0][2].tolist() == [5, 0, 199]  # coded at once
    assert got[2][0] == ["doc3", "nope"] and got[2][2].tolist() == [3, -1]
    assert got[3][0] == ["7"] and got[3][2].tolist() == [-1]
    assert isinstance(got[4], LimelightError) and "id path /_id matches None" in str(got[4])
    assert isinstance(got[5], LimelightError) and "score path /_score matches 'high'" in str(got[5])
    assert isinstance(got[6], LimelightError) and "score path /_score matches nothing" in str(got[6])
    # settled one at a time, out of order: the same
    again = [t.read(200, "application/json", bodies[j], 1)[0] for j in (7, 0, 2, 1)]
    for j, a in zip((7, 0, 2, 1), again, strict=True):
        one = t.settle([a])[0]
        assert list(one[1]) == list(got[j][1]) and one[2].tolist() == got[j][2].tolist()
    # a batch: each item as alone
    tb = Template({"url": "http://h/i", "preset": "elasticsearch", "batch_size": 3})
    tb.set_collection(strings)
    batch = json.dumps({"responses": [json.loads(bodies[0]), {"status": 503, "error": "busy"},
                                      json.loads(bodies[2])]}).encode()
    first, status, third = tb.settle(tb.read(200, "application/json", batch, 3))
    assert status == 503 and first[2].tolist() == [5, 0, 199] and third[0] == ["doc3", "nope"]


def test_journal_keeps_answers_by_codes_or_ids(tmp_path):
    """Answers given as codes (written dictionary-encoded) or as ids (strings) read back alike;
    a part being written when the job was killed is ignored; the log summarises."""
    from array import array

    from limelight.retrieval.kinds.http import _Codes
    from limelight.retrieval.replay import Journal, summarize_log

    strings = [f"doc{i}" for i in range(50)]
    codes = _Codes(strings)
    assert codes(["doc7", "nope", "doc0"]).tolist() == [7, -1, 0]
    j = Journal(tmp_path / "j", {"url": "u", "k": 3}, strings)
    j.add(("q1", "a"), True, 200, 1, 0.01, 0.01, "", (None, array("d", [3.0, 2.0]), np.array([7, 3], np.int32)))
    j.add(("q2", "b"), True, 200, 2, 0.02, 0.5, "", (["x-unknown"], array("d", [float("nan")]), None))
    j.add(("q3", "c"), False, 503, 6, 0.02, 3.0, "HTTP 503")
    j.flush()
    (tmp_path / "j" / ".hits-000002.parquet.1234.tmp").write_bytes(b"half")
    j2 = Journal(tmp_path / "j", None, strings)
    got = j2.lookup([("q2", "b"), ("q1", "a"), ("q3", "c"), ("q1", "other text")])
    assert set(got) == {0, 1}
    assert got[1][0] == ["doc7", "doc3"] and list(got[1][1]) == [3.0, 2.0]
    assert got[0][0] == ["x-unknown"] and np.isnan(got[0][1][0])
    assert not list((tmp_path / "j").glob(".*.tmp"))
    s = summarize_log(__import__("pandas").read_parquet(tmp_path / "j" / "log-000001.parquet"))
    assert (s["asked"], s["answered"], s["failed"], s["retried"], s["attempts"]) == (3, 2, 1, 2, 9)


def test_retry_after_and_client_options():
    assert _retry_after("3", 60) == 3 and _retry_after("999", 60) == 60 and _retry_after(None, 60) == 0
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < _retry_after(date, 60) <= 31
    assert _retry_after("garbage", 60) == 0
    with pytest.raises(LimelightError, match="concurrency must be a number ≥ 1"):
        ClientOptions(concurrency=0)


# ---- limelight serve ------------------------------------------------------------------------------
def test_limelight_serve_replayed_equals_its_bm25_store(srv, bm25_store, collection, tmp_path):
    """No faults: the replay of ``limelight serve`` is limelight's own BM25 store, pair for pair
    (scores cross JSON exactly), and a second replay asks the server nothing."""
    st, r = replay(srv.url, bm25_store.queries, collection, tmp_path, preset="limelight")
    assert same_pairs(st, bm25_store)
    [s] = r.replay_summary()
    assert (s["asked"], s["answered"], s["failed"], s["attempts"]) == (N_QUERIES, N_QUERIES, 0, N_QUERIES)
    assert s["url"] == f"{srv.url}/api/search" and s["latency_p50_ms"] <= s["latency_p99_ms"]
    # page by page (7 hits a request, {offset}): the same store
    paged, r = replay(srv.url, bm25_store.queries, collection, tmp_path / "paged", preset="limelight",
                      max_page=7)
    assert same_pairs(paged, bm25_store)
    assert r.replay_summary()[0]["attempts"] > N_QUERIES  # a request per page
    # without a score path the service's order is kept: score 1 / rank, the same documents
    ordered, _ = replay(srv.url, bm25_store.queries, collection, tmp_path / "ordered",
                        preset="limelight", score="")
    q, d, rank, score = ordered.pair_arrays()
    assert np.allclose(score, 1.0 / rank)
    bq, bd = bm25_store.pair_arrays()[:2]
    assert set(zip(q.tolist(), d.tolist(), strict=True)) == set(zip(bq.tolist(), bd.tolist(), strict=True))
    srv.kill()  # the server is gone: the journal answers a new store
    st2, _ = replay(srv.url, bm25_store.queries, collection, tmp_path / "again", tmp_path / "work",
                    preset="limelight")
    assert same_pairs(st2, bm25_store)


def test_limelight_serve_faults_and_a_restart_give_the_fault_free_store(srv, bm25_store, collection,
                                                                        tmp_path):
    log = tmp_path / "proxy.jsonl"
    starts = srv.starts
    with serving(proxy_argv(srv.url, log, FAULTS), tmp_path) as proxy:
        t = kill_and_restart_when(srv, lambda: _delivered(log) >= N_QUERIES // 3)
        st, r = replay(proxy.url, bm25_store.queries, collection, tmp_path, preset="limelight", **CLIENT)
        t.join(WAIT)
        assert srv.starts == starts + 1
    assert same_pairs(st, bm25_store)
    events = _events(log)
    kinds = collections.Counter(e["kind"] for e in events if e["ev"] == "fault")
    assert set(kinds) == {"503", "429", "delay", "reset"}, kinds
    assert any(e["ev"] == "upstream_error" for e in events)  # the server was down a while
    assert asked_again(log) == []
    # every query reached the server once, and again only when its answer was lost with the kill
    forwarded = collections.Counter(q for e in events if e["ev"] == "forward" for q in _queries_of(e))
    lost = collections.Counter(q for e in events if e["ev"] == "upstream_error" for q in _queries_of(e))
    assert set(forwarded) == set(bm25_store.queries.texts)
    assert all(n == 1 + lost[q] for q, n in forwarded.items())
    [s] = r.replay_summary()  # every request the client sent met a fault or was forwarded
    assert s["answered"] == N_QUERIES and s["failed"] == 0 and s["retried"] > 0
    assert s["attempts"] == sum(e["ev"] in ("fault", "forward") for e in events)


def test_ctrl_c_then_rerun_gives_the_fault_free_store(srv, bm25_store, tmp_path):
    """``limelight audit`` replaying ``limelight serve`` (60 queries/s) gets Ctrl-C mid-replay:
    it stops cleanly (exit 130, no traceback), keeps every answer received, and the rerun asks
    only the queries without one."""
    log = tmp_path / "proxy.jsonl"
    with serving(proxy_argv(srv.url, log, {}), tmp_path) as proxy:
        cfg = http_config(tmp_path, "svc", {"url": proxy.url, "preset": "limelight", "rate": 60, **CLIENT})
        out = tmp_path / "audit"
        p = subprocess.Popen([PY, "-m", "limelight.cli", "audit", str(cfg), "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _until(lambda: _delivered(log) >= 60, "60 answers")
        p.send_signal(signal.SIGINT)
        outp, err = p.communicate(timeout=WAIT)
        assert p.returncode == 130, err[-2000:]
        assert "Traceback" not in err + outp
        first = len(_events(log))
        [s] = replay_summaries(out / "systems" / "svc")
        assert 60 <= s["answered"] < N_QUERIES and s["answered"] == _delivered(log)
        r = audit_cmd(cfg, out)
        assert r.returncode == 0, r.stderr[-3000:]
    assert same_pairs(ExposureStore.open(out / "systems" / "svc" / "exposure"), bm25_store)
    assert asked_again(log, since=first) == []
    assert sum(e["ev"] == "forward" for e in _events(log)[first:]) == N_QUERIES - s["answered"]


def test_a_service_that_stays_down_stops_after_the_failure_budget(srv, bm25_store, tmp_path):
    """The server dies after two shards and stays down: one line naming the URL and the last
    status after the failure budget, exit status 2, the finished shards kept (a rerun, the
    server back, completes the fault-free store without rewriting them)."""
    log = tmp_path / "proxy.jsonl"
    with serving(proxy_argv(srv.url, log, {}), tmp_path) as proxy:
        cfg = http_config(tmp_path, "svc", {"url": proxy.url, "preset": "limelight", "rate": 60,
                                            **CLIENT, "retries": 2, "backoff": 0.01, "failure_budget": 3})
        out = tmp_path / "audit"
        shards = out / "systems" / "svc" / "exposure" / "shards"
        p = subprocess.Popen([PY, "-m", "limelight.cli", "audit", str(cfg), "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _until(lambda: len(list(shards.glob("*.parquet"))) >= 2, "two shards")
        srv.kill()
        _, err = p.communicate(timeout=WAIT)
        assert p.returncode == 2, err[-2000:]
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in err, err[-2000:]
        assert f"{proxy.url}/api/search" in errors[0] and "(last: HTTP 502)" in errors[0]
        assert "failure budget of 3 spent" in errors[0]
        kept = {f.name: f.stat().st_mtime_ns for f in shards.glob("*.parquet")}
        assert len(kept) >= 2
        srv.start()
        r = audit_cmd(cfg, out)
        assert r.returncode == 0, r.stderr[-3000:]
    assert same_pairs(ExposureStore.open(out / "systems" / "svc" / "exposure"), bm25_store)
    assert {f: shards.joinpath(f).stat().st_mtime_ns for f in kept} == kept
    assert asked_again(log) == []


def test_bad_responses_are_one_line_errors(srv, bm25_store, collection, tmp_path):
    """A response path that matches nothing (the response quoted, cut) and a response that is
    not JSON (the HTML home page) stop the replay with one line; so does a template without
    ``{query}`` in ``limelight audit`` (exit 2, no traceback)."""
    qs = bm25_store.queries.take(np.unique(bm25_store.pair_arrays()[0])[:5])  # queries with hits
    with pytest.raises(LimelightError) as e:
        replay(srv.url, qs, collection, tmp_path / "a", preset="limelight", hits="/hits")
    msg = str(e.value)
    assert "\n" not in msg and f"{srv.url}/api/search: hits path /hits matches nothing" in msg
    assert '"{\\"query\\":' in msg and msg.endswith('…"') and len(msg) < 400
    with pytest.raises(LimelightError) as e:
        replay(f"{srv.url}/", qs, collection, tmp_path / "b", params={"q": "{query}"})
    assert "is not JSON" in str(e.value) and "<!doctype html>" in str(e.value).lower()
    assert "\n" not in str(e.value)
    cfg = http_config(tmp_path, "bad", {"url": "http://127.0.0.1:9", "preset": "limelight",
                                        "params": {"q": "everything"}})
    r = audit_cmd(cfg, tmp_path / "bad-audit")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "no {query} placeholder" in errors[0], r.stderr[-2000:]
    # a credential written into the configuration is refused where it is read: nothing written
    cfg = http_config(tmp_path, "literal", {"url": "http://127.0.0.1:9", "preset": "limelight",
                                            "headers": {"Authorization": "Bearer hunter2-literal"}})
    r = audit_cmd(cfg, tmp_path / "literal-audit")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "credentials come from the environment" in errors[0]
    assert "hunter2" not in r.stderr and not (tmp_path / "literal-audit").exists()


# ---- a second engine: PISA behind HTTP --------------------------------------------------------------
def test_pisa_presets_agree(ref_engine, pisa_store, bm25_store, collection, tmp_path, monkeypatch):
    """The same PISA engine through the Solr preset and through _msearch batches gives the
    store of the Elasticsearch preset's single requests; a wrong token is one line naming the
    status, with the credential removed from the quoted response."""
    monkeypatch.setenv(TOKEN_ENV, REF_TOKEN)
    auth = {"Authorization": f"Bearer env:{TOKEN_ENV}"}
    eng = ref_engine
    solr, _ = replay(f"{eng.url}/solr/movies", bm25_store.queries, collection, tmp_path / "solr",
                     preset="solr", headers=auth)
    batch, r = replay(f"{eng.url}/movies", bm25_store.queries, collection, tmp_path / "batch",
                      preset="opensearch", headers=auth, batch_size=16)
    assert same_pairs(solr, pisa_store) and same_pairs(batch, pisa_store)
    assert r.replay_summary()[0]["attempts"] == N_QUERIES  # each query sent once (16 a request)
    monkeypatch.setenv(TOKEN_ENV, "wrong-secret-91ab")
    with pytest.raises(LimelightError, match=r"/movies/_search: HTTP 401 Unauthorized; check the "
                                             r"credentials") as e:
        replay(f"{eng.url}/movies", bm25_store.queries, collection, tmp_path / "denied",
               preset="elasticsearch", headers=auth)
    assert "wrong-secret" not in str(e.value) and "***" in str(e.value)
    assert not same_pairs(pisa_store, bm25_store)  # another engine indeed


def test_pisa_audit_with_faults_a_restart_and_a_token(engine_dir, pisa_store, bm25_store, tmp_path,
                                                     monkeypatch):
    """``limelight audit`` replays PISA (Elasticsearch preset, _msearch batches of 8, the token
    from the environment) behind 5 % faults, the engine killed and restarted mid-replay: the
    fault-free store; the engine's own count shows no query asked again once answered; the
    report shows the replay; the token is in no file of the audit and in no output."""
    token = "tok-" + os.urandom(12).hex()
    env = {**os.environ, TOKEN_ENV: token}
    log = tmp_path / "proxy.jsonl"
    count = engine_dir / "engine-count.jsonl"
    with serving(engine_argv(engine_dir, TOKEN_ENV), engine_dir, env) as eng, \
            serving(proxy_argv(eng.url, log, FAULTS), tmp_path) as proxy:
        start = len(count.read_text().splitlines()) if count.exists() else 0

        def answered() -> int:
            return len(count.read_text().splitlines()) - start

        cfg = http_config(tmp_path, "svc", {"url": f"{proxy.url}/movies", "preset": "elasticsearch",
                                            "batch_size": 8, **CLIENT,
                                            "headers": {"Authorization": f"Bearer env:{TOKEN_ENV}"}})
        out = tmp_path / "audit"
        t = kill_and_restart_when(eng, lambda: answered() >= N_QUERIES // 3)
        monkeypatch.setenv(TOKEN_ENV, token)
        r = audit_cmd(cfg, out)
        t.join(WAIT)
        assert r.returncode == 0, r.stderr[-3000:]
        assert eng.starts == 2
    assert same_pairs(ExposureStore.open(out / "systems" / "svc" / "exposure"), pisa_store)
    events = _events(log)
    assert {e["kind"] for e in events if e["ev"] == "fault"} == {"503", "429", "delay", "reset"}
    assert asked_again(log) == []
    seen = collections.Counter(json.loads(x) for x in count.read_text().splitlines()[start:])
    lost = collections.Counter(q for e in events if e["ev"] == "upstream_error" for q in _queries_of(e))
    assert set(seen) == set(bm25_store.queries.texts)
    assert all(n <= 1 + lost[q] for q, n in seen.items())  # twice only if the kill lost the answer
    assert sum(seen.values()) - N_QUERIES <= CLIENT["concurrency"] * 8  # at most the batches in flight
    report = (out / "report.html").read_text()
    assert "Queries replayed against live services" in report and f"{proxy.url}/movies/_search" in report
    leaks = [str(f) for f in out.rglob("*") if f.is_file() and token.encode() in f.read_bytes()]
    assert leaks == [] and token not in r.stdout + r.stderr
