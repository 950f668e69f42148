"""Query generation: controllable generation (CtrlQGen), query variations and simulated queries.

Exported here, the CtrlQGen pieces a study script calls directly (nothing else in the library
does): ``serialize_collection`` (s(e) of a catalog's entities, ``serialize``), ``weaklabel_ip``
(the narrow/broad intent of (query, entity) pairs, ``weaklabel``) and ``assert_no_leakage``
(train/test leakage check of a split, ``weaklabel``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

_EXPORTS = {
    "assert_no_leakage": "limelight.querygen.weaklabel",
    "serialize_collection": "limelight.querygen.serialize",
    "weaklabel_ip": "limelight.querygen.weaklabel",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs
    from limelight.querygen.serialize import serialize_collection  # noqa: F401
    from limelight.querygen.weaklabel import assert_no_leakage, weaklabel_ip  # noqa: F401
