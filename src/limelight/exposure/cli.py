"""Old home of ``limelight exposure``'s helpers, kept importable (tests, benchmarks).

The commands live in ``limelight.cli.exposure``; the helpers moved down to the library:
``open_retriever`` → ``limelight.retrieval.index_dir.open_fingerprinted`` (retriever, fingerprint,
settings), ``load_queries_file`` → ``limelight.data.loaders.load_queries_file``.
"""

from __future__ import annotations

from limelight.data.loaders import load_queries_file
from limelight.retrieval.index_dir import open_fingerprinted as open_retriever

__all__ = ["load_queries_file", "open_retriever"]
