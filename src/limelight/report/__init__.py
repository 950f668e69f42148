"""Self-contained HTML reports (plots embedded as PNG, sortable tables, no external resources),
and the audit run that writes one (:func:`run_audit`, what ``limelight audit`` does)."""

from limelight.report.html import render_report, write_report
from limelight.report.runner import ReportingAuditRunner, run_audit

__all__ = ["ReportingAuditRunner", "render_report", "run_audit", "write_report"]
