"""Stage ``compare``: standard measures and lexicographic (LexiRecall) preferences between the
systems that answer the judged queries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from limelight.audit.stage import Audit, Progress, Stage
from limelight.audit.stages.common import (
    able,
    eval_qids,
    left_out,
    no_qrels,
    none_able,
    switched_off,
    write_table,
)
from limelight.retrieval.systems import (
    NEW_QUERIES,
)


# ---- stages that need qrels -------------------------------------------------------------------
def _eval_runs(audit: Audit, k: int = 1000) -> dict:
    out = {}
    for spec in able(audit.cfg, NEW_QUERIES):
        retr = audit.retriever(spec, query_vectors=False)
        out[spec.name] = retr.retrieve(audit.inputs.eval_queries, k).rename(spec.name)
    return out


def _compare(audit: Audit, bar: Progress) -> dict:
    """System comparison: standard measures (tests against the first system) and all-pairs
    LexiRecall preferences with sign tests and the MC4 order."""
    from limelight.evaluation.compare import compare_runs, evaluate_runs

    inp = audit.inputs
    runs = _eval_runs(audit)
    bar.update(1, 3)
    table = evaluate_runs(list(runs.values()), inp.dataset.qrels, audit.cfg.measures)
    agg = table.aggregate()
    rows = []
    for i, n in enumerate(table.names):
        row = {"system": n, **agg[n]}
        for m in table.measures:
            p = table.p_vs_first[m][i]
            row[f"p_{m}"] = None if np.isnan(p) else float(p)
        rows.append(row)
    write_table(audit, "evaluation", pd.DataFrame(rows))
    bar.update(2, 3)
    summary: dict[str, Any] = {"n_queries": len(inp.eval_queries), "measures": agg}
    if len(runs) > 1:
        cmp = compare_runs(list(runs.values()), inp.dataset.qrels, audit.cfg.preference)
        d = cmp.to_dict()
        write_table(audit, "preferences", pd.DataFrame(d["pairs"]))
        summary["preference"] = {"measure": d["preference"], "mc4": d["mc4"],
                                 "discriminative_power": d["discriminative_power"]}
    bar.update(3, 3)
    return {"summary": summary}


COMPARE = Stage("compare", "system comparison: standard measures and lexirecall", _compare,
                key=lambda a: ([a.key("index")], [s.settings() for s in able(a.cfg, NEW_QUERIES)],
                               a.cfg.measures, a.cfg.preference, eval_qids(a)),
                inputs=("index",),
                skip=lambda a: (switched_off(a, "compare") or no_qrels(a)
                                or none_able(a, NEW_QUERIES, "to retrieve the judged queries")),
                note=lambda a: left_out(a.cfg.systems, NEW_QUERIES))
