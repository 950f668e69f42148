"""Errors that describe user mistakes in one line (the CLI prints them without a traceback)."""

from __future__ import annotations

from os import PathLike


class LimelightError(Exception):
    """Base class of every error caused by user input (bad file, unknown id, bad setting)."""


class FormatError(LimelightError, ValueError):
    """A malformed input file; the message names the file and, where known, the line."""

    def __init__(self, path: str | PathLike | None, line: int | None, message: str):
        self.path = None if path is None else str(path)
        self.line = line
        where = self.path or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class UnknownIdError(LimelightError, KeyError):
    """An id that the collection, query set or index does not contain."""

    def __init__(self, kind: str, ident: str, where: str | None = None):
        self.kind = kind
        self.ident = ident
        msg = f"unknown {kind} id {ident!r}" + (f" in {where}" if where else "")
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class IndexMismatchError(LimelightError):
    """An index built with other settings (analyzer, model) than the ones requested."""
