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


def _cell(v, decimals: int = 4) -> str:
    return f"{v:.{decimals}f}" if isinstance(v, float) else str(v)


def wrap_at_words(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters, broken at spaces and after ``- / _ :``
    (``library-automation`` → ``library-`` / ``automation``), never inside a word that fits on a
    line (one longer than ``width`` is cut, as nothing else can be done)."""
    import re

    lines: list[str] = []
    cur = ""
    for piece in re.findall(r"[^\s\-/_:]*[\-/_:]+|[^\s\-/_:]+|\s+", text):
        if piece.isspace():
            cur += " " if cur else ""
            continue
        if cur and len(cur) + len(piece) > width:
            lines.append(cur.rstrip())
            cur = ""
        while len(piece) > width:
            lines.append(piece[:width])
            piece = piece[width:]
        cur += piece
    if cur.strip() or not lines:
        lines.append(cur.rstrip())
    return "\n".join(lines)


def print_table(rows: Sequence[dict], title: str, empty: str | None = None, decimals: int = 4) -> None:
    """``rows`` as a rich table titled ``title`` on stdout, one column per key of the first row
    (floats with ``decimals`` decimals, long cells folded); ``empty`` (default ``"TITLE: none"``) when
    there are no rows. When every column but the first holds numbers, the numbers are never
    broken (their headers a word a line) and the first column (the labels) takes the width
    left, its labels wrapped at word boundaries (``wrap_at_words``)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not rows:
        console.print(f"{title}: none" if empty is None else empty)
        return
    cols = list(rows[0])
    cells = [[_cell(v, decimals) for v in r.values()] for r in rows]
    numeric = len(cols) > 1 and all(isinstance(r[c], int | float) and not isinstance(r[c], bool)
                                    for r in rows for c in cols[1:])
    t = Table(title=title)
    if numeric:  # each header a word a line; the numbers as they are; the labels the rest
        heads = [str(c).replace(" ", "\n") for c in cols]
        widths = [max(*map(len, h.split("\n")), *(len(row[i]) for row in cells)) for i, h in enumerate(heads)]
        label = max(console.width - sum(w + 3 for w in widths[1:]) - 4, 8)
        t.add_column(str(cols[0]), overflow="fold", max_width=label)
        for h in heads[1:]:
            t.add_column(h, justify="right", no_wrap=True)
        for row in cells:
            t.add_row(wrap_at_words(row[0], label), *row[1:])
    else:
        for c in cols:
            t.add_column(c, overflow="fold")
        for row in cells:
            t.add_row(*row)
    console.print(t)


def print_rows(rows: Sequence[dict], json_out: bool, title: str) -> None:
    """``rows`` as one JSON array (``--json``) or as a table (``print_table``)."""
    if json_out:
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    print_table(rows, title)

