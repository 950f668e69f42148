"""Old home of ``build_systems``, kept importable (``experiments/variations``).

The commands ``limelight variations|robustness|simulate`` live in ``limelight.cli.variations``;
``build_systems`` moved to ``limelight.querygen.robustness``.
"""

from __future__ import annotations

from limelight.querygen.robustness import build_systems

__all__ = ["build_systems"]
