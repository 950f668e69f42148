"""limelight: who search puts in the limelight, for whom, and how to change it.

The everyday names of each layer, importable from here too (each package exports more; see
``docs/architecture.md``): the data model and its loaders (``limelight.data``), the retrievers
(``limelight.retrieval``), ``evaluate`` (``limelight.evaluation``), exact exposure and
retrievability (``limelight.exposure``) and an audit directory (``limelight.audit``). Nothing in
the library imports this module but the command line (for ``__version__``).
"""

from __future__ import annotations

from limelight._lazy import lazy_exports
from limelight.errors import LimelightError

TYPE_CHECKING = False  # typing's, without importing typing (6 ms) before anything else runs
if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.audit.layout import AuditDir
    from limelight.data.collection import Collection
    from limelight.data.formats import read_trec_qrels, read_trec_run, write_trec_run
    from limelight.data.loaders import load_catalog, load_dataset, load_query_log
    from limelight.data.qrels import Qrels
    from limelight.data.queries import Queries
    from limelight.data.run import Run
    from limelight.evaluation.evaluate import evaluate
    from limelight.exposure.compute import compute_exposure
    from limelight.exposure.retrievability import gini, retrievability
    from limelight.exposure.store import ExposureStore
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder
    from limelight.retrieval.fusion import Hybrid

__version__ = "0.2.0"

__all__, __getattr__, __dir__ = lazy_exports(__name__)
__all__ += ["__version__"]
