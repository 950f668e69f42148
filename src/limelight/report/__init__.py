"""Self-contained HTML reports (plots embedded as PNG, sortable tables, no external resources)."""

from limelight.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]
