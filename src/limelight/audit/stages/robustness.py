"""Stage ``robustness``: query-variation robustness of the systems that answer new queries
(where judgments exist)."""

from __future__ import annotations

from limelight.audit.stage import Audit, Option, Progress, Stage, StageOptions
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


# ---- query variations and generated queries ---------------------------------------------------
def _check(opts: dict, fail, context: dict) -> None:
    """``[robustness]``: ``mode`` full, rerank or both; ``measure`` a measure; ``methods``
    ``"all"`` or registered variation methods (a string may list them comma-separated)."""
    if opts.get("mode", "full") not in ("full", "rerank", "both"):
        fail("mode", f"robustness.mode must be \"full\", \"rerank\" or \"both\", not {opts['mode']!r}")
    if "measure" in opts:
        from limelight.evaluation.measures import parse_measure

        try:
            parse_measure(opts["measure"])
        except Exception as e:  # noqa: BLE001 - MeasureError, told in one line
            fail("measure", f"robustness.measure: {e}")
    methods = opts.get("methods", "all")
    names = [m.strip() for m in methods.split(",") if m.strip()] if isinstance(methods, str) else methods
    if not names:
        fail("methods", "robustness.methods is empty (\"all\" or variation method names)")
    if [str(n).lower() for n in names] != ["all"]:
        from limelight.querygen.variations import METHODS

        known = {m.lower() for m in METHODS}
        for n in names:
            if not isinstance(n, str) or n.lower() not in known:
                fail("methods", f"robustness.methods: unknown {n!r} (known: {', '.join(METHODS)})")


OPTIONS = StageOptions("robustness", {
    "methods": Option((str, list), "all", help="\"all\" or the query-variation methods to apply"),
    "measure": Option(str, lambda a: a.cfg.measures[0] if a.cfg.measures else "nDCG@10",
                      help="the measure whose drop is reported (default: the first of [evaluation])"),
    "mode": Option(str, "full", help="full (every system), rerank (BM25 >> TK only) or both"),
}, _check)


def _robustness_opts(audit: Audit) -> dict:
    return OPTIONS.values(audit)


def _robustness(audit: Audit, bar: Progress) -> dict:
    """Query-variation robustness (where qrels exist)."""
    from limelight.querygen.robustness import robustness_report

    cfg, inp, opts = audit.cfg, audit.inputs, _robustness_opts(audit)
    pipes = {s.name: audit.retriever(s, query_vectors=False) % 1000 for s in able(cfg, NEW_QUERIES)}
    rep = robustness_report(pipes, inp.eval_queries, inp.dataset.qrels, opts["methods"],
                            opts["measure"], mode=opts["mode"], seed=cfg.seed,
                            dataset=inp.dataset.name)
    write_table(audit, "robustness", rep.to_pandas())
    figs = []
    if len(rep.rows):
        rep.plot(audit.dir.figures_dir / "robustness.png")
        figs.append("robustness.png")
    bar.update(1, 1)
    return {"summary": {"measure": rep.measure, "methods": rep.methods, "skipped_methods": rep.skipped,
                        "n_queries": len(rep.qids), "notes": rep.notes}, "figures": figs}


ROBUSTNESS = Stage("robustness", "query-variation robustness", _robustness,
                   key=lambda a: (a.key("index"), [s.settings() for s in able(a.cfg, NEW_QUERIES)],
                                  _robustness_opts(a), a.cfg.seed, eval_qids(a)),
                   inputs=("index",),
                   skip=lambda a: (switched_off(a, "robustness") or no_qrels(a)
                                   or none_able(a, NEW_QUERIES, "to retrieve query variations")),
                   note=lambda a: left_out(a.cfg.systems, NEW_QUERIES))
