"""Stage ``figures``: the Lorenz curves, the group figure and the summary tables across systems,
and what changes between the first system and each other."""

from __future__ import annotations

import pandas as pd

from limelight._io import atomic_path
from limelight.audit.stage import Audit, Progress, Stage
from limelight.audit.stages.common import (
    pct,
    present,
    write_table,
)


def _with_retrievability(audit: Audit) -> list[str]:
    return [s.name for s in audit.cfg.systems if present(audit, f"retrievability-{s.name}")]


def _figures(audit: Audit, bar: Progress) -> dict:
    """Lorenz curves, rank-size plot, per-group bars, and the systems summary table."""
    from limelight.exposure.plots import plot_lorenz, plot_rank_size

    cfg, names = audit.cfg, _with_retrievability(audit)
    figs = audit.dir.figures_dir
    frames = {n: pd.read_parquet(audit.dir.retrievability_path(n)) for n in names}
    c = 100 if 100 in cfg.cutoffs else max(cfg.cutoffs)
    made = []
    for cc in cfg.cutoffs:
        plot_lorenz({n: f[f"r_c{cc}"].to_numpy() for n, f in frames.items()}, figs / f"lorenz_c{cc}",
                    title=f"Lorenz curves of r(d), c={cc}")
        made.append(f"lorenz_c{cc}.png")
    plot_rank_size({n: f["n_exposing"].to_numpy() for n, f in frames.items()}, figs / "rank_size")
    made.append("rank_size.png")
    bar.update(1, 2)
    rows = []
    for n in names:
        res = audit.status(f"retrievability-{n}").result
        for cc, d in res["cutoffs"].items():
            rows.append({"system": n, "c": int(cc), "gini": d["gini"],
                         "gini_retrieved_only": d["gini_retrieved_only"],
                         "retrievable_fraction": d["retrievable_fraction"],
                         "mean_exposing_queries": res["mean_exposing_queries"]})
    write_table(audit, "systems", pd.DataFrame(rows))
    if cfg.group_field:
        grp = pd.concat([pd.read_parquet(audit.dir.table(f"groups_{n}")) for n in names])
        write_table(audit, "groups", grp)
        made.append(_group_figure(grp, figs / "groups.png", cfg.group_field, c))
    made += _system_diffs(audit, names, max(cfg.cutoffs))
    out: dict = {"figures": made}
    if cfg.group_field:
        out["fairness"] = _fairness(audit, names, cfg.group_field)
    bar.update(2, 2)
    return out


FIGURES = Stage("figures", "figures and summary tables", _figures,
                # "fairness": audits whose figures ran before the group fairness tables run it again
                key=lambda a: ([a.key(f"retrievability-{n}") for n in _with_retrievability(a)],
                               *(("fairness", a.quick) if a.cfg.group_field else ())),
                skip=lambda a: None if _with_retrievability(a) else "no system has retrievability figures",
                report=lambda audit_dir, stages: (diff_section(audit_dir, stages)
                                                  + fairness_section(audit_dir, stages)))


def _fairness(audit: Audit, names: list[str], field: str) -> dict:
    """Group fairness of exposure per system (issue 45): each group's share of the log's
    attention (DCG browsing model) against its share of the collection's documents, with
    bootstrap intervals over the searches, and the documents behind each group's gap; tables
    ``fairness`` and ``fairness_contributors``. The log has no relevance judgments, so the target
    is the group's share of documents, never merit."""
    from limelight.exposure.fairness import Groups, group_fairness

    rows, contrib, summary = [], [], {}
    for n in names:
        st = audit.dir.store(n)
        groups = Groups.from_field(st, field, audit.dir.index_dir)
        res = group_fairness(st, groups, None, "size", n_boot=50 if audit.quick else 200,
                             seed=audit.cfg.seed, top=5)
        rows.append(res.groups.assign(system=n))
        contrib.append(res.contributors.assign(system=n))
        s = res.summary
        summary[n] = {"tvd": s["tvd"], "awrf": {k: s["awrf"].get(k) for k in ("value", "lo", "hi")},
                      "browsing": s["browsing"], "n_boot": s["bootstrap"]["n_boot"],
                      "alpha": s["bootstrap"]["alpha"], "groups_source": s["groups_source"],
                      "n_queries_used": s["n_queries_used"]}
    write_table(audit, "fairness", pd.concat(rows, ignore_index=True))
    write_table(audit, "fairness_contributors", pd.concat(contrib, ignore_index=True))
    return summary


