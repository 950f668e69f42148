"""``limelight serve``: a web app and JSON API over an audit directory (read-only).

>>> from limelight.service import AuditService, create_app  # doctest: +SKIP
>>> app = create_app(AuditService("audits/movies"))          # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.service.app import create_app
    from limelight.service.core import AuditService, open_service

__all__, __getattr__, __dir__ = lazy_exports(__name__)
