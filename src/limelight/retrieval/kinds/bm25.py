"""Kind ``bm25``: limelight's BM25 over an index directory's ``bm25/`` index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1
from limelight.retrieval.systems import (
    DETERMINISTIC,
    EXACT_REVERSE,
    FIRST_STAGE,
    LOCAL_INDEX,
    NEW_QUERIES,
    Param,
    SystemKind,
    register_kind,
)

NUMBER = (int, float)


def open_bm25(spec: Any, index_dir: str | Path, *, name: str | None = None,
              threads: int | None = None, **_: Any):
    """``BM25`` over ``index_dir/bm25`` with the spec's ``k1`` and ``b`` (memory-mapped)."""
    from limelight.retrieval.bm25 import BM25, BM25Index

    r = BM25(BM25Index.load(Path(index_dir) / "bm25"), k1=spec.param("k1"), b=spec.param("b"),
             threads=threads)
    if name is not None:
        r.name = name
    return r


KIND = register_kind(SystemKind(
    "bm25",
    {"k1": Param(NUMBER, DEFAULT_K1, "term-frequency saturation"),
     "b": Param(NUMBER, DEFAULT_B, "document-length normalisation (0: none, 1: full)")},
    frozenset({NEW_QUERIES, EXACT_REVERSE, LOCAL_INDEX, DETERMINISTIC, FIRST_STAGE}),
    open_bm25,
    "limelight's BM25 (Robertson/Lucene idf) over the collection's index",
))
