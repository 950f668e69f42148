"""What a system is, as a value: ``System`` (kind, parameters, first stage, checkpoint, name).

One value for every door: the audit's ``[[systems]]`` tables and the CLI's ``--system`` file
(both read by :func:`limelight.audit.config.parse_systems`, the same keys), the CLI's
``--model``/``--k1``/``--b`` (:meth:`System.from_model`) and Python (:meth:`System.of`) build it.
Its kind is looked up in the registry once, when it is made (:attr:`System.registered`).
``RetrieverSpec`` is its former name: still importable, deprecated (it warns); so are
``store_settings`` and ``from_store_settings``, the earlier settings form's (0.2.0).

A system is frozen, hashable and picklable (it travels to Ray workers as is). Over an index
directory (``limelight index``; an audit's ``index/``):

- ``spec.open(index_dir)`` builds the retriever;
- ``spec.fingerprint(index_dir)`` identifies it: the index's metadata files and the settings
  (in the form stores recorded before they recorded ``settings()``, so that every store keeps
  its fingerprint: ``_fingerprint_form``), so that a store computed over another index, or with
  other settings, is recognised (``limelight exposure compute``); ``spec.fingerprint(index_key=KEY)``
  is the same identity where the index is known by a key instead (the audit's exposure stores:
  the one formula of both);
- ``spec.settings()`` describes it as JSON: ``{"kind": ..., parameters...}``, the one form
  every store records (the audit's, and with the encoder's identity and where the documents
  came from, a store computed by ``limelight exposure compute``) and every reader reads back
  (:meth:`System.from_recorded`; it also reads the ``model`` form that stores written by
  earlier code record, see :func:`_from_earlier_store_form`).

Shipped kinds and their parameters (defaults from :mod:`limelight.retrieval.defaults` filled in)::

    bm25      k1 = 0.9, b = 0.4
    dense     model (default: the encoder the index was built with), max_seq_length
    hybrid    RRF of the two: k1, b, rrf_k = 60, fusion_depth = 100, model, max_seq_length
    reranked  a neural re-ranker over ``first`` (a bm25, dense or hybrid spec): depth = 100,
              ``checkpoint`` (the file) and ``checkpoint_sha256``; the parameters ``first``
              (the first stage's name) and ``checkpoint`` (as written) are labels recorded in
              the settings (the audit's)

>>> spec = System.of("bm25", k1=1.2)                     # doctest: +SKIP
>>> retriever = spec.open("idx/debian")                  # doctest: +SKIP
>>> spec.fingerprint("idx/debian")                       # what `limelight exposure compute` records

Kinds, their parameters, defaults, capabilities and openers come from the registry
(:mod:`limelight.retrieval.systems`): a system of any registered kind opens through it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from limelight.errors import LimelightError, with_article
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1, FUSION_DEPTH, RRF_K
from limelight.retrieval.systems import FIRST_STAGE, QUERY_VECTORS, SystemKind, get_kind, kind_names


def models() -> list[str]:
    """The kinds an index directory serves without anything else (the CLI's ``--model``):
    those that can be a first stage."""
    return [k for k in kind_names() if get_kind(k).has(FIRST_STAGE)]


class Params(Mapping[str, Any]):
    """A system's parameters: a frozen mapping, sorted by name, hashable when its values are
    (``dict(params)``, ``params["k1"]`` and ``params.get("model")`` read it)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()):
        self._items: tuple[tuple[str, Any], ...] = tuple(sorted(dict(items).items()))

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Params):
            return self._items == other._items
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"Params({dict(self._items)!r})"

    def __reduce__(self) -> tuple:
        return Params, (self._items,)


