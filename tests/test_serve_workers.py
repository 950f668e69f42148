"""``limelight serve --workers 2``: a real pre-fork server on loopback (issue 54 item 5).

The command runs as an operator runs it (a subprocess: the portal over the tiny dense test
audit, opened by the master before it forks; each worker then warms up its BM25 kernel (numba's
OpenMP threads), FAISS index and torch encoder), and is stopped by the test. Each request goes over a new connection, so the kernel hands
it to either worker; ``X-Limelight-Worker`` names the process that answered, checked against the
master's children in ``/proc``. What must hold across workers is in the database: a session
made by one worker is valid on the other (and ends on both at logout), failed logins counted by
either throttle the account, and each worker writes its access-log rows when it stops.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import test_serve_support as support

dense_audit_dir = support.dense_audit_dir

PASSWORD = "alice password"
START_S = 300  # the server loads the audit and its models before it forks
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (from /proc)."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(entry))
    return out


@pytest.fixture(scope="module")
def server(dense_audit_dir, tmp_path_factory):
    """``limelight serve --workers 2`` with password accounts (alice owns one document; carol is
    for the throttle), answering on a free loopback port; stopped (SIGTERM) at the end. CPU: the
    dense test audit (built here when no test built it first: ~36 s) and the server's start,
    each worker warming up its own models (their libraries imported once, by the master, before
    it forks): the least that forks a real server."""
    from limelight.service.accounts import Accounts

    tmp = tmp_path_factory.mktemp("workers")
    url = f"sqlite:///{tmp / 'portal.db'}"
    acc = Accounts(url)
    acc.add_user("alice", "owner", "alice", PASSWORD)
    acc.add_user("carol", "owner", "carol", PASSWORD)
    acc.close()
    (tmp / "owners.tsv").write_text("alice\t1\ncarol\t2\n")
    port = _free_port()
    log = tmp / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "limelight.cli", "serve", "--audit", str(dense_audit_dir),
                             "--port", str(port), "--db", url, "--owners", str(tmp / "owners.tsv"),
                             "--min-searches", "1", "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert proc.poll() is None, f"the server exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no answer within {START_S} s: {log.read_text()[-2000:]}"
            try:
                if httpx.get(f"{base}/api/info", timeout=5).status_code == 200 and len(_children(proc.pid)) == 2:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield {"base": base, "proc": proc, "log": log, "db": url}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _get(server, path: str, cookies: dict | None = None, **params) -> httpx.Response:
    """One GET over a new connection (either worker may accept it)."""
    return httpx.get(server["base"] + path, params=params, cookies=cookies, timeout=60,
                     headers={"connection": "close"})


def _worker(r: httpx.Response) -> int:
    return int(r.headers["x-limelight-worker"])


def _login(server, name: str, password: str) -> httpx.Response:
    """The login form: its page from one connection, the post from another."""
    page = _get(server, "/login")
    return httpx.post(server["base"] + "/login", cookies=dict(page.cookies), timeout=60,
                      data={"name": name, "password": password, "next": "/",
                            "csrf_token": CSRF.search(page.text).group(1)},
                      headers={"connection": "close"})


def _until_both(server, ask, seconds: float = 60) -> dict[int, list[httpx.Response]]:
    """Responses of ``ask()`` by worker, asked until both workers answered twice (for at most
    ``seconds``: a new worker answers once it has warmed up)."""
    by: dict[int, list[httpx.Response]] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        r = ask()
        by.setdefault(_worker(r), []).append(r)
        if len(by) >= 2 and all(len(v) >= 2 for v in by.values()):
            break
    return by


def test_requests_are_answered_by_both_workers(server):
    workers = _children(server["proc"].pid)
    assert len(workers) == 2 and server["proc"].pid not in workers
    by = _until_both(server, lambda: _get(server, "/api/search", q="information retrieval", model="dense"))
    assert set(by) == workers  # both answered, and each is a child of the master
    results = {w: [[d["docid"] for d in r.json()["results"]] for r in rs] for w, rs in by.items()}
    first = next(iter(results.values()))[0]
    assert first and all(x == first for rs in results.values() for x in rs)  # the same dense ranking


def test_a_session_made_by_one_worker_is_valid_on_the_other_and_ends_on_both(server):
    r = _login(server, "alice", PASSWORD)
    assert r.status_code == 303, r.text
    made_by, cookies = _worker(r), dict(r.cookies)
    by = _until_both(server, lambda: _get(server, "/api/me", cookies=cookies))
    assert len(by) == 2 and made_by in by
    assert {x.json()["user"] for rs in by.values() for x in rs} == {"alice"}
    doc = [rs for w, rs in _until_both(server, lambda: _get(server, "/documents/1", cookies=cookies)).items()]
    assert len(doc) == 2 and all(x.status_code == 200 and 'id="who"' in x.text for rs in doc for x in rs)
    # alice's session cookie names her document only: another's answers as an unknown id, on both
    assert {x.status_code for rs in _until_both(server, lambda: _get(server, "/documents/2", cookies=cookies)).values()
            for x in rs} == {404}
    page = _get(server, "/", cookies=cookies)
    out = httpx.post(server["base"] + "/logout", cookies=cookies, timeout=60, headers={"connection": "close"},
                     data={"csrf_token": CSRF.search(page.text).group(1)})
    assert out.status_code == 303
    by = _until_both(server, lambda: _get(server, "/api/me", cookies=cookies))  # the old cookie, kept
    assert len(by) == 2 and {x.json()["user"] for rs in by.values() for x in rs} == {None}


def test_failed_logins_on_either_worker_throttle_the_account(server):
    from limelight.service.accounts import MAX_FAILURES

    answered = []
    for _ in range(MAX_FAILURES):
        r = _login(server, "carol", "wrong password")
        assert r.status_code == 401
        answered.append(_worker(r))
    refused = _until_both(server, lambda: _login(server, "carol", PASSWORD))  # the right one, too
    assert len(refused) == 2 and {x.status_code for rs in refused.values() for x in rs} == {429}
    assert _login(server, "alice", PASSWORD).status_code == 303  # per account


def test_a_worker_that_dies_is_replaced(server):
    before = _children(server["proc"].pid)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        now = _children(server["proc"].pid)
        if len(now) == 2 and victim not in now:
            break
        assert time.monotonic() < deadline, f"no new worker: {server['log'].read_text()[-2000:]}"
        time.sleep(0.2)
    by = _until_both(server, lambda: _get(server, "/api/info"))
    assert set(by) == now and all(x.status_code == 200 for rs in by.values() for x in rs)
    assert f"worker {victim} was killed by SIGKILL: starting another" in server["log"].read_text()


def test_sigterm_stops_the_master_and_its_workers_and_keeps_their_access_log(server):
    """Last in this module: the server stops."""
    from limelight.service.accounts import Accounts

    proc = server["proc"]
    workers = _children(proc.pid)
    marks = [_get(server, "/api/info", marker=str(i)) for i in range(20)]
    assert {r.status_code for r in marks} == {422}  # an unknown parameter: answered, and logged
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, server["log"].read_text()[-2000:]
    assert not any(Path(f"/proc/{w}").exists() for w in workers)
    acc = Accounts(server["db"])
    try:
        rows = [r for r in acc.access_log(limit=10_000) if r["path"] == "/api/info" and r["status"] == 422]
    finally:
        acc.close()
    assert len(rows) == 20  # each worker wrote its pending rows when it stopped
