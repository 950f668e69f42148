"""An optional adapter that exposes any limelight ``Stage`` as a PyTerrier transformer.

PyTerrier (``python-terrier``, which needs Java) is imported only when ``to_pyterrier`` is called;
without it that call raises a one-line ``LimelightError``. The frame conversions below need only
pandas::

    queries_from_frame(df)   qid, query [, weight, intent]  ->  Queries
    queries_to_frame(q)      Queries  ->  qid, query
    run_from_frame(df)       qid, docno, score  ->  Run   (a rank column is ignored: ranks are
                                                          recomputed from scores)
    run_to_frame(run, q)     Run  ->  qid, [query,] docno, score, rank   (rank 0-based, as
                                                                          PyTerrier writes it)

Example (with PyTerrier installed)::

    from limelight.retrieval.pyterrier import to_pyterrier
    pipe = to_pyterrier(bm25 % 100 | dense % 100)
    pt.Experiment([pipe], topics, qrels, eval_metrics=["ndcg_cut_10"])
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import FormatError, LimelightError, UnknownIdError
from limelight.retrieval.base import Stage

INSTALL_HINT = ("the PyTerrier adapter needs PyTerrier (pyterrier; Java only for Terrier's own "
                "indexes): pip install 'limelight[terrier]'")


def _require(df: pd.DataFrame, cols: tuple[str, ...], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise FormatError(None, None, f"{what} frame lacks column(s) {', '.join(missing)} "
                                      f"(has {', '.join(map(str, df.columns)) or 'none'})")


def queries_from_frame(df: pd.DataFrame, name: str = "queries") -> Queries:
    """``Queries`` from a PyTerrier topics frame (``qid``, ``query``; extra columns kept as
    fields). Repeated qids (a frame of results) keep their first text."""
    _require(df, ("qid", "query"), "topics")
    if df["qid"].duplicated().any():
        df = df.drop_duplicates("qid", keep="first")
    keep = [c for c in df.columns if c in ("qid", "query", "weight", "intent")
            or c not in ("docno", "docid", "score", "rank")]
    return Queries.from_pandas(df[keep].reset_index(drop=True), name=name)


def queries_to_frame(queries: Queries) -> pd.DataFrame:
    """A PyTerrier topics frame: ``qid``, ``query`` (strings)."""
    return pd.DataFrame({"qid": queries.ids.strings.astype(str),
                         "query": queries.texts.astype(str)})


def run_from_frame(df: pd.DataFrame, name: str = "run", doc_map: IdMap | None = None,
                   query_map: IdMap | None = None, where: str = "the results frame") -> Run:
    """A ``Run`` from a PyTerrier results frame (``qid``, ``docno``, ``score``). Queries of the
    frame whose only row has a missing ``docno`` (PyTerrier's way to keep a query with no result)
    are kept with no documents.

    ``doc_map`` / ``query_map``: encode the ids with these maps (the run's maps are then exactly
    them); an id they lack raises ``UnknownIdError`` naming the first ones and how many there
    are, ``where`` saying whose results they were."""
    _require(df, ("qid", "docno", "score"), "results")
    qids = df["qid"].astype(str)
    if query_map is None:
        qmap, q = IdMap.from_unique(qids.to_numpy(object), kind="query")
    else:
        qmap, q = query_map, _encode_known(query_map, qids, where)
    has_doc = df["docno"].notna().to_numpy()
    docnos = df["docno"][has_doc].astype(str)
    if doc_map is None:
        doc_map, d = IdMap.from_unique(docnos.to_numpy(object), kind="document")
    else:
        d = _encode_known(doc_map, docnos, where)
    score = pd.to_numeric(df["score"], errors="coerce").to_numpy(np.float64)[has_doc]
    if np.isnan(score).any():
        raise FormatError(None, None, "results frame has a non-numeric or missing score")
    return Run.from_codes(qmap, doc_map, q[has_doc], d, score, name)


def _encode_known(ids: IdMap, values: pd.Series, where: str) -> np.ndarray:
    """Codes of the strings ``values`` under ``ids`` (pandas' hash table, in C: 3× faster than a
    dict lookup per value on PISA's results); a one-line ``UnknownIdError`` naming the first (at
    most three) distinct values ``ids`` lacks, and how many, when there are any."""
    codes = pd.Index(ids.strings.astype(str)).get_indexer(values).astype(np.int32)
    if (codes < 0).any():
        bad = list(dict.fromkeys(values.to_numpy(object)[codes < 0].tolist()))
        shown = ", ".join(map(repr, bad[:3])) + (", ..." if len(bad) > 3 else "")
        raise UnknownIdError(ids.kind, bad[0], f"{where} ({len(bad)} unknown {ids.kind} "
                                               f"id{'s' if len(bad) > 1 else ''}: {shown})")
    return codes


def run_to_frame(run: Run, queries: Queries | None = None, rank_base: int = 0) -> pd.DataFrame:
    """A PyTerrier results frame ``qid, [query,] docno, score, rank`` in run order; ``rank`` is
    0-based by default (PyTerrier's convention). With ``queries``, their text fills ``query``."""
    out = {"qid": run.qids.decode(run.q).astype(str)}
    if queries is not None:
        codes = queries.ids.encode(run.qids.strings.tolist(), missing=-1)
        texts = np.append(queries.texts.astype(str), "")  # -1 (unknown query) -> ""
        out["query"] = texts[codes[run.q]]
    out["docno"] = run.docids.decode(run.d).astype(str)
    out["score"] = run.score
    out["rank"] = run.ranks().astype(np.int64) - 1 + rank_base
    return pd.DataFrame(out)


def to_pyterrier(stage: Stage):
    """Wrap ``stage`` as a ``pyterrier.Transformer``.

    Given topics (``qid, query``) it runs the stage; given results (``qid, query, docno, score``),
    they become the stage's input run (for re-rankers). Needs ``python-terrier``.
    """
    try:
        import pyterrier as pt
    except ImportError:
        raise LimelightError(INSTALL_HINT) from None

    class LimelightTransformer(pt.Transformer):
        def __init__(self, inner: Stage):
            super().__init__()
            self.stage = inner

        def __repr__(self) -> str:
            return f"LimelightTransformer({self.stage.name})"

        def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
            queries = queries_from_frame(inp)
            run_in = run_from_frame(inp) if "docno" in inp.columns else None
            return run_to_frame(self.stage.transform(queries, run_in), queries)

    return LimelightTransformer(stage)