def _system_diffs(audit: Audit, names: list[str], c: int) -> list[str]:
    """``limelight exposure diff`` from the first system to each other one: a summary table
    (``diff``), the biggest winners and losers (``diff_movers``) and one figure per pair."""
    from limelight.exposure.diff import diff_stores, field_values, plot_diff

    if len(names) < 2:
        return []
    first = audit.dir.store(names[0])
    groups = (field_values(first, audit.cfg.group_field, audit.dir.index_dir)
              if audit.cfg.group_field else None)
    rows, movers, made = [], [], []
    for n in names[1:]:
        d = diff_stores(first, audit.dir.store(n), c=c, group_values=groups, names=(names[0], n))
        rows.append({"from": names[0], "to": n, **d.summary})
        for kind, df in (("winner", d.winners(10)), ("loser", d.losers(10))):
            movers.append(df[["docid", "r_a", "r_b", "delta_r", "n_a", "n_b"]]
                          .assign(**{"from": names[0], "to": n, "kind": kind}))
        made += [p.name for p in plot_diff(d, audit.dir.figures_dir / f"diff_{names[0]}_{n}")
                 if p.suffix == ".png"]
    write_table(audit, "diff", pd.DataFrame(rows))
    write_table(audit, "diff_movers", pd.concat(movers, ignore_index=True))
    return made


def _group_figure(grp: pd.DataFrame, path, field: str, c: int) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    big = grp[grp["n_docs"] >= 20] if (grp["n_docs"] >= 20).any() else grp
    first = big["system"].iloc[0]
    order = big[big["system"] == first].sort_values("r_mean", ascending=False)["group"]
    keep = list(order.head(12)) + [g for g in order.tail(8) if g not in set(order.head(12))]
    piv = big.pivot_table(index="group", columns="system", values="r_mean").reindex(keep)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    piv.plot.barh(ax=ax, width=0.8)
    ax.invert_yaxis()
    ax.set_xlabel(f"mean r(d), c={c}")
    ax.set_ylabel(field)
    ax.set_title(f"Retrievability by {field}: most and least retrievable groups (≥20 documents)")
    ax.legend(fontsize=8)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    plt.close(fig)
    return path.name


# ---- report ---------------------------------------------------------------------------------------
def diff_section(audit_dir, stages) -> list:
    """What changes from the first system to each other one: a sentence per pair, its figure,
    the pair table and the documents that gain and lose most."""
    import shlex

    from limelight.audit.stage import Figure, Heading, Table, Text
    from limelight.audit.stages.common import read_table, words

    diff = read_table(audit_dir, "diff")
    if diff is None or not len(diff):
        return []
    figs, group = audit_dir.figures_dir, audit_dir.results().get("group_field")
    out = shlex.quote(str(audit_dir.path))
    first = diff["from"].iloc[0]
    blocks: list = [Heading(f"What changes from {first} to each other system")]
    for _, row in diff.iterrows():
        to = row["to"]
        trend = "falls" if row["gini_b"] < row["gini_a"] else "rises"
        blocks.append(Text(
            f"From {first} to {to} (top {int(row['c'])}), [[gini|inequality]] {trend} from "
            f"{row['gini_a']:.3f} to {row['gini_b']:.3f}: {int(row['n_gain']):,} documents are "
            f"shown more often, {int(row['n_lose']):,} less often; "
            f"{int(row['newly_retrievable']):,} documents no search showed are now shown and "
            f"{int(row['newly_irretrievable']):,} are no longer shown."))
        blocks.append(Figure(figs / f"diff_{first}_{to}.png",
                             f"Each document's retrievability r(d) under {to} against {first}, and the "
                             f"groups whose share moves most.",
                             f"limelight exposure diff {out}/systems/{first}/exposure "
                             f"{out}/systems/{to}/exposure" + (f" --group-field {group}" if group else "")))
    labels = {"from": "from", "to": "to", "c": "results looked at", "gini_a": "inequality before",
              "gini_b": "inequality after", "retrievable_fraction_a": "shown at least once before",
              "retrievable_fraction_b": "shown at least once after",
              "n_gain": "documents shown more", "n_lose": "documents shown less",
              "n_same": "documents unchanged", "newly_retrievable": "newly shown",
              "newly_irretrievable": "no longer shown",
              "r_moved": "retrievability moved between documents"}
    blocks.append(Table(words(diff, labels),
                        "Per pair of systems: [[gini|inequality]], the share of documents shown "
                        "at least once, and the documents whose [[retrievability]] goes up, down, "
                        "or from zero and back.",
                        formats={"shown at least once before": "percent",
                                 "shown at least once after": "percent"},
                        source=str(audit_dir.table("diff"))))
    movers = read_table(audit_dir, "diff_movers")
    if movers is not None:
        mv = movers.assign(kind=movers["kind"].map({"winner": "gains", "loser": "loses"}))
        mv = mv.rename(columns={"docid": "document", "r_a": "retrievability before",
                                "r_b": "retrievability after", "delta_r": "change",
                                "n_a": "searches showing it before", "n_b": "searches showing it after",
                                "kind": "gains or loses"})
        blocks.append(Table(mv, "The documents whose [[retrievability]] changes most between the "
                                "two systems.", formats={"change": "signed"}, ids=("document",),
                            source=str(audit_dir.table("diff_movers"))))
    return blocks


