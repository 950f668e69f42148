"""Retrieval: BM25 (``bm25``), dense (``dense``), fusion and composable pipelines (``base``).

Also public here, though nothing else in the library calls them:

- ``finetune_biencoder`` (with ``FinetuneStats`` and ``finetuned_exists``; ``finetune``): fine-tune a
  sentence-transformers bi-encoder on (query, relevant document) pairs, as CtrlQGen §4.2.2 does;
  ``dense.Encoder(out)`` loads the result.
- ``to_pyterrier`` and the frame conversions ``queries_from_frame``, ``queries_to_frame``,
  ``run_from_frame``, ``run_to_frame`` (``pyterrier``): any ``Stage`` as a PyTerrier transformer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

_EXPORTS = {
    "finetune_biencoder": "limelight.retrieval.finetune",
    "FinetuneStats": "limelight.retrieval.finetune",
    "finetuned_exists": "limelight.retrieval.finetune",
    "queries_from_frame": "limelight.retrieval.pyterrier",
    "queries_to_frame": "limelight.retrieval.pyterrier",
    "run_from_frame": "limelight.retrieval.pyterrier",
    "run_to_frame": "limelight.retrieval.pyterrier",
    "to_pyterrier": "limelight.retrieval.pyterrier",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs
    from limelight.retrieval.finetune import FinetuneStats, finetune_biencoder, finetuned_exists  # noqa: F401
    from limelight.retrieval.pyterrier import (  # noqa: F401
        queries_from_frame,
        queries_to_frame,
        run_from_frame,
        run_to_frame,
        to_pyterrier,
    )
