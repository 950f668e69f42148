"""A real PostgreSQL server for the portal's database tests: Debian's package (``make test``
installs it, ``make postgresql``), a cluster initialised in a temporary folder, listening on a
free loopback port, started once per test session and stopped at its end; and the
``db_url`` fixture that runs a test against SQLite and against it (a fresh database each).

initdb and the server refuse to run as root: as root they run as the ``postgres`` user the
package creates, in a folder handed to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

PG_ROOT = Path("/usr/lib/postgresql")


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (``None`` when none is installed)."""
    found = sorted(PG_ROOT.glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_server():
    """A running server: yields the URL of its ``postgres`` database (user ``limelight``, trust
    authentication on loopback only)."""
    bindir = pg_bin()
    if bindir is None:
        pytest.fail("PostgreSQL is not installed: `make postgresql` installs Debian's package "
                    "(make test does it)")
    root = Path(tempfile.mkdtemp(prefix="limelight-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "limelight", "--auth=trust", "-E", "UTF8",
            "--no-sync", "--no-instructions")
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off",
            "start")
        try:
            yield f"postgresql://limelight@127.0.0.1:{port}/postgres"
        finally:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url():
    """The session's PostgreSQL server (its ``postgres`` database's URL)."""
    with postgres_server() as url:
        yield url


def fresh_database(server_url: str) -> str:
    """A new empty database on the server: its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """An empty database: a SQLite file, or a new database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'portal.db'}"
    return fresh_database(request.getfixturevalue("postgres_url"))
