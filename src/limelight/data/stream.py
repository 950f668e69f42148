"""Documents in chunks: a collection read a bounded piece at a time (for indexing at scale).

``document_chunks(name_or_path, chunk_bytes)`` accepts what ``load_collection`` accepts and gives
a ``DocumentChunks``: the collection's name and text fields, and an iterator of ``Collection``
chunks, in document order, whose concatenation is the collection ``load_collection`` returns
(same ids, texts and fields; tested on the shared collections). A JSONL file (``.gz``
transparent) and a folder with ``docs.jsonl`` are *streamed*: never more than about
``chunk_bytes`` of input lines (and at least the first 1,000 documents, which decide the fields,
as ``Collection.from_records`` does) are held at once. Other sources (shared catalogs,
``irds:`` ids) are loaded whole and cut into chunks.

The checks are those of ``read_jsonl_docs``, each a one-line ``FormatError`` naming the line: not
UTF-8, invalid JSON, not an object, a missing or unusable id (``document_id``), a repeated id
(or, for the shared collections, the later copy dropped with a warning); text fields that are
not strings are indexed as their text form, with one warning for the whole file.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from limelight.data.collection import Collection, document_id, first_copy, join_fields
from limelight.data.formats import jsonl_records
from limelight.data.ids import IdMap
from limelight.data.loaders import CATALOGS, SHARED_COLLECTIONS, data_root, load_collection
from limelight.errors import FormatError

DEFAULT_CHUNK_BYTES = 32 << 20
_FIELDS_FROM = 1000  # documents whose keys decide the fields (as Collection.from_records)


@dataclass
class DocumentChunks:
    """A collection as chunks: ``name``, ``text_fields`` (what ``texts`` join) and ``chunks``
    (an iterator of ``Collection``, consumed once); ``streamed`` tells whether the input is
    read piece by piece (else it was loaded whole)."""

    name: str
    text_fields: tuple[str, ...]
    chunks: Iterator[Collection]
    streamed: bool


def document_chunks(name_or_path: str | os.PathLike,
                    chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> DocumentChunks:
    """The documents of ``name_or_path`` (as ``load_collection`` reads them) in chunks of about
    ``chunk_bytes`` of input (see the module docstring)."""
    s = str(name_or_path)
    p = Path(s)
    fields = ("title", "text")
    if s not in CATALOGS and not s.startswith("irds:"):
        if p.is_file() and not (p.name.startswith("catalog.jsonl") or p.suffix == ".json"):
            name = p.stem.split(".")[0]
            return DocumentChunks(name, fields, iter_jsonl_docs(p, chunk_bytes, name=name), True)
        folder = data_root() / "collections" / s if s in SHARED_COLLECTIONS else p
        if not p.is_file() and (folder / "docs.jsonl").is_file():
            dup = "first" if s in SHARED_COLLECTIONS else "error"
            return DocumentChunks(folder.name, fields,
                                  iter_jsonl_docs(folder / "docs.jsonl", chunk_bytes, name=folder.name,
                                                  duplicates=dup), True)
    coll = load_collection(s)
    return DocumentChunks(coll.name, tuple(coll.text_fields), slices(coll, chunk_bytes), False)


def slices(coll: Collection, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[Collection]:
    """``coll`` cut into consecutive chunks of about ``chunk_bytes`` of text (at least one
    document each)."""
    lens = np.fromiter((len(t) if isinstance(t, str) else 0 for t in coll.texts.tolist()),
                       dtype=np.int64, count=len(coll))
    ends = np.cumsum(lens + 1)
    start = 0
    while start < len(coll):
        base = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + chunk_bytes, side="right")))
        stop = min(stop, len(coll))
        yield _slice(coll, start, stop)
        start = stop


def _slice(coll: Collection, a: int, b: int) -> Collection:
    return Collection(IdMap(coll.ids.strings[a:b].tolist(), kind="document"), coll.texts[a:b],
                      {k: v[a:b] for k, v in coll.fields.items()}, coll.name, coll.text_fields)


def iter_jsonl_docs(path: str | os.PathLike, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                    text_fields: tuple[str, ...] = ("title", "text"), id_field: str = "id",
                    name: str | None = None, duplicates: str = "error") -> Iterator[Collection]:
    """The documents of a JSONL file as ``Collection`` chunks of about ``chunk_bytes`` of lines
    (``read_jsonl_docs`` piece by piece: same documents, same checks; see the module docstring).
    """
    path = Path(path)
    name = name or path.parent.name
    seen: set[str] = set()
    keys: list[str] | None = None
    bad: list = [None, 0]  # the first document with a non-string text field, and their count
    n_docs = 0
    for recs, lines in _record_chunks(path, chunk_bytes):
        if keys is None:
            keys = []
            for r in recs[:_FIELDS_FROM]:
                for k in r:
                    if k != id_field and k not in keys:
                        keys.append(k)
        ids: list[str] = []
        keep: list[dict] = []
        for r, line in zip(recs, lines, strict=True):
            did = document_id(r, id_field, path, line)
            kinds = [k for k in text_fields if k in r and not isinstance(r[k], str)]
            if not first_copy(did, seen, duplicates, path, line):
                continue
            if kinds:
                bad[1] += 1
                bad[0] = bad[0] or (line, kinds[0], r[kinds[0]])
            ids.append(did)
            keep.append(r)
        if not keep:
            continue
        n_docs += len(keep)
        fields = {}
        for k in keys:
            col = np.empty(len(keep), dtype=object)
            col[:] = [r.get(k) for r in keep]
            fields[k] = col
        yield Collection(IdMap(ids, kind="document"), join_fields(fields, text_fields, len(keep)),
                         fields, name, tuple(text_fields))
    if bad[0] is not None:
        line, key, value = bad[0]
        warnings.warn(f"{path}: {bad[1]} document(s) with a non-string {' or '.join(text_fields)} "
                      f"(first: line {line}, {key} = {json.dumps(value, default=str)[:40]}), "
                      "indexed as text", stacklevel=2)
    if not n_docs:
        raise FormatError(path, None, "no documents")


def _record_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[list[dict], list[int]]]:
    """JSON objects of a JSONL file with their line numbers, in chunks of about ``chunk_bytes``
    of lines (the first chunk holds at least ``_FIELDS_FROM`` objects)."""
    recs: list[dict] = []
    lines: list[int] = []
    size = 0
    first = True
    for obj, i, n in jsonl_records(path):
        recs.append(obj)
        lines.append(i)
        size += n
        if size >= chunk_bytes and (not first or len(recs) >= _FIELDS_FROM):
            yield recs, lines
            recs, lines, size, first = [], [], 0, False
    if recs:
        yield recs, lines
