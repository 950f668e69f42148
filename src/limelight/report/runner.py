"""Run an audit and write its HTML report: what ``limelight audit CONFIG --out DIR`` does, as a
library call. The audit (:mod:`limelight.audit.runner`) computes and records every stage and
``results.json``; the report is written here, by the layer that may import both::

    from limelight.report import run_audit
    results = run_audit("configs/quick.toml", "audit-quick", quick=True)   # + audit-quick/report.html
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from limelight.audit.config import AuditConfig, load_config
from limelight.audit.runner import AuditRunner, ProgressFn
from limelight.report.html import write_report


class ReportingAuditRunner(AuditRunner):
    """An :class:`~limelight.audit.runner.AuditRunner` whose :meth:`run` also writes
    ``DIR/report.html`` once ``results.json`` is written (the runner ``limelight audit`` uses)."""

    def run(self) -> dict[str, Any]:
        """Run (or resume) the audit, then write its report; returns ``results.json``."""
        results = super().run()
        write_report(self.dir, command=self.command)
        return results


def run_audit(config: AuditConfig | str | os.PathLike, out: str | os.PathLike, quick: bool = False,
              progress: ProgressFn | None = None, show_progress: bool = False,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) the audit described by ``config`` into ``out`` and write
    ``out/report.html``; returns ``results.json``.

    ``progress(stage, done, total)`` is called as stages advance. Finished stages whose inputs
    and settings did not change are skipped; an interrupted stage resumes from its partial output
    (an interrupted audit writes no report).
    """
    cfg = config if isinstance(config, AuditConfig) else load_config(config)
    return ReportingAuditRunner(cfg, out, quick=quick, progress=progress,
                                show_progress=show_progress, log=log).run()
