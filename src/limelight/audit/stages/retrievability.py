"""Stage ``retrievability-<system>``: r(d), Gini and Lorenz per cutoff (and per group) from a
system's exposure store."""

from __future__ import annotations

import shlex
from typing import Any

import numpy as np
import pandas as pd

from limelight._io import atomic_path
from limelight.audit.stage import Audit, Progress, Stage, SystemView
from limelight.audit.stages.common import (
    pct,
    write_table,
)


def retrievability_stage(spec: SystemView) -> Stage:
    """r(d) at each cutoff over every document, Gini (overall and per group), Lorenz data."""

    def body(audit: Audit, bar: Progress) -> dict:
        from limelight.exposure.retrievability import gini, group_retrievability

        cfg, ds = audit.cfg, audit.inputs.dataset
        st = audit.dir.store(spec.name)
        cols: dict[str, Any] = {"doc_id": st.doc_ids.strings.astype(str)}
        cutoffs = {}
        for i, c in enumerate(cfg.cutoffs):
            rv = st.retrievability(c=c)
            cols[f"r_c{c}"] = rv.r
            cutoffs[str(c)] = rv.to_dict()
            bar.update(i + 1, len(cfg.cutoffs) + 1)
        n_exp = st.n_exposing()
        cols["n_exposing"] = n_exp
        g = cfg.group_field
        if g:
            cols[g] = [str(v) for v in ds.field(g).tolist()]
        df = pd.DataFrame(cols)
        with atomic_path(audit.dir.retrievability_path(spec.name)) as tmp:
            df.to_parquet(tmp, index=False)
        c_main = 100 if 100 in cfg.cutoffs else max(cfg.cutoffs)
        r = cols[f"r_c{c_main}"]
        out: dict[str, Any] = {"cutoffs": cutoffs, "c_main": c_main,
                               "mean_exposing_queries": float(n_exp.mean())}
        if g:
            grp = group_retrievability(r, ds.field(g))
            # Gini within each group (documents counted in each of their groups)
            from limelight.exposure.retrievability import as_labels

            labels = [as_labels(v) for v in ds.field(g).tolist()]
            lens = np.fromiter((len(x) for x in labels), dtype=np.int64, count=len(labels))
            doc = np.repeat(np.arange(len(r)), lens)
            flat = pd.DataFrame({"group": [x for lab in labels for x in lab], "r": r[doc]})
            ginis = {k: gini(v.to_numpy()) for k, v in flat.groupby("group", sort=False)["r"]}
            grp["gini"] = grp["group"].map(ginis)
            grp.insert(0, "system", spec.name)
            out["groups_table"] = write_table(audit, f"groups_{spec.name}", grp)
            out["n_groups"] = int(len(grp))
        bar.update(len(cfg.cutoffs) + 1, len(cfg.cutoffs) + 1)
        return out

    exposure = f"exposure-{spec.name}"
    return Stage(f"retrievability-{spec.name}", f"retrievability, Gini and Lorenz under {spec.name}",
                 body, key=lambda a: (a.key(exposure), a.cfg.cutoffs, a.cfg.group_field),
                 inputs=(exposure,), outputs=lambda a: (a.dir.retrievability_path(spec.name),),
                 report=report_section)


# ---- report ---------------------------------------------------------------------------------------
def c_main(cutoffs: list[int]) -> int:
    """The cutoff the report leads with: 100 when the audit has it, else the largest."""
    return 100 if 100 in cutoffs else max(cutoffs)


def top_share(r: np.ndarray, share: float = 0.1) -> float:
    """The share of all retrievability that the ``share`` most retrievable documents hold."""
    total = float(r.sum())
    if total <= 0 or not len(r):
        return 0.0
    k = max(1, int(round(share * len(r))))
    return float(np.sort(r)[::-1][:k].sum() / total)


def systems_table(audit_dir) -> pd.DataFrame:
    """Per system and cutoff: Gini, the share of retrievability the top 10 % of documents hold,
    the share of documents shown at least once, the documents never shown, and the median r(d)
    (how many searches, counted as often as issued, show a typical document in their top c)."""
    res = audit_dir.results()
    rows = []
    for n in res["systems"]:
        p = audit_dir.retrievability_path(n)
        if not p.exists():
            continue
        df = pd.read_parquet(p)
        for c in res["cutoffs"]:
            r = df[f"r_c{c}"].to_numpy()
            rows.append({"system": n, "c": c, "gini": res["systems"][n].get(f"gini_c{c}"),
                         "top10": top_share(r), "shown": float((r > 0).mean()),
                         "never": int((r == 0).sum()),
                         "median_r": float(np.median(r))})
    return pd.DataFrame(rows)


