"""A stage of an audit as data, what a stage sees of the audit, and what the runner records.

A :class:`Stage` is a value: its ``name`` and ``title``; the stages it reads (``inputs``: each
must have run, else it is skipped); ``skip``, the reason it does not apply to this audit (a
switched-off stage, a collection without judgments; checked first, never cached); ``key``, the
JSON-able parts of its cache key (hashed with its name: a stage chains the keys of the stages it
reads through :meth:`Audit.key`, so a changed setting reruns exactly what depends on it);
``outputs``, the files and folders it owns (removed when its key changes); ``body``, which
computes and writes its outputs and returns its JSON-able result; and ``report``, its section of
the HTML report as data (:data:`ReportSection`: headings, sentences, tables, figures, rendered
by ``limelight.report.html``; the audit layer writes no HTML). The runner
(:mod:`limelight.audit.runner`) iterates the stages of :func:`limelight.audit.stages.audit_stages`
and does the caching, progress and records; a body sees the audit only through :class:`Audit`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from limelight.audit.layout import AuditDir


class SystemView(Protocol):
    """What a stage reads of an audited system (a :class:`limelight.retrieval.spec.System`; the
    stages do not import the configuration module, which reads their option schemas)."""

    name: str
    kind: str
    params: Mapping[str, Any]

    def settings(self) -> dict[str, Any]: ...

    def fingerprint(self, index_dir: Any = None, *, index_key: Any = None) -> str: ...


class ConfigView(Protocol):
    """What a stage reads of the audit configuration (``limelight.audit.config.AuditConfig``)."""

    name: str
    systems: list[Any]
    depth: int
    cutoffs: list[int]
    seed: int
    measures: list[str]
    options: dict[str, dict[str, Any]]


@dataclass
class StageStatus:
    """What happened to one stage in this run."""

    name: str
    title: str
    status: str  # "done" (ran now) | "cached" (finished earlier, same key) | "skipped"
    reason: str = ""
    seconds: float = 0.0
    key: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return self.status in ("done", "cached")


class StageSkipped(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised inside a stage body to skip it with a reason shown in the report."""


class Progress(Protocol):
    """The progress display a stage body reports to."""

    def update(self, done: int, total: int) -> None: ...


class Audit(Protocol):
    """What a stage sees of the audit it runs in (:class:`limelight.audit.runner.AuditRunner`)."""

    cfg: ConfigView
    dir: AuditDir
    quick: bool

    @property
    def inputs(self) -> Any:
        """The collection and query sets the stages work on (loaded once)."""

    def status(self, name: str) -> StageStatus | None:
        """The status of stage ``name`` in this run (``None`` before it is reached)."""

    def key(self, name: str) -> str | None:
        """The cache key of stage ``name`` in this run (``None``: not run, or skipped before)."""

    def encoder(self) -> Any:
        """The dense encoder of the audit's dense and hybrid systems."""

    def retriever(self, spec: SystemView, query_vectors: bool = True) -> Any:
        """The retriever of system ``spec`` over the audit's index."""


def _nothing(audit: Audit) -> tuple:
    return ()


def _applies(audit: Audit) -> str | None:
    return None


@dataclass(frozen=True)
class Stage:
    """One stage of an audit (see the module docstring)."""

    name: str
    title: str
    body: Callable[[Audit, Progress], dict[str, Any]]
    key: Callable[[Audit], tuple] = _nothing
    inputs: tuple[str, ...] = ()
    outputs: Callable[[Audit], tuple[Path, ...]] = _nothing
    skip: Callable[[Audit], str | None] = _applies
    #: a line shown beside the stage once it is present (e.g. which systems it left out)
    note: Callable[[Audit], str] | None = None
    #: the stage's section of the report (:data:`ReportSection`), ``None``: no section
    report: ReportSection | None = None


