"""What identifies the inputs of an exposure job, and the check of its query set.

A store's manifest records these fingerprints; a job whose retriever, queries or documents
fingerprint differently does not resume the store (``limelight.exposure.compute``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence

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


def ids_fingerprint(ids: IdMap) -> str:
    """A fingerprint of an ordered id set."""
    return _sha(["\x1f".join(ids.strings.tolist()).encode("utf-8")])


def queries_fingerprint(queries: Queries) -> str:
    """A fingerprint of a query set: ids, texts and weights, in order."""
    return _sha([
        "\x1f".join(queries.ids.strings.tolist()).encode("utf-8"),
        "\x1f".join(queries.texts.tolist()).encode("utf-8"),
        np.ascontiguousarray(queries.weights, dtype="<f8").tobytes(),
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
        raise LimelightError("the query set is empty")
    queries.check_nonempty()
    w = np.asarray(queries.weights, dtype=np.float64)
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise LimelightError(f"query {queries.ids[i]!r}: weight must be a finite number ≥ 0, got {w[i]}")
