"""An index directory as ``limelight index`` writes it, and opening retrievers over it.

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

from limelight._io import atomic_dir, read_versioned
from limelight.analysis import Analyzer
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.errors import IndexMismatchError, LimelightError

FORMAT = "limelight-index/1"


def build_index(collection: Collection, out: str | os.PathLike, dense: bool = False,
                analyzer: Analyzer | None = None, model: str | None = None,
                show_progress: bool = False) -> Path:
    """Build the BM25 index (and the dense one with ``dense``) of ``collection`` into ``out``.

    Everything is written into a temporary directory that replaces ``out`` only when complete.
    """
    from limelight.retrieval.bm25 import BM25Index

    out = Path(out)
    with atomic_dir(out) as tmp:
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


def read_meta(index_dir: str | os.PathLike) -> dict:
    """The index directory's ``meta.json`` (a one-line error when it is not a limelight index)."""
    return read_versioned(Path(index_dir) / "meta.json", FORMAT, "limelight index",
                          rebuild="build one with `limelight index`")


def index_size(index_dir: str | os.PathLike) -> int:
    """The number of documents of an index directory (a clear error when it is not one)."""
    return int(read_meta(index_dir)["n_docs"])


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


def open_retriever(index_dir: str | os.PathLike, model: str = "bm25", k1: float = 0.9,
                   b: float = 0.4, threads: int | None = None, dense_model: str | None = None):
    """A ``Retriever`` over an index directory: ``bm25``, ``dense`` or ``hybrid`` (RRF of both)."""
    meta = read_meta(index_dir)
    index_dir = Path(index_dir)
    if model not in ("bm25", "dense", "hybrid"):
        raise LimelightError(f"unknown model {model!r} (bm25, dense or hybrid)")
    if model in ("dense", "hybrid") and "dense" not in meta["built"]:
        raise LimelightError(f"{index_dir}: has no dense index (rebuild with `limelight index --dense`)")

    def bm25():
        from limelight.retrieval.bm25 import BM25, BM25Index

        return BM25(BM25Index.load(index_dir / "bm25"), k1=k1, b=b, threads=threads)

    def dense():
        from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

        idx = DenseIndex.load(index_dir / "dense")
        return DenseRetriever(idx, Encoder(dense_model) if dense_model else None)

    if model == "bm25":
        return bm25()
    if model == "dense":
        return dense()
    from limelight.retrieval.fusion import Hybrid

    return Hybrid(bm25(), dense())


def open_fingerprinted(index_dir: str | os.PathLike, model: str = "bm25", k1: float = 0.9,
                       b: float = 0.4, threads: int | None = None) -> tuple:
    """``(retriever, fingerprint, settings)`` over an index directory (``open_retriever``).

    The fingerprint hashes the index's metadata files, the model and its settings, so that an
    exposure store computed over another index (or with other settings) is recognised;
    ``settings`` records the model (and k1, b for BM25; the encoder's identity for dense).
    """
    import hashlib

    read_meta(index_dir)  # a clear error when it is not an index
    retriever = open_retriever(index_dir, model, k1=k1, b=b, threads=threads)
    h = hashlib.sha256()
    root = Path(index_dir)
    for p in sorted([root / "meta.json", *root.glob("bm25/*.json"), *root.glob("dense/*.json")]):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    settings = {"model": model} if model == "dense" else {"model": model, "k1": k1, "b": b}
    h.update(json.dumps(settings, sort_keys=True).encode())
    if model == "dense":  # recorded, so that vectors of another encoder variant are refused
        settings["encoder"] = retriever.encoder.identity()
    return retriever, h.hexdigest()[:32], settings