def report_section(audit_dir, stages) -> list:
    """How unequal retrievability is under each system: a sentence per system, the Lorenz curves,
    the rank-size plot, a table per system and cutoff, and retrievability by group."""
    from limelight.audit.stage import Figure, Heading, Table, Text

    res = audit_dir.results()
    systems, cutoffs, depth = res["systems"], res["cutoffs"], res["depth"]
    done = [n for n in systems if stages.get(f"retrievability-{n}", {}).get("status") != "skipped"
            and audit_dir.retrievability_path(n).exists()]
    blocks: list = [Heading("Retrievability and inequality")]
    for n in systems:
        if n not in done:
            reason = stages.get(f"retrievability-{n}", {}).get("reason") or "no exposure store"
            blocks.append(Text(f"{n}: no retrievability ({reason}).", tone="skipped"))
    if not done:
        return blocks
    table = systems_table(audit_dir)
    c = c_main(cutoffs)
    for n in done:
        row = table[(table["system"] == n) & (table["c"] == c)].iloc[0]
        blocks.append(Text(
            f"Under {n}, the 10 % most retrievable documents get {pct(row['top10'])} of all "
            f"[[retrievability]] at [[cutoff|c]] = {c}; {row['never']:,} documents "
            f"({pct(1 - row['shown'])}) are in no search's top {c}; [[gini|Gini]] "
            f"{row['gini']:.3f}."))
    out = shlex.quote(str(audit_dir.path))
    figs = audit_dir.figures_dir
    for cc in cutoffs:
        cmds = "; ".join(f"limelight retrievability --store {out}/systems/{n}/exposure --c {cc}"
                         for n in done)
        blocks.append(Figure(figs / f"lorenz_c{cc}.png",
                             f"How evenly each system spreads attention over the collection, top "
                             f"{cc}: the share of all retrievability (up) held by the least "
                             f"retrievable share of documents (across); the diagonal is equality "
                             f"([[lorenz]]).", cmds))
    blocks.append(Figure(figs / "rank_size.png",
                         f"How many searches show each document in their top {depth}, documents "
                         f"sorted from most to least shown.",
                         f"python -c \"from limelight.audit import AuditDir; print(AuditDir('{out}')"
                         f".store('{done[0]}').n_exposing())\""))
    blocks.append(Table(
        table.rename(columns={"system": "system", "c": "results looked at", "gini": "inequality (Gini)",
                              "top10": "share held by the top 10 % of documents",
                              "shown": "documents shown at least once",
                              "never": "documents never shown",
                              "median_r": "searches showing a typical document (median)"}),
        "[[retrievability|Retrievability]] over every document of the collection, each search "
        "counted as often as it was issued; [[gini|inequality]] 0 means every document is shown "
        "equally often, 1 that one document gets all the attention.",
        formats={"share held by the top 10 % of documents": "percent",
                 "documents shown at least once": "percent",
                 "searches showing a typical document (median)": "int"}))
    return blocks + _group_blocks(audit_dir)


def _group_blocks(audit_dir) -> list:
    """Retrievability by group (the audit's group field): a sentence, the figure, and one row per
    group with its average r(d) under each system."""
    from limelight.audit.stage import Figure, Heading, Table, Text

    res, figs = audit_dir.results(), audit_dir.figures_dir
    blocks: list = []
    group = res.get("group_field")
    grp_p = audit_dir.table("groups")
    if group and grp_p.exists():
        grp = pd.read_parquet(grp_p)
        blocks.append(Heading(f"Retrievability by {group}", 3))
        first = grp[grp["system"] == grp["system"].iloc[0]]
        big = first[first["n_docs"] >= 20] if (first["n_docs"] >= 20).any() else first
        lo, hi = big.sort_values("r_mean").iloc[0], big.sort_values("r_mean").iloc[-1]
        blocks.append(Text(
            f"Under {first['system'].iloc[0]}, a document of {group} {hi['group']} is shown by "
            f"{hi['r_mean']:,.0f} searches on average, one of {lo['group']} by {lo['r_mean']:,.1f} "
            f"(groups of 20 documents or more)."))
        blocks.append(Figure(figs / "groups.png",
                             f"Average retrievability of a document per {group}: the most and the "
                             f"least retrievable groups, per system.",
                             f"python -c \"import pandas as pd; print(pd.read_parquet('{grp_p}'))\""))
        names = list(dict.fromkeys(grp["system"]))
        piv = grp.pivot_table(index="group", columns="system", values="r_mean").reindex(columns=names)
        size = grp.drop_duplicates("group").set_index("group")["n_docs"]
        wide = pd.DataFrame({group: piv.index, "documents": size.reindex(piv.index).to_numpy()})
        for n in names:
            wide[f"average retrievability under {n}"] = piv[n].to_numpy()
        share = grp[grp["system"] == names[0]].set_index("group")["r_share"]
        wide[f"share of all retrievability under {names[0]}"] = share.reindex(piv.index).to_numpy()
        wide = wide.sort_values(f"average retrievability under {names[0]}", ascending=False)
        blocks.append(Table(
            wide, f"Per {group}: how many searches show one of its documents on average under each "
                  f"system (a document in several groups counts in each).",
            formats={f"share of all retrievability under {names[0]}": "percent"}, raw=(group,),
            source=str(grp_p)))
    return blocks
