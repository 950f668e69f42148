"""Stage ``retrievability-<system>``: r(d), Gini and Lorenz per cutoff (and per group) from a
system's exposure store."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from limelight._io import atomic_path
from limelight.audit.stage import Audit, Progress, Stage, SystemView
from limelight.audit.stages.common import (
    write_table,
)


def retrievability_stage(spec: SystemView) -> Stage:
    """r(d) at each cutoff over every document, Gini (overall and per group), Lorenz data."""

    def body(audit: Audit, bar: Progress) -> dict:
        from limelight.exposure.retrievability import gini, group_retrievability

        cfg, coll = audit.cfg, audit.inputs.dataset.collection
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
            cols[g] = [str(v) for v in coll.fields[g].tolist()]
        df = pd.DataFrame(cols)
        with atomic_path(audit.dir.retrievability_path(spec.name)) as tmp:
            df.to_parquet(tmp, index=False)
        c_main = 100 if 100 in cfg.cutoffs else max(cfg.cutoffs)
        r = cols[f"r_c{c_main}"]
        out: dict[str, Any] = {"cutoffs": cutoffs, "c_main": c_main,
                               "mean_exposing_queries": float(n_exp.mean())}
        if g:
            grp = group_retrievability(r, coll.fields[g])
            # Gini within each group (documents counted in each of their groups)
            from limelight.exposure.retrievability import _as_labels

            labels = [_as_labels(v) for v in coll.fields[g].tolist()]
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
                 inputs=(exposure,), outputs=lambda a: (a.dir.retrievability_path(spec.name),))
