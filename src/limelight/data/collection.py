"""``Collection``: documents with an id, the text that is indexed, and optional named fields."""

from __future__ import annotations

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
