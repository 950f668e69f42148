"""Entity serialization for CtrlQGen (Penha et al., WWW 2023, §3.1.1) and catalog schemas.

``s(e) = col_1: val_1 [SEP] col_2: val_2 [SEP] ... [SEP] col_n: val_n`` over the schema's fields
in order narrow, broad, broad free text; empty values are left out; list values are joined by
", "; free-text fields may be cut to their first ``max_words`` words (the paper's appendix E keeps
the first 50 tokens of reviews and descriptions).

A schema declares the role of each catalog field: ``narrow`` (fields that identify one entity:
title, name), ``broad`` (category-like values many entities share: genre, section, tags) and
``broad_ft`` (free-text broad fields: description, reviews). It is a small TOML file users can
write for their own catalogs::

    name = "debian"
    narrow = ["name", "summary"]
    broad = ["section", "tags"]
    broad_ft = ["description"]

    [fields.tags]                 # optional per-field settings
    label = "tags"                # the column name written in s(e) (default: the field name)
    facet_separator = "::"        # queries keep what follows it ("use::editing" -> "editing")
    skip_values = ["role::program"]  # values never used in queries
    [fields.description]
    max_words = 50                # serialization keeps the first 50 words
    [fields."MPAA Rating"]
    query_prefix = "rated"        # queries read "rated pg-13", not "pg-13"

``load_schema("debian")`` / ``load_schema("movies")`` read the schemas shipped with limelight;
any other argument is a path to a TOML file.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from limelight.data.collection import Collection
from limelight.errors import FormatError, LimelightError

SEP = "[SEP]"
ROLES = ("narrow", "broad", "broad_ft")
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class FieldSpec:
    """Settings of one catalog field: its role, serialized label, facet separator, skipped
    values and the word limit applied when serializing."""

    name: str
    role: str
    label: str
    facet_separator: str | None = None
    skip_values: frozenset[str] = frozenset()
    max_words: int | None = None
    query_prefix: str | None = None


@dataclass(frozen=True)
class Schema:
    """Field roles of a catalog (narrow, broad, broad free text) for serialization and weak
    labeling. Build it with ``Schema.from_dict`` or ``load_schema``."""

    name: str
    fields: tuple[FieldSpec, ...]
    source: str = "<dict>"
    _by_name: dict[str, FieldSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        self._by_name.update({f.name: f for f in self.fields})

    @property
    def narrow(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.role == "narrow")

    @property
    def broad(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.role == "broad")

    @property
    def broad_ft(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.role == "broad_ft")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def spec(self, name: str) -> FieldSpec:
        return self._by_name[name]

    @classmethod
    def from_dict(cls, d: dict, source: str = "<dict>") -> Schema:
        """A schema from the TOML structure (see the module docstring)."""
        if not isinstance(d, dict):
            raise FormatError(source, None, "a schema is a table with narrow/broad/broad_ft lists")
        unknown = set(d) - {"name", "narrow", "broad", "broad_ft", "fields", "id"}
        if unknown:
            raise FormatError(source, None, f"unknown schema key(s): {', '.join(sorted(unknown))}")
        opts = d.get("fields", {}) or {}
        specs: list[FieldSpec] = []
        seen: set[str] = set()
        for role in ROLES:
            names = d.get(role, []) or []
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise FormatError(source, None, f"{role!r} must be a list of field names")
            for n in names:
                if n in seen:
                    raise FormatError(source, None, f"field {n!r} has more than one role")
                seen.add(n)
                o = opts.get(n, {}) or {}
                bad = set(o) - {"label", "facet_separator", "skip_values", "max_words", "query_prefix"}
                if bad:
                    raise FormatError(source, None, f"field {n!r}: unknown setting(s) {', '.join(sorted(bad))}")
                mw = o.get("max_words")
                if mw is not None and (not isinstance(mw, int) or mw < 1):
                    raise FormatError(source, None, f"field {n!r}: max_words must be a positive integer")
                specs.append(FieldSpec(n, role, str(o.get("label", n)), o.get("facet_separator"),
                                       frozenset(map(str, o.get("skip_values", []))), mw,
                                       o.get("query_prefix")))
        extra = set(opts) - seen
        if extra:
            raise FormatError(source, None, f"settings for field(s) without a role: {', '.join(sorted(extra))}")
        if not any(s.role == "narrow" for s in specs):
            raise FormatError(source, None, "a schema needs at least one narrow field")
        if not any(s.role in ("broad", "broad_ft") for s in specs):
            raise FormatError(source, None, "a schema needs at least one broad or broad_ft field")
        return cls(str(d.get("name", Path(source).stem)), tuple(specs), source)

    def check_collection(self, collection: Collection) -> None:
        """Raise, in one line, naming every schema field the collection lacks (and its role)."""
        missing = [f for f in self.fields if f.name not in collection.fields]
        if missing:
            which = ", ".join(f"{f.name!r} ({f.role})" for f in missing)
            raise LimelightError(
                f"schema {self.name!r} ({self.source}) names field{'s' if len(missing) > 1 else ''} "
                f"{which}, which catalog {collection.name!r} lacks "
                f"(its fields: {', '.join(collection.fields) or 'none'})")


def shipped_schemas() -> list[str]:
    """The names of the entity schemas shipped with limelight (``debian``, ``movies``)."""
    return sorted(p.stem for p in SCHEMA_DIR.glob("*.toml"))


def shipped_schema_name(collection_name: str) -> str | None:
    """The shipped schema named like a collection (``debian``), or None. A collection's name is
    looked up among the shipped schemas only: it is never opened as a path (a collection named
    ``docs`` run from a folder with a ``docs/`` subfolder has no schema, not a folder for one)."""
    return collection_name if collection_name in shipped_schemas() else None


def load_schema(name_or_path: str | os.PathLike | Schema) -> Schema:
    """A shipped schema (``debian``, ``movies``) or a TOML schema file."""
    if isinstance(name_or_path, Schema):
        return name_or_path
    s = str(name_or_path)
    path = SCHEMA_DIR / f"{s}.toml" if s in shipped_schemas() else Path(s)
    if not path.is_file():
        shipped = ", ".join(shipped_schemas())
        what = "a folder, not a schema file" if path.is_dir() else "no such schema"
        raise LimelightError(f"{s}: {what} (shipped: {shipped}; or give a TOML file)")
    try:
        d = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise FormatError(path, int(m.group(1)) if m else None, f"invalid TOML ({e})") from None
    return Schema.from_dict(d, str(path))


# ---- values -----------------------------------------------------------------------------------


def _is_empty(v) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and np.isnan(v):
        return True
    if isinstance(v, str):
        return not v.strip()
    if isinstance(v, (list, tuple, np.ndarray)):
        return all(_is_empty(x) for x in v)
    return False


def field_values(spec: FieldSpec, v, for_query: bool = False) -> list[str]:
    """The non-empty string values of one field of one entity (lists give several values).

    With ``for_query``, skipped values are dropped and facet prefixes removed
    (``use::editing`` → ``editing``; ``-`` and ``_`` become spaces).
    """
    if _is_empty(v):
        return []
    items = list(v) if isinstance(v, (list, tuple, np.ndarray)) else [v]
    out = []
    for x in items:
        if _is_empty(x):
            continue
        s = _WS.sub(" ", str(x)).strip()
        if for_query:
            if s in spec.skip_values:
                continue
            if spec.facet_separator and spec.facet_separator in s:
                s = s.rsplit(spec.facet_separator, 1)[1]
                s = " ".join(s.replace("-", " ").replace("_", " ").replace(":", " ").split())
            if spec.query_prefix:
                s = f"{spec.query_prefix} {s}"
        out.append(s)
    return out


def _value_text(spec: FieldSpec, v) -> str:
    text = ", ".join(field_values(spec, v))
    if spec.max_words is not None:
        words = text.split(" ")
        if len(words) > spec.max_words:
            text = " ".join(words[:spec.max_words])
    return text


def serialize_entity(entity: dict, schema: Schema, entity_id: str | None = None) -> str:
    """``col: val [SEP] col: val ...`` for one entity (a dict of field values).

    Raises ``LimelightError`` naming the entity when every schema field is empty.
    """
    parts = [f"{s.label}: {t}" for s in schema.fields
             if (t := _value_text(s, entity.get(s.name)))]
    if not parts:
        who = entity_id if entity_id is not None else entity.get("id", "?")
        raise LimelightError(f"entity {who!r}: every field of schema {schema.name!r} is empty "
                             f"({', '.join(schema.names)})")
    return f" {SEP} ".join(parts)


def plain_text(entity: dict, schema: Schema, entity_id: str | None = None) -> str:
    """The values only, space-joined, without column names or [SEP] (QGen's input)."""
    parts = [t for s in schema.fields if (t := _value_text(s, entity.get(s.name)))]
    if not parts:
        who = entity_id if entity_id is not None else entity.get("id", "?")
        raise LimelightError(f"entity {who!r}: every field of schema {schema.name!r} is empty")
    return " ".join(parts)


def serialize_collection(collection: Collection, schema: Schema | str,
                         idx: Sequence[int] | np.ndarray | None = None,
                         plain: bool = False) -> np.ndarray:
    """s(e) for the documents at ``idx`` (default: all) of a catalog, as an object array.

    ``plain=True`` gives the values without column names (QGen's input).
    """
    schema = load_schema(schema)
    schema.check_collection(collection)
    idx = np.arange(len(collection)) if idx is None else np.asarray(idx, dtype=np.int64)
    fn = plain_text if plain else serialize_entity
    cols = [collection.fields[n] for n in schema.names]
    names = schema.names
    ids = collection.ids.strings
    return np.asarray([fn(dict(zip(names, (c[i] for c in cols), strict=True)), schema, ids[i])
                       for i in idx.tolist()], dtype=object)
