"""A query log's distinct queries, read in blocks (issue 44: logs of tens of millions of lines).

``distinct_log(path)`` returns what ``load_query_log(path)`` returns (the log's distinct
normalised texts in order of first entry, each with the id and source of its first entry and
the number of its entries as weight o_q; lines longer than ``MAX_LOG_QUERY_CHARS`` dropped with
one warning that counts them), without holding the log's lines: the file is read in blocks of
about ``block_bytes``, and only the distinct queries are kept (a dictionary from normalised
text to query, and each line's id as a 64-bit hash to check that ids do not repeat). A 10M-line
log whose distinct queries are a third of its lines then needs about the memory of those
queries instead of ~5 GB for its lines, their ids and the duplicate check.

Any line the fast path does not accept (wrong number of columns, an empty query, a repeated id,
a byte that is not UTF-8, a damaged file) makes it read the file again with ``read_queries_tsv``, whose error
names the line: the errors are those of the whole-file reader, word for word.
"""

from __future__ import annotations

import gzip
import os
import sys
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries

LOG_HEADER = ["source", "qid", "query"]
BLOCK_BYTES = 16 << 20


class _Slow(Exception):
    """A line the block reader leaves to ``read_queries_tsv`` (which names it in its error)."""


def _blocks(path: Path, block_bytes: int) -> Iterator[bytes]:
    """The file's bytes (gunzipped for ``.gz``) in blocks that end after a newline."""
    opener = gzip.open if str(path).endswith(".gz") else open
    rest = b""
    with opener(path, "rb") as f:
        while True:
            data = f.read(block_bytes)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest = data[cut:]
            yield data[:cut]
    if rest:
        yield rest


def is_log(path: str | os.PathLike) -> bool:
    """Whether a query file's first line is the query log's header ``source qid query``."""
    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rb") as f:
            first = f.readline(1 << 16).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        return False
    first = (first.splitlines() or [""])[0]
    return [c.strip().lower() for c in first.split("\t")] == LOG_HEADER


def distinct_log(path: str | os.PathLike, max_chars: int, name: str = "querylog",
                 block_bytes: int = BLOCK_BYTES) -> Queries | None:
    """The distinct queries of the log at ``path`` (see the module docstring), or None when a
    line needs the whole-file reader (its error names the line)."""
    try:
        return _distinct_log(Path(path), max_chars, name, block_bytes)
    except (_Slow, UnicodeDecodeError, OSError, EOFError, zlib.error):
        return None  # (an unreadable or damaged file: the whole-file reader's one-line error)


def _distinct_log(path: Path, max_chars: int, name: str, block_bytes: int) -> Queries:
    """``distinct_log`` proper; raises ``_Slow`` on a line it leaves to the whole-file reader.
    Long because it is one pass over the lines with its bookkeeping inline (per-line calls
    would double its time on a 10M-line log)."""
    index: dict[str, int] = {}
    texts: list[str] = []
    ids: list[str] = []
    sources: list[str] = []
    counts: list[int] = []
    hashes: list[np.ndarray] = []
    n_long, first_long = 0, None
    header = True
    for block in _blocks(path, block_bytes):
        lines = block.decode("utf-8").splitlines()
        if header:
            lines, header = lines[1:], False
        h = np.empty(len(lines), np.int64)
        k = 0
        for ln in lines:
            if not ln.strip():
                continue
            parts = ln.split("\t")
            if len(parts) != 3:
                raise _Slow
            src, qid, qtext = parts
            qid = f"{src}:{qid}".strip()
            qtext = qtext.strip()
            if not qtext:
                raise _Slow
            h[k] = hash(qid)
            k += 1
            if len(qtext) > max_chars:
                n_long += 1
                if first_long is None:
                    first_long = (qid, len(qtext))
                continue
            key = " ".join(qtext.lower().split())
            j = index.get(key)
            if j is None:
                index[key] = len(texts)
                texts.append(key)
                ids.append(qid)
                sources.append(sys.intern(src))
                counts.append(1)
            else:
                counts[j] += 1
        hashes.append(h[:k])
    del index
    allh = np.concatenate(hashes) if hashes else np.zeros(0, np.int64)
    del hashes
    allh.sort()
    if len(allh) > 1 and (allh[1:] == allh[:-1]).any():
        raise _Slow  # a repeated id (or, once in ~10^12 logs, a hash collision: read it whole)
    if not texts and not n_long:
        raise _Slow  # an empty log: the whole-file reader's error
    if n_long:
        warnings.warn(f"{path}: {n_long} log line(s) longer than {max_chars:,} characters skipped "
                      f"(first: query {first_long[0]!r}, {first_long[1]:,} characters)", stacklevel=4)
    idmap = IdMap(ids, kind="query")
    id_arr = np.empty(len(ids), dtype=object)
    id_arr[:] = ids
    src_arr = np.empty(len(sources), dtype=object)
    src_arr[:] = sources
    text_arr = np.empty(len(texts), dtype=object)
    text_arr[:] = texts
    return Queries(idmap, text_arr, np.asarray(counts, dtype=np.float64),
                   fields={"source": src_arr, "log_id": id_arr}, name=name)
