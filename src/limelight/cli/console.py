"""What the CLI prints besides plain lines: tables (rich), JSON rows and progress bars.

Progress bars come from ``limelight.progress`` (a transient rich bar on a terminal, plain lines on
stderr otherwise), which library code (the dense encoder, the audit) uses too; the commands take
them from here so that everything a command draws has one home. rich is imported on first use:
``limelight --help`` and the fast paths (``limelight evaluate``) do not load it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TextIO

import typer

from limelight.progress import progress_bar

__all__ = ["print_rows", "print_table", "progress_bar", "show_warning"]


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """A warning as a CLI user sees it: one line on stderr, ``warning: MESSAGE``, without the
    Python file, line number, category or source line that ``warnings`` prints by default
    (``limelight.cli.main`` installs it as ``warnings.showwarning``)."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    try:
        (file or sys.stderr).write(f"warning: {text}\n")
    except OSError:  # stderr closed: nowhere to warn (as warnings.showwarning does)
        pass


def print_table(rows: Sequence[dict], title: str, empty: str | None = None) -> None:
    """``rows`` as a rich table titled ``title`` on stdout, one column per key of the first row
    (floats with four decimals, long cells folded); ``empty`` (default ``"TITLE: none"``) when
    there are no rows."""
    from rich.console import Console
    from rich.table import Table

    if not rows:
        Console().print(f"{title}: none" if empty is None else empty)
        return
    t = Table(title=title)
    for c in rows[0]:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in r.values()))
    Console().print(t)


def print_rows(rows: Sequence[dict], json_out: bool, title: str) -> None:
    """``rows`` as one JSON array (``--json``) or as a table (``print_table``)."""
    if json_out:
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    print_table(rows, title)

