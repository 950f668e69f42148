"""limelight's data model: ``Collection``, ``Queries``, ``Qrels``, ``Run`` and their formats."""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

_EXPORTS = {
    "Collection": "limelight.data.collection",
    "data_root": "limelight.data.loaders",
    "Dataset": "limelight.data.loaders",
    "IdMap": "limelight.data.ids",
    "load_catalog": "limelight.data.loaders",
    "load_collection": "limelight.data.loaders",
    "load_dataset": "limelight.data.loaders",
    "load_queries": "limelight.data.loaders",
    "load_queries_file": "limelight.data.loaders",
    "load_query_log": "limelight.data.loaders",
    "load_run": "limelight.data.formats",
    "Qrels": "limelight.data.qrels",
    "Queries": "limelight.data.queries",
    "read_jsonl_docs": "limelight.data.formats",
    "read_queries_tsv": "limelight.data.formats",
    "read_run_parquet": "limelight.data.formats",
    "read_trec_qrels": "limelight.data.formats",
    "read_trec_run": "limelight.data.formats",
    "Run": "limelight.data.run",
    "write_queries_tsv": "limelight.data.formats",
    "write_run_parquet": "limelight.data.formats",
    "write_trec_qrels": "limelight.data.formats",
    "write_trec_run": "limelight.data.formats",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs
    from limelight.data.collection import Collection  # noqa: F401
    from limelight.data.formats import (  # noqa: F401
        load_run,
        read_jsonl_docs,
        read_queries_tsv,
        read_run_parquet,
        read_trec_qrels,
        read_trec_run,
        write_queries_tsv,
        write_run_parquet,
        write_trec_qrels,
        write_trec_run,
    )
    from limelight.data.ids import IdMap  # noqa: F401
    from limelight.data.loaders import (  # noqa: F401
        Dataset,
        data_root,
        load_catalog,
        load_collection,
        load_dataset,
        load_queries,
        load_queries_file,
        load_query_log,
    )
    from limelight.data.qrels import Qrels  # noqa: F401
    from limelight.data.queries import Queries  # noqa: F401
    from limelight.data.run import Run  # noqa: F401
