"""Stage ``figures``: the Lorenz curves, the group figure and the summary tables across systems,
and what changes between the first system and each other."""

from __future__ import annotations

import pandas as pd

from limelight._io import atomic_path
from limelight.audit.stage import Audit, Progress, Stage
from limelight.audit.stages.common import (
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
    bar.update(2, 2)
    return {"figures": made}


FIGURES = Stage("figures", "figures and summary tables", _figures,
                key=lambda a: ([a.key(f"retrievability-{n}") for n in _with_retrievability(a)],),
                skip=lambda a: None if _with_retrievability(a) else "no system has retrievability figures")


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
