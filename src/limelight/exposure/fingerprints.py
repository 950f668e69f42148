"""What identifies the inputs of an exposure job, and the check of its query set.

A store's manifest records these fingerprints; a job whose retriever, queries or documents
fingerprint differently does not resume the store (``limelight.exposure.compute``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import LimelightError


def _sha(parts: Sequence[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:32]


_JOIN_BATCH = 1 << 16
_EMPTY = "the query set is empty"


class _Joined:
    """``"\\x1f".join(strings).encode("utf-8")`` as a part of ``_sha`` without building it: its
    length (one pass) and its bytes in chunks (a second pass), a batch of strings at a time, so
    that hashing millions of ids or texts holds one batch's bytes, not all of them. ``strings``:
    an array, or a function returning an iterator over the strings in lists (any batching gives
    the same bytes)."""

    def __init__(self, strings: np.ndarray | Callable[[], Iterable[list[str]]]):
        self.strings = strings
        self.length = sum(len(c) for c in self.chunks())

    def _batches(self) -> Iterable[list[str]]:
        if callable(self.strings):
            return self.strings()
        return (self.strings[s:s + _JOIN_BATCH].tolist() for s in range(0, len(self.strings), _JOIN_BATCH))

    def chunks(self):
        first = True
        for batch in self._batches():
            if not batch:
                continue
            b = "\x1f".join(batch).encode("utf-8")
            yield b if first else b"\x1f" + b
            first = False


class _Bytes:
    """Bytes given in chunks as a part of ``_sha`` (``length``: their total)."""

    def __init__(self, length: int, chunks: Callable[[], Iterable[bytes]]):
        self.length, self.chunks = length, chunks


def _sha_stream(parts: Sequence[bytes | _Joined | _Bytes]) -> str:
    """``_sha`` of ``parts``, some given as ``_Joined`` or ``_Bytes`` (the same digest)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, _Joined | _Bytes):
            h.update(p.length.to_bytes(8, "little"))
            for c in p.chunks():
                h.update(c)
        else:
            h.update(len(p).to_bytes(8, "little"))
            h.update(p)
    return h.hexdigest()[:32]


def ids_fingerprint(ids: IdMap) -> str:
    """A fingerprint of an ordered id set."""
    return _sha_stream([_Joined(ids.strings)])


def queries_fingerprint(queries: Queries, *, check: bool = False) -> str:
    """A fingerprint of a query set: ids, texts and weights, in order (hashed a batch at a
    time: the same digest as hashing them joined). ``check``: also ``validate_queries``'s check,
    in the same pass (the weights read once): how an exposure job checks its query set, once,
    as it takes its fingerprint (``limelight.audit.job.ExposureJob``)."""
    if check:
        if len(queries) == 0:
            raise LimelightError(_EMPTY)
        queries.check_nonempty()

    def weights():
        s = 0
        for w in queries.column_batches("weight", _JOIN_BATCH):
            w = np.ascontiguousarray(w, dtype="<f8")
            if check and (i := _first_bad_weight(w)) >= 0:
                raise _weight_error(queries.ids[s + i], w[i])
            s += len(w)
            yield w.tobytes()

    return _sha_stream([
        _Joined(lambda: queries.column_batches("qid", _JOIN_BATCH)),
        _Joined(lambda: queries.column_batches("text", _JOIN_BATCH)),
        _Bytes(8 * len(queries), weights),
    ])


def retriever_fingerprint(retriever, doc_ids: IdMap) -> str:
    """A retriever's ``fingerprint`` attribute (or method) when it has one; otherwise its class,
    name, simple settings (numbers, strings) and the fingerprint of its documents."""
    fp = getattr(retriever, "fingerprint", None)
    if callable(fp):
        fp = fp()
    if isinstance(fp, str) and fp:
        return fp
    settings = {}
    with contextlib.suppress(TypeError):
        settings = {k: v for k, v in sorted(vars(retriever).items())
                    if not k.startswith("_") and isinstance(v, int | float | str | bool)}
    cls = type(retriever)
    desc = json.dumps({"class": f"{cls.__module__}.{cls.__qualname__}",
                       "name": str(getattr(retriever, "name", "")), "settings": settings,
                       "docs": ids_fingerprint(doc_ids)}, sort_keys=True, default=str)
    return _sha([desc.encode("utf-8")])


def validate_queries(queries: Queries) -> None:
    """Raise a one-line ``LimelightError`` for an empty query set, an empty query text or a
    weight that is missing, negative or not finite (duplicate ids cannot exist in an IdMap)."""
    if len(queries) == 0:
        raise LimelightError(_EMPTY)
    queries.check_nonempty()
    s = 0
    for w in queries.column_batches("weight", 1 << 18):
        w = np.asarray(w, dtype=np.float64)
        if (i := _first_bad_weight(w)) >= 0:
            raise _weight_error(queries.ids[s + i], w[i])
        s += len(w)


def _first_bad_weight(w: np.ndarray) -> int:
    """The position of the first weight of ``w`` that is missing, negative or not finite; -1."""
    bad = ~np.isfinite(w) | (w < 0)
    return int(np.flatnonzero(bad)[0]) if bad.any() else -1


def _weight_error(qid: str, w: float) -> LimelightError:
    return LimelightError(f"query {qid!r}: weight must be a finite number ≥ 0, got {w}")
