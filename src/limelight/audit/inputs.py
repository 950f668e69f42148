"""The inputs of an audit: the collection, the exposure query set (by ``queries.source``), the
judged queries, and their fingerprints. Loaded once, before the output directory is created, so
that an audit that cannot load them leaves nothing behind.

``queries.source = "generated"`` audits a collection that has no query log with queries generated
from the collection itself, as CtrlQGen does (Penha et al., WWW 2023): for every entity (or a
seeded sample of ``[ctrlqgen] n_entities`` of them), ``[ctrlqgen] n`` queries (default 1) of each
intent of ``[ctrlqgen] intents`` (default narrow and broad), by WeakLabeling-Un (no model) or the
trained ``[ctrlqgen] generator`` (checked up front against the schema and, if set,
``[ctrlqgen] backbone``: ``check_ctrlqgen_generator``), from the fields of the entity schema
``[ctrlqgen] schema`` (default: the one shipped for the collection, ``debian`` or ``movies``). The generated queries
are then a query log: normalised, identical texts merged into one query whose weight o_q is the
number of times it was generated (r(d) is unchanged: it is additive over queries); a query keeps
the id, intent and entity of its first occurrence. ``queries.sample`` and ``--quick`` sample them
as they sample the log; entities are drawn first, at most as many as queries are kept, so a quick
audit of a large catalog does not generate for every entity.

The collection is read once here, for its checks, its size and its fingerprint, and is not held:
:class:`AuditDataset` reads it again where a stage needs its documents (see there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from limelight.audit.collection import (
    AuditDataset,
    collection_fingerprint,
    load_audit_dataset,
)
from limelight.audit.config import AuditConfig, _line_of
from limelight.errors import FormatError, LimelightError

#: [ctrlqgen] defaults shared by ``queries.source = "generated"`` and the ctrlqgen stage
GENERATED_INTENTS = ("narrow", "broad")


@dataclass
class AuditInputs:
    """What the stages work on (loaded once)."""

    dataset: AuditDataset
    queries: Any  # Queries (the exposure query set)
    collection_fp: str
    queries_fp: str
    eval_queries: Any = None  # Queries with qrels, or None


def load_inputs(cfg: AuditConfig, quick: bool = False, on_disk: str | os.PathLike | None = None) -> AuditInputs:
    """Load and check the collection, the exposure queries (``queries.source``, sampled as the
    config says; ``quick`` takes ``[quick] queries``) and the judged queries.

    ``on_disk``: a folder (new or limelight's, living as long as the inputs are used) where a
    query log's distinct queries are kept as a query table (``limelight.data.querytable``), read
    a batch at a time as the exposure stage reads them, as ``limelight exposure compute`` keeps
    them: the same queries, in the same order, with the same fingerprint, in memory that does
    not grow with the log. A sample of the log is then drawn from the table (and held)."""
    from limelight.audit.job import job_queries
    from limelight.exposure.fingerprints import queries_fingerprint

    where = cfg.path or "<config>"
    ds = load_audit_dataset(cfg.collection, cfg.collection_name)
    coll = ds.collection
    if cfg.depth >= len(coll):
        raise FormatError(where, _line_of(cfg.text, "depth") if cfg.text else None,
                          f"audit.depth ({cfg.depth}) is not below the {len(coll)} documents of "
                          f"{ds.name}: every query would retrieve (nearly) every document, so r(d) "
                          f"is flat and Gini meaningless (0 under dense retrieval); audit a larger "
                          f"collection or set audit.depth and cutoffs below {len(coll)}")
    if cfg.group_field and cfg.group_field not in coll.fields:
        raise LimelightError(f"{where}: audit.group_field {cfg.group_field!r} is not a field of "
                             f"{ds.name} (fields: {', '.join(sorted(coll.fields)) or 'none'})")
    check_ctrlqgen_generator(cfg, ds)
    n = cfg.quick_queries if quick else cfg.query_sample
    # sampled, then validated once (the exposure job's check: ``job_queries``)
    queries = job_queries(load_queries(cfg, ds, n, on_disk), sample=n, seed=cfg.seed)
    eval_q = None
    if ds.qrels is not None and ds.queries is not None:
        eval_q = ds.queries
        if quick and cfg.quick_eval_queries:
            eval_q = eval_q.sample(cfg.quick_eval_queries, seed=cfg.seed)
    text_h = collection_fingerprint(coll)
    dataset = AuditDataset(ds, cfg.collection, cfg.collection_name, text_h, keep=(cfg.group_field,))
    return AuditInputs(dataset, queries, text_h, queries_fingerprint(queries), eval_q)


def check_ctrlqgen_generator(cfg: AuditConfig, ds) -> None:
    """A configured ``[ctrlqgen] generator`` must have been trained for the configured entity
    schema (``[ctrlqgen] schema``, default the collection's) and, when ``[ctrlqgen] backbone``
    is set, from that base model: checked from its metadata before anything runs, so a wrong
    generator is a one-line error, not a failure half-way (``check_generator``). Nothing is
    checked when no stage uses it or when the collection has no entity schema (the ctrlqgen
    stage is then skipped with its reason)."""
    from limelight.querygen.generator import check_generator
    from limelight.querygen.serialize import load_schema, shipped_schema_name

    opts = cfg.options.get("ctrlqgen", {})
    if not opts.get("generator") or not (cfg.stages.get("ctrlqgen", True)
                                         or cfg.query_source == "generated"):
        return
    name = opts.get("schema") or shipped_schema_name(ds.name)
    if name is None:  # no entity schema: the ctrlqgen stage is skipped with its reason
        return
    try:
        schema = load_schema(name)
    except LimelightError:
        return
    check_generator(opts["generator"], schema, opts.get("backbone"),
                    what=f"{cfg.path or '<config>'}: [ctrlqgen] generator")


def load_queries(cfg: AuditConfig, ds, n: int = 0, on_disk: str | os.PathLike | None = None):
    """The exposure query set of ``queries.source`` before sampling (``n``: the number of
    queries the audit will sample, 0 for all; it bounds the entities a generated set draws;
    ``on_disk``: where a query log's distinct queries are kept, see ``load_inputs``)."""
    src = cfg.query_source
    if src == "log":
        from limelight.data.loaders import load_query_log

        return load_query_log(on_disk=on_disk)
    if src == "dataset":
        if ds.queries is None:
            raise LimelightError(f"{cfg.path or '<config>'}: queries.source = \"dataset\" but "
                                 f"{ds.name} has no queries")
        return ds.queries
    if src == "generated":
        return generated_queries(cfg, ds, n)
    from limelight.data.loaders import load_queries_file

    return load_queries_file(src, on_disk=on_disk)


def generated_queries(cfg: AuditConfig, ds, n: int = 0):
    """``queries.source = "generated"``: queries generated from the collection (see the module
    docstring), merged by normalised text with weight o_q = number of occurrences."""
    from limelight.data.ids import IdMap
    from limelight.data.queries import Queries
    from limelight.querygen.generator import generate_queries
    from limelight.querygen.serialize import load_schema, shipped_schema_name
    from limelight.querygen.weaklabel import WeakLabelingUn

    opts = cfg.options.get("ctrlqgen", {})
    coll = ds.collection
    try:  # the default: the schema shipped for the collection's name, never a path
        name = opts.get("schema") or shipped_schema_name(ds.name)
        if name is None:
            raise LimelightError(f"{ds.name} is not a catalog with a shipped schema")
        schema = load_schema(name)
        schema.check_collection(coll)
    except LimelightError as e:
        raise LimelightError(f"{cfg.path or '<config>'}: queries.source = \"generated\" needs an "
                             f"entity schema for {ds.name} (set [ctrlqgen] schema = \"FILE.toml\"; "
                             f"shipped: debian, movies): {e}") from None
    n_entities = opts.get("n_entities")
    if n:
        n_entities = min(n, n_entities or n)
    generator = opts.get("generator")
    if generator is not None:  # loaded once for every intent
        from limelight.querygen.generator import load_generator

        generator = load_generator(generator, schema)
    labeler = WeakLabelingUn(schema).fit(coll) if generator is None else None
    parts = [generate_queries(coll, schema, intent, n=int(opts.get("n", 1)), generator=generator,
                              n_entities=n_entities, seed=cfg.seed, labeler=labeler)
             for intent in opts.get("intents", GENERATED_INTENTS)]
    ids = np.concatenate([p.ids.strings for p in parts]).astype(object)
    texts = np.concatenate([p.texts for p in parts]).astype(object)
    intents = np.concatenate([p.intents for p in parts]).astype(object)
    entity = np.concatenate([p.fields["entity_id"] for p in parts]).astype(object)
    norm = np.asarray([" ".join(t.lower().split()) for t in texts.tolist()], dtype=object)
    keep = np.asarray([bool(t) for t in norm.tolist()], dtype=bool)
    ids, intents, entity, norm = ids[keep], intents[keep], entity[keep], norm[keep]
    if not len(norm):
        raise LimelightError(f"{cfg.path or '<config>'}: queries.source = \"generated\": no "
                             f"query could be generated from {ds.name} (are the schema's fields "
                             "empty?)")
    uniq, first, inverse = np.unique(norm, return_index=True, return_inverse=True)
    weight = np.bincount(inverse, minlength=len(uniq)).astype(np.float64)
    order = np.argsort(first, kind="stable")  # first occurrence order: narrow, then broad
    first = first[order]
    return Queries(IdMap(ids[first].tolist(), kind="query"), norm[first], weight[order],
                   intents[first], {"entity_id": entity[first]}, name="generated")
