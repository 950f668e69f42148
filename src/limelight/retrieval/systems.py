"""The registry of system kinds: what an audited system can be, as ir_measures registers measures.

A kind is one module that calls :func:`register_kind` with a :class:`SystemKind`: its name, its
parameters (type, default, one line of help), its capabilities and how it opens. Everything above
(the audit configuration, its stages, the CLI, the web app) asks a kind for a *capability*, never
for its name::

    from limelight.retrieval.systems import get_kind
    if get_kind(spec.kind).has(EXACT_REVERSE): ...

Kinds shipped with limelight:

- ``bm25``, ``dense``, ``hybrid`` (:mod:`limelight.retrieval.kinds`): limelight's own rankers over
  an index directory;
- ``reranked`` (:mod:`limelight.rerank.kind`): a TK/KNRM re-ranker over another system;
- ``run`` (:mod:`limelight.retrieval.kinds.run`): results the user already has (TREC, Parquet,
  JSONL or CSV files);
- ``pyterrier`` (:mod:`limelight.retrieval.kinds.pyterrier`): any PyTerrier transformer made by
  a ``module:factory`` (e.g. PISA's BM25); PyTerrier is imported only when one is opened.

:func:`load_kinds` imports the modules of the shipped kinds (:data:`SHIPPED`) and of the kinds
other packages declare under the ``limelight.systems`` entry-point group, as plugins do.

``limelight systems`` lists the registered kinds with their parameters and capabilities.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from limelight.errors import LimelightError, with_article

# ---- capabilities ---------------------------------------------------------------------------------
NEW_QUERIES = "new_queries"
EXACT_REVERSE = "exact_reverse"
LOCAL_INDEX = "local_index"
DETERMINISTIC = "deterministic"
QUERY_VECTORS = "query_vectors"
FIRST_STAGE = "first_stage"
REMOTE = "remote"

#: every capability a kind may declare, with the sentence ``limelight systems`` and the report use
CAPABILITIES: dict[str, str] = {
    NEW_QUERIES: "answers queries it has not seen before (search box, pasted documents, suggestions)",
    EXACT_REVERSE: "exact reverse search: the queries that expose a new document, from the system's "
                   "own scoring",
    LOCAL_INDEX: "a local index of the collection that the EQI stage can train and search on",
    DETERMINISTIC: "the same query always gets the same ranking",
    QUERY_VECTORS: "encodes queries with the dense model (the audit encodes the log once for it)",
    FIRST_STAGE: "can be the first stage of a reranked system",
    REMOTE: "a service reached over the network: any worker can ask it any shard of the log "
            "(the Ray engine replays it shard by shard)",
}


@dataclass(frozen=True)
class Param:
    """One parameter of a kind: its accepted type(s), default (``None``: none filled in) and help."""

    type: type | tuple[type, ...]
    default: Any = None
    help: str = ""

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` has this parameter's type (a bool is never an int or a float)."""
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if isinstance(value, bool) and bool not in types:
            return False
        return isinstance(value, types)

    @property
    def type_name(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if set(types) == {int, float}:
            return "number"
        names = {int: "integer", float: "number", str: "string", bool: "boolean", list: "list",
                 dict: "table"}
        return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


@dataclass(frozen=True)
class SystemKind:
    """A kind of system: ``name``, ``params`` (name -> :class:`Param`), ``capabilities`` (names
    from :data:`CAPABILITIES`), ``open`` (see below) and a one-line ``description``.
    ``labels``: parameters that name other things (a first stage, a file) and are recorded as
    written, not as settings of the ranking. ``needs_index``: whether it opens over limelight's
    index directory (an external system, a run file or a service, does not).

    ``open(spec, index_dir, *, name, threads, encoder, **context)`` returns a retriever: an
    object with ``search_batch(texts, k)`` or a callable ``(Queries) -> Run``, with ``doc_ids``
    where it knows them. ``context`` (every key optional; an opener ignores what it does not
    use): ``collection`` (the audited ``Collection``: result ids are checked against it),
    ``queries`` (the audit's query log), ``base_dir`` (the folder relative paths in the
    parameters resolve against: the configuration's), ``work_dir`` (a folder of the system's own
    for resumable state, e.g. a replay's finished shards), ``reranker`` (``reranked``: an already
    loaded ranker), ``shared`` (a callable ``kind name -> retriever`` of retrievers already open
    with their kind's default parameters, which a kind made of others, ``hybrid``, may reuse).
    A retriever that answers some queries only (results from a file, a service) offers
    ``coverage()``: a dict with ``queries``, ``with_results`` and
    ``without_results`` over the ``queries`` it opened with (more keys allowed), which the audit
    records in ``results.json`` and the report shows.

    ``resolve(params, base_dir) -> params`` (optional) checks the parameters against the files
    they name (relative paths against ``base_dir``, the configuration's folder) and adds what
    identifies their content (``run``: the files' ``sha256``), so that a system's settings, and
    the audit stages keyed on them, follow the content; it runs once, where a configuration is
    read (:meth:`resolved`).

    ``preload()`` (optional) imports the libraries ``open`` loads, opening nothing and starting
    no thread pool: a pre-fork server calls it once before it forks, so that its workers share
    the imported code rather than each importing it again."""

    name: str
    params: Mapping[str, Param]
    capabilities: frozenset[str]
    open: Callable[..., Any]
    description: str = ""
    labels: tuple[str, ...] = field(default=())
    needs_index: bool = True
    resolve: Callable[[dict[str, Any], Path], dict[str, Any]] | None = None
    preload: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.capabilities) - set(CAPABILITIES))
        if unknown:
            raise LimelightError(f"system kind {self.name!r}: unknown capability {unknown[0]!r} "
                                 f"({', '.join(CAPABILITIES)})")
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))

    def has(self, capability: str) -> bool:
        """Whether this kind has ``capability`` (one of :data:`CAPABILITIES`)."""
        if capability not in CAPABILITIES:
            raise LimelightError(f"unknown capability {capability!r} ({', '.join(CAPABILITIES)})")
        return capability in self.capabilities

    def defaults(self) -> dict[str, Any]:
        """The parameters that have a default, with it."""
        return {k: p.default for k, p in self.params.items() if p.default is not None}

    def resolved(self, params: Mapping[str, Any],
                 base_dir: str | os.PathLike | None = None) -> dict[str, Any]:
        """``params`` completed by the kind's ``resolve`` against ``base_dir`` (default: the
        working directory); a copy of them for a kind without one. Its errors are one line."""
        params = dict(params)
        if self.resolve is None:
            return params
        return self.resolve(params, Path(base_dir) if base_dir is not None else Path.cwd())

    def check(self, params: Mapping[str, Any], where: str = "") -> None:
        """A one-line ``LimelightError`` for a parameter this kind lacks (the ones it has listed)
        or a value of the wrong type; ``None`` values count as not given."""
        at = f"{where}: " if where else ""
        for k, v in params.items():
            if k not in self.params:
                raise LimelightError(f"{at}system kind {self.name!r} has no parameter {k!r} "
                                     f"(parameters: {', '.join(self.params) or 'none'})")
            if v is not None and not self.params[k].accepts(v):
                raise LimelightError(f"{at}{k} must be {with_article(self.params[k].type_name)}, not {v!r}")


