"""Query logs that say who searched and when: a searcher (or session) column and a timestamp
column beside the query, as in the AOL log (``AnonID  Query  QueryTime  ItemRank  ClickURL``).

Such a log is read into its distinct normalised queries (as ``load_query_log`` reads the shared
log) with, per query, its weight o_q (times issued, every line), ``n_searchers`` (distinct
searchers who issued it: the count the portal's k rule uses when present) and the first and last
time it was issued. ``since``/``until`` keep only the lines of one period (two periods of one
log can then be audited and compared).

Recognised headers (case-insensitive, tab-separated): the AOL layout, or any header with a
``query`` column and a ``searcher``/``session``/``user``/``anonid`` column, optionally a
``time``/``timestamp``/``querytime`` column. A bad line (too few fields, an unreadable time)
is one error naming the file and line.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from limelight._io import open_text
from limelight.data.ids import IdMap
from limelight.data.queries import Queries, normalise_texts
from limelight.errors import LimelightError

SEARCHER_COLUMNS = ("anonid", "searcher", "session", "sessionid", "session_id", "user", "user_id",
                    "userid")
TIME_COLUMNS = ("querytime", "time", "timestamp", "ts")
QUERY_COLUMNS = ("query", "text", "querytext")


def log_columns(path: str | os.PathLike) -> dict[str, int] | None:
    """The positions of a log's query, searcher and time columns from its header line (keys
    ``query``, ``searcher``, optionally ``time``), or None when the header names no searcher."""
    try:
        with open_text(path, "rb") as f:
            first = f.readline(1 << 16).decode("utf-8", errors="replace")
    except (OSError, EOFError):
        return None
    cols = [c.strip().lower() for c in (first.splitlines() or [""])[0].split("\t")]

    def pos(names):
        return next((i for i, c in enumerate(cols) if c in names), None)

    q, s, t = pos(QUERY_COLUMNS), pos(SEARCHER_COLUMNS), pos(TIME_COLUMNS)
    if q is None or s is None:
        return None
    out = {"query": q, "searcher": s, "n": len(cols)}
    if t is not None:
        out["time"] = t
    return out


def _time(value: str, path: Path, line: int) -> np.datetime64:
    v = value.strip()
    try:
        if v.replace(".", "", 1).isdigit():  # seconds since the epoch
            return np.datetime64(int(float(v)), "s")
        return np.datetime64(v.replace(" ", "T"), "s")
    except ValueError:
        raise LimelightError(f"{path}:{line}: unreadable query time {value!r}") from None


def _read_lines(p: Path, since: str | None, until: str | None):
    """The lines of one period of searcher log ``p``: texts, searchers, times (empty without a
    time column), line numbers, and whether the log has a time column."""
    cols = log_columns(p)
    if cols is None:
        raise LimelightError(f"{p}:1: not a searcher log (its header names no query and "
                             f"searcher columns: one of {', '.join(SEARCHER_COLUMNS)})")
    if (since or until) and "time" not in cols:
        raise LimelightError(f"{p}:1: --since/--until need a time column "
                             f"({', '.join(TIME_COLUMNS)})")
    lo = np.datetime64(since.replace(" ", "T"), "s") if since else None
    hi = np.datetime64(until.replace(" ", "T"), "s") if until else None
    qi, si, ti = cols["query"], cols["searcher"], cols.get("time")
    need = max(qi, si, -1 if ti is None else ti) + 1
    texts, searchers, times, lines = [], [], [], []
    with open_text(p, "rb") as f:
        for n, raw in enumerate(f, start=1):
            if n == 1:
                continue
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise LimelightError(f"{p}:{n}: not UTF-8") from None
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < need:
                raise LimelightError(f"{p}:{n}: {len(parts)} field(s), the header has {cols['n']}")
            if ti is not None:
                t = _time(parts[ti], p, n)
                if (lo is not None and t < lo) or (hi is not None and t >= hi):
                    continue
                times.append(t)
            texts.append(parts[qi])
            searchers.append(parts[si].strip())
            lines.append(n)
    return texts, searchers, times, lines, ti is not None


def searcher_lines(path: str | os.PathLike, since: str | None = None,
                   until: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each line of a searcher log (one period of it) as ``(searcher, normalised text)``, in log
    order, lines whose text normalises to nothing left out: what a DP release counts
    (``limelight.service.dprelease``), on the texts the audit's distinct queries carry."""
    texts, searchers, _, _, _ = _read_lines(Path(path), since, until)
    norm = normalise_texts(texts)
    keep = np.flatnonzero(norm != "")
    return np.asarray(searchers, dtype=object)[keep], norm[keep].astype(object)


def read_searcher_log(path: str | os.PathLike, since: str | None = None, until: str | None = None,
                      name: str = "querylog") -> Queries:
    """A searcher log's distinct normalised queries (see the module's docstring), in order of
    first issue. ``since`` (inclusive) and ``until`` (exclusive) are ISO times that keep only the
    lines of one period; they need a time column."""
    p = Path(path)
    texts, searchers, times, lines, timed = _read_lines(p, since, until)
    ti = 0 if timed else None
    norm = normalise_texts(texts)
    keep = np.flatnonzero(norm != "")
    if not len(keep):
        raise LimelightError(f"{p}: no query in the log" + (" in that period" if since or until else ""))
    norm = norm[keep]
    uniq, first, inverse, counts = np.unique(norm, return_index=True, return_inverse=True,
                                             return_counts=True)
    who = np.asarray(searchers, dtype=object)[keep]
    _, who_code = np.unique(who, return_inverse=True)
    pairs = np.unique(inverse.astype(np.int64) * (int(who_code.max()) + 1) + who_code)
    n_searchers = np.bincount(pairs // (int(who_code.max()) + 1), minlength=len(uniq))
    order = np.argsort(first, kind="stable")
    line_no = np.asarray(lines, dtype=np.int64)[keep]
    ids = IdMap([f"line{int(x)}" for x in line_no[first[order]]], kind="query")
    fields = {"n_searchers": n_searchers[order].astype(np.float64)}
    if ti is not None:
        t = np.asarray(times, dtype="datetime64[s]")[keep]
        ti64 = t.view(np.int64)
        mn = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
        mx = np.full(len(uniq), np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(mn, inverse, ti64)
        np.maximum.at(mx, inverse, ti64)
        first_t, last_t = mn.view("datetime64[s]"), mx.view("datetime64[s]")
        fields["first_time"] = first_t[order].astype(str).astype(object)
        fields["last_time"] = last_t[order].astype(str).astype(object)
    return Queries(ids, uniq[order].astype(object), counts[order].astype(np.float64),
                   fields=fields, name=name)
