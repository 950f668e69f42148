"""An index directory as ``limelight index`` writes it, and opening retrievers over it.

What a retriever over it is (kind, parameters), how it is opened and fingerprinted:
:class:`limelight.retrieval.spec.System`; ``open_retriever`` and ``open_fingerprinted``
are its shortcuts for the CLI's ``--model``/``--k1``/``--b``. ``meta.json`` is read by
:mod:`limelight.retrieval.index_meta` (``read_meta``, ``index_size``, re-exported here).

Layout::

    DIR/meta.json        collection name, size, what was built
    DIR/docs.parquet     doc ids, indexed text and the collection's fields (for display)
    DIR/bm25/            BM25Index
    DIR/dense/           DenseIndex (with ``--dense``)

Writing one, shared with :mod:`limelight.scale.index` (Ray runs of the same folder):
``memory_budget`` (the build's bytes), ``docs_and_bm25`` (``docs.parquet`` through a
``DocsWriter`` and ``bm25/`` through a ``BM25Builder``) and ``write_meta`` (``meta.json``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from limelight._io import atomic_dir
from limelight.analysis import Analyzer
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.errors import IndexMismatchError, LimelightError
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1
from limelight.retrieval.index_meta import FORMAT, index_size, read_meta
from limelight.retrieval.spec import System

if TYPE_CHECKING:
    from limelight.retrieval.bm25_build import BM25Builder

DEFAULT_MEMORY_GB = 2.0


def build_index(collection: Collection, out: str | os.PathLike, dense: bool = False,
                analyzer: Analyzer | None = None, model: str | None = None,
                show_progress: bool = False, memory_gb: float = DEFAULT_MEMORY_GB) -> Path:
    """Build the BM25 index (and the dense one with ``dense``) of ``collection`` into ``out``.

    Everything is written into a temporary directory that replaces ``out`` only when complete.
    The BM25 index is built in chunks within ``memory_gb`` of working memory
    (``retrieval.bm25_build``; the same files as ``BM25Index.build(collection).save``).
    """
    from limelight.data.stream import DocumentChunks, slices

    chunk = memory_budget(memory_gb) // 64
    source = DocumentChunks(collection.name, tuple(collection.text_fields),
                            slices(collection, chunk), False)
    return _build(source, out, dense, analyzer, model, show_progress, memory_gb, collection)


def build_index_from(source: str | os.PathLike, out: str | os.PathLike, dense: bool = False,
                     analyzer: Analyzer | None = None, model: str | None = None,
                     show_progress: bool = False, memory_gb: float = DEFAULT_MEMORY_GB) -> Path:
    """``build_index`` of the collection ``source`` names (what ``load_collection`` accepts),
    read in chunks: a JSONL file or a folder with ``docs.jsonl`` is streamed, so that the peak
    memory is about ``memory_gb`` plus the index's own size (vocabulary, ids, postings), not
    the corpus's (``limelight index``; ``data.stream.document_chunks``)."""
    from limelight.data.stream import document_chunks

    chunks = document_chunks(source, memory_budget(memory_gb) // 64)
    return _build(chunks, out, dense, analyzer, model, show_progress, memory_gb)


def memory_budget(memory_gb: float) -> int:
    """``memory_gb`` in bytes, the budget of an index build (one line when not positive)."""
    if not memory_gb > 0:
        raise LimelightError(f"the memory budget must be positive, got {memory_gb} GB")
    return int(memory_gb * (1 << 30))


def _build(source, out: str | os.PathLike, dense: bool, analyzer: Analyzer | None,
           model: str | None, show_progress: bool, memory_gb: float,
           collection: Collection | None = None) -> Path:
    """Write an index directory from ``source`` (``DocumentChunks``): docs.parquet and the BM25
    index chunk by chunk, then the dense index (from ``collection``, else the stored texts)."""
    out = Path(out)
    with atomic_dir(out, "index") as tmp:
        n_docs = _write_docs_and_bm25(source, tmp, analyzer or Analyzer(), memory_budget(memory_gb),
                                      show_progress, len(collection) if collection is not None else None)
        built = ["bm25"]
        if dense:
            from limelight.retrieval.dense import DenseIndex, Encoder

            coll = collection if collection is not None else _stored_texts(tmp, source.name)
            enc = Encoder(model) if model else Encoder()
            DenseIndex.build(coll, enc, show_progress=show_progress).save(tmp / "dense")
            built.append("dense")
        write_meta(tmp, source, n_docs, built)
    return out


def _write_docs_and_bm25(source, tmp: Path, analyzer: Analyzer, memory_bytes: int,
                         show_progress: bool, total: int | None) -> int:
    """One pass over ``source``'s chunks into the index folder ``tmp``: each is appended to
    ``docs.parquet`` and fed to the BM25 builder of ``bm25/`` (``docs_and_bm25``). Returns the
    number of documents."""
    from limelight.progress import progress_bar

    with (docs_and_bm25(tmp, analyzer, memory_bytes, source.name) as (docs, builder, ids),
          progress_bar(f"BM25: analyzing {source.name}", total) if show_progress
          else contextlib.nullcontext(_no_progress) as update):
        for chunk in source.chunks:
            docs.write(chunk)
            builder.add(chunk.texts.tolist())
            ids.extend(chunk.ids.strings.tolist())
            update(len(ids))
        update(len(ids), len(ids))  # a streamed source's total is known at its end
    return len(ids)


@contextlib.contextmanager
def docs_and_bm25(tmp: Path, analyzer: Analyzer, memory_bytes: int,
                   name: str) -> Iterator[tuple[DocsWriter, BM25Builder, list[str]]]:
    """``docs.parquet`` and the BM25 index ``bm25/`` (atomically) of the index folder ``tmp``
    being written (here and by ``limelight.scale.index``): yields the documents' writer, the
    ``BM25Builder`` and the list of document ids the caller fills in the order it feeds them;
    then closes the documents and finishes the builder, or on an error aborts the builder
    (and closes the documents)."""
    from limelight.retrieval.bm25_build import BM25Builder

    with atomic_dir(tmp / "bm25", "BM25 index") as btmp:
        builder = BM25Builder(btmp, analyzer, memory_bytes)
        docs = DocsWriter(tmp / "docs.parquet")
        ids: list[str] = []
        try:
            yield docs, builder, ids
            docs.close()
            builder.finish(ids, name)
        except BaseException:
            builder.abort()
            docs.close()
            raise


def write_meta(tmp: Path, source, n_docs: int, built: list[str]) -> None:
    """The index folder's ``meta.json`` (``source``: the ``DocumentChunks`` indexed)."""
    meta = {"format": FORMAT, "collection": source.name, "n_docs": n_docs,
            "built": built, "text_fields": list(source.text_fields)}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))


