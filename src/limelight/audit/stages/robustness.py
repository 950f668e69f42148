"""Stage ``robustness``: query-variation robustness of the systems that answer new queries
(where judgments exist)."""

from __future__ import annotations

import limelight.audit.stages.common as common
from limelight.audit.stage import Audit, Option, Progress, Stage, StageOptions
from limelight.retrieval.systems import NEW_QUERIES


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


def _robustness(audit: Audit, bar: Progress) -> dict:
    """Query-variation robustness (where qrels exist)."""
    from limelight.querygen.robustness import robustness_report

    cfg, inp, opts = audit.cfg, audit.inputs, OPTIONS.values(audit)
    pipes = {s.name: audit.retriever(s, query_vectors=False) % 1000 for s in common.able(cfg, NEW_QUERIES)}
    rep = robustness_report(pipes, inp.eval_queries, inp.dataset.qrels, opts["methods"],
                            opts["measure"], mode=opts["mode"], seed=cfg.seed,
                            dataset=inp.dataset.name)
    common.write_table(audit, "robustness", rep.to_pandas())
    figs = []
    if len(rep.rows):
        rep.plot(audit.dir.figures_dir / "robustness.png")
        figs.append("robustness.png")
    bar.update(1, 1)
    return {"summary": {"measure": rep.measure, "methods": rep.methods, "skipped_methods": rep.skipped,
                        "n_queries": len(rep.qids), "notes": rep.notes}, "figures": figs}


ROBUSTNESS = Stage("robustness", "query-variation robustness", _robustness,
                   key=lambda a: (a.key("index"), [s.settings() for s in common.able(a.cfg, NEW_QUERIES)],
                                  OPTIONS.values(a), a.cfg.seed, common.eval_qids(a)),
                   inputs=("index",),
                   skip=lambda a: (common.switched_off(a, "robustness") or common.no_qrels(a)
                                   or common.none_able(a, NEW_QUERIES, "to retrieve query variations")),
                   note=lambda a: common.left_out(a.cfg.systems, NEW_QUERIES),
                   report=lambda d, s: report_section(d, s))

_WORDS = {"system": "system", "mode": "mode", "level": "level", "category": "kind of variation",
          "method": "variation", "n_queries": "judged searches", "n_valid": "searches varied",
          "original": "original", "value": "varied", "abs_drop": "drop", "rel_drop": "relative drop",
          "p_value": "p-value (paired t-test)", "p_bonferroni": "p-value (Bonferroni)",
          "sig": "significant", "judged_original": "judged share, original",
          "judged": "judged share, varied"}


def report_section(audit_dir, stages) -> list:
    """How much each system's effectiveness drops when the searches are misspelt, reordered or
    reworded (Penha et al., ECIR 2022, Table 4)."""
    import shlex

    from limelight.audit.stage import Figure, Table, Text
    from limelight.audit.stages.common import pct, read_table, section_start

    blocks, rec = section_start(stages, "robustness",
                                "Do the systems cope with misspelt and reworded searches?")
    if rec is None:
        return blocks
    summ = rec.get("result", {}).get("summary", {})
    df = read_table(audit_dir, "robustness")
    if df is not None and len(df):
        worst = df.loc[df["rel_drop"].idxmax()]
        blocks.append(Text(f"The largest drop: {worst['system']} loses {pct(worst['rel_drop'])} of "
                           f"its {summ.get('measure', 'effectiveness')} under {worst['method']} "
                           f"({worst['category']})."))
        keep = [c for c in _WORDS if c in df.columns]
        blocks.append(Table(df[keep].rename(columns=_WORDS),
                            f"Per system, variation and kind of variation: the mean "
                            f"{summ.get('measure', '')} on the original and the varied searches, its "
                            f"drop, and a paired t-test with Bonferroni's correction.",
                            formats={"relative drop": "percent", "p-value (paired t-test)": "p",
                                     "p-value (Bonferroni)": "p", "judged share, original": "percent",
                                     "judged share, varied": "percent"},
                            source=str(audit_dir.table("robustness"))))
    man = audit_dir.manifest
    blocks.append(Figure(audit_dir.figures_dir / "robustness.png",
                         "How much each system's effectiveness drops under each variation.",
                         f"limelight audit {shlex.quote(str(man.get('config') or 'CONFIG.toml'))} "
                         f"--out {shlex.quote(str(audit_dir.path))}"))
    return blocks
