"""``limelight serve`` under load (issue 42): no global lock around computations, a bounded EQI
queue, bodies that are not UTF-8, schemathesis against a real server, the offline API page.

Real uvicorn servers on loopback, started and stopped here. Slow work is held on a
``threading.Event`` (never a sleep or a timing threshold): a view whose computation waits for an
event is a computation that takes as long as the test wants.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import test_serve_support as support

from limelight.service.concurrency import Busy, Gate, QueueTimeout, SingleFlight, ViewCache, sizeof

audit_dir, service, live_server = support.audit_dir, support.service, support.live_server

WAIT = 120  # seconds: a bound on any wait here, so that a hang fails instead of blocking the run


@contextlib.contextmanager
def serving(app):
    """``app`` served by uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + WAIT
    while not server.started:
        assert time.monotonic() < deadline and t.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(WAIT)


def _until(cond, what: str) -> None:
    """Wait (bounded) until ``cond()`` holds: a state change, not a duration."""
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class Held:
    """A computation that runs until released: ``make()`` signals ``started`` then waits."""

    def __init__(self, value=None):
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self.value = value

    def make(self):
        self.calls += 1
        self.started.set()
        assert self.release.wait(WAIT), "never released"
        return self.value


# ---- the pieces ---------------------------------------------------------------------------------
def test_single_flight_computes_once_and_never_blocks_other_keys():
    cache = SingleFlight()
    slow = Held(value="slow")
    results = {}
    first = threading.Thread(target=lambda: results.update(a=cache.get("a", slow.make)))
    first.start()
    assert slow.started.wait(WAIT)
    # another key is answered while "a" computes
    assert cache.get("b", lambda: "b") == "b"
    # a second caller of "a" waits for the first computation, not its own
    second = threading.Thread(target=lambda: results.update(a2=cache.get("a", lambda: "other")))
    second.start()
    _until(lambda: second.is_alive(), "the second caller")
    assert "a2" not in results and cache.computing() == 1
    slow.release.set()
    first.join(WAIT), second.join(WAIT)
    assert results == {"a": "slow", "a2": "slow"} and slow.calls == 1
    assert cache.get("a", lambda: "again") == "slow"


def test_single_flight_error_reaches_every_waiter_and_is_not_kept():
    cache = SingleFlight()
    gate = threading.Event()
    started = threading.Event()

    def fail():
        started.set()
        assert gate.wait(WAIT)
        raise ValueError("no such view")

    errors = []

    def call(make):
        try:
            cache.get("k", make)
        except ValueError as e:
            errors.append(str(e))

    a = threading.Thread(target=call, args=(fail,))
    a.start()
    assert started.wait(WAIT)
    b = threading.Thread(target=call, args=(lambda: "unused",))
    b.start()
    _until(lambda: b.is_alive(), "the waiter")
    gate.set()
    a.join(WAIT), b.join(WAIT)
    assert errors == ["no such view", "no such view"]
    assert cache.get("k", lambda: "now") == "now"  # a failure is not kept


def test_view_cache_is_bounded_in_bytes_least_recently_used_first():
    cache = ViewCache(max_bytes=3 * 8000, workers=1, max_pending=4)
    arrays = {k: np.full(1000, i, dtype=np.float64) for i, k in enumerate("abcd")}  # 8,000 bytes each
    for k in "abc":
        cache.get(k, lambda k=k: arrays[k])
    assert cache.stats()["bytes"] == 24000 and cache.stats()["entries"] == 3
    cache.get("a", lambda: pytest.fail("a is cached"))  # a is now the most recently used
    cache.get("d", lambda: arrays["d"])  # evicts b, the least recently used
    st = cache.stats()
    assert st["bytes"] <= st["max_bytes"] and st["evictions"] == 1 and "b" not in cache and "a" in cache
    big = np.zeros(10_000)  # larger than the bound: returned, not kept, nothing evicted for it
    assert cache.get("big", lambda: big) is big and "big" not in cache and cache.stats()["entries"] == 3
    assert sizeof({"x": np.zeros(10), "y": (np.zeros(5), 1.0)}) >= 120


