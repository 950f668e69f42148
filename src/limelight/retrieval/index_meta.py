"""An index directory's ``meta.json`` (what ``limelight index`` built): read and checked.

Kept apart from :mod:`limelight.retrieval.index_dir` (which builds indexes and re-exports these
names) so that :mod:`limelight.retrieval.spec` can check an index without importing the module
that imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from limelight._io import read_versioned

FORMAT = "limelight-index/1"


def read_meta(index_dir: str | os.PathLike) -> dict:
    """The index directory's ``meta.json`` (a one-line error when it is not a limelight index)."""
    return read_versioned(Path(index_dir) / "meta.json", FORMAT, "limelight index",
                          rebuild="build one with `limelight index`")


def index_size(index_dir: str | os.PathLike) -> int:
    """The number of documents of an index directory (a clear error when it is not one)."""
    return int(read_meta(index_dir)["n_docs"])


__all__ = ["FORMAT", "index_size", "read_meta"]
