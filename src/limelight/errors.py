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


# ---- the words of one-line messages ---------------------------------------------------------------
_SPELLED = frozenset({"http", "https", "html", "hnsw", "sql", "svg", "url", "tsv", "xml"})
"""Lower-case words read letter by letter (``an http system``, ``an svg``)."""


def with_article(word: str) -> str:
    """``word`` after its indefinite article, as it is read: ``an int``, ``a float``, ``an index``,
    ``an EQI model`` (an acronym by its first letter's name), ``an http system``, ``a uniform``."""
    head = (word.split() or [""])[0].strip("'\"`([")
    low = head.lower()
    if (head.isupper() and len(head) > 1) or low in _SPELLED:  # letter by letter: "an EQI", "an http"
        an = low[:1] in set("aefhilmnorsx")
    else:
        an = low[:1] in set("aeiou") and not low.startswith(("uni", "use", "usu", "uti", "one", "eu"))
    return f"{'an' if an else 'a'} {word}"


def plural(n: int | float, noun: str, nouns: str | None = None) -> str:
    """``n`` and its noun, in the singular for exactly one: ``1 system``, ``2 systems``, ``0 queries``
    (``nouns``: the plural when it is not ``noun + "s"``); counts are written with thousands
    separators."""
    many = nouns or (noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s")
    shown = f"{int(n):,}" if float(n).is_integer() else f"{n:,}"
    return f"{shown} {noun if n == 1 else many}"