def test_view_cache_refuses_a_new_key_beyond_its_pending_bound():
    cache = ViewCache(max_bytes=1 << 20, workers=2, max_pending=2)
    held = [Held(np.zeros(1)) for _ in range(2)]
    threads = [threading.Thread(target=cache.get, args=(f"k{i}", h.make), kwargs={"heavy": True})
               for i, h in enumerate(held)]
    for t in threads:
        t.start()
    for h in held:
        assert h.started.wait(WAIT)
    with pytest.raises(Busy) as e:
        cache.get("k9", lambda: np.zeros(1), heavy=True)
    assert e.value.retry_after >= 1 and "views are being computed" in str(e.value)
    for h in held:
        h.release.set()
    for t in threads:
        t.join(WAIT)
    assert cache.get("k9", lambda: np.ones(1), heavy=True)[0] == 1.0


def test_view_cache_bounds_the_requests_waiting_for_a_key():
    """Each request waiting for a view being computed holds a server thread: at most
    ``max_waiters`` of them, the next is refused (429) rather than starving the thread pool."""
    cache = ViewCache(max_bytes=1 << 20, workers=1, max_pending=4, max_waiters=1)
    held = Held(np.zeros(2))
    owner = threading.Thread(target=cache.get, args=("k", held.make), kwargs={"heavy": True})
    owner.start()
    assert held.started.wait(WAIT)
    got = []
    waiter = threading.Thread(target=lambda: got.append(cache.get("k", lambda: np.ones(2))))
    waiter.start()
    _until(lambda: cache.stats()["waiting"] == 1, "the first waiter")
    with pytest.raises(Busy, match="wait for views being computed"):
        cache.get("k", lambda: np.ones(2))
    held.release.set()
    owner.join(WAIT), waiter.join(WAIT)
    assert got[0] is held.value and cache.stats()["waiting"] == 0 and held.calls == 1


@contextlib.contextmanager
def held(gate):
    """``gate``'s running slot taken by another thread for the block (which starts once it is
    taken), given back at its end."""
    running, release = threading.Event(), threading.Event()

    def hold():
        with gate.slot():
            running.set()
            assert release.wait(WAIT)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert running.wait(WAIT)
        yield
    finally:
        release.set()
        holder.join(WAIT)


def test_gate_bounds_its_queue_and_the_wait():
    gate = Gate(workers=1, max_queue=1, timeout=0.2, what="jobs")
    outcome = []

    def queued():
        try:
            with gate.slot():
                outcome.append("ran")
        except QueueTimeout as e:
            outcome.append(e)

    with held(gate):
        q = threading.Thread(target=queued)
        q.start()
        _until(lambda: gate.stats()["waiting"] == 1, "a queued job")
        with pytest.raises(Busy) as e:  # running 1 + waiting 1: the queue is full
            gate.slot()
        assert not isinstance(e.value, QueueTimeout) and e.value.retry_after >= 1
        q.join(WAIT)  # no turn within the gate's timeout: QueueTimeout
        assert isinstance(outcome[0], QueueTimeout) and outcome[0].retry_after >= 1
    with gate.slot():
        pass
    st = gate.stats()
    assert (st["running"], st["waiting"], st["rejected"], st["timed_out"]) == (0, 0, 1, 1)


