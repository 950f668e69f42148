"""Broad query suggestions (Penha et al., WWW 2023, §5.3 and Figure 4): for a user's query, the
top-k entities a retriever returns, and ``n`` broad-intent CtrlQGen queries for each of them.

Usage::

    from limelight.data import load_catalog
    from limelight.querygen.suggest import suggest
    from limelight.retrieval.spec import System

    cat = load_catalog("debian")
    bm25 = System.of("bm25").open("idx/debian")
    s = suggest("text editor", bm25, cat, "debian", top_k=5, n=3)   # generator=DIR: trained G
    s.suggestions   # [(suggestion, entity id it was generated for), ...], deduplicated

The pieces are what the issue-26 H2 simulation uses (``experiments/ctrlqgen/stages_eval.py``):
``broad_suggestions`` (``n`` broad queries per entity, by the trained generator or, without one,
WeakLabeling-Un, the weak-label fallback) and ``ranked_suggestions`` (a ranking's suggestions in
rank order, each entity's in generation order). The simulation keeps repeated texts (each is an
accepted suggestion of its own); ``suggest``, for one user, shows each text once
(``normalize_query``), where it first appears, and never the user's own query.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from limelight.data.collection import Collection
from limelight.data.queries import check_query_text
from limelight.errors import LimelightError, UnknownIdError
from limelight.querygen.generator import (
    QueryGenerator,
    generate_queries,
    generator_source,
    load_generator,
)
from limelight.querygen.serialize import Schema, load_schema
from limelight.querygen.weaklabel import WeakLabelingUn, normalize_query


def broad_suggestions(collection: Collection, schema: Schema | str, entity_ids: Sequence[str],
                      n: int = 3, generator: QueryGenerator | str | os.PathLike | None = None,
                      seed: int = 0, batch_size: int = 16, labeler: WeakLabelingUn | None = None,
                      empty: str = "skip") -> dict[str, list[str]]:
    """``n`` broad queries for each entity (``generate_queries`` with intent broad), by entity id
    in the order of ``entity_ids``; an entity that gives none is absent (``empty="skip"``) or
    an error naming it (``empty="error"``)."""
    qs = generate_queries(collection, schema, "broad", n=n, generator=generator,
                          entity_ids=list(entity_ids), seed=seed, batch_size=batch_size,
                          labeler=labeler, empty=empty)
    out: dict[str, list[str]] = {}
    for e, t in zip(qs.fields["entity_id"].tolist(), qs.texts.tolist(), strict=True):
        out.setdefault(e, []).append(t)
    return out


def ranked_suggestions(ranking: Iterable[Hashable], by_entity: Mapping[Hashable, Sequence[str]],
                       dedup: bool = False, exclude: Iterable[str] = ()) -> list[tuple[str, Hashable]]:
    """The suggestions of the entities of one ranking, in rank order (each entity's in
    ``by_entity`` order), as (text, entity) pairs. With ``dedup``, a text whose normalized
    form came before, or is that of a text of ``exclude`` (the user's own query), is left out."""
    out, seen = [], {normalize_query(t) for t in exclude}
    for e in ranking:
        for t in by_entity.get(e, ()):
            if dedup:
                key = normalize_query(t)
                if key in seen:
                    continue
                seen.add(key)
            out.append((t, e))
    return out


@dataclass
class Suggestions:
    """What ``suggest`` returns: the query, its top entities with their scores, the deduplicated
    broad suggestions (text, entity id) and where they come from (``generator_source``)."""

    query: str
    entities: list[tuple[str, float]]
    suggestions: list[tuple[str, str]] = field(default_factory=list)
    source: str = ""

    def to_dict(self) -> dict:
        return {"query": self.query, "source": self.source,
                "entities": [{"rank": r, "entity_id": e, "score": s}
                             for r, (e, s) in enumerate(self.entities, 1)],
                "suggestions": [{"query": t, "entity_id": e} for t, e in self.suggestions]}


def suggest(query: str, retriever, collection: Collection, schema: Schema | str, top_k: int = 5,
            n: int = 3, generator: QueryGenerator | str | os.PathLike | None = None,
            backbone: str | os.PathLike | None = None, seed: int = 0,
            labeler: WeakLabelingUn | None = None) -> Suggestions:
    """Broad suggestions for ``query``: its ``top_k`` entities under ``retriever`` (anything with
    ``search_batch(texts, k)`` and ``doc_ids``, e.g. BM25 over an index of the catalog), then
    ``n`` broad queries for each (``broad_suggestions``; a path ``generator`` is checked against
    ``schema`` and, when given, ``backbone``), deduplicated and without the query itself: at
    most ``top_k × n``.

    One-line errors: an empty query, ``top_k`` or ``n`` below 1, a retrieved entity id that the
    catalog lacks (an index of another collection), a trained generator that returns nothing for
    one of the entities. An entity whose broad fields are empty gives no weak-label suggestion."""
    query = check_query_text(query)
    if top_k < 1 or n < 1:
        raise LimelightError(f"top_k and n must be ≥ 1, got {top_k} and {n}")
    schema = load_schema(schema)
    if generator is not None and not isinstance(generator, QueryGenerator):
        generator = load_generator(generator, schema, backbone)
    docs, scores = retriever.search_batch([query], top_k)
    ents = []
    for d, s in zip(docs[0].tolist(), scores[0].tolist(), strict=True):
        if d < 0:
            continue
        eid = str(retriever.doc_ids.strings[d])
        if eid not in collection.ids:
            raise UnknownIdError("entity", eid, f"catalog {collection.name} (is the index built "
                                                 "over this catalog?)")
        ents.append((eid, float(s)))
    by_entity = broad_suggestions(collection, schema, [e for e, _ in ents], n, generator, seed,
                                  labeler=labeler, empty="skip" if generator is None else "error")
    return Suggestions(query, ents, ranked_suggestions([e for e, _ in ents], by_entity, dedup=True,
                                                       exclude=[query]),
                       generator_source(generator))
