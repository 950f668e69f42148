"""The portal's database (issue 54): the schema migrates up from an empty database, and users,
passwords, API tokens, sessions, the login throttle and the access log behave the same on SQLite
and on a real PostgreSQL server (started on loopback for the session: tests/_postgres.py); the
``limelight users`` commands over it."""

from __future__ import annotations

import datetime as dt

import pytest
from _postgres import db_url, postgres_url  # noqa: F401 - fixtures
from sqlalchemy import inspect, select, text, update
from typer.testing import CliRunner

import limelight.service.db as db
from limelight.cli import app
from limelight.errors import LimelightError
from limelight.service.accounts import MAX_FAILURES, Accounts, Throttled, sha256


@pytest.fixture
def accounts(db_url):  # noqa: F811
    a = Accounts(db_url)
    yield a
    a.close()


def test_schema_migrates_up_from_an_empty_database(db_url):  # noqa: F811
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = db.make_engine(db_url)
    assert inspect(engine).get_table_names() == []
    db.migrate(engine)
    db.migrate(engine)  # at the newest revision: nothing to do
    tables = set(inspect(engine).get_table_names())
    assert tables == {"users", "api_tokens", "sessions", "login_attempts", "access_log", "settings",
                      db.VERSION_TABLE}
    with engine.connect() as conn:
        assert conn.execute(text(f"SELECT version_num FROM {db.VERSION_TABLE}")).scalar() == "0001"
        # the migrations build exactly the ORM's tables (columns, types, indexes, keys)
        ctx = MigrationContext.configure(conn, opts={"version_table": db.VERSION_TABLE})
        assert compare_metadata(ctx, db.Base.metadata) == []
    engine.dispose()


def test_users_passwords_and_the_throttle(accounts):
    a = accounts.add_user("alice", "owner", "Warner Bros.", password="correct horse")
    assert (a.role, a.owner) == ("owner", "Warner Bros.")
    assert accounts.add_user("bob", "owner").owner == "bob"  # the owner key defaults to the name
    accounts.add_user("root", "admin", password="rootroot")
    with pytest.raises(LimelightError, match="already exists"):
        accounts.add_user("alice", "owner")
    with pytest.raises(LimelightError, match="--owns is for owners"):
        accounts.add_user("root2", "admin", "x")
    with pytest.raises(LimelightError, match="role"):
        accounts.add_user("eve", "superuser")
    with pytest.raises(LimelightError, match="shorter"):
        accounts.add_user("eve", "owner", password="short")
    with accounts.Session() as s:  # argon2id at rest, never the password
        stored = s.scalar(select(db.User.password_hash).where(db.User.name == "alice"))
    assert stored.startswith("$argon2id$") and "correct horse" not in stored
    assert accounts.check_password("alice", "correct horse", "10.0.0.1") == a
    assert accounts.check_password("bob", "anything at all", "10.0.0.1") is None  # no password set
    for _ in range(MAX_FAILURES):
        assert accounts.check_password("alice", "wrong password", "10.0.0.2") is None
    with pytest.raises(Throttled) as e:  # the 6th within the minute: refused, even the right one
        accounts.check_password("alice", "correct horse", "10.0.0.3")
    assert e.value.retry_after == 60
    assert accounts.check_password("root", "rootroot", "10.0.0.2") is not None  # per account
    with accounts.Session.begin() as s:  # a minute later the account may try again
        s.execute(update(db.LoginAttempt).values(at=db.utcnow() - dt.timedelta(seconds=61)))
    assert accounts.check_password("alice", "correct horse", "10.0.0.3") == a
    accounts.set_password("alice", "battery staple")
    assert accounts.check_password("alice", "battery staple", "10.0.0.1") == a
    assert [u["name"] for u in accounts.list_users()] == ["alice", "bob", "root"]
    accounts.remove_user("bob")
    assert accounts.get("bob") is None and [u["name"] for u in accounts.list_users()] == ["alice", "root"]


def test_tokens_are_hashed_shown_once_expire_and_revoke(accounts):
    accounts.add_user("alice", "owner")
    token, tid, expires = accounts.issue_token("alice", days=30, label="ci")
    assert token.startswith("ll_") and len(token) > 40
    assert abs((expires - db.utcnow()) - dt.timedelta(days=30)) < dt.timedelta(minutes=1)
    with accounts.Session() as s:
        row = s.get(db.ApiToken, tid)
        assert row.token_hash == sha256(token) and token not in repr(vars(row))
    assert accounts.token_account(token).name == "alice"
    assert accounts.token_account(token + "x") is None
    other, oid, _ = accounts.issue_token("alice")
    assert accounts.revoke("alice", tid) == 1
    assert accounts.token_account(token) is None and accounts.token_account(other).name == "alice"
    with accounts.Session.begin() as s:  # expired a second ago
        s.execute(update(db.ApiToken).where(db.ApiToken.id == oid).values(
            expires_at=db.utcnow() - dt.timedelta(seconds=1)))
    assert accounts.token_account(other) is None
    with pytest.raises(LimelightError, match="no token 999"):
        accounts.revoke("alice", 999)
    third, _, _ = accounts.issue_token("alice")
    accounts.remove_user("alice")  # its tokens go with it
    assert accounts.token_account(third) is None


