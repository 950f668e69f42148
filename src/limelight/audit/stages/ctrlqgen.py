"""Stage ``ctrlqgen``: CtrlQGen synthetic queries and their effect on retrievability."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from limelight.audit.stage import (
    Audit,
    ConfigView,
    Option,
    Progress,
    Stage,
    StageOptions,
    SystemView,
)
from limelight.audit.stages.common import (
    able,
    none_able,
    present,
    switched_off,
    write_table,
)
from limelight.retrieval.systems import (
    NEW_QUERIES,
)


def _ctrlqgen_system(cfg: ConfigView) -> SystemView:
    """The system the generated queries run on: the first that answers new queries (the first
    system of the config when none does: the stage then says why it cannot run)."""
    systems = able(cfg, NEW_QUERIES)
    return systems[0] if systems else cfg.systems[0]


def _resolve(base: Path, raw: str) -> Path:
    path = Path(raw).expanduser()
    return (path if path.is_absolute() else base / path).resolve()


def _check(opts: dict, fail, context: dict) -> None:
    """``[ctrlqgen]``: counts ≥ 1, intents among narrow and broad; a ``schema`` is a shipped
    schema's name or a TOML file, a ``generator`` (and a ``backbone`` given as a local path) is
    resolved against the configuration's folder, as checkpoints are, and the generator's identity
    (``generator_fingerprint``) joins the options, so that the stage's key follows the weights."""
    base = context["base"]
    for k in ("n", "n_entities"):
        if opts.get(k, 1) < 1:
            fail(k, f"ctrlqgen.{k} must be ≥ 1, got {opts[k]}")
    if "intents" in opts:
        if not opts["intents"]:
            fail("intents", "ctrlqgen.intents is empty (narrow, broad or both)")
        for i in opts["intents"]:
            if not isinstance(i, str) or i.lower() not in ("narrow", "broad"):
                fail("intents", f"ctrlqgen.intents: unknown {i!r} (known: narrow, broad)")
    if "schema" in opts:
        from limelight.querygen.serialize import shipped_schemas

        raw = opts["schema"]
        if raw not in shipped_schemas():
            path = Path(raw).expanduser()
            found = next((c for c in ((path,) if path.is_absolute() else (base / path, path)) if c.is_file()),
                         None)
            if found is None:
                fail("schema", f"ctrlqgen.schema {raw!r}: neither a shipped schema "
                               f"({', '.join(shipped_schemas())}) nor a TOML file")
            opts["schema"] = str(found.resolve())
    if isinstance(opts.get("generator"), str):
        from limelight.querygen.generator import generator_fingerprint

        opts["generator"] = str(_resolve(base, opts["generator"]))
        opts["generator_fingerprint"] = generator_fingerprint(opts["generator"])
        if isinstance(opts.get("backbone"), str) and (backbone := _resolve(base, opts["backbone"])).exists():
            opts["backbone"] = str(backbone)


def _shipped_schema(audit: Audit) -> str | None:
    """The schema shipped for the collection's name (``debian``, ``movies``), or None: a
    collection's name is never opened as a path."""
    from limelight.querygen.serialize import shipped_schema_name

    return shipped_schema_name(audit.inputs.dataset.name)


OPTIONS = StageOptions("ctrlqgen", {
    "schema": Option(str, _shipped_schema, help="entity schema: a shipped name or a TOML file "
                                                "(default: the one shipped for the collection)"),
    "intents": Option(list, ["narrow", "broad"], help="query intents generated"),
    "n": Option(int, 1, help="queries per entity and intent"),
    "n_entities": Option(int, 5000, 500, help="entities sampled (seeded)"),
    "generator": Option(str, None, help="a trained generator folder (limelight generate train); "
                                         "default: WeakLabeling-Un templates"),
    "backbone": Option(str, help="the generator's backbone model folder, when not its own"),
}, _check)


def _ctrlqgen_skip(audit: Audit) -> str | None:
    from limelight.errors import LimelightError
    from limelight.querygen.serialize import load_schema

    if off := switched_off(audit, "ctrlqgen"):
        return off
    if audit.cfg.query_source == "generated":
        return ("the audit's own queries are generated (queries.source = \"generated\"): the "
                "systems' retrievability above is already under CtrlQGen queries")
    spec, inp = _ctrlqgen_system(audit.cfg), audit.inputs
    if none := none_able(audit, NEW_QUERIES, "to run the generated queries"):
        return none
    if not present(audit, f"retrievability-{spec.name}"):
        return f"needs the retrievability of {spec.name}"
    schema = OPTIONS.values(audit)["schema"]
    if schema is None:
        return (f"{inp.dataset.name} has no CtrlQGen entity schema (narrow/broad fields): none is "
                f"shipped for that name (debian, movies); set [ctrlqgen] schema = \"FILE.toml\"")
    try:
        load_schema(schema).check_collection(inp.dataset.collection)
    except LimelightError as e:
        return f"{inp.dataset.name} has no CtrlQGen entity schema (narrow/broad fields): {e}"
    return None


