"""limelight's data model: ``Collection``, ``Queries``, ``Qrels``, ``Run`` and their formats."""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.data.collection import Collection
    from limelight.data.formats import (
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
    from limelight.data.ids import IdMap
    from limelight.data.loaders import (
        Dataset,
        data_root,
        load_catalog,
        load_collection,
        load_dataset,
        load_queries,
        load_queries_file,
        load_query_log,
    )
    from limelight.data.qrels import Qrels
    from limelight.data.queries import Queries
    from limelight.data.querytable import QueryTable, write_query_table
    from limelight.data.run import Run

__all__, __getattr__, __dir__ = lazy_exports(__name__)
