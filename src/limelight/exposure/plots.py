"""Exposure plots (matplotlib, Agg backend), each saved as PNG and SVG."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from limelight.exposure.retrievability import gini, lorenz


def _figure():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(5.5, 4.5), dpi=120)


def save_figure(fig, out: str | os.PathLike) -> list[Path]:
    """Save as ``out.png`` and ``out.svg`` (any suffix of ``out`` is replaced), atomically."""
    from limelight._io import atomic_path

    base = Path(out)
    base = base.with_suffix("") if base.suffix in (".png", ".svg") else base
    paths = []
    for ext in ("png", "svg"):
        p = base.with_name(base.name + "." + ext)
        with atomic_path(p) as tmp:
            fig.savefig(tmp, format=ext, bbox_inches="tight")
        paths.append(p)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths


def plot_lorenz(systems: Mapping[str, np.ndarray], out: str | os.PathLike,
                title: str = "Lorenz curves of retrievability", max_points: int = 2000) -> list[Path]:
    """Lorenz curves of several systems' r(d) on one axes, with the line of equality."""
    fig, ax = _figure()
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="equality")
    for name, r in systems.items():
        x, y = lorenz(r)
        if len(x) > max_points:  # thin the curve; keep both ends
            idx = np.unique(np.linspace(0, len(x) - 1, max_points).astype(np.int64))
            x, y = x[idx], y[idx]
        ax.plot(x, y, lw=1.5, label=f"{name} (G={gini(r):.3f})")
    ax.set_xlabel("cumulative share of documents (by r(d), ascending)")
    ax.set_ylabel("cumulative share of retrievability")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    return save_figure(fig, out)


def plot_rank_size(systems: Mapping[str, np.ndarray], out: str | os.PathLike,
                   title: str = "Exposing queries per document") -> list[Path]:
    """Rank-size plot (log-log): documents sorted by their number of exposing queries (EQI
    paper, Figure 4); documents with none are not drawn (log scale)."""
    fig, ax = _figure()
    for name, n in systems.items():
        s = np.sort(np.asarray(n))[::-1]
        s = s[s > 0]
        ax.loglog(np.arange(1, len(s) + 1), s, lw=1.5, label=f"{name} ({len(s)} docs exposed)")
    ax.set_xlabel("document rank")
    ax.set_ylabel("number of exposing queries")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save_figure(fig, out)


def plot_histogram(r: np.ndarray, out: str | os.PathLike, title: str = "Distribution of r(d)",
                   bins: int = 50) -> list[Path]:
    """Histogram of r(d) on a log-spaced axis; the count of documents with r = 0 is in the title."""
    r = np.asarray(r, dtype=np.float64)
    fig, ax = _figure()
    pos = r[r > 0]
    if len(pos):
        lo, hi = pos.min(), pos.max()
        edges = np.geomspace(lo, hi * 1.0001, bins + 1) if hi > lo else np.array([lo * 0.9, hi * 1.1])
        ax.hist(pos, bins=edges, color="tab:blue")
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("r(d)")
    ax.set_ylabel("documents")
    ax.set_title(f"{title}\n{int((r == 0).sum())} of {len(r)} documents have r(d) = 0")
    return save_figure(fig, out)
