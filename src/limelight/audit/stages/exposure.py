"""Stage ``exposure-<system>``: exact exposure of every query's top ``depth`` under one system
(resumable, an ``ExposureStore``)."""

from __future__ import annotations

from limelight.audit.cache import stable_hash
from limelight.audit.stage import Audit, Progress, Stage, SystemView


# ---- exposure and retrievability --------------------------------------------------------------
def _exposure_deps(audit: Audit, spec: SystemView) -> list:
    return [audit.key("index")] + ([audit.key("query-vectors")] if spec.needs_dense else [])


def exposure_stage(spec: SystemView, depth: int) -> Stage:
    """Exact exposure of every query's top ``depth`` under one system (resumable)."""

    def body(audit: Audit, bar: Progress) -> dict:
        from limelight.exposure.compute import compute_exposure

        cfg = audit.cfg
        retr = audit.retriever(spec)
        st = compute_exposure(retr, audit.inputs.queries, audit.dir.store_dir(spec.name),
                              depth=cfg.depth, shard_size=cfg.shard_size,
                              fingerprint=stable_key(_exposure_deps(audit, spec), spec),
                              settings=spec.settings(), progress=bar.update)
        q, _, _, _ = st.pair_arrays()
        out = {"n_pairs": int(len(q)), "n_queries": len(st.queries), "n_docs": len(st.doc_ids),
               "timings": st.manifest.get("timings", {})}
        if callable(getattr(retr, "coverage", None)):  # results of a file or a service: which queries have any
            out["coverage"] = retr.coverage()
        return out

    return Stage(f"exposure-{spec.name}", f"exact exposure under {spec.name} (top {depth})", body,
                 key=lambda a: (_exposure_deps(a, spec), spec.settings(), a.inputs.queries_fp,
                                a.cfg.depth, a.cfg.shard_size),
                 inputs=("index",), outputs=lambda a: (a.dir.store_dir(spec.name),))


def stable_key(deps: list, spec) -> str:
    return stable_hash("retriever", deps, spec.settings())
