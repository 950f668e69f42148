"""Stage ``query-vectors``: the log's queries encoded once for every system that searches with
query vectors."""

from __future__ import annotations

import numpy as np

from limelight._io import atomic_path
from limelight.audit.stage import Audit, Progress, Stage
from limelight.audit.stages.common import (
    dense_settings,
)


def _query_vectors(audit: Audit, bar: Progress) -> dict:
    """Encode the audit's queries once for every dense and hybrid system."""
    texts = audit.inputs.queries.texts.tolist()
    enc = audit.encoder()
    n = len(texts)
    vec = np.zeros((n, enc.dim), dtype=np.float32)
    step = 4096
    for s in range(0, n, step):
        vec[s:s + step] = enc.encode(texts[s:s + step], show_progress=False)
        bar.update(min(n, s + step), n)
    with atomic_path(audit.dir.query_vectors) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, vec)
    return {"n_queries": n, "dim": int(enc.dim)}


QUERY_VECTORS = Stage("query-vectors", "dense query encoding (shared by dense and hybrid)",
                      _query_vectors,
                      key=lambda a: (a.inputs.queries_fp, dense_settings(a.cfg)),
                      outputs=lambda a: (a.dir.query_vectors,))