def fairness_section(audit_dir, stages) -> list:
    """Group fairness (issue 45), when the audit has a group field: per system a sentence naming
    the group with the largest deficit and the largest surplus, each group's share of attention
    against its share of documents with intervals, and the documents behind the largest gaps."""
    from limelight.audit.stage import Heading, Table, Text
    from limelight.audit.stages.common import read_table

    res = audit_dir.results()
    group = res.get("group_field")
    if not group:
        return []
    blocks: list = [Heading(f"Is attention fair across {group}s?")]
    table, contrib = read_table(audit_dir, "fairness"), read_table(audit_dir, "fairness_contributors")
    summ = (stages.get("figures", {}).get("result") or {}).get("fairness") or {}
    if table is None or contrib is None:
        blocks.append(Text("Not computed: this audit's figures stage ran before group fairness was "
                           "part of the audit; run the audit again (finished stages are reused).",
                           tone="skipped"))
        return blocks
    n_boot = next(iter(summ.values()), {}).get("n_boot", 0)
    for n, g in table.groupby("system", sort=False):
        lo, hi = g.loc[g["gap"].idxmin()], g.loc[g["gap"].idxmax()]
        tvd = (summ.get(n) or {}).get("tvd", {})
        blocks.append(Text(
            f"Under {n}, {group} {lo['group']} holds {pct(lo['size_share'])} of the documents but "
            f"gets {pct(lo['exposure_share'])} of the [[group_exposure_share|attention]] "
            f"(95 % interval {_interval(lo, 'exposure_share')}), the largest deficit; {hi['group']} holds "
            f"{pct(hi['size_share'])} and gets {pct(hi['exposure_share'])} "
            f"(95 % interval {_interval(hi, 'exposure_share')}), the largest surplus."
            + (f" In all, {pct(tvd['value'])} of the attention would have to move to give every "
               f"{group} its share of documents." if tvd.get("value") is not None else "")))
    shown = table.assign(order=table["gap"].abs()).sort_values(["system", "order"], ascending=[True, False])
    shown = shown.assign(interval=[_interval(r, "exposure_share") for _, r in shown.iterrows()])
    labels = {"system": "system", "group": group, "n_docs": "documents",
              "size_share": "share of documents", "exposure_share": "share of attention",
              "interval": "95 % interval of the share of attention", "gap": "attention gap",
              "dp": "attention per document against the average"}
    blocks.append(Table(shown[[c for c in labels if c in shown.columns]].rename(columns=labels),
                        f"Per system and {group}, largest gaps first: the share of all searchers' "
                        f"attention (a searcher whose attention fades with the rank, as nDCG "
                        f"assumes; each search counted as often as it was issued) against the "
                        f"[[group_size_share|share of documents]], the fair share if every document "
                        f"deserved the same; the [[disparity|gap]] is negative for a deficit. "
                        f"Intervals from {n_boot:,} bootstrap resamples of the searches. The log "
                        f"has no relevance judgments, so attention is not compared with merit.",
                        formats={"share of documents": "percent", "share of attention": "percent",
                                 "attention gap": "points", "attention per document against the average": "ratio"},
                        raw=(group,), source=str(audit_dir.table("fairness"))))
    worst = table.loc[table.groupby("system", sort=False)["gap"].idxmin()]
    keys = set(zip(worst["system"], worst["group"], strict=True))
    top = contrib[[(s, g) in keys for s, g in zip(contrib["system"], contrib["group"], strict=True)]]
    if len(top):
        top = top.rename(columns={"system": "system", "group": group, "rank": "place",
                                  "docid": "document", "contribution": "share of the gap it adds",
                                  "fraction_of_gap": "part of the group's gap"})
        blocks.append(Table(top.drop(columns=["direction"]),
                            f"The documents that contribute most to the largest deficit of each "
                            f"system: the {group} documents whose attention falls furthest short "
                            f"of their fair share.",
                            formats={"share of the gap it adds": "points",
                                     "part of the group's gap": "percent"},
                            ids=("document",), raw=(group,),
                            source=str(audit_dir.table("fairness_contributors"))))
    return blocks


def _interval(row, col: str) -> str:
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return "no interval"
    return f"{pct(lo)} to {pct(hi)}"
