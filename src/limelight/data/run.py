"""``Run``: ranked documents with scores for each query, stored columnar with CSR offsets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from limelight.data.ids import IdMap, flatten_nested, nest_by_query

if TYPE_CHECKING:  # pandas is imported where used (it costs 0.2 s at start-up)
    import pandas as pd


def _order_rows(q: np.ndarray, score: np.ndarray, lex: np.ndarray) -> np.ndarray | None:
    """Row order: by query, score descending, then docid descending (trec_eval's tie rule);
    ``None`` when the rows are already in that order (runs as search engines write them)."""
    if len(q) > 1:
        dq = q[1:].astype(np.int64) - q[:-1]
        if (dq >= 0).all():
            same = dq == 0
            ds = score[1:] - score[:-1]
            if not (same & (ds > 0)).any():  # grouped by query, scores descending
                tie = same & (ds == 0)
                if not (tie & (lex[1:] >= lex[:-1])).any():
                    return None
                # only ties are out of order: sort each run of equal (query, score) by docid
                group = np.concatenate(([0], np.cumsum(~tie)))
                top = int(lex.max()) + 1
                return np.argsort(group * top + (top - 1 - lex), kind="stable")
    return np.lexsort((-lex, -score, q))
def _csr(q: np.ndarray, nq: int) -> np.ndarray:
    offsets = np.zeros(nq + 1, dtype=np.int64)
    np.cumsum(np.bincount(q, minlength=nq), out=offsets[1:])
    return offsets


@dataclass(eq=False)
class Run:
    """A ranking per query.

    Rows are grouped by query (``offsets`` is CSR over ``qids``) and, within a query, ordered by
    score descending with ties broken by docid descending, as trec_eval does. Ranks are derived
    from that order (``ranks()``), never stored. Scores are float64 so that ties read from text
    files stay exactly as trec_eval (which parses doubles) sees them.
    """

    qids: IdMap
    docids: IdMap
    q: np.ndarray  # int32, query code per row (non-decreasing)
    d: np.ndarray  # int32, doc code per row
    score: np.ndarray  # float64
    offsets: np.ndarray  # int64, len(qids) + 1
    name: str = "run"
    meta: dict = field(default_factory=dict)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_codes(
        cls,
        qids: IdMap,
        docids: IdMap,
        q: np.ndarray,
        d: np.ndarray,
        score: np.ndarray,
        name: str = "run",
        sort: bool = True,
    ) -> Run:
        """Build from int codes. ``sort=False`` trusts that rows are already in run order."""
        q = np.ascontiguousarray(q, dtype=np.int32)
        d = np.ascontiguousarray(d, dtype=np.int32)
        score = np.ascontiguousarray(score, dtype=np.float64)
        if not (len(q) == len(d) == len(score)):
            raise ValueError("q, d and score must have the same length")
        if sort and len(q):
            order = _order_rows(q, score, docids.lexical_rank()[d])
            if order is not None:
                q, d, score = q[order], d[order], score[order]
        return cls(qids, docids, q, d, score, _csr(q, len(qids)), name)

    @classmethod
    def from_arrays(
        cls,
        qids: Iterable[str],
        docids: Iterable[str],
        scores: Iterable[float],
        name: str = "run",
        doc_map: IdMap | None = None,
    ) -> Run:
        """Build from parallel string/score sequences (one row per (query, doc))."""
        qmap, q = IdMap.from_unique(list(qids), kind="query")
        if doc_map is None:
            doc_map, d = IdMap.from_unique(list(docids), kind="document")
        else:
            d = doc_map.encode(docids)
        return cls.from_codes(qmap, doc_map, q, d, np.asarray(list(scores) if not isinstance(scores, np.ndarray) else scores, dtype=np.float64), name)

    @classmethod
    def from_dict(cls, runs: Mapping[str, Mapping[str, float]], name: str = "run") -> Run:
        """From ``{qid: {docid: score}}`` (the pytrec_eval / ranx dict form)."""
        qs, ds, ss = flatten_nested(runs)
        return cls.from_arrays(qs, ds, np.asarray(ss, dtype=np.float64), name)

    @classmethod
    def from_pandas(cls, df: pd.DataFrame, name: str = "run") -> Run:
        """From a frame with ``query_id, doc_id, score`` (ir_measures) or ``qid, docno, score``
        (PyTerrier) columns."""
        qcol = "query_id" if "query_id" in df.columns else "qid"
        dcol = "doc_id" if "doc_id" in df.columns else "docno"
        return cls.from_arrays(
            df[qcol].astype(str).to_numpy(object),
            df[dcol].astype(str).to_numpy(object),
            df["score"].to_numpy(np.float64),
            name,
        )

    @classmethod
    def from_ir_measures(cls, scored_docs: Iterable, name: str = "run") -> Run:
        """From an iterable of ``ir_measures.ScoredDoc`` (or any (query_id, doc_id, score))."""
        rows = list(scored_docs)
        return cls.from_arrays([r[0] for r in rows], [r[1] for r in rows],
                               np.asarray([r[2] for r in rows], dtype=np.float64), name)

    @classmethod
    def from_ranx(cls, run, name: str | None = None) -> Run:
        """From a ``ranx.Run``."""
        return cls.from_dict(run.to_dict(), name or getattr(run, "name", None) or "run")

    # ---- views ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.q)

    @property
    def n_queries(self) -> int:
        return len(self.qids)

    def __repr__(self) -> str:
        return f"Run({self.name!r}, queries={self.n_queries}, rows={len(self)})"

    def ranks(self) -> np.ndarray:
        """1-based rank of each row within its query."""
        return (np.arange(len(self.q), dtype=np.int64) - self.offsets[self.q] + 1).astype(np.int32)

    def depths(self) -> np.ndarray:
        """Number of retrieved documents per query."""
        return np.diff(self.offsets)

    def query(self, qid: str) -> tuple[np.ndarray, np.ndarray]:
        """(doc ids as strings, scores) of one query, in rank order."""
        i = self.qids.lookup(qid)
        s, e = self.offsets[i], self.offsets[i + 1]
        return self.docids.decode(self.d[s:e]), self.score[s:e]

    def topk(self, k: int) -> Run:
        """The run cut to its top ``k`` documents per query."""
        keep = self.ranks() <= k
        return Run.from_codes(self.qids, self.docids, self.q[keep], self.d[keep],
                              self.score[keep], self.name, sort=False)

    def subset(self, qids: Sequence[str]) -> Run:
        """The rows of the queries ``qids`` (ids the run lacks are ignored), same maps and order."""
        keep_q = np.zeros(self.n_queries, dtype=bool)
        codes = self.qids.encode(list(qids), missing=-1)
        keep_q[codes[codes >= 0]] = True
        keep = keep_q[self.q]
        return Run.from_codes(self.qids, self.docids, self.q[keep], self.d[keep], self.score[keep],
                              self.name, sort=False)

    def rename(self, name: str) -> Run:
        return Run(self.qids, self.docids, self.q, self.d, self.score, self.offsets, name, dict(self.meta))

    def with_doc_map(self, doc_map: IdMap, drop_unknown: bool = False) -> Run:
        """Re-encode doc codes under ``doc_map`` (e.g. the collection's or the qrels').

        Unknown documents raise ``UnknownIdError`` unless ``drop_unknown``.
        """
        if doc_map is self.docids:
            return self
        if doc_map.has_prefix(self.docids):  # same codes: re-point, no re-encoding
            return Run(self.qids, doc_map, self.q, self.d, self.score, self.offsets, self.name,
                       dict(self.meta))
        recode = doc_map.encode(self.docids.strings, missing=-1 if drop_unknown else None)
        d = recode[self.d]
        keep = d >= 0
        q, s = self.q, self.score
        if not keep.all():
            q, d, s = q[keep], d[keep], s[keep]
        # order within a query is unchanged: scores and doc strings are the same
        return Run.from_codes(self.qids, doc_map, q, d, s, self.name, sort=False)

    # ---- conversion -----------------------------------------------------------------------
    def to_pandas(self) -> pd.DataFrame:
        """Columns ``query_id, doc_id, score, rank`` (rank 1-based)."""
        import pandas as pd

        return pd.DataFrame({
            "query_id": self.qids.decode(self.q),
            "doc_id": self.docids.decode(self.d),
            "score": self.score,
            "rank": self.ranks(),
        })

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{qid: {docid: score}}``."""
        return nest_by_query(self.qids, self.offsets, self.docids.decode(self.d).tolist(),
                             self.score.tolist(), skip_empty=False)

    def to_ir_measures(self) -> list:
        """A list of ``ir_measures.ScoredDoc``."""
        from ir_measures import ScoredDoc

        return [ScoredDoc(q, d, s) for q, d, s in zip(
            self.qids.decode(self.q).tolist(), self.docids.decode(self.d).tolist(),
            self.score.tolist(), strict=True)]

    def to_ranx(self):
        """A ``ranx.Run``."""
        from ranx import Run as RanxRun

        return RanxRun(self.to_dict(), name=self.name)
