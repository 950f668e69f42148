"""Accounts of the portal: users, passwords, API tokens, login sessions, the login throttle and
the access log, over the database of :mod:`limelight.service.db`.

- Passwords are hashed with argon2id (argon2-cffi's defaults, RFC 9106's second recommended
  setting); a user may have none (API tokens only).
- API tokens are 256 random bits (``ll_`` and 43 URL-safe characters); only their SHA-256 is
  stored (a token of that entropy needs no slow hash), so a token is shown once, when issued. A
  token has an expiry and can be revoked; either refuses it on its next request.
- A browser session is a random id in a signed cookie, stored as its SHA-256 with an expiry:
  logging out, expiry, and removing the user end it in every worker.
- Logins are throttled: after :data:`MAX_FAILURES` failed passwords for one account within
  :data:`WINDOW` (or :data:`MAX_ADDRESS_FAILURES` from one address), the next attempt is
  refused (:class:`Throttled`: HTTP 429) without checking the password.
- The access log is written in batches (:data:`LOG_BATCH` rows or :data:`LOG_SECONDS` old, one
  commit each, instead of one commit per request); reading it, and closing, write what is
  pending first, so a server stopped normally loses none.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select

import limelight.service.db as db
from limelight.errors import LimelightError

TOKEN_PREFIX = "ll_"
TOKEN_DAYS = 90  # default lifetime of an API token
SESSION_HOURS = 8  # default lifetime of a login session
WINDOW = dt.timedelta(minutes=1)  # the throttle's window
MAX_FAILURES = 5  # failed passwords per account within WINDOW; the next attempt: 429
MAX_ADDRESS_FAILURES = 30  # failed passwords from one address within WINDOW
MIN_PASSWORD = 8  # characters
LOG_BATCH = 200  # access-log rows kept before one commit writes them
LOG_SECONDS = 1.0  # ... or once the oldest pending row is this old (checked at the next request)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+\-]{0,99}$")


class Throttled(LimelightError):
    """Too many failed logins: retry after ``retry_after`` seconds (HTTP 429)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Account:
    """A user as the server sees it (no secrets)."""

    id: int
    name: str
    role: str
    owner: str | None


