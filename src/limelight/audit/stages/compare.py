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
                note=lambda a: left_out(a.cfg.systems, NEW_QUERIES), report=lambda d, s: report_section(d, s))


def measure_words(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """A table of measures per system with its p-value columns (``p_<measure>``) in words, and
    their formats."""
    ren = {c: f"p-value of {c[2:]} against the first system" for c in df.columns if c.startswith("p_")}
    return df.rename(columns=ren), {v: "p" for v in ren.values()}


def report_section(audit_dir, stages) -> list:
    """The systems' effectiveness on the judged queries (means, p-values against the first
    system) and the all-pairs lexicographic preferences."""
    from limelight.audit.stage import Table, Text
    from limelight.audit.stages.common import read_table, section_start

    blocks, rec = section_start(stages, "compare", "How good are the systems at finding relevant documents?")
    if rec is None:
        return blocks
    summ = rec.get("result", {}).get("summary", {})
    ev = read_table(audit_dir, "evaluation")
    if ev is not None and len(ev):
        m = [c for c in ev.columns if c != "system" and not c.startswith("p_")]
        if m:
            best = ev.loc[ev[m[0]].idxmax()]
            blocks.append(Text(f"On {summ.get('n_queries', 0):,} judged queries, {best['system']} "
                               f"ranks relevant documents best by {m[0]} ({best[m[0]]:.3f})."))
        df, fmt = measure_words(ev)
        blocks.append(Table(df, "Mean over the judged queries; p-values against the first system "
                                "(Holm's correction).", formats=fmt, source=str(audit_dir.table("evaluation"))))
    pref = read_table(audit_dir, "preferences")
    if pref is not None and len(pref):
        p = summ.get("preference", {})
        pref = pref.rename(columns={"a": "system", "b": "against", "wins": "searches it wins",
                                    "ties": "ties", "losses": "searches it loses",
                                    "p_value": "p-value (sign test)", "p_holm": "p-value (Holm)"})
        blocks.append(Table(pref, f"Every pair of systems compared search by search with the "
                                  f"lexicographic preference {p.get('measure', '')}: wins, ties and "
                                  f"losses, with sign tests.",
                            formats={"p-value (sign test)": "p", "p-value (Holm)": "p"},
                            source=str(audit_dir.table("preferences"))))
    return blocks