def _ctrlqgen(audit: Audit, bar: Progress) -> dict:
    """CtrlQGen (Penha et al., WWW 2023) synthetic queries of each intent (WeakLabeling-Un unless
    ``[ctrlqgen] generator`` names a trained model) for a seeded sample of entities, their exact
    exposure under the first system, and the effect on retrievability: r(d) and Gini under the
    log, under the generated queries, and under both (r is additive over queries)."""
    from limelight.audit.job import ExposureJob
    from limelight.exposure.compute import ExposureOptions
    from limelight.exposure.retrievability import gini, retrievable_fraction
    from limelight.querygen.generator import generate_queries, generator_source, load_generator
    from limelight.querygen.serialize import load_schema

    cfg, coll, opts = audit.cfg, audit.inputs.dataset.collection, OPTIONS.values(audit)
    spec = _ctrlqgen_system(cfg)
    schema = load_schema(opts["schema"])
    generator = None if not opts["generator"] else load_generator(
        opts["generator"], schema, opts.get("backbone"), what="[ctrlqgen] generator")
    base = pd.read_parquet(audit.dir.retrievability_path(spec.name))
    rows, n_gen = [], {}
    intents = list(opts["intents"])
    for i, intent in enumerate(intents):
        gen = generate_queries(coll, schema, intent, n=int(opts["n"]), generator=generator,
                               n_entities=min(int(opts["n_entities"]), len(coll)), seed=cfg.seed)
        n_gen[intent] = len(gen)
        # the one job assembler (it checks the queries); its store known by the retriever's own
        # fingerprint, as before
        job = ExposureJob(spec, gen, audit.dir.path / "ctrlqgen" / intent,
                          cfg.depth, cfg.shard_size, recorded=None,
                          pairs_in_memory=ExposureOptions.pairs_in_memory)
        st = job.run(audit.retriever(spec, query_vectors=False))
        sample = pd.DataFrame({"intent": intent, "entity_id": gen.fields["entity_id"][:20],
                               "query": gen.texts[:20]})
        write_table(audit, f"ctrlqgen_sample_{intent}", sample)
        for c in cfg.cutoffs:
            r_log = base[f"r_c{c}"].to_numpy()
            r_gen = st.retrievability(c=c).r
            for label, r in (("log", r_log), (f"generated ({intent})", r_gen),
                             (f"log + generated ({intent})", r_log + r_gen)):
                if label == "log" and i > 0:
                    continue
                rows.append({"system": spec.name, "queries": label, "c": c, "gini": gini(r),
                             "retrievable_fraction": retrievable_fraction(r)})
        bar.update(i + 1, len(intents))
    df = pd.DataFrame(rows).sort_values(["c", "queries"], kind="stable", ignore_index=True)
    write_table(audit, "ctrlqgen", df)
    return {"summary": {"system": spec.name, "n_generated": n_gen,
                        "generator": opts["generator"] or "WeakLabeling-Un",
                        "source": generator_source(generator)}}


def _ctrlqgen_note(audit: Audit) -> str:
    """Where the stage's queries came from (shown under the CtrlQGen section of the report)."""
    from limelight.querygen.generator import generator_source

    gen = OPTIONS.values(audit)["generator"]
    return f"Generated queries: {generator_source(gen)}."


CTRLQGEN = Stage("ctrlqgen", "CtrlQGen synthetic queries and their retrievability effect", _ctrlqgen,
                 key=lambda a: (a.key(f"retrievability-{_ctrlqgen_system(a.cfg).name}"),
                                dict(OPTIONS.values(a)), a.cfg.seed),
                 outputs=lambda a: (a.dir.path / "ctrlqgen",), skip=_ctrlqgen_skip,
                 note=_ctrlqgen_note, report=lambda d, s: report_section(d, s))


def report_section(audit_dir, stages) -> list:
    """How retrievability changes when generated searches (CtrlQGen) join the log."""
    from limelight.audit.stage import Table, Text
    from limelight.audit.stages.common import pct, read_table, section_table

    blocks, rec, df = section_table(stages, "ctrlqgen",
                                    "Would generated searches reach the documents the log misses?", audit_dir)
    if rec is None:
        return blocks
    if df is not None:
        c = int(df["c"].max())
        at = df[df["c"] == c]
        log = at[at["queries"] == "log"]
        both = at[at["queries"].str.startswith("log + ")]
        if len(log) and len(both):
            b = both.loc[both["retrievable_fraction"].idxmax()]
            blocks.append(Text(
                f"With the {b['queries'].removeprefix('log + ')} searches added to the log, "
                f"{pct(b['retrievable_fraction'])} of the documents are in some top {c}, against "
                f"{pct(log['retrievable_fraction'].iloc[0])} with the log alone."))
        blocks.append(Table(df.rename(columns={"queries": "searches", "c": "results looked at",
                                               "gini": "inequality (Gini)",
                                               "retrievable_fraction": "documents shown at least once"}),
                            "[[gini|Inequality]] and the share of documents shown at least once "
                            "under the first system, for the log, the generated searches of each "
                            "intent, and both together.",
                            formats={"documents shown at least once": "percent"},
                            source=str(audit_dir.table("ctrlqgen"))))
    for intent in ("narrow", "broad"):
        sample = read_table(audit_dir, f"ctrlqgen_sample_{intent}")
        if sample is not None and len(sample):
            blocks.append(Table(sample.rename(columns={"intent": "intent", "entity_id": "document",
                                                       "query": "generated search"}),
                                f"A few generated {intent} searches.", ids=("document",),
                                raw=("generated search",),
                                max_rows=10))
    return blocks
