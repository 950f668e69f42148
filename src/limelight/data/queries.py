"""``Queries``: query ids and texts, with optional weights o_q and intent labels."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from limelight.data.ids import IdMap
from limelight.errors import LimelightError

if TYPE_CHECKING:  # pandas is imported where used (it costs 0.2 s at start-up)
    import pandas as pd
    import pyarrow as pa

_BLANK = re.compile(r"\x00[^\S\x00]*\x00")  # an empty or blank text between two separators



def normalise_texts(texts: Iterable[str]) -> np.ndarray:
    """Query texts as the query log is read (``load_query_log``): lowercased, every run of
    whitespace one space, no leading or trailing blanks (an object array). Queries matched by
    text (a ``run`` system's results, the log's distinct queries) are compared in this form."""
    return np.asarray([" ".join(str(t).lower().split()) for t in texts], dtype=object)


def check_query_text(text: str) -> str:
    """The one rule for a query typed by a user (``limelight search``, the web app's search): a
    blank text (empty or whitespace only) is an error, never a search with no results."""
    if text is None or not str(text).strip():
        raise LimelightError("empty query")
    return str(text)

@dataclass(eq=False)
class Queries:
    """A query set. ``weights`` (o_q, default 1) weight a query in retrievability; ``intents``
    label it (e.g. ``narrow``/``broad``); ``fields`` hold any other per-query columns."""

    ids: IdMap
    texts: np.ndarray  # object array of str
    weights: np.ndarray = field(default=None)  # float64
    intents: np.ndarray | None = None  # object array or None
    fields: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "queries"
    # whether the set is read from disk as it is used (``limelight.data.querytable``): then the
    # row methods below read only the rows asked for, and the whole columns are built on demand
    on_disk: ClassVar[bool] = False

    def __post_init__(self):
        self.texts = np.asarray(self.texts, dtype=object)
        if len(self.texts) != len(self.ids):
            raise ValueError("ids and texts differ in length")
        if self.weights is None:
            self.weights = np.ones(len(self.ids), dtype=np.float64)
        else:
            self.weights = np.asarray(self.weights, dtype=np.float64)
            bad = ~np.isfinite(self.weights) | (self.weights < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise LimelightError(
                    f"query {self.ids[i]!r}: weight must be a finite number ≥ 0, got {self.weights[i]}")

    @classmethod
    def from_lists(cls, ids: Iterable[str], texts: Iterable[str], weights=None, intents=None,
                   name: str = "queries") -> Queries:
        return cls(IdMap(list(ids), kind="query"), np.asarray(list(texts), dtype=object),
                   None if weights is None else np.asarray(weights, dtype=np.float64),
                   None if intents is None else np.asarray(list(intents), dtype=object), name=name)

    @classmethod
    def from_dict(cls, queries: Mapping[str, str], name: str = "queries") -> Queries:
        return cls.from_lists(list(queries.keys()), list(queries.values()), name=name)

    @classmethod
    def from_pandas(cls, df: pd.DataFrame, name: str = "queries") -> Queries:
        """From ``query_id, text`` (ir_datasets) or ``qid, query`` (PyTerrier) columns, with
        optional ``weight`` and ``intent``."""
        qcol = "query_id" if "query_id" in df.columns else "qid"
        tcol = "text" if "text" in df.columns else "query"
        extra = {c: df[c].to_numpy(object) for c in df.columns
                 if c not in (qcol, tcol, "weight", "intent")}
        return cls(IdMap(df[qcol].astype(str).tolist(), kind="query"),
                   df[tcol].astype(str).to_numpy(object),
                   df["weight"].to_numpy(np.float64) if "weight" in df.columns else None,
                   df["intent"].to_numpy(object) if "intent" in df.columns else None,
                   extra, name)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"Queries({self.name!r}, n={len(self)})"

    def __getitem__(self, qid: str) -> str:
        return self.texts[self.ids.lookup(qid)]

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        df = pd.DataFrame({"query_id": self.ids.strings, "text": self.texts, "weight": self.weights})
        if self.intents is not None:
            df["intent"] = self.intents
        for k, v in self.fields.items():
            df[k] = v
        return df

    def to_dict(self) -> dict[str, str]:
        return dict(zip(self.ids, self.texts.tolist(), strict=True))

    def take(self, idx: np.ndarray) -> Queries:
        """The queries at positions ``idx`` (a new, re-interned query set)."""
        idx = np.asarray(idx)
        return Queries(IdMap(self.ids.strings[idx], kind="query"), self.texts[idx],
                       self.weights[idx], None if self.intents is None else self.intents[idx],
                       {k: v[idx] for k, v in self.fields.items()}, self.name)

    def slice(self, start: int, stop: int) -> Queries:
        """The queries at positions ``start:stop`` (in memory, whatever holds this set)."""
        return self.take(np.arange(start, min(stop, len(self))))

    def texts_between(self, start: int, stop: int) -> list[str]:
        """The texts of the queries at positions ``start:stop``, as a list."""
        return self.texts[start:stop].tolist()

    def arrow_rows(self, start: int = 0, stop: int | None = None) -> pa.Table:
        """``qid, text, weight`` of the queries at positions ``start:stop`` as an Arrow table."""
        import pyarrow as pa

        stop = len(self) if stop is None else min(stop, len(self))
        return pa.table({"qid": pa.array(self.ids.strings[start:stop].tolist(), pa.string()),
                         "text": pa.array(self.texts[start:stop].tolist(), pa.string()),
                         "weight": pa.array(self.weights[start:stop], pa.float64())})

    def column_batches(self, column: str, size: int = 1 << 16) -> Iterator[list | np.ndarray]:
        """The ``"qid"``, ``"text"`` (lists) or ``"weight"`` (float64 arrays) column in order,
        a batch of (at most) ``size`` values at a time."""
        if column == "weight":
            for s in range(0, len(self), size):
                yield self.weights[s:s + size]
            return
        col = self.ids.strings if column == "qid" else self.texts
        for s in range(0, len(self), size):
            yield col[s:s + size].tolist()

    def has_field(self, name: str) -> bool:
        """Whether the set has the per-query column ``name`` in ``fields`` (asked of a set read
        from disk without building its columns)."""
        return name in self.fields

    def head(self, n: int) -> Queries:
        return self.take(np.arange(min(n, len(self))))

    def sample(self, n: int, seed: int = 0) -> Queries:
        """``n`` queries drawn without replacement (seeded), in original order."""
        if n >= len(self):
            return self
        rng = np.random.default_rng(seed)
        return self.take(np.sort(rng.choice(len(self), size=n, replace=False)))

    def check_nonempty(self) -> None:
        """Raise naming the first query whose text is empty or blank."""
        batch = 1 << 16  # one regex pass per batch (not one joined copy of every text)
        for s in range(0, len(self.texts), batch):
            texts = self.texts[s:s + batch].tolist()
            try:  # the loop below only runs to name the culprit
                if not _BLANK.search("\x00" + "\x00".join(texts) + "\x00"):
                    continue
            except TypeError:  # a text that is not a string
                pass
            for i, t in enumerate(texts, start=s):
                if not isinstance(t, str) or not t.strip():
                    raise LimelightError(f"query {self.ids[i]!r} is empty")