_KINDS: dict[str, SystemKind] = {}
_LOADED = False

#: modules whose import registers the kinds limelight ships (the lowest layer first)
SHIPPED = ("limelight.retrieval.kinds", "limelight.rerank.kind", "limelight.retrieval.kinds.run",
           "limelight.retrieval.kinds.pyterrier", "limelight.retrieval.kinds.http")


def register_kind(kind: SystemKind, *, replace: bool = False) -> SystemKind:
    """Register ``kind`` under its name (a second registration of a name is refused unless
    ``replace``); returns it."""
    if kind.name in _KINDS and not replace and _KINDS[kind.name] is not kind:
        raise LimelightError(f"system kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def unregister_kind(name: str) -> None:
    """Remove the kind registered as ``name`` (a plugin's tests put the registry back)."""
    _KINDS.pop(name, None)


def load_kinds() -> None:
    """Import the modules of every shipped kind and of the ``limelight.systems`` entry points
    (their imports register them); a plugin that cannot be imported is left out with a warning."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from importlib.metadata import entry_points

    for mod in SHIPPED:
        importlib.import_module(mod)
    for ep in entry_points(group="limelight.systems"):
        try:
            importlib.import_module(ep.value)
        except ImportError as e:  # a plugin whose dependencies are missing: left out, said once
            warnings.warn(f"system kinds of {ep.value} left out: {e}", stacklevel=2)


def kind_names() -> list[str]:
    """The names of the registered kinds: the shipped ones first, in the order of
    :data:`SHIPPED` and by name within one of its modules (whatever imported them first), then
    the others (plugins) in registration order: the same list whatever the import order."""
    load_kinds()

    def rank(name: str) -> tuple[int, str]:
        module = getattr(_KINDS[name].open, "__module__", "")
        hits = [i for i, m in enumerate(SHIPPED) if module == m or module.startswith(m + ".")]
        if not hits:
            return len(SHIPPED), ""  # (stable sort: plugins in registration order)
        return max(hits), name  # the most specific shipped module

    return sorted(_KINDS, key=rank)


def get_kind(name: str) -> SystemKind:
    """The kind registered as ``name``; a one-line error listing the registered ones otherwise."""
    kind = _KINDS.get(name)
    if kind is None:
        load_kinds()
        kind = _KINDS.get(name)
    if kind is None:
        raise LimelightError(f"unknown system kind {name!r} (registered: {', '.join(kind_names())})")
    return kind


def has_capability(name: str, capability: str) -> bool:
    """Whether the kind registered as ``name`` has ``capability``."""
    return get_kind(name).has(capability)


def describe_kinds() -> list[dict[str, Any]]:
    """Every registered kind as JSON-able rows: name, description, parameters (type, default,
    help) and capabilities (what ``limelight systems`` prints)."""
    return [{"kind": k.name, "description": k.description,
             "parameters": {n: {"type": p.type_name, "default": p.default, "help": p.help}
                            for n, p in k.params.items()},
             "capabilities": sorted(k.capabilities)}
            for k in (get_kind(n) for n in kind_names())]


__all__ = ["CAPABILITIES", "DETERMINISTIC", "EXACT_REVERSE", "FIRST_STAGE", "LOCAL_INDEX",
           "NEW_QUERIES", "QUERY_VECTORS", "Param", "SystemKind", "describe_kinds", "get_kind",
           "has_capability", "kind_names", "load_kinds", "register_kind", "unregister_kind"]
