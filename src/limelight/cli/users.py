"""``limelight users``: the portal's accounts (``limelight serve --db URL``).

Passwords never come as an argument in clear: from the environment variable
``LIMELIGHT_PASSWORD`` when set, else from a prompt (hidden, asked twice). API tokens are shown
once, when issued, alone on the last line of the output (``users token``).
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from limelight.errors import LimelightError

app = typer.Typer(help="The portal's accounts: add, list, remove users, set passwords, issue and "
                       "revoke API tokens (limelight serve --db URL).", no_args_is_help=True)

PASSWORD_ENV = "LIMELIGHT_PASSWORD"
DB = typer.Option(..., "--db", envvar="LIMELIGHT_DB",
                  help="the portal's database: sqlite:///FILE (or a path), postgresql://USER@HOST/DB")


def _accounts(db: str):
    from limelight.service.accounts import Accounts

    return Accounts(db)


def _password(name: str) -> str:
    if PASSWORD_ENV in os.environ:
        return os.environ[PASSWORD_ENV]
    return typer.prompt(f"password for {name}", hide_input=True, confirmation_prompt=True)


@app.command("add")
def add(name: str = typer.Argument(..., help="the user name"),
        role: str = typer.Option(..., "--role", help="admin (everything) or owner (its own documents)"),
        owns: str | None = typer.Option(None, "--owns", help="an owner's owner key: the value of the "
                                        "--owners field, or the owner column of the --owners TSV "
                                        "(default: the user name)"),
        no_password: bool = typer.Option(False, "--no-password", help="no password: API tokens only"),
        db: str = DB) -> None:
    """Add a user; its password from $LIMELIGHT_PASSWORD or a prompt."""
    accounts = _accounts(db)
    try:
        if accounts.get(name) is not None:  # before asking for a password
            raise LimelightError(f"user {name!r} already exists")
        a = accounts.add_user(name, role, owns, None if no_password else _password(name))
    finally:
        accounts.close()
    typer.echo(f"added {a.name} ({a.role}{f', owner {a.owner}' if a.owner else ''})")


@app.command("add-owners")
def add_owners(audit: Path = typer.Option(..., "--audit", help="the audit served (limelight audit --out DIR)"),
               owners: str = typer.Option(..., "--owners", help="field:NAME or a TSV of OWNER<TAB>ID-or-pattern, "
                                          "as limelight serve takes it"),
               db: str = DB) -> None:
    """One owner account per owner key of the audit's documents (named after the key, no password:
    set one with users passwd, or issue a token); keys already taken are skipped."""
    from limelight.audit import AuditDir
    from limelight.retrieval.index_dir import load_docs
    from limelight.service.policy import Ownership

    ad = AuditDir(audit)
    ad.manifest  # noqa: B018 - a one-line error for a directory that is no audit
    docs = load_docs(ad.index_dir)
    keys = Ownership.from_spec(owners, docs.ids, docs.fields).owners
    accounts = _accounts(db)
    try:
        added = accounts.add_owners(keys)
    finally:
        accounts.close()
    example = next(iter(added), None)
    skipped = len(keys) - len(added)
    typer.echo(f"added {len(added):,} owner accounts for the {len(keys):,} owner keys of {owners}"
               + (f" ({skipped:,} already had one)" if skipped else "")
               + (f"; to log in as one, give it a password: limelight users passwd {example}" if example else ""))


@app.command("passwd")
def passwd(name: str = typer.Argument(..., help="the user name"), db: str = DB) -> None:
    """Set a user's password (from $LIMELIGHT_PASSWORD or a prompt); its sessions end."""
    accounts = _accounts(db)
    try:
        if accounts.get(name) is None:  # before asking for a password
            raise LimelightError(f"no user {name!r}")
        accounts.set_password(name, _password(name))
    finally:
        accounts.close()
    typer.echo(f"password of {name} set")


@app.command("token")
def token(name: str = typer.Argument(..., help="the user name"),
          days: float = typer.Option(90.0, "--days", min=0.001, help="days until the token expires"),
          label: str | None = typer.Option(None, "--label", help="what the token is for"),
          db: str = DB) -> None:
    """Issue an API token (Authorization: Bearer TOKEN); it is shown once, on the last line."""
    accounts = _accounts(db)
    try:
        tok, tid, expires = accounts.issue_token(name, days, label)
    finally:
        accounts.close()
    typer.echo(f"token {tid} for {name}, expires {expires.isoformat(sep=' ')} UTC; shown once, keep it:")
    typer.echo(tok)


@app.command("revoke")
def revoke(name: str = typer.Argument(..., help="the user name"),
           token_id: int | None = typer.Option(None, "--token", help="the token's id (users list --tokens); "
                                               "default: every token of the user"),
           db: str = DB) -> None:
    """Revoke a user's API token (or all of them): refused from its next request."""
    accounts = _accounts(db)
    try:
        n = accounts.revoke(name, token_id)
    finally:
        accounts.close()
    typer.echo(f"revoked {n} token{'s' if n != 1 else ''} of {name}")


@app.command("remove")
def remove(name: str = typer.Argument(..., help="the user name"), db: str = DB) -> None:
    """Remove a user with its tokens and sessions."""
    accounts = _accounts(db)
    try:
        accounts.remove_user(name)
    finally:
        accounts.close()
    typer.echo(f"removed {name}")


@app.command("list")
def list_users(tokens: bool = typer.Option(False, "--tokens", help="each user's tokens too (never the tokens "
                                           "themselves: id, label, dates)"),
               db: str = DB) -> None:
    """The users: name, role, owner key, password set, live tokens."""
    accounts = _accounts(db)
    try:
        users = accounts.list_users()
        for u in users:
            typer.echo(f"{u['name']}\t{u['role']}\t{u['owner'] or '-'}\t"
                       f"{'password' if u['password'] else 'no password'}\t{u['tokens']} live tokens")
            if tokens:
                for t in accounts.tokens(u["name"]):
                    state = "revoked" if t["revoked"] else f"expires {t['expires']:%Y-%m-%d %H:%M}"
                    typer.echo(f"  token {t['id']}\t{t['label'] or '-'}\t{state}")
    finally:
        accounts.close()
    if not users:
        typer.echo("no users", err=True)
