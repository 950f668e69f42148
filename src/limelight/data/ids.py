"""Interned string ids: one ``IdMap`` maps the ids of a collection or query set to int32 and back.

Ids are never hashed to numbers (ranx hashes them to float64, where collisions are possible).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from limelight.errors import UnknownIdError


def flatten_nested(nested: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[str], list[Any]]:
    """``{qid: {docid: value}}`` (qrels' grades, a run's scores) → ``(qids, docids, values)``,
    one entry per pair, in the dictionaries' order."""
    qs: list[str] = []
    ds: list[str] = []
    vs: list[Any] = []
    for qid, docs in nested.items():
        qs.extend([qid] * len(docs))
        ds.extend(docs.keys())
        vs.extend(docs.values())
    return qs, ds, vs


def nest_by_query(qids: Iterable[str], offsets: np.ndarray, docs: list[str], values: list[Any],
                  skip_empty: bool) -> dict[str, dict[str, Any]]:
    """The inverse of ``flatten_nested`` for rows grouped by query (query ``i``'s rows are
    ``offsets[i]:offsets[i + 1]``): ``{qid: {docid: value}}``, without the queries that have no
    row when ``skip_empty``."""
    out: dict[str, dict[str, Any]] = {}
    for i, qid in enumerate(qids):
        s, e = int(offsets[i]), int(offsets[i + 1])
        if e > s or not skip_empty:
            out[qid] = dict(zip(docs[s:e], values[s:e], strict=True))
    return out


def arrow_numpy(arr) -> np.ndarray:
    """A numeric ``pyarrow`` array as numpy, zero-copy from its data buffer when it has no
    nulls (``Array.to_numpy`` would load pyarrow's pandas shim, which imports pandas)."""
    if arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    dtype = np.dtype(arr.type.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset:arr.offset + len(arr)]


def _arrow_byte_order(arr, limit: int = 1 << 27) -> np.ndarray | None:
    """Stable argsort of an Arrow string array in byte-wise (UTF-8, strcmp) order, on a
    zero-padded ``(n, longest)`` byte matrix viewed as numpy ``S`` strings (``pyarrow.compute``
    would cost 0.13 s to import); ``None`` when that matrix would exceed ``limit`` bytes, or for
    nulls or NUL bytes."""
    n = len(arr)
    if arr.null_count or n == 0:
        return None if arr.null_count else np.zeros(0, dtype=np.int64)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + n + 1]
    lens = np.diff(offsets).astype(np.int64)
    width = max(int(lens.max()), 1)
    if n * width > limit:
        return None
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    if not data.all():  # a NUL byte: numpy's S strings would ignore it at the end
        return None
    mat = np.zeros((n, width), dtype=np.uint8)
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    mat[rows, cols] = data
    return np.argsort(mat.view(f"S{width}").ravel(), kind="stable")