# ---- the service, served --------------------------------------------------------------------------
def test_a_slow_view_blocks_neither_info_nor_other_views(service, live_server):
    """Item 1: while one view computes (held on an event), ``/api/info``, a search and another
    view of an uncached cutoff are answered; a second request for the slow view waits for that
    computation (it is not computed twice)."""
    slow = Held(value=np.arange(3.0))
    key = ("slow-view", "test")
    got = {}
    owner = threading.Thread(target=lambda: got.update(first=service._memoize(key, slow.make)))
    owner.start()
    try:
        assert slow.started.wait(WAIT)
        # the slow view is held for up to WAIT s; a request blocked behind it times out first
        with httpx.Client(base_url=live_server, timeout=WAIT / 4) as c:
            assert c.get("/api/info").status_code == 200
            assert c.get("/api/search", params={"q": "star wars"}).status_code == 200
            c_new = 37  # a cutoff no other test asks for: computed now, beside the slow view
            r = c.get("/api/retrievability", params={"system": "bm25-classic", "c": c_new})
            assert r.status_code == 200 and r.json()["c"] == c_new
            assert r.json()["gini"] == pytest.approx(
                service.system("bm25-classic").store.retrievability(c=c_new).gini)
        assert owner.is_alive() and "first" not in got  # all answered while the slow view computes
        waiter = threading.Thread(target=lambda: got.update(second=service._memoize(key, lambda: "again")))
        waiter.start()
        _until(lambda: waiter.is_alive(), "the second request")
        assert "second" not in got
    finally:
        slow.release.set()
        owner.join(WAIT)
    waiter.join(WAIT)
    assert got["first"] is got["second"] and slow.calls == 1
    stats = service.cache_stats()["views"]
    assert 0 < stats["bytes"] <= stats["max_bytes"]


def test_a_slow_heavy_view_leaves_a_turn_for_another(service, live_server):
    """A heavy computation (a whole store read) holding one of the two turns: an r(d) of a new
    cutoff still computes in the other."""
    slow = Held(value=np.zeros(4))
    owner = threading.Thread(target=lambda: service._views.get(("slow-heavy",), slow.make, heavy=True))
    owner.start()
    try:
        assert slow.started.wait(WAIT)
        with httpx.Client(base_url=live_server, timeout=WAIT / 4) as c:
            r = c.get("/api/retrievability/documents", params={"system": "bm25", "c": 41, "limit": 3})
            assert r.status_code == 200 and len(r.json()["documents"]) == 3
            assert c.get("/api/info").status_code == 200
        assert owner.is_alive()  # answered while the slow computation holds its turn
    finally:
        slow.release.set()
        owner.join(WAIT)


@pytest.fixture(scope="module")
def eqi_service(audit_dir):
    """A service of its own (its EQI queue is filled here): one waiting search at most, and a
    wait of at most half a second."""
    from limelight.service.core import AuditService

    svc = AuditService(audit_dir, eqi_queue=1, eqi_timeout=0.5)
    svc.eqi("warm up the exact reverse search", "bm25", 1)  # builds the engine (seconds), once
    return svc


def test_eqi_queue_is_bounded_429_then_503(eqi_service):
    """Item 2: with a search running (held) and one waiting, a third gets 429 with Retry-After
    at once; the waiting one gets 503 with Retry-After when its wait runs out; once the
    running search ends, searches are answered again."""
    from limelight.service.app import create_app

    gate = eqi_service.eqi_gate
    body = {"text": "a film about star wars", "system": "bm25", "k": 5}
    with serving(create_app(eqi_service)) as base, httpx.Client(base_url=base, timeout=WAIT) as c:
        with held(gate):
            queued = {}
            t = threading.Thread(target=lambda: queued.update(r=c.post("/api/eqi", json=body)))
            t.start()
            _until(lambda: gate.stats()["waiting"] == 1 or "r" in queued, "a queued search")
            if "r" not in queued:  # the queue is full: the next one is refused at once
                r = c.post("/api/eqi", json=body)
                assert r.status_code == 429, r.text
                assert int(r.headers["retry-after"]) >= 1 and "busy" in r.json()["detail"]
                page = c.post("/eqi", data={"text": "star wars", "system": "bm25", "k": "5"})
                assert page.status_code == 429 and int(page.headers["retry-after"]) >= 1
            t.join(WAIT)
            r = queued["r"]
            assert r.status_code == 503, r.text
            assert int(r.headers["retry-after"]) >= 1 and "waited" in r.json()["detail"]
        r = c.post("/api/eqi", json=body)
        assert r.status_code == 200 and r.json()["exact"]["available"]
    stats = gate.stats()
    assert stats["rejected"] >= 1 and stats["timed_out"] == 1 and stats["running"] == stats["waiting"] == 0