def test_sessions_end_on_logout_expiry_and_password_change(accounts):
    a = accounts.add_user("alice", "owner", password="correct horse")
    sid = accounts.open_session(a, hours=1)
    with accounts.Session() as s:
        assert s.scalar(select(db.LoginSession.sid_hash)) == sha256(sid)
    assert accounts.session_account(sid) == a
    accounts.close_session(sid)
    assert accounts.session_account(sid) is None
    sid = accounts.open_session(a, hours=1)
    with accounts.Session.begin() as s:
        s.execute(update(db.LoginSession).values(expires_at=db.utcnow() - dt.timedelta(seconds=1)))
    assert accounts.session_account(sid) is None
    sid = accounts.open_session(a, hours=1)
    accounts.set_password("alice", "another password")
    assert accounts.session_account(sid) is None


def test_access_log_and_the_shared_session_key(accounts, db_url):  # noqa: F811
    accounts.log_access([{"user_name": "alice", "method": "GET", "path": "/documents/x", "status": 200,
                          "address": "10.0.0.1"}, {"user_name": None, "method": "GET", "path": "/",
                                                   "status": 200, "address": "10.0.0.2"}])
    log = accounts.access_log()
    assert [(r["user_name"], r["path"]) for r in log] == [(None, "/"), ("alice", "/documents/x")]
    other = Accounts(db_url)  # a second worker signs with the same key
    try:
        assert other.secret_key() == accounts.secret_key() and len(accounts.secret_key()) >= 48
    finally:
        other.close()


def test_access_log_is_written_in_batches_and_none_lost_at_close(db_url):  # noqa: F811
    """Requests are logged without a commit each (the portal's per-request cost): LOG_BATCH rows
    take one commit; rows still pending are written when the server closes its accounts."""
    from sqlalchemy import event

    from limelight.service.accounts import LOG_BATCH

    a = Accounts(db_url)
    commits = []
    event.listen(a.Session.kw["bind"], "commit", lambda conn: commits.append(1))
    row = {"user_name": "bob", "method": "GET", "path": "/documents/y", "status": 200, "address": "10.0.0.3"}
    for _ in range(LOG_BATCH + 5):
        a.log_access([row])
    assert len(commits) == 1
    a.close()  # the 5 pending rows are written, not lost
    b = Accounts(db_url)
    try:
        assert len(b.access_log(limit=LOG_BATCH + 10)) == LOG_BATCH + 5
    finally:
        b.close()


def test_throttle_and_logout_hold_across_workers(accounts, db_url):  # noqa: F811
    """Two workers (two Accounts on one database): failed logins counted in either throttle the
    account in both; a session ended in one is refused by the other on its next request."""
    other = Accounts(db_url)
    try:
        a = accounts.add_user("carol", "owner", password="correct horse")
        for i in range(MAX_FAILURES):
            assert (accounts, other)[i % 2].check_password("carol", "wrong password", "10.0.0.9") is None
        for worker in (accounts, other):
            with pytest.raises(Throttled):
                worker.check_password("carol", "correct horse", "10.0.0.8")
        sid = other.open_session(a)
        assert accounts.session_account(sid) == a
        other.close_session(sid)
        assert accounts.session_account(sid) is None
    finally:
        other.close()


def test_users_commands(db_url, monkeypatch):  # noqa: F811
    runner = CliRunner()
    monkeypatch.setenv("LIMELIGHT_PASSWORD", "correct horse")
    r = runner.invoke(app, ["users", "add", "alice", "--role", "owner", "--owns", "Warner Bros.", "--db", db_url])
    assert r.exit_code == 0 and "added alice (owner, owner Warner Bros.)" in r.output, r.output
    monkeypatch.delenv("LIMELIGHT_PASSWORD")
    r = runner.invoke(app, ["users", "add", "root", "--role", "admin", "--db", db_url],
                      input="rootpassword\nrootpassword\n")  # the prompt, hidden, asked twice
    assert r.exit_code == 0 and "rootpassword" not in r.output, r.output
    r = runner.invoke(app, ["users", "token", "alice", "--days", "7", "--db", db_url])
    assert r.exit_code == 0, r.output
    token = r.output.strip().splitlines()[-1]  # alone on the last line
    accounts = Accounts(db_url)
    try:
        assert accounts.token_account(token).name == "alice"
        assert accounts.check_password("root", "rootpassword", "127.0.0.1").role == "admin"
        r = runner.invoke(app, ["users", "list", "--tokens", "--db", db_url])
        assert r.exit_code == 0 and "alice\towner\tWarner Bros.\tpassword\t1 live tokens" in r.output
        assert token not in r.output
        r = runner.invoke(app, ["users", "revoke", "alice", "--db", db_url])
        assert r.exit_code == 0 and "revoked 1 token of alice" in r.output
        assert accounts.token_account(token) is None
        r = runner.invoke(app, ["users", "passwd", "root", "--db", db_url], input="new password\nnew password\n")
        assert r.exit_code == 0 and accounts.check_password("root", "new password", "127.0.0.1")
        r = runner.invoke(app, ["users", "remove", "alice", "--db", db_url])
        assert r.exit_code == 0 and accounts.get("alice") is None
        r = runner.invoke(app, ["users", "remove", "alice", "--db", db_url])
        assert isinstance(r.exception, LimelightError) and "no user 'alice'" in str(r.exception)
    finally:
        accounts.close()


def test_a_database_that_cannot_be_opened_is_one_line(tmp_path):
    with pytest.raises(LimelightError, match="no such directory"):
        Accounts(f"sqlite:///{tmp_path / 'missing' / 'portal.db'}")
    with pytest.raises(LimelightError, match=r"^--db postgresql\+psycopg://u:\*\*\*@127\.0\.0\.1:1/x: "):
        Accounts("postgresql://u:secret@127.0.0.1:1/x")
    with pytest.raises(LimelightError, match="^--db nonsense://: Can't load plugin"):
        Accounts("nonsense://")
