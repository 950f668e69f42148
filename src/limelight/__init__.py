"""limelight: who search puts in the limelight, for whom, and how to change it."""

from limelight.errors import LimelightError

__version__ = "0.1.0"

__all__ = ["LimelightError", "__version__"]
