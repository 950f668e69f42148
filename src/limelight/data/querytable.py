"""``QueryTable``: a query set that stays on disk (issue 44: logs of tens of millions of lines).

The table is one Arrow IPC file (``qid, text, weight`` and any other string columns, such as a
log's ``source``), written by ``limelight.data.querylog.distinct_log_table``. A ``QueryTable`` is
a ``Queries`` whose weights only are held in memory (8 bytes a query); the rows an exposure job
needs are read a batch at a time (``texts_between``, ``arrow_rows``, ``slice``, ``column_batches``)
with ordinary reads, not a memory map, so that the process holds the batches it works on and not
the pages of every batch it has read. The other columns (``ids``, ``texts``, ``fields``) are
built whole on first use, for code that needs them all (then the table costs what an in-memory
query set costs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from limelight.data.ids import IdMap, arrow_numpy
from limelight.data.queries import Queries
from limelight.errors import LimelightError

if TYPE_CHECKING:
    import pyarrow as pa

_CORE = ("qid", "text", "weight")


class QueryTable(Queries):
    """The query set in the Arrow IPC file ``path`` (see the module docstring)."""

    on_disk: ClassVar[bool] = True

    def __init__(self, path: str | os.PathLike, name: str | None = None):
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self.path = Path(path)
        try:
            self._file = ipc.open_file(pa.OSFile(str(self.path)))
        except (OSError, pa.ArrowInvalid) as e:
            raise LimelightError(f"{self.path}: not a query table ({e})") from None
        missing = [c for c in _CORE if c not in self._file.schema.names]
        if missing:
            raise LimelightError(f"{self.path}: not a query table (no column {missing[0]!r})")
        meta = self._file.schema.metadata or {}
        self.name = name or meta.get(b"name", b"queries").decode("utf-8")
        self.intents = None
        # where each batch starts (each batch read once for its length, and let go)
        sizes = [self._file.get_record_batch(i).num_rows for i in range(self._file.num_record_batches)]
        self._starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self._starts[1:])
        self._weights: np.ndarray | None = None
        self._ids: IdMap | None = None
        self._texts: np.ndarray | None = None
        self._fields: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __repr__(self) -> str:
        return f"QueryTable({self.name!r}, n={len(self)}, path={str(self.path)!r})"

    def __reduce__(self):  # (a task shipping it reopens the file)
        return (QueryTable, (self.path, self.name))

    # -- reading rows --
    def _batches(self, start: int, stop: int) -> Iterator[pa.RecordBatch]:
        """The rows ``start:stop`` as slices of the file's record batches, in order."""
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        for i in range(max(first, 0), len(self._starts) - 1):
            s, e = int(self._starts[i]), int(self._starts[i + 1])
            if s >= stop:
                break
            lo, hi = max(start, s), min(stop, e)
            if lo < hi:
                yield self._file.get_batch(i).slice(lo - s, hi - lo)

    def arrow_rows(self, start: int = 0, stop: int | None = None) -> pa.Table:
        import pyarrow as pa

        stop = len(self) if stop is None else min(stop, len(self))
        parts = list(self._batches(start, stop))
        if not parts:
            t = pa.Table.from_batches([], schema=self._file.schema)
        else:
            t = pa.Table.from_batches(parts).combine_chunks()
        return t.select(list(_CORE)).replace_schema_metadata(None)

    def texts_between(self, start: int, stop: int) -> list[str]:
        import pyarrow as pa

        parts = [b.column("text") for b in self._batches(start, stop)]
        return pa.chunked_array(parts, pa.string()).to_pylist() if parts else []

    def column_batches(self, column: str, size: int = 1 << 16) -> Iterator[list | np.ndarray]:
        """As ``Queries.column_batches``: ``size`` values at a time (the last: the rest), read
        from the file's record batches that hold them."""
        if size < 1:
            raise LimelightError(f"batch size must be ≥ 1, got {size}")
        for s in range(0, len(self), size):
            parts = [b.column(column) for b in self._batches(s, s + size)]
            if column == "weight":
                yield np.concatenate([arrow_numpy(p) for p in parts])
            else:
                yield [x for p in parts for x in p.to_pylist()]

    def slice(self, start: int, stop: int) -> Queries:
        import pyarrow as pa

        parts = list(self._batches(start, stop))
        t = pa.Table.from_batches(parts, schema=self._file.schema).combine_chunks()
        return _from_arrow(t, self.name)

    def take(self, idx: np.ndarray) -> Queries:
        """The queries at positions ``idx`` (only the batches that hold them are read)."""
        import pyarrow as pa

        idx = np.asarray(idx, dtype=np.int64)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"query position out of range 0..{len(self) - 1}")
        b = np.searchsorted(self._starts, idx, side="right") - 1
        order = np.argsort(b, kind="stable")
        parts, bs = [], b[order]
        cuts = np.flatnonzero(np.diff(bs)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(idx)], strict=True):
            if lo < hi:
                i = int(bs[lo])
                parts.append(self._file.get_batch(i).take(pa.array(idx[order[lo:hi]] - self._starts[i])))
        t = pa.Table.from_batches(parts, schema=self._file.schema).combine_chunks()
        inverse = np.empty(len(idx), dtype=np.int64)
        inverse[order] = np.arange(len(idx))
        return _from_arrow(t.take(pa.array(inverse)), self.name)

    def check_nonempty(self) -> None:
        for b in self._batches(0, len(self)):
            texts = b.column("text").to_pylist()
            bad = [i for i, t in enumerate(texts) if t is None or not t.strip()]
            if bad:
                raise LimelightError(f"query {b.column('qid')[bad[0]].as_py()!r} is empty")

    def has_field(self, name: str) -> bool:
        names = self._file.schema.names
        return (name in names and name not in _CORE) or (name == "log_id" and "source" in names)

    # -- whole columns, built on first use --
    @property
    def weights(self) -> np.ndarray:  # type: ignore[override]
        if self._weights is None:
            parts = list(self.column_batches("weight"))
            self._weights = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
        return self._weights

    @property
    def ids(self) -> IdMap:  # type: ignore[override]
        if self._ids is None:
            self._ids = IdMap.from_arrow(self._column("qid"), kind="query")
        return self._ids

    @property
    def texts(self) -> np.ndarray:  # type: ignore[override]
        if self._texts is None:
            self._texts = _objects(self._column("text"))
        return self._texts

    @property
    def fields(self) -> dict[str, np.ndarray]:  # type: ignore[override]
        if self._fields is None:
            self._fields = {c: _objects(self._column(c)) for c in self._file.schema.names
                            if c not in _CORE}
            if "source" in self._fields:  # as the in-memory log reader gives them
                self._fields["log_id"] = self.ids.strings
        return self._fields

    def _column(self, name: str):
        import pyarrow as pa

        parts = [self._file.get_batch(i).column(name) for i in range(self._file.num_record_batches)]
        return pa.chunked_array(parts, pa.string()).combine_chunks()


