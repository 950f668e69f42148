"""Kind ``hybrid``: reciprocal rank fusion (RRF) of the index's BM25 and dense rankings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1, FUSION_DEPTH, RRF_K
from limelight.retrieval.kinds.bm25 import KIND as BM25
from limelight.retrieval.kinds.bm25 import NUMBER, open_bm25
from limelight.retrieval.kinds.dense import DENSE_PARAMS, open_dense
from limelight.retrieval.kinds.dense import KIND as DENSE
from limelight.retrieval.systems import (
    DETERMINISTIC,
    FIRST_STAGE,
    NEW_QUERIES,
    QUERY_VECTORS,
    Param,
    SystemKind,
    register_kind,
)


def _at_defaults(spec: Any, kind: Any) -> bool:
    """Whether ``spec``'s values of ``kind``'s parameters are that kind's defaults."""
    return all(spec.param(k) == p.default for k, p in kind.params.items())


def open_hybrid(spec: Any, index_dir: str | Path, *, name: str | None = None,
                threads: int | None = None, encoder: Any = None, shared: Any = None, **_: Any):
    """``Hybrid``: RRF (``rrf_k``) of BM25 and dense, each cut at ``fusion_depth``.

    ``shared`` (optional, a callable ``kind name -> retriever``): retrievers already open with
    their kind's default parameters (the web app's search models); a part whose parameters are
    its kind's defaults is taken from it (and no ``encoder`` is given) instead of opened again."""
    from limelight.retrieval.fusion import Hybrid

    named = {"name": name} if name is not None else {}
    reuse = shared is not None and encoder is None
    lexical = (shared(BM25.name) if reuse and _at_defaults(spec, BM25)
               else open_bm25(spec, index_dir, name=name, threads=threads))
    semantic = (shared(DENSE.name) if reuse and _at_defaults(spec, DENSE)
                else open_dense(spec, index_dir, name=name, encoder=encoder))
    return Hybrid(lexical, semantic, k=spec.param("rrf_k"), depth=spec.param("fusion_depth"), **named)


KIND = register_kind(SystemKind(
    "hybrid",
    {"k1": Param(NUMBER, DEFAULT_K1, "BM25's k1"), "b": Param(NUMBER, DEFAULT_B, "BM25's b"),
     "rrf_k": Param(NUMBER, RRF_K, "RRF constant: 1 / (rrf_k + rank)"),
     "fusion_depth": Param(int, FUSION_DEPTH, "each ranking is cut at this depth before fusion"),
     **DENSE_PARAMS},
    frozenset({NEW_QUERIES, DETERMINISTIC, QUERY_VECTORS, FIRST_STAGE}),
    open_hybrid,
    "reciprocal rank fusion of BM25 and dense",
))