def _no_progress(done: int, total: int | None = None) -> None:
    """A progress callback that shows nothing."""


class DocsWriter:
    """``docs.parquet`` written a chunk at a time (a row group each): ``doc_id``, ``text`` and
    the collection's fields, every column a string (lists and objects as JSON; a field named
    ``text`` or ``doc_id`` is stored as ``field_text``/``field_doc_id``)."""

    def __init__(self, path: Path):
        self.path = path
        self.writer = None
        self.schema = None
        self.closed = False

    def write(self, chunk: Collection) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = _docs_columns(chunk)
        if self.writer is None:
            self.schema = pa.schema([(k, pa.string()) for k in cols])
            self.writer = pq.ParquetWriter(self.path, self.schema)
        self.writer.write_table(pa.table({k: pa.array(v, pa.string()) for k, v in cols.items()},
                                         schema=self.schema))

    def close(self) -> None:
        """Finish the file (an empty table of ``doc_id`` and ``text`` when nothing came)."""
        if self.closed:
            return
        self.closed = True
        if self.writer is not None:
            self.writer.close()
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.schema([("doc_id", pa.string()), ("text", pa.string())]).empty_table(),
                       self.path)


def _docs_columns(collection: Collection) -> dict[str, list]:
    """The columns of ``docs.parquet`` for ``collection`` (see ``DocsWriter``)."""
    # lists of str, not .astype(str): a fixed-width numpy unicode array is n × longest text × 4
    # bytes (10 GB for the Debian catalog, whose longest description has ~40k characters)
    cols = {"doc_id": [str(x) for x in collection.ids.strings.tolist()],
            "text": [str(x) for x in collection.texts.tolist()]}
    for k, v in collection.fields.items():
        if k in ("text", "doc_id"):
            k = f"field_{k}"
        cols[k] = [json.dumps(x, default=str) if isinstance(x, list | dict) else (None if x is None else str(x))
                   for x in v.tolist()]
    return cols


def _stored_texts(folder: Path, name: str) -> Collection:
    """The ids and texts just written to ``folder/docs.parquet`` (for the dense index)."""
    import pyarrow.parquet as pq

    t = pq.read_table(folder / "docs.parquet", columns=["doc_id", "text"])
    return Collection(IdMap(t.column("doc_id").to_pylist(), kind="document"),
                      np.asarray(t.column("text").to_pylist(), dtype=object), name=name)


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

    ``System.from_model(model, k1, b, dense_model).open(index_dir, threads=threads)``.
    """
    read_meta(index_dir)  # a clear error when it is not an index, before the model's
    return System.from_model(model, k1, b, dense_model).open(index_dir, threads=threads)


def open_fingerprinted(index_dir: str | os.PathLike, model: str = "bm25", k1: float = DEFAULT_K1,
                       b: float = DEFAULT_B, threads: int | None = None) -> tuple:
    """``(retriever, fingerprint, settings)`` over an index directory (``open_retriever``).

    The fingerprint hashes the index's metadata files, the model and its settings, so that an
    exposure store computed over another index (or with other settings) is recognised;
    ``settings`` records the kind and its parameters (k1, b for BM25), with the encoder's
    identity for dense: :meth:`System.fingerprint` and :meth:`System.settings` (``retriever``).
    """
    read_meta(index_dir)  # a clear error when it is not an index
    spec = System.from_model(model, k1, b)
    retriever = spec.open(index_dir, threads=threads)
    return retriever, spec.fingerprint(index_dir), spec.settings(retriever)


__all__ = ["FORMAT", "build_index", "index_size", "load_docs", "open_fingerprinted",
           "open_retriever", "read_meta"]
