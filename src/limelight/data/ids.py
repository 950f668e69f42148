"""Interned string ids: one ``IdMap`` maps the ids of a collection or query set to int32 and back.

Ids are never hashed to numbers (ranx hashes them to float64, where collisions are possible).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from limelight.errors import UnknownIdError


class IdMap:
    """An ordered, immutable set of string ids with O(1) lookup both ways.

    ``ids[i]`` is the string of int id ``i``; ``index[s]`` the int id of string ``s``.
    """

    __slots__ = ("_ids", "_index", "_order", "kind")

    def __init__(self, ids: Iterable[str], kind: str = "id"):
        arr = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=object)
        self._ids: np.ndarray = arr
        self._index: dict[str, int] = {s: i for i, s in enumerate(arr.tolist())}
        if len(self._index) != len(arr):
            seen: set[str] = set()
            dup = next(s for s in arr.tolist() if s in seen or seen.add(s))
            raise ValueError(f"duplicate {kind} id {dup!r}")
        self._order: np.ndarray | None = None
        self.kind = kind

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

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self):
        return iter(self._ids.tolist())

    def __contains__(self, s: object) -> bool:
        return s in self._index

    def __getitem__(self, i: int) -> str:
        return self._ids[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdMap) and (
            self is other or (len(self) == len(other) and bool(np.all(self._ids == other._ids)))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IdMap({self.kind}, n={len(self)})"

    @property
    def strings(self) -> np.ndarray:
        """The ids as a numpy object array, in int-id order."""
        return self._ids

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
        return self._ids[np.asarray(codes)]

    def lexical_rank(self) -> np.ndarray:
        """For each int id, its position in byte-wise string order (trec_eval's tie order)."""
        if self._order is None:
            keys = np.array([s.encode("utf-8") for s in self._ids.tolist()], dtype=object)
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
        return IdMap(np.concatenate([self._ids, np.asarray(extra, dtype=object)]), self.kind)
