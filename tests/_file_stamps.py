"""What the Ray tests and ``benchmarks/ray_cluster.py`` compare before and after a node is killed:
the (inode, mtime) of each unit a job wrote, so that a unit written again shows."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def stamps(paths: Iterable[Path]) -> dict[str, tuple[int, int]]:
    """(inode, mtime in ns) of each existing file of ``paths``, by name (a ``meta.json`` by the
    name of its folder); a file gone meanwhile is left out."""
    out = {}
    for p in paths:
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        out[str(p.parent.name if p.name == "meta.json" else p.name)] = (st.st_ino, st.st_mtime_ns)
    return out
