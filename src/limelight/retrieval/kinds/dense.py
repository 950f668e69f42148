"""Kind ``dense``: a sentence-embedding model (MiniLM by default) and FAISS over ``dense/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from limelight.retrieval.systems import (
    DETERMINISTIC,
    EXACT_REVERSE,
    FIRST_STAGE,
    LOCAL_INDEX,
    NEW_QUERIES,
    QUERY_VECTORS,
    Param,
    SystemKind,
    register_kind,
)


def _preload() -> None:
    from limelight.retrieval.dense import import_libraries

    import_libraries()


def open_dense(spec: Any, index_dir: str | Path, *, name: str | None = None, encoder: Any = None,
               **_: Any):
    """``DenseRetriever`` over ``index_dir/dense``; ``encoder`` replaces the query encoder (e.g.
    one that looks up precomputed query vectors), else the spec's ``model``/``max_seq_length``
    or the index's own encoder."""
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

    if encoder is None and (spec.param("model") or spec.param("max_seq_length")):
        encoder = Encoder(spec.param("model"), max_seq_length=spec.param("max_seq_length"))
    named = {"name": name} if name is not None else {}
    return DenseRetriever(DenseIndex.load(Path(index_dir) / "dense"), encoder, **named)


DENSE_PARAMS = {
    "model": Param(str, None, "sentence-transformers model path or name (default: the index's)"),
    "max_seq_length": Param(int, None, "truncate texts to this many tokens"),
}

KIND = register_kind(SystemKind(
    "dense",
    DENSE_PARAMS,
    frozenset({NEW_QUERIES, EXACT_REVERSE, LOCAL_INDEX, DETERMINISTIC, QUERY_VECTORS, FIRST_STAGE}),
    open_dense,
    "a sentence-embedding model (all-MiniLM-L6-v2 by default) with exact FAISS search",
    preload=_preload,
))
