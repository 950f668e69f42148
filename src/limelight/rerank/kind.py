"""Kind ``reranked``: a TK/KNRM re-ranker (``limelight rerank train``) over the top ``depth`` of
another system of the audit (its ``first`` stage). Light to import: torch loads when it opens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from limelight.errors import LimelightError
from limelight.retrieval.defaults import RERANK_DEPTH
from limelight.retrieval.systems import DETERMINISTIC, NEW_QUERIES, Param, SystemKind, register_kind


def open_reranked_spec(spec: Any, index_dir: str | Path, *, name: str | None = None,
                       threads: int | None = None, encoder: Any = None, **context: Any):
    """The first stage (``spec.first``, opened over ``index_dir``) followed by the ranker of
    ``spec.checkpoint`` (:func:`limelight.rerank.ranker.open_reranked`; ``context``: an already
    loaded ``reranker``, the ``collection`` it reads)."""
    from limelight.rerank.ranker import open_reranked

    if spec.first is None:
        raise LimelightError("a reranked retriever needs its first stage (first=System)")
    first = spec.first.open(index_dir, name=spec.param("first"), threads=threads, encoder=encoder)
    return open_reranked(spec, first, index_dir=index_dir, name=name,
                         collection=context.get("collection"), reranker=context.get("reranker"))


KIND = register_kind(SystemKind(
    "reranked",
    {"depth": Param(int, RERANK_DEPTH, "the first stage's top `depth` are re-ranked"),
     "first": Param(str, None, "the first stage: the name of another system of the audit"),
     "checkpoint": Param(str, None, "a TK/KNRM checkpoint (`limelight rerank train`)")},
    frozenset({NEW_QUERIES, DETERMINISTIC}),
    open_reranked_spec,
    "a TK or KNRM neural re-ranker over another system's top results",
    labels=("first", "checkpoint"),
))
