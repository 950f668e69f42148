"""Evaluate runs: per-query and aggregate values of measures.

The query set is the qrels' queries with at least one relevant document (grade ≥ 1); a query
missing from a run is an empty ranking and scores 0 on every trec_eval measure (trec_eval
``-c``); queries only in the run are ignored with a warning. The relevance-position array is
built once per (run, threshold) and shared by every measure.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.evaluation.measures import Measure, compute, parse_measures
from limelight.evaluation.relpos import (
    QrelsIndex,
    RelPositions,
    corpus_size,
    relevance_positions,
)

if TYPE_CHECKING:  # pandas is imported where used (it costs 0.2 s at start-up)
    import pandas as pd


@dataclass
class EvalResult:
    """Values of several measures for one run: ``per_query[m]`` aligned with ``qids``."""

    name: str
    qids: IdMap
    per_query: dict[Measure, np.ndarray]
    positions: dict[int, RelPositions] = field(default_factory=dict)

    @property
    def aggregate(self) -> dict[Measure, float]:
        """Mean over the query set (trec_eval's ``all`` line)."""
        return {m: float(v.mean()) if len(v) else 0.0 for m, v in self.per_query.items()}

    def __getitem__(self, measure: str | Measure) -> float:
        return self.aggregate[parse_measures(measure)[0]]

    def to_pandas(self) -> pd.DataFrame:
        """One row per query, one column per measure (named as the measure prints)."""
        import pandas as pd

        return pd.DataFrame({str(m): v for m, v in self.per_query.items()},
                            index=pd.Index(self.qids.strings, name="query_id"))


class Evaluator:
    """Evaluates runs against one qrels with a fixed list of measures and corpus size
    (``n_docs``; when it is None, each run's own default, ``corpus_size``).

    >>> ev = Evaluator(qrels, "AP nDCG@10 R@1000 LexiRecall")  # doctest: +SKIP
    >>> ev.evaluate(run).aggregate                              # doctest: +SKIP
    """

    def __init__(self, qrels: Qrels, measures: str | Iterable[str | Measure],
                 n_docs: int | None = None):
        self.qrels = qrels
        self.index = QrelsIndex(qrels)
        if len(self.index.qids) == 0:
            raise LimelightError(f"{qrels.name}: no query has a relevant document (grade ≥ 1)")
        self.measures = parse_measures(measures)
        self.n_docs = n_docs

    @property
    def qids(self) -> IdMap:
        return self.index.qids

    def corpus_size(self, run: Run, n_docs: int | None = None) -> int:
        """The corpus size ``n`` used for ``run``: ``n_docs``, else the evaluator's, else the
        run's own default (``relpos.corpus_size``: the qrels' documents plus those the run
        retrieves), which no other run changes."""
        n = n_docs if n_docs is not None else self.n_docs
        return int(n) if n is not None else corpus_size(self.qrels, run)

    def thresholds(self) -> list[int]:
        return sorted({m.threshold for m in self.measures})

    def positions(self, run: Run, threshold: int = 1, n_docs: int | None = None) -> RelPositions:
        return relevance_positions(run, self.index, threshold, self.corpus_size(run, n_docs))

    def overlap(self, run: Run) -> tuple[int, int]:
        """(qrels queries that ``run`` has, judged documents that ``run`` retrieves for any
        query): both 0 when the run comes from another collection than the qrels."""
        nq = int((self.qrels.qids.encode(run.qids.strings, missing=-1) >= 0).sum())
        if len(run.d) == 0:
            return nq, 0
        rec = self.index.doc_recode(run.docids)[run.d]  # run rows -> qrels document codes
        retrieved = np.zeros(len(self.qrels.docids), dtype=bool)
        retrieved[rec[rec >= 0]] = True
        judged = np.zeros(len(self.qrels.docids), dtype=bool)
        judged[self.qrels.d] = True
        return nq, int((retrieved & judged).sum())

    def evaluate(self, run: Run, n_docs: int | None = None, warn: bool = True) -> EvalResult:
        """Per-query values of every measure for ``run``."""
        n = self.corpus_size(run, n_docs)
        rps = {t: relevance_positions(run, self.index, t, n) for t in self.thresholds()}
        extra = next(iter(rps.values())).extra_queries
        if warn:
            nq, nd = self.overlap(run)
            if nq == 0 or nd == 0:
                warnings.warn(
                    f"{run.name}: no overlap with qrels {self.qrels.name} (query overlap {nq} of "
                    f"{len(self.qrels.qids)} qrels queries; document overlap {nd} of "
                    f"{len(np.unique(self.qrels.d))} judged documents): are these the right "
                    f"qrels?",
                    stacklevel=2)
                extra = []  # said above, in other words
        if extra and warn:
            warnings.warn(f"{run.name}: {len(extra)} queries without a relevant judgment in the qrels are ignored "
                          f"(e.g. {extra[0]!r})", stacklevel=2)
        per_query = {}
        for m in self.measures:
            per_query[m] = compute(m, rps[m.threshold])
        return EvalResult(run.name, self.qids, per_query, rps)

    def evaluate_many(self, runs: Sequence[Run], warn: bool = True) -> list[EvalResult]:
        """Evaluate several runs, each exactly as ``evaluate`` evaluates it alone (its own
        default corpus size unless ``n_docs`` was given: see ``corpus_size``)."""
        return [self.evaluate(r, warn=warn) for r in runs]


def evaluate(run: Run | Sequence[Run], qrels: Qrels, measures: str | Iterable[str | Measure],
             n_docs: int | None = None) -> EvalResult | list[EvalResult]:
    """Evaluate one run (→ ``EvalResult``) or several (→ list); each run's values are those it
    gets alone (``n_docs``, or its own default corpus size)."""
    ev = Evaluator(qrels, measures, n_docs)
    if isinstance(run, Run):
        return ev.evaluate(run)
    return ev.evaluate_many(list(run))


def unique_names(runs: Sequence[Run]) -> list[str]:
    """Run names made unique (``name``, ``name#2``...) for tables and JSON keys."""
    out: list[str] = []
    for r in runs:
        name, i = r.name, 2
        while name in out:
            name = f"{r.name}#{i}"
            i += 1
        out.append(name)
    return out
