"""limelight's own system kinds over an index directory (``limelight index``): ``bm25``,
``dense`` and ``hybrid``, one module each; importing this package registers them."""

from limelight.retrieval.kinds import bm25, dense, hybrid  # noqa: F401  (registers the kinds)

__all__ = ["bm25", "dense", "hybrid"]
