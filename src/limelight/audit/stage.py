"""A stage of an audit as data, what a stage sees of the audit, and what the runner records.

A :class:`Stage` is a value: its ``name`` and ``title``; the stages it reads (``inputs``: each
must have run, else it is skipped); ``skip``, the reason it does not apply to this audit (a
switched-off stage, a collection without judgments; checked first, never cached); ``key``, the
JSON-able parts of its cache key (hashed with its name: a stage chains the keys of the stages it
reads through :meth:`Audit.key`, so a changed setting reruns exactly what depends on it);
``outputs``, the files and folders it owns (removed when its key changes); and ``body``, which
computes and writes its outputs and returns its JSON-able result. The runner
(:mod:`limelight.audit.runner`) iterates the stages of :func:`limelight.audit.stages.audit_stages`
and does the caching, progress and records; a body sees the audit only through :class:`Audit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from limelight.audit.config import AuditConfig, SystemSpec
    from limelight.audit.inputs import AuditInputs
    from limelight.audit.layout import AuditDir


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

    cfg: AuditConfig
    dir: AuditDir
    quick: bool

    @property
    def inputs(self) -> AuditInputs:
        """The collection and query sets the stages work on (loaded once)."""

    def status(self, name: str) -> StageStatus | None:
        """The status of stage ``name`` in this run (``None`` before it is reached)."""

    def key(self, name: str) -> str | None:
        """The cache key of stage ``name`` in this run (``None``: not run, or skipped before)."""

    def encoder(self) -> Any:
        """The dense encoder of the audit's dense and hybrid systems."""

    def retriever(self, spec: SystemSpec, query_vectors: bool = True) -> Any:
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