def _objects(arr) -> np.ndarray:
    out = np.empty(len(arr), dtype=object)
    out[:] = arr.to_pylist()
    return out


def _from_arrow(t: pa.Table, name: str) -> Queries:
    """An in-memory ``Queries`` of the rows of table ``t`` (the ids known distinct)."""
    fields = {c: _objects(t.column(c)) for c in t.column_names if c not in _CORE}
    if "source" in fields:
        fields["log_id"] = _objects(t.column("qid"))
    return Queries(IdMap.from_arrow(t.column("qid").combine_chunks(), kind="query"),
                   _objects(t.column("text")), arrow_numpy(t.column("weight").combine_chunks()).copy(),
                   fields=fields, name=name)


def write_query_table(queries: Queries, path: str | os.PathLike, batch: int = 1 << 16) -> Path:
    """Write ``queries`` (``qid, text, weight`` and its string fields but ``log_id``) as a query
    table at ``path`` (atomically), ``batch`` rows per record batch; returns the path."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from limelight._io import atomic_path

    extra = [c for c in queries.fields if c != "log_id"]
    schema = pa.schema([("qid", pa.string()), ("text", pa.string()), ("weight", pa.float64()),
                        *[(c, pa.string()) for c in extra]], metadata={"name": queries.name})
    with atomic_path(path) as tmp, ipc.new_file(str(tmp), schema) as w:
        for s in range(0, len(queries), batch):
            e = min(len(queries), s + batch)
            t = queries.arrow_rows(s, e)
            for c in extra:
                t = t.append_column(c, pa.array(queries.fields[c][s:e].tolist(), pa.string()))
            w.write_table(t, max_chunksize=batch)
    return Path(path)