def sha256(text: str) -> str:
    """The hex SHA-256 of ``text`` (tokens and session ids at rest)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _account(u: db.User) -> Account:
    return Account(u.id, u.name, u.role, u.owner)


class Accounts:
    """The accounts in the database at ``url`` (migrated up when opened)."""

    def __init__(self, url: str):
        from argon2 import PasswordHasher

        self.url = url
        self.Session = db.open_database(url)
        self.hasher = PasswordHasher()
        self._dummy = self.hasher.hash(secrets.token_hex(16))  # an unknown user costs one verify too
        self._log_lock = threading.Lock()
        self._pending: list[dict] = []  # access-log rows not yet written
        self._pending_since = 0.0

    def close(self) -> None:
        """Write the pending access-log rows, then close the database's connections."""
        self.flush_access_log()
        self.dispose()

    def dispose(self) -> None:
        """Close the database's pooled connections (new ones open when next needed): before the
        server forks its workers, which must not share a connection."""
        self.Session.kw["bind"].dispose()

    # ---- users -----------------------------------------------------------------------------------
    def add_user(self, name: str, role: str, owner: str | None = None, password: str | None = None) -> Account:
        """A new user: ``admin``, or ``owner`` of the documents of owner key ``owner`` (default:
        its name)."""
        if not NAME.match(name):
            raise LimelightError(f"user name {name!r}: 1-100 letters, digits or . _ @ + - "
                                 "(starting with a letter or digit)")
        if role not in db.ROLES:
            raise LimelightError(f"role {role!r}: one of {', '.join(db.ROLES)}")
        if role == "admin" and owner is not None:
            raise LimelightError("an admin sees every document: --owns is for owners")
        owner = (owner or name) if role == "owner" else None
        with self.Session.begin() as s:
            if s.scalar(select(db.User.id).where(db.User.name == name)) is not None:
                raise LimelightError(f"user {name!r} already exists")
            u = db.User(name=name, role=role, owner=owner, created_at=db.utcnow(),
                        password_hash=self._hash(password) if password is not None else None)
            s.add(u)
            s.flush()
            return _account(u)

    def add_owners(self, keys: list[str]) -> dict[str, str]:
        """One owner account per owner key, without a password (set one with ``set_password``,
        or issue a token), in one transaction: the user name is the key with every run of
        characters a name may not hold turned into ``-`` (``Warner Bros.`` → ``Warner-Bros.``).
        Keys whose name is already taken (or empty) are skipped. Returns name → key of those
        added."""
        import re

        now = db.utcnow()
        with self.Session.begin() as s:
            taken = set(s.scalars(select(db.User.name)))
            new: dict[str, str] = {}
            for key in dict.fromkeys(keys):  # a one-off command, not a request's path
                name = re.sub(r"[^A-Za-z0-9._@+-]+", "-", key).lstrip("-._@+").rstrip("-")[:100]
                if name and NAME.match(name) and name not in taken and name not in new:
                    new[name] = key
            s.add_all([db.User(name=n, role="owner", owner=k, created_at=now, password_hash=None)
                       for n, k in new.items()])
        return new

    def _hash(self, password: str) -> str:
        if len(password) < MIN_PASSWORD:
            raise LimelightError(f"the password is shorter than {MIN_PASSWORD} characters")
        return self.hasher.hash(password)

    def _user(self, s, name: str) -> db.User:
        u = s.scalar(select(db.User).where(db.User.name == name))
        if u is None:
            raise LimelightError(f"no user {name!r} in {db.shown_url(self.url)}")
        return u

    def get(self, name: str) -> Account | None:
        """The user called ``name`` (``None`` when there is none)."""
        with self.Session() as s:
            u = s.scalar(select(db.User).where(db.User.name == name))
            return _account(u) if u is not None else None

    def remove_user(self, name: str) -> None:
        """Remove a user with its tokens and sessions."""
        with self.Session.begin() as s:
            s.delete(self._user(s, name))

    def set_password(self, name: str, password: str) -> None:
        """Set (or replace) a user's password; its sessions end."""
        with self.Session.begin() as s:
            u = self._user(s, name)
            u.password_hash = self._hash(password)
            s.execute(delete(db.LoginSession).where(db.LoginSession.user_id == u.id))

    def list_users(self) -> list[dict]:
        """Every user: name, role, owner key, whether it has a password, its live tokens."""
        now = db.utcnow()
        with self.Session() as s:
            live = dict(s.execute(select(db.ApiToken.user_id, func.count()).where(
                db.ApiToken.revoked_at.is_(None), db.ApiToken.expires_at > now).group_by(db.ApiToken.user_id)).all())
            return [{"name": u.name, "role": u.role, "owner": u.owner, "password": u.password_hash is not None,
                     "tokens": int(live.get(u.id, 0)), "created": u.created_at.isoformat(sep=" ")}
                    for u in s.scalars(select(db.User).order_by(db.User.name))]

    def tokens(self, name: str) -> list[dict]:
        """A user's tokens (id, label, created, expires, revoked, last used): never the tokens."""
        with self.Session() as s:
            u = self._user(s, name)
            return [{"id": t.id, "label": t.label, "created": t.created_at, "expires": t.expires_at,
                     "revoked": t.revoked_at, "last_used": t.last_used_at}
                    for t in sorted(u.tokens, key=lambda t: t.id)]

    # ---- API tokens ------------------------------------------------------------------------------
    def issue_token(self, name: str, days: float = TOKEN_DAYS, label: str | None = None) -> tuple[str, int, dt.datetime]:
        """A new API token for ``name``: ``(token, id, expires_at)``; the token is not kept."""
        if not days > 0:
            raise LimelightError(f"a token's lifetime must be positive, got {days} days")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = db.utcnow()
        expires = now + dt.timedelta(days=days)
        with self.Session.begin() as s:
            u = self._user(s, name)
            t = db.ApiToken(user_id=u.id, token_hash=sha256(token), label=label, created_at=now, expires_at=expires)
            s.add(t)
            s.flush()
            return token, t.id, expires

    def revoke(self, name: str, token_id: int | None = None) -> int:
        """Revoke one of ``name``'s tokens (``token_id``) or all of them; how many were live."""
        now = db.utcnow()
        with self.Session.begin() as s:
            u = self._user(s, name)
            live = [t for t in u.tokens if t.revoked_at is None and (token_id is None or t.id == token_id)]
            if token_id is not None and not any(t.id == token_id for t in u.tokens):
                raise LimelightError(f"user {name!r} has no token {token_id}")
            for t in live:
                t.revoked_at = now
            return len(live)

    def token_account(self, token: str) -> Account | None:
        """The user of a live token (``None``: unknown, revoked or expired)."""
        now = db.utcnow()
        with self.Session.begin() as s:
            t = s.scalar(select(db.ApiToken).where(db.ApiToken.token_hash == sha256(token)))
            if t is None or t.revoked_at is not None or t.expires_at <= now:
                return None
            if t.last_used_at is None or now - t.last_used_at >= dt.timedelta(minutes=1):
                t.last_used_at = now  # at most one write a minute per token
            return _account(t.user)

    # ---- passwords and sessions ------------------------------------------------------------------
    def check_password(self, name: str, password: str, address: str) -> Account | None:
        """The user when ``password`` is ``name``'s, else ``None``; ``Throttled`` without
        checking when the account (or the address) failed too often within the last minute."""
        from argon2.exceptions import InvalidHashError, VerificationError

        now = db.utcnow()
        since = now - WINDOW
        with self.Session.begin() as s:
            s.execute(delete(db.LoginAttempt).where(db.LoginAttempt.at < now - dt.timedelta(days=1)))
            failed = select(func.count()).select_from(db.LoginAttempt).where(
                db.LoginAttempt.ok.is_(False), db.LoginAttempt.at >= since)
            if s.scalar(failed.where(db.LoginAttempt.user_name == name)) >= MAX_FAILURES:
                raise Throttled(f"too many failed logins for {name!r}: wait a minute", int(WINDOW.total_seconds()))
            if s.scalar(failed.where(db.LoginAttempt.address == address)) >= MAX_ADDRESS_FAILURES:
                raise Throttled("too many failed logins from this address: wait a minute",
                                int(WINDOW.total_seconds()))
        with self.Session() as s:
            u = s.scalar(select(db.User).where(db.User.name == name))
            stored = u.password_hash if u is not None and u.password_hash else self._dummy
        try:
            ok = self.hasher.verify(stored, password) and u is not None and u.password_hash is not None
        except (VerificationError, InvalidHashError):
            ok = False
        with self.Session.begin() as s:
            s.add(db.LoginAttempt(at=now, user_name=name[:100], address=address[:100], ok=ok))
        return _account(u) if ok else None

    def open_session(self, account: Account, hours: float = SESSION_HOURS) -> str:
        """A new login session for ``account``: its id (for the signed cookie; kept hashed)."""
        sid = secrets.token_urlsafe(32)
        now = db.utcnow()
        with self.Session.begin() as s:
            s.add(db.LoginSession(user_id=account.id, sid_hash=sha256(sid), created_at=now,
                                  expires_at=now + dt.timedelta(hours=hours)))
        return sid

    def session_account(self, sid: str) -> Account | None:
        """The user of a live session (``None``: unknown, ended or expired): one indexed query
        on every request (no cache, so that logging out or expiry holds on the next one)."""
        u, ls = db.User, db.LoginSession
        with self.Session() as s:
            row = s.execute(select(u.id, u.name, u.role, u.owner).join(ls, ls.user_id == u.id).where(
                ls.sid_hash == sha256(sid), ls.revoked_at.is_(None), ls.expires_at > db.utcnow())).first()
        return None if row is None else Account(*row)

    def close_session(self, sid: str) -> None:
        """End a login session (logging out)."""
        with self.Session.begin() as s:
            for ls in s.scalars(select(db.LoginSession).where(db.LoginSession.sid_hash == sha256(sid))):
                ls.revoked_at = db.utcnow()

    # ---- the server's settings and the access log --------------------------------------------------
    def secret_key(self) -> str:
        """The key that signs session cookies: made once, kept in the database, so that every
        worker (and a restarted server) accepts the same cookies."""
        with self.Session.begin() as s:
            row = s.get(db.Setting, "session_key")
            if row is None:
                row = db.Setting(key="session_key", value=secrets.token_urlsafe(48))
                s.add(row)
            return row.value

    def log_access(self, entries: list[dict]) -> None:
        """Append requests to the access log (``user_name, method, path, status, address``; ``at``
        defaults to now): kept, and written in one commit once :data:`LOG_BATCH` rows are pending
        or the oldest is :data:`LOG_SECONDS` old (:meth:`flush_access_log`, :meth:`close`)."""
        if not entries:
            return
        now = db.utcnow()
        rows = [{"at": now, **e} for e in entries]
        with self._log_lock:
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.extend(rows)
            due = len(self._pending) >= LOG_BATCH or time.monotonic() - self._pending_since >= LOG_SECONDS
        if due:
            self.flush_access_log()

    def flush_access_log(self) -> int:
        """Write the pending access-log rows in one commit; how many."""
        with self._log_lock:
            rows, self._pending = self._pending, []
        if rows:
            with self.Session.begin() as s:
                s.execute(insert(db.AccessLog), rows)
        return len(rows)

    def access_log(self, limit: int = 100) -> list[dict]:
        """The latest requests, newest first (this process's pending rows written first)."""
        self.flush_access_log()
        with self.Session() as s:
            rows = s.scalars(select(db.AccessLog).order_by(db.AccessLog.id.desc()).limit(limit))
            return [{"at": r.at, "user_name": r.user_name, "method": r.method, "path": r.path,
                     "status": r.status, "address": r.address} for r in rows]