# ---- report sections: what a stage shows, as data the report layer renders ------------------
#
# The audit is below the report: a stage does not write HTML. Its report hook reads the audit
# directory and returns blocks; ``limelight.report.html`` renders them (numbers formatted for
# reading, tables sortable, figures inlined). In ``Text`` and captions, ``[[key]]`` names a
# glossary term (``limelight.report.glossary``; shown as its words, linked to its entry) and
# ``[[key|words]]`` the same term shown as ``words``.


@dataclass(frozen=True)
class Heading:
    """A section heading (``level`` 2) or a sub-heading (3)."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Text:
    """A paragraph in plain words. ``tone``: ``""`` (a finding), ``"note"`` (a caveat, e.g. a
    system left out for lack of a capability), ``"skipped"`` (why nothing is shown) or
    ``"muted"`` (small print)."""

    text: str
    tone: str = ""


@dataclass(frozen=True)
class Table:
    """A table whose column labels are words (``frame``: a pandas DataFrame, shown as is, at most
    ``max_rows`` rows). ``formats`` maps a column to how its numbers read: ``"percent"`` (a
    fraction shown as a percentage), ``"p"`` (a p-value), ``"signed"`` (a change, with its sign),
    ``"int"``; other numeric columns get 3 significant digits and thousands separators.
    ``ids``: columns of identifiers (document ids, file names), shown as code; ``raw``: columns
    of the collection's or the log's own text (searches, group names), shown as they are and
    marked so (``data-raw``: a page check reads them as data, not as the page's words).
    ``source``: the Parquet file the figures come from."""

    frame: Any
    caption: str
    formats: Mapping[str, str] = field(default_factory=dict)
    ids: Sequence[str] = ()
    raw: Sequence[str] = ()
    source: str = ""
    max_rows: int | None = None


@dataclass(frozen=True)
class Figure:
    """A figure of the audit (``path``: a PNG), its one-line ``caption`` saying what it shows,
    and the ``command`` that reproduces it."""

    path: Path
    caption: str
    command: str = ""


Block = Heading | Text | Table | Figure

#: a stage's report hook: ``(audit directory, the stages' records by name)`` → its blocks
#: (the records are ``audit.json``'s: ``status``, ``reason``, ``result``, ``seconds``)
ReportSection = Callable[["AuditDir", Mapping[str, dict]], list[Block]]


NO_DEFAULT = object()


@dataclass(frozen=True)
class Option:
    """One key of a stage's ``[table]``: its type(s), its default (``NO_DEFAULT``: left out when
    not given; a callable: computed from the audit), the default under ``--quick`` when it
    differs, and one line of help (the configuration reference prints it)."""

    type: type | tuple[type, ...]
    default: Any = NO_DEFAULT
    quick: Any = NO_DEFAULT
    help: str = ""


@dataclass(frozen=True)
class StageOptions:
    """The options of a stage: the ``[table]`` of the audit configuration it reads, its keys
    (:class:`Option`), keys that were removed (key -> the one-line advice), and ``check(opts,
    fail, context)``, which validates the values (``fail(key, message)`` raises the one-line
    error at the key's line; ``context``: ``base`` the configuration's folder, ``depth`` the
    audit's depth) and may resolve them in place (a path made absolute, a file's hash added).
    The configuration checks every table up front with these."""

    table: str
    keys: Mapping[str, Option]
    check: Callable[[dict, Callable[[str, str], Any], dict], None] | None = None
    removed: Mapping[str, str] = field(default_factory=dict)

    def types(self) -> dict[str, type | tuple[type, ...]]:
        """The type(s) of each key."""
        return {k: o.type for k, o in self.keys.items()}

    def values(self, audit: Audit) -> dict[str, Any]:
        """The table of ``audit``'s configuration with the defaults filled in (``--quick`` ones
        under ``audit.quick``)."""
        out: dict[str, Any] = {}
        for k, o in self.keys.items():
            d = o.quick if audit.quick and o.quick is not NO_DEFAULT else o.default
            if d is not NO_DEFAULT:
                out[k] = d(audit) if callable(d) else d
        return {**out, **audit.cfg.options.get(self.table, {})}
