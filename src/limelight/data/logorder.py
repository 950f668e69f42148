"""The order in which a store's queries were searched: by time where the log has a time column,
else the file's order (issue 56 item 2: DistFaiR's sequence over the log).

A store keeps a log's distinct queries in order of first entry in the file; a searcher log (the
AOL layout, ``limelight.data.searcherlog``) is often sorted by searcher, so that order is not
the order in time. The store does not keep the times (its tables and fingerprints stay as they
are): ``query_time_order`` reads them from the log the store was computed from, places each
distinct query at its first issue, and sorts by that time, stably (ties, e.g. queries issued
in the same second, in file order). A query that recurs counts at its first issue with its whole
weight o_q, since the store holds distinct queries.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from limelight._io import open_text
from limelight.data.ids import IdMap
from limelight.data.searcherlog import log_columns, read_searcher_log
from limelight.errors import LimelightError

FILE_ORDER = "file order (first entry of each query in the log)"


def _time_column(path: Path) -> str | None:
    """The header name of a searcher log's time column (None: no time column, or not a
    searcher log)."""
    cols = log_columns(path)
    if cols is None or "time" not in cols:
        return None
    with open_text(path, "rb") as f:
        header = f.readline(1 << 16).decode("utf-8", errors="replace").rstrip("\r\n").split("\t")
    return header[cols["time"]].strip()


def query_time_order(log: str | os.PathLike, qids: IdMap) -> tuple[np.ndarray, str]:
    """``(order, label)``: a permutation of the query codes ``0..len(qids)-1`` (a store's, in
    order of first entry in ``log``) that walks them in time order when ``log`` has a time
    column — by first issue, stable, so ties keep the file order — with the label
    ``"time order, from column X"``; otherwise the identity and ``FILE_ORDER``. A query of
    ``qids`` missing from the log (another log, or a period of it) is one error naming both."""
    p = Path(log)
    if not p.is_file():
        raise LimelightError(f"{p}: no such query log")
    column = _time_column(p)
    n = len(qids)
    if column is None:
        return np.arange(n, dtype=np.int64), FILE_ORDER
    qs = read_searcher_log(p)
    at = pd.Index(qs.ids.strings).get_indexer(qids.strings)
    missing = np.flatnonzero(at < 0)
    if len(missing):
        raise LimelightError(f"{p}: query {qids.strings[missing[0]]!r} of the store is not in this log "
                             f"({len(missing):,} of {n:,} missing): give the whole log the store was "
                             "computed from")
    first = np.asarray(qs.fields["first_time"], dtype="datetime64[s]")[at].view(np.int64)
    return np.argsort(first, kind="stable").astype(np.int64), f"time order, from column {column}"
