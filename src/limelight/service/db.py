"""The portal's database: users, API tokens, sessions, login attempts, the access log and the
server's settings (SQLAlchemy 2 ORM; the schema is Alembic's, ``limelight/service/migrations``).

``--db`` takes a SQLAlchemy URL: ``sqlite:///path/portal.db`` (the default kind: a file the
operator names; a bare path means the same) or ``postgresql://user@host/db`` (driven by psycopg
3). :func:`open_database` migrates the schema up to the newest revision, from an empty database
too, so every worker and every ``limelight users`` command sees the same tables. Times are
stored as naive UTC (:func:`utcnow`), the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import (
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, sessionmaker

from limelight.errors import LimelightError

ROLES = ("admin", "owner")
VERSION_TABLE = "limelight_schema_version"  # Alembic's revision table
MIGRATIONS = "limelight.service:migrations"  # Alembic's script location (package data)


def utcnow() -> dt.datetime:
    """Now, as the database stores it: naive UTC, to the second."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)


class Base(DeclarativeBase):
    """The portal's tables."""


class User(Base):
    """An account: ``admin`` (the platform team: everything) or ``owner`` of the documents whose
    owner key is ``owner``."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(10))
    owner: Mapped[str | None] = mapped_column(String(500))
    password_hash: Mapped[str | None] = mapped_column(String(300))  # argon2id; None: tokens only
    created_at: Mapped[dt.datetime] = mapped_column(DateTime())
    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user", cascade="all, delete-orphan",
                                                  passive_deletes=True)


class ApiToken(Base):
    """An API token: only its SHA-256 is kept (the token is shown once, when issued)."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime())
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime())
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime())
    last_used_at: Mapped[dt.datetime | None] = mapped_column(DateTime())
    user: Mapped[User] = relationship(back_populates="tokens")


class LoginSession(Base):
    """A logged-in browser: the signed cookie carries a random id, kept here as its SHA-256, so
    that logging out, expiry and removing the user end it in every worker."""

    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    sid_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime())
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime())
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime())


class LoginAttempt(Base):
    """A password tried at the login page (the throttle counts the failures of the last minute
    per account and per address)."""

    __tablename__ = "login_attempts"
    __table_args__ = (Index("ix_login_attempts_user_at", "user_name", "at"),
                      Index("ix_login_attempts_address_at", "address", "at"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(DateTime())
    user_name: Mapped[str] = mapped_column(String(100))
    address: Mapped[str] = mapped_column(String(100))
    ok: Mapped[bool] = mapped_column(Boolean())


class AccessLog(Base):
    """One request: who (user name, or none), what (method, path without its query string: a
    search's words are the searcher's), the answer's status, from where."""

    __tablename__ = "access_log"
    __table_args__ = (Index("ix_access_log_at", "at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(DateTime())
    user_name: Mapped[str | None] = mapped_column(String(100))
    method: Mapped[str] = mapped_column(String(10))
    path: Mapped[str] = mapped_column(String(2000))
    status: Mapped[int] = mapped_column(Integer)
    address: Mapped[str] = mapped_column(String(100))


class Setting(Base):
    """A server setting shared by every worker (the session cookies' signing key)."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text())


def database_url(url: str) -> str:
    """A SQLAlchemy URL from ``--db``: a bare path is a SQLite file; ``postgresql://`` is driven
    by psycopg 3 (SQLAlchemy's default for it is psycopg2)."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().absolute()}"
    try:
        u = make_url(url)
    except ArgumentError:
        raise LimelightError(f"--db {url!r}: not a database URL (sqlite:///FILE or "
                             "postgresql://USER@HOST/DB)") from None
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def shown_url(url: str) -> str:
    """``url`` without its password (for messages)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (``database_url``); SQLite files in WAL mode with a busy timeout, so
    that several workers and the ``users`` command share one file."""
    full = database_url(url)
    try:
        if full.startswith("sqlite"):
            db_file = make_url(full).database
            if db_file and db_file != ":memory:" and not Path(db_file).parent.is_dir():
                raise LimelightError(f"--db {url}: no such directory {Path(db_file).parent}")
            engine = create_engine(full, connect_args={"check_same_thread": False, "timeout": 30})

            @event.listens_for(engine, "connect")
            def _pragmas(conn, _record):
                cur = conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                # WAL's recommended durability: a commit is not synced (the WAL is, at each
                # checkpoint); a power cut may lose the last requests' access-log rows, never
                # corrupt the file. FULL fsynced every request's log row: ~30 ms a request.
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()
        else:
            engine = create_engine(full, pool_pre_ping=True)
    except (ArgumentError, NoSuchModuleError) as e:
        raise LimelightError(f"--db {shown_url(full)}: {e}") from None
    return engine


def migrate(engine: Engine) -> None:
    """Migrate the schema up to the newest revision (from an empty database: every table)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def open_database(url: str) -> sessionmaker:
    """A session factory over ``url`` with its schema migrated up; a database that cannot be
    reached or written is one ``LimelightError`` naming it (password hidden)."""
    engine = make_engine(url)
    try:
        migrate(engine)
    except SQLAlchemyError as e:
        engine.dispose()
        why = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        raise LimelightError(f"--db {shown_url(str(engine.url))}: {why}") from None
    return sessionmaker(engine, expire_on_commit=False)