class IdMap:
    """An ordered, immutable set of string ids with O(1) lookup both ways.

    ``ids[i]`` is the string of int id ``i``; ``index[s]`` the int id of string ``s``.
    A map read from a file keeps its ids as one Arrow string array (a few bytes per id, no Python
    object per id); the numpy object array (``strings``) and the lookup dictionary are built on
    first use only.
    """

    __slots__ = ("_ids", "_arrow", "_index_d", "_order", "_base", "kind")

    def __init__(self, ids: Iterable[str], kind: str = "id"):
        arr = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=object)
        self._ids: np.ndarray | None = arr
        self._arrow = None
        self._index_d: dict[str, int] | None = {s: i for i, s in enumerate(arr.tolist())}
        if len(self._index_d) != len(arr):
            seen: set[str] = set()
            dup = next(s for s in arr.tolist() if s in seen or seen.add(s))
            raise ValueError(f"duplicate {kind} id {dup!r}")
        self._order: np.ndarray | None = None
        self._base: IdMap | None = None
        self.kind = kind

    @classmethod
    def from_arrow(cls, ids, kind: str = "id", base: IdMap | None = None) -> IdMap:
        """A map over a ``pyarrow`` string array of ids **known to be distinct** (e.g. the
        dictionary of ``dictionary_encode``); nothing is copied into Python objects.

        ``base``: a map whose ids are the first ``len(base)`` ids of this one (same codes), so
        that data coded under ``base`` can be re-pointed to this map without re-encoding.
        """
        m = cls.__new__(cls)
        m._ids, m._arrow, m._index_d, m._order, m._base, m.kind = None, ids, None, None, base, kind
        return m

    @classmethod
    def from_unique(cls, values: Sequence[str], kind: str = "id") -> tuple[IdMap, np.ndarray]:
        """Intern ``values`` (with repeats) in first-seen order; return the map and int32 codes."""
        arr = np.asarray(values, dtype=object)
        if len(arr) == 0:
            return cls([], kind), np.zeros(0, dtype=np.int32)
        uniq, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # first-seen order
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        m = cls(uniq[order], kind)
        m._order = None
        return m, rank[inverse.reshape(-1)].astype(np.int32)

    # ---- lazily built views -----------------------------------------------------------------
    @property
    def _index(self) -> dict[str, int]:
        """The string → int id dictionary (built on first use)."""
        if self._index_d is None:
            self._index_d = {s: i for i, s in enumerate(self.strings.tolist())}
        return self._index_d

    @property
    def strings(self) -> np.ndarray:
        """The ids as a numpy object array, in int-id order."""
        if self._ids is None:
            ids = np.empty(len(self._arrow), dtype=object)
            ids[:] = self._arrow.to_pylist()
            self._ids = ids
        return self._ids

    def to_arrow(self):
        """The ids as a ``pyarrow`` string array, in int-id order."""
        if self._arrow is None:
            import pyarrow as pa

            self._arrow = pa.array(self._ids.tolist(), type=pa.string())
        return self._arrow

    def has_prefix(self, other: IdMap) -> bool:
        """True when ``other``'s ids are this map's first ids, with the same codes (known
        without comparing strings when this map was built by extending ``other``)."""
        m: IdMap | None = self
        while m is not None:
            if m is other:
                return True
            m = m._base
        return False

    def nbytes(self) -> int:
        """Approximate resident size of the map (Arrow buffers, or Python objects if built)."""
        import sys

        total = 0
        if self._arrow is not None:
            total += self._arrow.nbytes
        if self._ids is not None:
            total += self._ids.nbytes + sum(sys.getsizeof(s) for s in self._ids.tolist())
        if self._index_d is not None:
            total += sys.getsizeof(self._index_d)
        if self._order is not None:
            total += self._order.nbytes
        return total

    def __len__(self) -> int:
        return len(self._ids) if self._ids is not None else len(self._arrow)

    def __iter__(self):
        return iter(self.strings.tolist())

    def __contains__(self, s: object) -> bool:
        return s in self._index

    def __getitem__(self, i: int) -> str:
        if self._ids is None:
            return self._arrow[int(i)].as_py()
        return self._ids[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdMap) and (
            self is other or (len(self) == len(other) and bool(np.all(self.strings == other.strings)))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IdMap({self.kind}, n={len(self)})"

    def get(self, s: str, default: int = -1) -> int:
        return self._index.get(s, default)

    def lookup(self, s: str) -> int:
        """The int id of ``s``; ``UnknownIdError`` if absent."""
        try:
            return self._index[s]
        except KeyError:
            raise UnknownIdError(self.kind, s) from None

    def encode(self, values: Iterable[str], missing: int | None = None) -> np.ndarray:
        """int32 codes of ``values``; unknown ids raise, or map to ``missing`` when given."""
        idx = self._index
        if missing is None:
            try:
                return np.fromiter((idx[v] for v in values), dtype=np.int32)
            except KeyError as e:
                raise UnknownIdError(self.kind, e.args[0]) from None
        return np.fromiter((idx.get(v, missing) for v in values), dtype=np.int32)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The string ids of int codes (an object array)."""
        return self.strings[np.asarray(codes)]

    def lexical_rank(self) -> np.ndarray:
        """For each int id, its position in byte-wise string order (trec_eval's tie order)."""
        if self._order is None:
            order = _arrow_byte_order(self._arrow) if self._arrow is not None else None
            if order is None:
                keys = np.array([s.encode("utf-8") for s in self.strings.tolist()], dtype=object)
                order = np.argsort(keys, kind="stable")
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            self._order = rank
        return self._order

    def union(self, other: IdMap) -> IdMap:
        """This map extended with the ids of ``other`` that it lacks (existing codes kept)."""
        extra = [s for s in other if s not in self._index]
        if not extra:
            return self
        m = IdMap(np.concatenate([self.strings, np.asarray(extra, dtype=object)]), self.kind)
        m._base = self
        return m
