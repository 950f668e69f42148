"""Stage ``intervention``: stochastic (Plackett-Luce) rankings over each system's store and the
expected retrievability per temperature."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from limelight._io import atomic_path
from limelight.audit.stage import Audit, Option, Progress, Stage, StageOptions
from limelight.audit.stages.common import (
    present,
    switched_off,
    write_table,
)


# ---- intervention: stochastic (Plackett-Luce) policies over each system ------------------------
def _with_exposure(audit: Audit) -> list[str]:
    return [s.name for s in audit.cfg.systems if present(audit, f"exposure-{s.name}")]


def _check(opts: dict, fail, context: dict) -> None:
    """``[intervention]``: temperatures (numbers ≥ 0, non-empty), samples ≥ 1, 1 ≤ c ≤ depth."""
    temps = opts.get("temperatures", [0.5])
    if not temps or not all(isinstance(t, int | float) and not isinstance(t, bool) and t >= 0
                            for t in temps):
        fail("temperatures", f"intervention.temperatures must be a non-empty list of numbers ≥ 0, got {temps!r}")
    if opts.get("samples", 1) < 1:
        fail("samples", f"intervention.samples must be ≥ 1, got {opts['samples']}")
    depth = context["depth"]
    if not 1 <= opts.get("c", 1) <= depth:
        fail("c", f"intervention.c must be in 1..depth ({depth}), got {opts['c']}")


OPTIONS = StageOptions("intervention", {
    "temperatures": Option(list, [0, 0.1, 0.2, 0.5, 1, 2],
                           help="Plackett-Luce temperatures, relative to each query's score spread "
                                "(T = 0 is always added)"),
    "samples": Option(int, 16, help="sampled rankings per query (Monte-Carlo)"),
    "c": Option(int, lambda a: 10 if 10 in a.cfg.cutoffs else min(a.cfg.cutoffs),
                help="retrievability cutoff of the expected r(d) (default 10, or the smallest cutoff)"),
}, _check)


def _intervention_opts(audit: Audit) -> tuple[list[float], int, int]:
    """The temperatures (T = 0 always among them), samples per query and cutoff c."""
    opts = OPTIONS.values(audit)
    temps = [float(t) for t in opts["temperatures"]]
    if 0.0 not in temps:
        temps = [0.0, *temps]
    return temps, int(opts["samples"]), int(opts["c"])


def _intervention_skip(audit: Audit) -> str | None:
    if off := switched_off(audit, "intervention"):
        return off
    if audit.cfg.options.get("intervention") is None:
        return "no [intervention] table in the configuration"
    return None if _with_exposure(audit) else "no system has an exposure store"


def _intervention(audit: Audit, bar: Progress) -> dict:
    """Expected r(d), its Gini and retrievable fraction under a Plackett-Luce policy over each
    system's stored top-n, for the temperatures of ``[intervention]`` (issue 21)."""
    from limelight.exposure.stochastic import stochastic_store_exposure

    cfg, inp, names = audit.cfg, audit.inputs, _with_exposure(audit)
    temps, samples, c = _intervention_opts(audit)
    judged = inp.eval_queries is not None
    specs = {s.name: s for s in cfg.systems}
    rows = []
    total = len(names) * len(temps)
    for i, n in enumerate(names):
        st = audit.dir.store(n)
        # with judgments, the same policy over the judged queries' top-n: its relevance price
        run = (audit.retriever(specs[n], query_vectors=False).retrieve(inp.eval_queries, cfg.depth)
               if judged else None)
        for j, t in enumerate(sorted(temps)):
            sx = stochastic_store_exposure(st, t, c=c, n_samples=samples, seed=cfg.seed)
            d = sx.to_dict()
            rows.append({"system": n, "temperature": t, "c": c, "samples": samples,
                         "gini": d["gini"], "retrievable_fraction": d["retrievable_fraction"],
                         **(_policy_relevance(run, inp, t, samples, cfg.seed) if judged else {})})
            bar.update(i * len(temps) + j + 1, total)
    df = pd.DataFrame(rows)
    base = df[df["temperature"] == 0].set_index("system")["gini"]
    df["gini_change"] = df["gini"] / df["system"].map(base) - 1.0
    table = write_table(audit, "intervention", df)
    fig = _intervention_figure(df, audit.dir.figures_dir / "intervention.png", c)
    summary = {n: {f"T={t:g}": g for t, g in zip(df[df.system == n]["temperature"],
                                                 df[df.system == n]["gini"], strict=True)}
               for n in names}
    return {"table": table, "figure": fig, "summary": summary}


INTERVENTION = Stage("intervention", "stochastic rankings: expected retrievability per temperature",
                     _intervention,
                     key=lambda a: ([a.key(f"exposure-{n}") for n in _with_exposure(a)],
                                    *_intervention_opts(a), a.cfg.seed),
                     skip=_intervention_skip, report=lambda d, s: report_section(d, s))


