"""Stage ``exposure-<system>``: exact exposure of every query's top ``depth`` under one system
(resumable, an ``ExposureStore``)."""

from __future__ import annotations

from limelight.audit.stage import Audit, Progress, Stage, SystemView


# ---- exposure and retrievability --------------------------------------------------------------
def _exposure_deps(audit: Audit, spec: SystemView) -> list:
    return [audit.key("index")] + ([audit.key("query-vectors")] if spec.needs_dense else [])


def exposure_job(audit: Audit, spec: SystemView):
    """The :class:`~limelight.audit.job.ExposureJob` of one system of the audit (what
    ``limelight exposure compute`` runs for its one system): the audit's query set (validated
    and fingerprinted once, when the inputs were loaded), its store ``systems/NAME/exposure``, known by the stage keys of
    the index (and query vectors) it reads, recording the audit's settings."""
    from limelight.audit.job import ExposureJob

    cfg = audit.cfg
    return ExposureJob(spec, audit.inputs.queries, audit.dir.store_dir(spec.name), cfg.depth,
                       cfg.shard_size, index_dir=audit.dir.index_dir,
                       index_key=_exposure_deps(audit, spec), recorded="audit",
                       queries_fp=audit.inputs.queries_fp)


def exposure_stage(spec: SystemView, depth: int) -> Stage:
    """Exact exposure of every query's top ``depth`` under one system (resumable)."""

    def body(audit: Audit, bar: Progress) -> dict:
        retr = audit.retriever(spec)  # (the audit's opener: its shared encoder and re-ranker)
        st = exposure_job(audit, spec).run(retr, bar.update)
        # counted from the store's index and manifest: neither the pairs nor the queries read
        out = {"n_pairs": st.n_pairs(), "n_queries": st.n_queries, "n_docs": len(st.doc_ids),
               "timings": st.manifest.get("timings", {})}
        if callable(getattr(retr, "coverage", None)):  # results of a file or a service: which queries have any
            out["coverage"] = retr.coverage()
        return out

    return Stage(f"exposure-{spec.name}", f"exact exposure under {spec.name} (top {depth})", body,
                 report=report_section, key=lambda a: (_exposure_deps(a, spec), spec.settings(), a.inputs.queries_fp,
                                a.cfg.depth, a.cfg.shard_size),
                 inputs=("index",), outputs=lambda a: (a.dir.store_dir(spec.name),))


# ---- report ---------------------------------------------------------------------------------------
def _coverage_notes(cov: dict) -> str:
    """What else a system's coverage says (result lists no query matches, unknown documents
    left out, repeated lists), as a clause, or ``""``."""
    notes = [f"{cov[k]:,} {what}" for k, what in (
        ("unmatched_result_lists", "result lists match no search of the log"),
        ("duplicate_result_lists", "result lists repeat an earlier search and were left out"),
        ("unknown_doc_results", "results of documents the collection lacks were left out"))
        if cov.get(k)]
    return "; " + "; ".join(notes) if notes else ""


_REPLAY_WORDS = {"system": "system", "url": "service address", "k": "results asked for",
                 "asked": "searches asked", "answered": "answered", "refused": "refused",
                 "failed": "failed", "retried": "retried", "attempts": "requests sent",
                 "latency_p50_ms": "median time (ms)", "latency_p95_ms": "95th percentile (ms)",
                 "latency_p99_ms": "99th percentile (ms)"}


def report_section(audit_dir, stages) -> list:
    """Which searches of the log each system answered (systems whose results come from a file or
    a live service), and how the searches went to each live service (asked, answered, failed,
    retried, latency)."""
    from limelight.audit.stage import Heading, Table, Text
    from limelight.retrieval.replay import replay_summaries

    systems = audit_dir.results()["systems"]
    blocks: list = []
    for n, s in systems.items():
        if (cov := s.get("coverage")) is not None:
            blocks.append(Text(
                f"{n}: queries with results {cov['with_results']:,}, without "
                f"{cov['without_results']:,} (of {cov['queries']:,}; a query without results "
                f"shows no document){_coverage_notes(cov)}."))
    rows = [{"system": n, **r} for n in systems for r in replay_summaries(audit_dir.system_dir(n))]
    if rows:
        import pandas as pd

        df = pd.DataFrame(rows)
        labels = dict(_REPLAY_WORDS)
        labels.update({c: c.replace("_", " ") for c in df.columns if c not in labels})
        blocks.append(Heading("Queries replayed against live services", 3))
        blocks.append(Table(df.rename(columns=labels),
                            "Per system and number of results asked for: searches asked, answered "
                            "(refused: an error answer taken as no results), failed (still without "
                            "an answer), retried; requests sent, retries included; response times "
                            "of the answered requests. The log of every request is kept under the "
                            "system's replay folder.", ids=("service address",)))
    if blocks:
        blocks.insert(0, Heading("Searches answered by external systems"))
    return blocks
