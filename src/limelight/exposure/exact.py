"""Exact exposure (compatibility module): the names this module held, re-exported from where
they live now.

- ``limelight.exposure.compute``: ``compute_exposure``, ``ExposureOptions``, ``exposure_from_run``
- ``limelight.exposure.engine``: ``ShardEngine``, ``LocalEngine``, ``ShardJob`` (engines by name)
- ``limelight.exposure.store``: ``ExposureStore``, the store's files and its per-document index
- ``limelight.exposure.shards``: the top-k kernel, the pair buffer, shard files, the writer
- ``limelight.exposure.fingerprints``: ids/queries/retriever fingerprints, ``validate_queries``
"""

from __future__ import annotations

from limelight.exposure.compute import ExposureOptions, compute_exposure, exposure_from_run
from limelight.exposure.engine import LocalEngine, ShardEngine, ShardJob
from limelight.exposure.fingerprints import (
    ids_fingerprint,
    queries_fingerprint,
    retriever_fingerprint,
    validate_queries,
)
from limelight.exposure.shards import (
    SHARD_GLOB,
    _batch_rows,
    _rows_from_topk,
    shard_path,
    write_shard,
)
from limelight.exposure.store import (
    BUILDING_DB,
    DB_NAME,
    FORMAT,
    ExposureStore,
    resolve_query_id,
)

__all__ = [
    "BUILDING_DB",
    "DB_NAME",
    "FORMAT",
    "SHARD_GLOB",
    "ExposureOptions",
    "ExposureStore",
    "LocalEngine",
    "ShardEngine",
    "ShardJob",
    "_batch_rows",
    "_rows_from_topk",
    "compute_exposure",
    "exposure_from_run",
    "ids_fingerprint",
    "queries_fingerprint",
    "resolve_query_id",
    "retriever_fingerprint",
    "shard_path",
    "validate_queries",
    "write_shard",
]
