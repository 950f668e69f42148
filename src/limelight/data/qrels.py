"""``Qrels``: graded relevance judgments, columnar and grouped by query."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from limelight.data.ids import IdMap, flatten_nested, nest_by_query

if TYPE_CHECKING:  # pandas is imported where used (it costs 0.2 s at start-up)
    import pandas as pd


@dataclass(eq=False)
class Qrels:
    """Judgments ``(query, document) → grade``; rows sorted by query then document code."""

    qids: IdMap
    docids: IdMap
    q: np.ndarray  # int32
    d: np.ndarray  # int32
    rel: np.ndarray  # int32 grade (may be negative: judged non-relevant / spam)
    offsets: np.ndarray  # int64 CSR over qids
    name: str = "qrels"
    # how many of ``docids``' first codes are the qrels' own documents (None: all of them):
    # set when ``with_doc_map`` re-points the qrels onto a longer map (see ``n_own_docs``)
    own_docs: int | None = None

    @property
    def n_own_docs(self) -> int:
        """The documents the qrels know: those of their id map when they were made (the judged
        documents of a qrels file; the whole collection for qrels read against one, as
        ``load_dataset`` reads them), the first codes of ``docids``. A map the qrels were
        re-pointed onto (``with_doc_map`` onto a map that extends theirs) adds other documents
        after them: those do not count; qrels re-encoded onto an unrelated map know all of it."""
        return len(self.docids) if self.own_docs is None else self.own_docs

    @classmethod
    def from_codes(cls, qids: IdMap, docids: IdMap, q, d, rel, name: str = "qrels") -> Qrels:
        q = np.asarray(q, dtype=np.int32)
        d = np.asarray(d, dtype=np.int32)
        rel = np.asarray(rel, dtype=np.int32)
        order = np.lexsort((d, q))
        q, d, rel = q[order], d[order], rel[order]
        if len(q) > 1:
            dup = (q[1:] == q[:-1]) & (d[1:] == d[:-1])
            if dup.any():
                i = int(np.flatnonzero(dup)[0])
                raise ValueError(
                    f"duplicate judgment for query {qids[q[i]]!r}, document {docids[d[i]]!r}")
        offsets = np.zeros(len(qids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(q, minlength=len(qids)), out=offsets[1:])
        return cls(qids, docids, q, d, rel, offsets, name)

    @classmethod
    def from_arrays(cls, qids: Iterable[str], docids: Iterable[str], rels: Iterable[int],
                    name: str = "qrels", doc_map: IdMap | None = None) -> Qrels:
        qmap, q = IdMap.from_unique(list(qids), kind="query")
        if doc_map is None:
            doc_map, d = IdMap.from_unique(list(docids), kind="document")
        else:
            d = doc_map.encode(docids)
        return cls.from_codes(qmap, doc_map, q, d, np.asarray(list(rels), dtype=np.int32), name)

    @classmethod
    def from_dict(cls, qrels: Mapping[str, Mapping[str, int]], name: str = "qrels") -> Qrels:
        """From ``{qid: {docid: grade}}``."""
        qs, ds, rs = flatten_nested(qrels)
        return cls.from_arrays(qs, ds, [int(v) for v in rs], name)

    @classmethod
    def from_pandas(cls, df: pd.DataFrame, name: str = "qrels") -> Qrels:
        """From ``query_id, doc_id, relevance`` (ir_measures) or ``qid, docno, label`` columns."""
        qcol = "query_id" if "query_id" in df.columns else "qid"
        dcol = "doc_id" if "doc_id" in df.columns else "docno"
        rcol = "relevance" if "relevance" in df.columns else "label"
        return cls.from_arrays(df[qcol].astype(str).tolist(), df[dcol].astype(str).tolist(),
                               df[rcol].astype(int).tolist(), name)

    @classmethod
    def from_ir_measures(cls, qrels: Iterable, name: str = "qrels") -> Qrels:
        rows = list(qrels)
        return cls.from_arrays([r[0] for r in rows], [r[1] for r in rows],
                               [int(r[2]) for r in rows], name)

    @classmethod
    def from_ranx(cls, qrels, name: str = "qrels") -> Qrels:
        return cls.from_dict(qrels.to_dict(), name)

    def __len__(self) -> int:
        return len(self.q)

    def __repr__(self) -> str:
        return f"Qrels({self.name!r}, queries={len(self.qids)}, judgments={len(self)})"

    def n_relevant(self, threshold: int = 1) -> np.ndarray:
        """Number of documents with grade ≥ ``threshold`` per query."""
        return np.bincount(self.q[self.rel >= threshold], minlength=len(self.qids))

    def query(self, qid: str) -> dict[str, int]:
        i = self.qids.lookup(qid)
        s, e = self.offsets[i], self.offsets[i + 1]
        return dict(zip(self.docids.decode(self.d[s:e]).tolist(), self.rel[s:e].tolist(), strict=True))

    def with_doc_map(self, doc_map: IdMap, drop_unknown: bool = False) -> Qrels:
        """Re-encode documents under ``doc_map``; unknown ids raise unless ``drop_unknown``."""
        if doc_map is self.docids:
            return self
        if doc_map.has_prefix(self.docids):  # same codes: re-point, no re-encoding
            return Qrels(self.qids, doc_map, self.q, self.d, self.rel, self.offsets, self.name,
                         self.n_own_docs)
        recode = doc_map.encode(self.docids.strings, missing=-1 if drop_unknown else None)
        d = recode[self.d]
        keep = d >= 0
        return Qrels.from_codes(self.qids, doc_map, self.q[keep], d[keep], self.rel[keep], self.name)

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({"query_id": self.qids.decode(self.q), "doc_id": self.docids.decode(self.d),
                             "relevance": self.rel})

    def to_dict(self) -> dict[str, dict[str, int]]:
        return nest_by_query(self.qids, self.offsets, self.docids.decode(self.d).tolist(),
                             self.rel.tolist(), skip_empty=True)

    def to_ir_measures(self) -> list:
        from ir_measures import Qrel

        return [Qrel(q, d, r) for q, d, r in zip(self.qids.decode(self.q).tolist(),
                                                  self.docids.decode(self.d).tolist(),
                                                  self.rel.tolist(), strict=True)]

    def to_ranx(self):
        from ranx import Qrels as RanxQrels

        return RanxQrels(self.to_dict(), name=self.name)
