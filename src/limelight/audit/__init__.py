"""The audit: one command from a collection and a query log to an exposure report."""

from limelight.audit.layout import AuditDir, NotAnAuditError

__all__ = ["AuditDir", "NotAnAuditError"]
