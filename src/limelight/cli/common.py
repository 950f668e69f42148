"""Option checks and help texts shared by several command modules."""

from __future__ import annotations

from limelight.errors import LimelightError

COLLECTION_HELP = "shared collection name (cranfield, npl, scifact, adi, ...) or a folder with docs.jsonl, queries.tsv, qrels.txt"


def check_k(value: int, option: str = "--k", n_docs: int | None = None) -> int:
    """A depth option (``--k``, ``--depth``) checked: an error naming the value when it is < 1,
    capped at ``n_docs`` (no ranking holds more documents than the collection)."""
    if value < 1:
        raise LimelightError(f"{option} must be ≥ 1, got {value}")
    return min(value, n_docs) if n_docs else value
