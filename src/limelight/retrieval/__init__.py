"""Retrieval: BM25 (``bm25``), dense (``dense``), fusion and composable pipelines (``base``).

- ``Stage`` and its operators (``%`` = ``Cutoff``, ``>>`` = ``Then``, ``|`` = ``RRF``), every
  retriever a ``Retriever``: ``BM25`` over a ``BM25Index``; ``DenseRetriever`` over a
  ``DenseIndex`` built with an ``Encoder`` (``DenseRescorer`` re-scores a first stage);
  ``Hybrid`` fuses the two.
- Fusion stages ``RRF``, ``CombSUM``, ``CombMNZ``, ``Linear`` (of ``Stage`` outputs) and the same
  formulas over ``Run`` objects: ``rrf``, ``combsum``, ``combmnz``, ``linear``, ``fuse``.
- An index directory (``index_dir``): ``build_index`` writes one, ``load_docs`` reads its
  documents back, ``open_retriever`` opens a retriever over it.
- ``System`` (``spec``; ``RetrieverSpec`` is its former name, deprecated): a system as a value (kind,
  parameters, first stage, checkpoint, name) that the audit's ``[[systems]]``, the CLI's
  ``--system`` file and Python build alike, opened (``open``) and fingerprinted
  (``fingerprint``) over an index directory; the default settings (``DEFAULT_K1``,
  ``DEFAULT_B``, ...) are in ``defaults``.
- The registry of system kinds (``systems``): ``SystemKind`` (parameters as ``Param``,
  capabilities, opener), ``register_kind``, ``get_kind``, ``kind_names``; the shipped kinds
  ``bm25``, ``dense``, ``hybrid`` are the modules of ``kinds``.

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

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.retrieval.base import (
        RRF,
        CombMNZ,
        CombSUM,
        Cutoff,
        Fusion,
        Linear,
        Retriever,
        Stage,
        Then,
    )
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.dense import DenseIndex, DenseRescorer, DenseRetriever, Encoder
    from limelight.retrieval.explain import explain, explain_bm25, explain_dense, highlight_html
    from limelight.retrieval.finetune import FinetuneStats, finetune_biencoder, finetuned_exists
    from limelight.retrieval.fusion import Hybrid
    from limelight.retrieval.index_dir import build_index, load_docs, open_retriever
    from limelight.retrieval.pyterrier import (
        queries_from_frame,
        queries_to_frame,
        run_from_frame,
        run_to_frame,
        to_pyterrier,
    )
    from limelight.retrieval.runfusion import combmnz, combsum, fuse, linear, rrf
    from limelight.retrieval.spec import System
    from limelight.retrieval.systems import (
        Param,
        SystemKind,
        get_kind,
        kind_names,
        register_kind,
    )

# System's former name: importable, deprecated (spec warns), not exported
__all__, __getattr__, __dir__ = lazy_exports(__name__, deprecated={"RetrieverSpec": "limelight.retrieval.spec"})