def test_queued_eqi_search_runs_when_its_turn_comes(audit_dir):
    """A search that waits less than the timeout is answered (the queue delays, it does not drop)."""
    from limelight.service.app import create_app
    from limelight.service.core import AuditService

    svc = AuditService(audit_dir, eqi_queue=2, eqi_timeout=WAIT)
    gate = svc.eqi_gate
    with serving(create_app(svc)) as base, httpx.Client(base_url=base, timeout=WAIT) as c:
        out = {}
        with held(gate):
            t = threading.Thread(target=lambda: out.update(r=c.post("/api/eqi", json={"text": "star wars", "k": 3})))
            t.start()
            _until(lambda: gate.stats()["waiting"] == 1, "a queued search")
            assert c.get("/api/info").status_code == 200  # the rest of the API is not queued behind it
        t.join(WAIT)
    assert out["r"].status_code == 200 and len(out["r"].json()["exact"]["queries"]) <= 3


def test_a_body_that_is_not_utf8_is_a_documented_422(live_server):
    """Item 5: a JSON body with a byte that is not UTF-8 is a 422 naming the byte, and 422 is
    documented for the operation (FastAPI's own answer is an undocumented 400)."""
    with httpx.Client(base_url=live_server, timeout=WAIT) as c:
        r = c.post("/api/eqi", content=b'{"text": "caf\xe9 au lait"}', headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        (err,) = r.json()["detail"]
        assert "not UTF-8" in err["msg"] and "0xe9" in err["msg"]
        # JSON in UTF-16 (with its mark) is still JSON text
        r = c.post("/api/eqi", content='{"text": "star wars", "k": 2}'.encode("utf-16"),
                   headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        spec = c.get("/openapi.json").json()
    responses = spec["paths"]["/api/eqi"]["post"]["responses"]
    assert {"413", "422", "429", "503"} <= set(responses)
    assert "Retry-After" in responses["429"]["headers"]


def test_schemathesis_against_a_real_server(live_server, tmp_path):
    """Item 5: the schemathesis command against ``/openapi.json`` of a real server on loopback
    (every check, every phase, a bounded number of examples): no server error, no status code
    the schema does not document."""
    st = Path(sys.executable).with_name("st")
    report = tmp_path / "report.xml"
    r = subprocess.run([str(st), "run", f"{live_server}/openapi.json", "--checks", "all",
                        "--max-examples", "25", "--seed", "42", "--no-shrink", "--workers", "1",
                        "--request-timeout", "60", "--report", "junit", "--report-junit-path", str(report)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"})
    tail = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    assert "Server error" not in r.stdout and "Undocumented HTTP status code" not in r.stdout, tail
    assert " passed" in r.stdout and "failed" not in r.stdout.split("SUMMARY")[-1], tail


def test_serve_points_at_the_offline_api_page(audit_dir):
    """Item 6: ``serve`` announces ``/api`` (read from the OpenAPI schema, no network), and
    ``/docs`` and ``/redoc`` (CDN assets) lead there; no response allows a CDN."""
    proc = subprocess.Popen([sys.executable, "-m", "limelight.cli", "serve", "--audit", str(audit_dir),
                             "--port", "0", "--no-preload", "--eqi-queue", "2", "--view-cache-mb", "64"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("serving") and "API at /api" in line and "/docs" not in line, line
        base = line.split(" on ", 1)[1].split()[0].rstrip("/")
        with httpx.Client(base_url=base, timeout=WAIT) as c:
            r = c.get("/docs", follow_redirects=True)
            assert r.status_code == 200 and str(r.url).endswith("/api")
            assert "GET /api/documents/{docid}" in r.text and "POST /api/eqi" in r.text
            assert "cdn" not in r.text.lower() and "<script" not in r.text
            assert str(c.get("/redoc", follow_redirects=True).url).endswith("/api")
            for url in ("/api", "/openapi.json", "/api/info"):
                assert "cdn" not in c.get(url).headers["content-security-policy"]
    finally:
        proc.terminate()
        proc.wait(WAIT)