@dataclass(frozen=True)
class System:
    """One system (see the module docstring): what an audit's ``[[systems]]`` table, the CLI's
    ``--system`` file or its ``--model`` flags describe.

    ``params`` (:class:`Params`; a mapping or ``(name, value)`` pairs are accepted when
    constructing) holds the kind's defaults filled in; values are kept as given (an ``int``
    ``k1`` stays an ``int``, as the fingerprints hash it; ``None`` counts as not given).
    ``first`` is the first stage of a stacked system (``reranked``); ``checkpoint`` its
    checkpoint file (resolved) and ``checkpoint_sha256`` that file's content hash (checked when
    opened). ``name`` names the system (an audit's systems: unique, used in paths; the CLI's:
    optional); it is no part of the settings or fingerprints. ``registered`` is the kind's
    :class:`~limelight.retrieval.systems.SystemKind`, looked up once, when the value is made
    (``kind`` may be given as that object, already looked up: the value keeps its name).
    """

    kind: str = "bm25"
    params: Params = Params()
    first: System | None = None
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    name: str | None = None
    registered: SystemKind = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.kind, SystemKind):  # already looked up (the parser's): not again
            kind = self.kind
            object.__setattr__(self, "kind", kind.name)
        else:
            kind = get_kind(self.kind)
        object.__setattr__(self, "registered", kind)
        given = dict(self.params)
        unknown = sorted(set(given) - set(kind.params))
        if unknown:
            raise LimelightError(f"system kind {self.kind!r} has no parameter {unknown[0]!r} "
                                 f"(parameters: {', '.join(kind.params) or 'none'})")
        p = {**kind.defaults(), **{k: v for k, v in given.items() if v is not None}}
        object.__setattr__(self, "params", Params(p))
        if self.first is not None and "first" not in kind.params:
            raise LimelightError(f"{with_article(self.kind)} retriever has no first stage")
        if self.first is not None and not self.first.registered.has(FIRST_STAGE):
            raise LimelightError(f"the first stage of {with_article(self.kind)} retriever is one of "
                                 f"{', '.join(models())}, not {self.first.kind}")
        if self.checkpoint is not None:
            object.__setattr__(self, "checkpoint", str(self.checkpoint))

    def __getstate__(self) -> dict[str, Any]:  # the kind travels by its name (a worker looks it up)
        return {k: v for k, v in vars(self).items() if k != "registered"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        object.__setattr__(self, "registered", get_kind(self.kind))

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def of(cls, kind: str = "bm25", *, first: System | None = None,
           checkpoint: str | os.PathLike | None = None, checkpoint_sha256: str | None = None,
           name: str | None = None, **params: Any) -> System:
        """``System.of("hybrid", rrf_k=30)``: a kind and its parameters as keywords (a
        reranked system's labels ``first`` and ``checkpoint`` go through the constructor's
        ``params``)."""
        return cls(kind, Params(params), first,
                   None if checkpoint is None else str(checkpoint), checkpoint_sha256, name)

    @classmethod
    def from_model(cls, model: str = "bm25", k1: float = DEFAULT_K1, b: float = DEFAULT_B,
                   dense_model: str | None = None) -> System:
        """``System.of`` of the CLI's ``--model`` (a kind that can be a first stage: bm25, dense
        or hybrid) and ``--k1``/``--b`` (set where the kind declares them: bm25 and hybrid);
        ``dense_model`` overrides the index's encoder (where the kind declares ``model``)."""
        if model not in models():
            raise LimelightError(f"unknown model {model!r} ({', '.join(models())})")
        declared = get_kind(model).params
        params: dict[str, Any] = {k: v for k, v in (("k1", k1), ("b", b)) if k in declared}
        if dense_model and "model" in declared:
            params["model"] = dense_model
        return cls.of(model, **params)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any],
                      checkpoint: str | os.PathLike | None = None) -> System:
        """The spec whose :meth:`settings` are ``settings`` (an audit system's settings);
        ``checkpoint``: a reranked spec's checkpoint file (the settings hold its hash only)."""
        p = dict(settings)
        kind = p.pop("kind", "bm25")
        sha = p.pop("checkpoint_sha256", None)
        first = p.pop("first_settings", None)
        # the constructor, not ``of``: a reranked system's labels are named first and checkpoint
        return cls(kind, Params(p), None if first is None else cls.from_settings(first),
                   None if checkpoint is None else str(checkpoint), sha)

    @classmethod
    def from_recorded(cls, settings: Mapping[str, Any]) -> System:
        """The system of settings as a store or an audit recorded them: :meth:`settings`'s form
        (``kind``; keys that are no parameter, such as the manifest's ``name``, a store's
        ``encoder``, ``index`` or ``collection``, are ignored). Settings without ``kind`` are
        those a store computed by ``limelight exposure compute`` of earlier code recorded
        (``model``): read by the one migration, :func:`_from_earlier_store_form`. What the
        service, ``limelight eqi`` and a resumed store's reader use."""
        if "kind" not in settings:
            return _from_earlier_store_form(settings)
        declared = get_kind(settings["kind"]).params
        return cls.from_settings({k: v for k, v in settings.items()
                                  if k in declared or k in ("kind", "checkpoint_sha256", "first_settings")})

    @classmethod
    def from_store_settings(cls, settings: Mapping[str, Any]) -> System:
        """Deprecated (it warns): :meth:`from_recorded`, which reads this form too."""
        _deprecated("System.from_store_settings", "System.from_recorded")
        return cls.from_recorded(settings)

    # ---- description -------------------------------------------------------------------------
    def param(self, name: str, default: Any = None) -> Any:
        """The value of parameter ``name`` (``default`` when not set)."""
        return dict(self.params).get(name, default)

    @property
    def needs_dense(self) -> bool:
        """Whether opening needs the dense index and an encoder (dense, hybrid; or the first
        stage of a reranked spec is one)."""
        return self.uses_dense or (self.first is not None and self.first.needs_dense)

    @property
    def uses_dense(self) -> bool:
        """Whether the system itself encodes queries with the dense model (its kind has the
        ``query_vectors`` capability: dense, hybrid)."""
        return self.registered.has(QUERY_VECTORS)

    def index_holds(self, meta: Mapping[str, Any]) -> bool:
        """Whether an index directory whose ``meta.json`` is ``meta`` holds the parts this spec
        opens over (its ``built`` parts: the dense index when :attr:`needs_dense`)."""
        return not self.needs_dense or "dense" in meta.get("built", ["bm25"])

    def settings(self, retriever: Any = None) -> dict[str, Any]:
        """Kind and parameters with defaults filled in; a reranked spec adds its checkpoint's
        hash and its first stage's settings (``first_settings``): what the audit records and
        its stage keys cover, so that a changed first stage or a retrained checkpoint reruns
        what depends on it. The one settings form (:meth:`from_recorded` reads it back).

        With the opened ``retriever`` of a dense system (one that holds an encoder; a hybrid
        holds none itself), its encoder's identity is added under ``encoder``: what a store
        computed by ``limelight exposure compute`` records, so that vectors of another encoder
        variant are refused (``ExactReverse``)."""
        p = dict(self.params)
        kind = self.registered
        if "checkpoint" in kind.params:
            p["checkpoint_sha256"] = self.checkpoint_sha256
        if "first" in kind.params:
            p["first_settings"] = self.first.settings() if self.first is not None else None
        return {"kind": self.kind, **{k: p[k] for k in sorted(p)}, **_encoder_of(retriever)}

    def store_settings(self, retriever: Any = None) -> dict[str, Any]:
        """Deprecated (it warns): the ``model`` form stores of earlier code recorded; stores
        now record :meth:`settings` (``settings(retriever)``)."""
        _deprecated("System.store_settings", "System.settings")
        return {**self._fingerprint_form(), **_encoder_of(retriever)}

    def _fingerprint_form(self) -> dict[str, Any]:
        """What :meth:`fingerprint` hashes over an index directory: the ``model`` form that
        ``limelight exposure compute`` recorded before stores recorded :meth:`settings`. Kept
        byte for byte, for the fingerprint only, so that the stores earlier code computed keep
        their fingerprints (a store with another one is refused as computed with "another
        index or retriever"): ``{"model", "k1", "b"}`` (bm25, hybrid) or ``{"model": "dense"}``,
        with the parameters the command line cannot set added when they differ from the
        defaults (``dense_model`` for the dense model); a re-ranker's first stage in this form
        under ``first``; a kind that cannot be a first stage (``run``, a service) all its
        parameters. :func:`_from_earlier_store_form` reads it back."""
        p = dict(self.params)
        declared = self.registered.params
        if "first" in declared:  # a re-ranker over a first stage
            return {"model": self.kind,
                    "first": self.first._fingerprint_form() if self.first is not None else None,
                    "depth": p["depth"], "checkpoint_sha256": self.checkpoint_sha256}
        if not self.registered.has(FIRST_STAGE):  # another kind (run, a service, a plugin's): its parameters
            return {"model": self.kind, **{k: p[k] for k in sorted(p)}}
        out: dict[str, Any] = {"model": self.kind}
        out.update({k: p[k] for k in ("k1", "b") if k in declared})
        for k, default in (("rrf_k", RRF_K), ("fusion_depth", FUSION_DEPTH)):
            if k in p and p[k] != default:
                out[k] = p[k]
        if "model" in p:
            out["dense_model"] = p["model"]
        if "max_seq_length" in p:
            out["max_seq_length"] = p["max_seq_length"]
        return out

    def fingerprint(self, index_dir: str | os.PathLike | None = None, *,
                    index_key: Any = None) -> str:
        """This retriever's identity over ``index_dir``: a hash of the index's metadata files
        (``meta.json``, ``bm25/*.json``, ``dense/*.json``) and :meth:`_fingerprint_form` (the
        settings in the form earlier stores were fingerprinted by: their fingerprints stay). With ``index_key`` instead (a JSON-able value
        that identifies the index, e.g. the audit's stage keys): the hash of ``("retriever",
        index_key, settings())``, as the audit's exposure stores record it."""
        if (index_dir is None) == (index_key is None):
            raise LimelightError("fingerprint: give index_dir or index_key (one of them)")
        if index_key is not None:
            blob = json.dumps(["retriever", index_key, self.settings()], sort_keys=True,
                              default=str, separators=(",", ":"))
            return hashlib.sha256(blob.encode()).hexdigest()[:24]
        from limelight.retrieval.index_meta import read_meta

        read_meta(index_dir)  # a clear error when it is not an index
        h = hashlib.sha256()
        root = Path(index_dir)
        for f in sorted([root / "meta.json", *root.glob("bm25/*.json"), *root.glob("dense/*.json")]):
            if f.is_file():
                h.update(f.name.encode())
                h.update(f.read_bytes())
        h.update(json.dumps(self._fingerprint_form(), sort_keys=True).encode())
        return h.hexdigest()[:32]

    # ---- opening -----------------------------------------------------------------------------
    def open(self, index_dir: str | os.PathLike | None, *, name: str | None = None,
             threads: int | None = None, encoder: Any = None, **context: Any) -> Any:
        """The retriever over ``index_dir`` (a ``Retriever``: ``BM25``, ``DenseRetriever``,
        ``Hybrid``, or what the ``reranked`` opener returns).

        ``name`` names it (and the parts of a hybrid); ``threads`` caps BM25's kernels;
        ``encoder`` replaces the dense query encoder (e.g. one that looks up precomputed query
        vectors); ``context`` goes to the kind's opener (:class:`~limelight.retrieval.systems.
        SystemKind`: ``collection``, ``queries``, ``base_dir``, ``work_dir``, ``reranker``). The
        index's files are memory-mapped where they can be. A kind that does not open over an
        index (``needs_index`` false) takes ``index_dir=None``.
        """
        kind = self.registered
        root = None if index_dir is None else Path(index_dir)
        if kind.needs_index:
            from limelight.retrieval.index_meta import read_meta

            if root is None:
                raise LimelightError(f"{with_article(self.kind)} system opens over an index directory (limelight index)")
            meta = read_meta(root)
            if not self.index_holds(meta):
                raise LimelightError(f"{root}: has no dense index (rebuild with `limelight index --dense`)")
        return kind.open(self, root, name=name, threads=threads, encoder=encoder, **context)


