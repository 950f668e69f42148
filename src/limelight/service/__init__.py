"""``limelight serve``: a web app and JSON API over an audit directory (read-only).

>>> from limelight.service import AuditService, create_app  # doctest: +SKIP
>>> app = create_app(AuditService("audits/movies"))          # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

_EXPORTS = {
    "AuditService": "limelight.service.core",
    "open_service": "limelight.service.core",
    "create_app": "limelight.service.app",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from limelight.service.app import create_app  # noqa: F401
    from limelight.service.core import AuditService, open_service  # noqa: F401
