"""Stage ``index``: a ``limelight index`` directory of the collection (BM25, and dense when a
system needs it), the catalog encoded in chunks through the embedding cache.

The BM25 index is built by a process of its own (``limelight.audit.collection.build_bm25``; a
collection of at most ``IN_PROCESS_MAX_DOCS`` documents in the audit's process, where a child's
start costs more than the build), which reads the collection itself: what a build holds (the
collection, the analysis of its texts, the vocabulary and the postings as they are laid out)
goes back to the system when it exits, instead of staying resident in the audit's process for
the stages that follow (Debian: ~240 MB of collection and ~360 MB left by the build,
docs/scale.md). The dense index is encoded in the audit's process, which reads the collection
for it (``AuditDataset.collection``) and holds its encoder.
"""

from __future__ import annotations

import json

import numpy as np

from limelight._io import atomic_path
from limelight.audit.collection import build_bm25
from limelight.audit.stage import Audit, Progress, Stage
from limelight.audit.stages.common import (
    dense_settings,
)


# ---- indexing ---------------------------------------------------------------------------------
def _index(audit: Audit, bar: Progress) -> dict:
    """A ``limelight index`` directory: BM25 (``build_bm25``), plus the dense (FAISS) index
    when a system needs it; document embeddings go through the shared embedding cache."""
    ds = audit.inputs.dataset
    build_bm25(ds, audit.dir.index_dir)
    out = {"n_docs": ds.n_docs, "built": ["bm25"]}
    if dense_settings(audit.cfg):
        di = _dense_index(audit, ds.collection, bar)
        di.save(audit.dir.index_dir / "dense")
        meta_p = audit.dir.index_dir / "meta.json"
        meta = json.loads(meta_p.read_text())
        meta["built"] = ["bm25", "dense"]
        with atomic_path(meta_p) as tmp:
            tmp.write_text(json.dumps(meta, indent=1))
        out["built"].append("dense")
        out["dense_dim"] = di.dim
    return out


INDEX = Stage("index", "BM25 (and dense) index of the collection", _index,
              key=lambda a: (a.inputs.collection_fp, dense_settings(a.cfg)),
              outputs=lambda a: (a.dir.index_dir,))

CHUNK_DOCS = 8192


def _dense_index(audit: Audit, coll, bar: Progress):
    """The dense index of ``coll``. Large collections are encoded in chunks of ``CHUNK_DOCS``
    documents, each through the embedding cache, so that an interrupted encoding (the demo's
    dominant cost) resumes at the last finished chunk."""
    from limelight.data.collection import Collection
    from limelight.data.ids import IdMap
    from limelight.retrieval.dense import DenseIndex, collection_fingerprint

    enc, cache = audit.encoder(), audit.cfg.embedding_cache
    n = len(coll)
    if n <= 2 * CHUNK_DOCS:
        return DenseIndex.build(coll, enc, cache_dir=cache)
    emb = np.zeros((n, enc.dim), dtype=np.float32)
    ids = coll.ids.strings
    bar.update(0, n)
    for s in range(0, n, CHUNK_DOCS):
        e = min(n, s + CHUNK_DOCS)
        part = Collection(IdMap(ids[s:e].tolist(), kind="document"), coll.texts[s:e],
                          name=f"{coll.name}-docs{s:07d}-{e:07d}")
        emb[s:e] = enc.encode_collection(part, cache_dir=cache)
        bar.update(e, n)
    meta = {"encoder": enc.identity(), "collection": coll.name, "n_docs": n,
            "collection_fingerprint": collection_fingerprint(coll)}
    return DenseIndex.from_embeddings(coll.ids, emb, meta)