def _encoder_of(retriever: Any) -> dict[str, Any]:
    """``{"encoder": identity}`` of an opened retriever that holds a dense encoder, else ``{}``."""
    encoder = getattr(retriever, "encoder", None)
    return {} if encoder is None else {"encoder": encoder.identity()}


def _from_earlier_store_form(settings: Mapping[str, Any]) -> System:
    """The one migration of recorded settings: the system of the ``model`` form a store
    computed by ``limelight exposure compute`` of earlier code recorded (what
    :meth:`System._fingerprint_form` still writes for the fingerprint): ``{"model": "bm25",
    "k1", "b"}``, ``{"model": "dense", "dense_model", "max_seq_length"}``, a hybrid's
    ``rrf_k``/``fusion_depth`` when not the defaults, a re-ranker's first stage in this form under
    ``first`` with ``depth`` and ``checkpoint_sha256``, another kind's parameters as they are
    (keys that are none, such as ``index`` or ``encoder``, ignored; no ``model``: bm25). Such a
    store opens, is served and resumes as before: its fingerprint is the system's
    (:meth:`System.fingerprint`). :meth:`System.from_recorded` calls it; nothing else does."""
    kind = settings.get("model", "bm25")
    if kind not in kind_names():
        raise LimelightError(f"unknown model {kind!r} ({', '.join(models())})")
    registered = get_kind(kind)
    declared = registered.params
    if "first" in declared:  # a re-ranker over a first stage
        return System.of(kind, first=_from_earlier_store_form(settings.get("first") or {}),
                         checkpoint_sha256=settings.get("checkpoint_sha256"), depth=settings.get("depth"))
    params = {k: settings[k] for k in declared if k in settings}
    if registered.has(FIRST_STAGE):  # the dense model was recorded as dense_model
        params = {k: v for k, v in params.items() if k != "model"}
        if "dense_model" in settings and "model" in declared:
            params["model"] = settings["dense_model"]
    return System.of(kind, **params)


def _deprecated(old: str, new: str) -> None:
    import warnings

    warnings.warn(f"{old} is deprecated: use {new} (one settings form)", DeprecationWarning, stacklevel=3)


def __getattr__(name: str):
    if name == "RetrieverSpec":  # the former name of System
        import warnings

        warnings.warn("limelight.retrieval.spec.RetrieverSpec is now System (same value)",
                      DeprecationWarning, stacklevel=2)
        return System
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Params", "System", "models"]
