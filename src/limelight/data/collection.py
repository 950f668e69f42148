"""``Collection``: documents with an id, the text that is indexed, and optional named fields."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from limelight.data.ids import IdMap

if TYPE_CHECKING:  # pandas is imported where used (it costs 0.2 s at start-up)
    import pandas as pd


@dataclass(eq=False)
class Collection:
    """Documents. ``texts`` is what lexical and dense indexing read; ``fields`` keep the
    structured columns (title, catalog metadata such as ``section`` or ``tags``)."""

    ids: IdMap
    texts: np.ndarray  # object array of str
    fields: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "collection"
    text_fields: tuple[str, ...] = ()  # fields joined into ``texts``, for provenance

    def __post_init__(self):
        self.texts = np.asarray(self.texts, dtype=object)
        if len(self.texts) != len(self.ids):
            raise ValueError("ids and texts differ in length")

    @classmethod
    def from_records(cls, records: Sequence[dict], text_fields: Sequence[str] = ("title", "text"),
                     id_field: str = "id", name: str = "collection") -> Collection:
        """Build from dict records; ``texts`` joins ``text_fields`` (lists joined by spaces)."""
        ids = [str(r[id_field]) for r in records]
        keys: list[str] = []
        for r in records[:1000]:
            for k in r:
                if k != id_field and k not in keys:
                    keys.append(k)
        fields = {k: np.asarray([r.get(k) for r in records], dtype=object) for k in keys}
        texts = join_fields(fields, text_fields, len(ids))
        return cls(IdMap(ids, kind="document"), texts, fields, name, tuple(text_fields))

    @classmethod
    def from_pandas(cls, df: pd.DataFrame, text_fields: Sequence[str] = ("title", "text"),
                    id_field: str | None = None, name: str = "collection") -> Collection:
        id_field = id_field or next(c for c in ("doc_id", "docno", "id") if c in df.columns)
        return cls.from_records(df.to_dict("records"), text_fields, id_field, name)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"Collection({self.name!r}, n={len(self)})"

    def doc(self, docid: str) -> dict:
        """One document as a dict: id, every field, and ``indexed_text`` (what indexes read)."""
        i = self.ids.lookup(docid)
        out = {"id": docid}
        out.update({k: v[i] for k, v in self.fields.items()})
        out["indexed_text"] = self.texts[i]
        return out

    def field(self, name: str) -> np.ndarray:
        from limelight.errors import LimelightError

        if name not in self.fields:
            raise LimelightError(f"collection {self.name!r} has no field {name!r} "
                                 f"(fields: {', '.join(self.fields) or 'none'})")
        return self.fields[name]

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        df = pd.DataFrame({"doc_id": self.ids.strings, "text": self.texts})
        for k, v in self.fields.items():
            df[k] = v
        return df

    def head(self, n: int) -> Collection:
        idx = np.arange(min(n, len(self)))
        return Collection(IdMap(self.ids.strings[idx], kind="document"), self.texts[idx],
                          {k: v[idx] for k, v in self.fields.items()}, self.name, self.text_fields)


def _as_text(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    if isinstance(v, list | tuple | np.ndarray):
        return " ".join(_as_text(x) for x in v)
    return str(v)


def join_fields(fields: dict[str, np.ndarray], names: Iterable[str], n: int) -> np.ndarray:
    """Join the named fields of each document with single spaces (missing values skipped)."""
    cols = [fields[k].tolist() for k in names if k in fields]
    out = np.empty(n, dtype=object)
    out[:] = [" ".join(s for s in map(_as_text, vals) if s) for vals in zip(*cols, strict=True)] if cols else [""] * n
    return out


def document_id(record: dict, id_field: str, where: str | os.PathLike, line: int | None) -> str:
    """The id of one document record as TREC run and qrels files hold it (a string; an integer
    is written in decimal). What those whitespace-separated lines cannot hold is refused with a
    ``FormatError`` naming ``where:line``: a missing or null id, an empty one, one with a space,
    tab or any other whitespace, and one that is not a string or an integer."""
    from limelight.errors import FormatError

    if id_field not in record:
        raise FormatError(where, line, f"document without {id_field!r}")
    v = record[id_field]
    if v is None:
        raise FormatError(where, line, f"document {id_field!r} is null: every document needs an id")
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise FormatError(where, line, f"document {id_field!r} must be a string or an integer, not "
                                       f"{type(v).__name__} ({str(v)[:40]!r})")
    s = str(v)
    if not s:
        raise FormatError(where, line, f"empty document {id_field!r}: every document needs an id")
    if any(c.isspace() for c in s):
        raise FormatError(where, line, f"document id {s!r} contains whitespace: TREC run and qrels "
                                       "lines are whitespace-separated, so no run could name it")
    return s


def first_copy(did: str, seen: set[str], duplicates: str, where: str | os.PathLike,
               line: int | None) -> bool:
    """Whether document ``did`` (at ``where:line``) is the first with its id (then added to
    ``seen``). A repeated id is a ``FormatError`` naming the line, or with ``duplicates="first"``
    dropped with a warning (``False``: the reader skips it)."""
    if did not in seen:
        seen.add(did)
        return True
    if duplicates != "first":
        from limelight.errors import FormatError

        raise FormatError(where, line, f"duplicate document id {did!r}")
    warnings.warn(f"{where}:{line}: duplicate document id {did!r} dropped (first kept)", stacklevel=3)
    return False


def check_documents(records: Sequence[dict], lines: Sequence[int], text_fields: Sequence[str],
                    id_field: str, where: str | os.PathLike) -> None:
    """Check documents read from ``where`` (``lines``: each record's line) before they are
    indexed: every id is one TREC files can hold (``document_id``: else a one-line error naming
    the line), and a text field (``text_fields``: title, text) that holds something other than
    a string (null, a number, a list, an object) is indexed as its text form, with one warning
    that counts the documents concerned and names the first."""
    import json
    import warnings

    first, n = None, 0
    for r, line in zip(records, lines, strict=True):
        document_id(r, id_field, where, line)
        bad = [k for k in text_fields if k in r and not isinstance(r[k], str)]
        if bad:
            n += 1
            first = first or (line, bad[0], r[bad[0]])
    if first is not None:
        line, key, value = first
        warnings.warn(f"{where}: {n} document(s) with a non-string {' or '.join(text_fields)} "
                      f"(first: line {line}, {key} = {json.dumps(value, default=str)[:40]}), "
                      "indexed as text", stacklevel=3)
