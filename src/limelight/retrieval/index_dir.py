"""An index directory as ``limelight index`` writes it, and opening retrievers over it.

What a retriever over it is (kind, parameters), how it is opened and fingerprinted:
:class:`limelight.retrieval.spec.RetrieverSpec`; ``open_retriever`` and ``open_fingerprinted``
are its shortcuts for the CLI's ``--model``/``--k1``/``--b``. ``meta.json`` is read by
:mod:`limelight.retrieval.index_meta` (``read_meta``, ``index_size``, re-exported here).

Layout::

    DIR/meta.json        collection name, size, what was built
    DIR/docs.parquet     doc ids, indexed text and the collection's fields (for display)
    DIR/bm25/            BM25Index
    DIR/dense/           DenseIndex (with ``--dense``)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from limelight._io import atomic_dir
from limelight.analysis import Analyzer
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.errors import IndexMismatchError
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1
from limelight.retrieval.index_meta import FORMAT, index_size, read_meta
from limelight.retrieval.spec import RetrieverSpec


def build_index(collection: Collection, out: str | os.PathLike, dense: bool = False,
                analyzer: Analyzer | None = None, model: str | None = None,
                show_progress: bool = False) -> Path:
    """Build the BM25 index (and the dense one with ``dense``) of ``collection`` into ``out``.

    Everything is written into a temporary directory that replaces ``out`` only when complete.
    """
    from limelight.retrieval.bm25 import BM25Index

    out = Path(out)
    with atomic_dir(out, "index") as tmp:
        _docs_frame(collection).to_parquet(tmp / "docs.parquet", index=False)
        BM25Index.build(collection, analyzer or Analyzer(), show_progress=show_progress).save(tmp / "bm25")
        built = ["bm25"]
        if dense:
            from limelight.retrieval.dense import DenseIndex, Encoder

            enc = Encoder(model) if model else Encoder()
            DenseIndex.build(collection, enc, show_progress=show_progress).save(tmp / "dense")
            built.append("dense")
        meta = {"format": FORMAT, "collection": collection.name, "n_docs": len(collection),
                "built": built, "text_fields": list(collection.text_fields)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    return out


def _docs_frame(collection: Collection) -> pd.DataFrame:
    # lists of str, not .astype(str): a fixed-width numpy unicode array is n × longest text × 4
    # bytes (10 GB for the Debian catalog, whose longest description has ~40k characters)
    df = pd.DataFrame({"doc_id": [str(x) for x in collection.ids.strings.tolist()],
                       "text": [str(x) for x in collection.texts.tolist()]})
    for k, v in collection.fields.items():
        if k in ("text", "doc_id"):
            k = f"field_{k}"
        df[k] = [json.dumps(x, default=str) if isinstance(x, list | dict) else (None if x is None else str(x))
                 for x in v.tolist()]
    return df


def load_docs(index_dir: str | os.PathLike) -> Collection:
    """The documents stored with an index (ids, indexed text and fields as strings)."""
    p = Path(index_dir) / "docs.parquet"
    try:
        df = pd.read_parquet(p)
    except Exception as e:
        raise IndexMismatchError(f"{p}: cannot read stored documents ({e})") from None
    fields = {c: df[c].to_numpy(object) for c in df.columns if c not in ("doc_id", "text")}
    return Collection(IdMap(df["doc_id"].tolist(), kind="document"), df["text"].to_numpy(object),
                      fields, read_meta(index_dir).get("collection", "collection"))


def open_retriever(index_dir: str | os.PathLike, model: str = "bm25", k1: float = DEFAULT_K1,
                   b: float = DEFAULT_B, threads: int | None = None, dense_model: str | None = None):
    """A ``Retriever`` over an index directory: ``bm25``, ``dense`` or ``hybrid`` (RRF of both).

    ``RetrieverSpec.from_model(model, k1, b, dense_model).open(index_dir, threads=threads)``.
    """
    read_meta(index_dir)  # a clear error when it is not an index, before the model's
    return RetrieverSpec.from_model(model, k1, b, dense_model).open(index_dir, threads=threads)


def open_fingerprinted(index_dir: str | os.PathLike, model: str = "bm25", k1: float = DEFAULT_K1,
                       b: float = DEFAULT_B, threads: int | None = None) -> tuple:
    """``(retriever, fingerprint, settings)`` over an index directory (``open_retriever``).

    The fingerprint hashes the index's metadata files, the model and its settings, so that an
    exposure store computed over another index (or with other settings) is recognised;
    ``settings`` records the model (and k1, b for BM25; the encoder's identity for dense):
    :meth:`RetrieverSpec.fingerprint` and :meth:`RetrieverSpec.store_settings`.
    """
    read_meta(index_dir)  # a clear error when it is not an index
    spec = RetrieverSpec.from_model(model, k1, b)
    retriever = spec.open(index_dir, threads=threads)
    return retriever, spec.fingerprint(index_dir), spec.store_settings(retriever)


__all__ = ["FORMAT", "RetrieverSpec", "build_index", "index_size", "load_docs", "open_fingerprinted",
           "open_retriever", "read_meta"]