def report_section(audit_dir, stages) -> list:
    """How much randomising each system's rankings (Plackett-Luce) spreads attention, and what it
    costs in relevance where judgments exist."""
    import shlex

    from limelight.audit.stage import Figure, Table, Text
    from limelight.audit.stages.common import section_table, words

    blocks, rec, df = section_table(stages, "intervention",
                                    "Changing who is in the limelight: stochastic rankings", audit_dir)
    if rec is None:
        return blocks
    if df is not None:
        hot = df.loc[df.groupby("system", sort=False)["temperature"].idxmax()]
        for _, r in hot.iterrows():
            blocks.append(Text(f"At temperature {r['temperature']:g}, {r['system']}'s "
                               f"[[gini|inequality]] goes from "
                               f"{df[(df.system == r['system']) & (df.temperature == 0)]['gini'].iloc[0]:.3f} "
                               f"to {r['gini']:.3f} ({r['gini_change']:+.0%})."))
        labels = {"system": "system", "temperature": "temperature", "c": "results looked at",
                  "samples": "rankings sampled per search", "gini": "inequality (Gini)",
                  "retrievable_fraction": "documents shown at least once",
                  "gini_change": "change of inequality", "ndcg10": "expected nDCG@10"}
        labels.update({c: c for c in df.columns if c.startswith("EE-")})
        caption = ("Inequality and the share of documents shown at least once of the expected "
                   "retrievability under a Plackett-Luce policy over each system's stored results "
                   "at temperature T (relative to each search's score spread; T = 0 is the system "
                   "itself). With relevance judgments, the same policy's expected nDCG@10 and "
                   "[[expected_exposure|expected exposure]] on the judged searches: the price in "
                   "relevance.")
        percent = ("documents shown at least once", "change of inequality")
        blocks.append(Table(words(df, labels), caption, formats=dict.fromkeys(percent, "percent"),
                            source=str(audit_dir.table("intervention"))))
    man = audit_dir.manifest
    blocks.append(Figure(audit_dir.figures_dir / "intervention.png",
                         "Inequality of the expected retrievability against the temperature (and, "
                         "with judgments, expected nDCG@10 against that inequality).",
                         f"limelight audit {shlex.quote(str(man.get('config') or 'CONFIG.toml'))} "
                         f"--out {shlex.quote(str(audit_dir.path))}"))
    return blocks


def _policy_relevance(run, inp: Any, t: float, samples: int, seed: int,
                      gamma: float = 0.5) -> dict:
    """Expected nDCG@10 and EE-L/EE-D/EE-R (γ = ``gamma``) over the judged queries of the
    Plackett-Luce policy at temperature ``t`` over ``run``'s top-n."""
    from limelight.evaluation.expected_exposure import evaluate_exposure, expected_ndcg
    from limelight.exposure.stochastic import policy_expectations

    n_docs = inp.dataset.n_docs
    pol = policy_expectations(run, t, k=int(run.depths().max()) if len(run) else 1, gamma=gamma,
                              n_samples=max(samples, 32), seed=seed)
    _, ndcg = expected_ndcg(pol.dcg, inp.dataset.qrels, 10, n_docs=n_docs)
    ee = evaluate_exposure(pol.exposure, inp.dataset.qrels,
                           f"EE-L(gamma={gamma}) EE-D(gamma={gamma}) EE-R(gamma={gamma})",
                           n_docs=n_docs)
    return {"ndcg10": float(ndcg.mean()), **{m.name: float(v) for m, v in ee.aggregate.items()}}


def _intervention_figure(df: pd.DataFrame, path, c: int) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    judged = "ndcg10" in df.columns
    fig, axes = plt.subplots(1, 2 if judged else 1, figsize=(11 if judged else 5.5, 4), dpi=110)
    ax = axes[0] if judged else axes
    if judged:  # the trade-off: relevance against the spread of exposure, T along each curve
        tr = axes[1]
        for n, g in df.groupby("system", sort=False):
            tr.plot(g["gini"], g["ndcg10"], "-o", ms=3, label=n)
            for x, y, t in zip(g["gini"], g["ndcg10"], g["temperature"], strict=True):
                tr.annotate(f"{t:g}", (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        tr.set_xlabel(f"Gini of expected r(d), c = {c}")
        tr.set_ylabel("expected nDCG@10 (judged queries)")
        tr.set_title("trade-off (labels: T)", fontsize=9)
        tr.legend(fontsize=8)
    for n, g in df.groupby("system", sort=False):
        x = g["temperature"].to_numpy()
        ax.plot(np.where(x > 0, x, np.nan), g["gini"], "-o", ms=3, label=n)
        ax.axhline(g["gini"].iloc[0], color=ax.lines[-1].get_color(), lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("temperature T (relative to each query's score spread; dotted: T = 0)")
    ax.set_ylabel(f"Gini of expected r(d), c = {c}")
    ax.legend(fontsize=8)
    ax.set_title("Plackett-Luce policies over each system's top-n", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path.name
