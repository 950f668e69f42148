"""Geometry of the pages' SVG charts (numbers only; labels are escaped by the templates).

- ``exposure_bars``: the paper's Figure 1 — one bar per exposing query, x = position in the
  exposure list (ρ(q, ψ_d) + 1), height = n_{q→d} − ρ(d, σ_q) (higher = more exposing), dotted
  when the query is in both lists being compared.
- ``lorenz_paths``: Lorenz curves of several systems and the line of equality.
"""

from __future__ import annotations

import numpy as np

W, H, PAD = 640, 220, 36
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def exposure_bars(heights: list[int | None], depth: int, shared: list[bool] | None = None,
                  n_slots: int | None = None) -> dict:
    """Bars for a Figure 1 panel: ``heights[i]`` is n − ρ for the query at position i + 1
    (``None``: the query does not expose the document; drawn as a tick on the axis)."""
    n = max(n_slots or len(heights), 1)
    slot = (W - 2 * PAD) / n
    bw = max(slot * 0.7, 1.0)
    scale = (H - 2 * PAD) / max(depth, 1)
    bars = []
    for i, h in enumerate(heights):
        x = PAD + i * slot + (slot - bw) / 2
        hh = 0.0 if h is None else float(h) * scale
        bars.append({"x": round(x, 2), "y": round(H - PAD - hh, 2), "w": round(bw, 2), "h": round(hh, 2),
                     "miss": h is None, "shared": bool(shared[i]) if shared else False})
    yticks = [{"v": v, "y": round(H - PAD - v * scale, 2)} for v in np.linspace(0, depth, 5).round().astype(int).tolist()]
    xticks = [{"v": v, "x": round(PAD + (v - 0.5) * slot, 2)}
              for v in sorted({1, *np.linspace(1, n, 5).round().astype(int).tolist()})]
    return {"w": W, "h": H, "pad": PAD, "bars": bars, "yticks": yticks, "xticks": xticks,
            "x0": PAD, "x1": W - PAD, "y0": H - PAD, "y1": PAD}


def lorenz_paths(curves: dict[str, tuple[list[float], list[float]]]) -> dict:
    """Polylines of Lorenz curves ``{system: (x, y)}`` in a square plot."""
    size = 320
    inner = size - 2 * PAD

    def pts(x, y) -> str:
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        return " ".join(f"{PAD + a * inner:.1f},{size - PAD - b * inner:.1f}" for a, b in zip(x, y, strict=True))

    lines = [{"name": name, "points": pts(*xy), "color": COLORS[i % len(COLORS)]}
             for i, (name, xy) in enumerate(curves.items())]
    ticks = [{"v": f"{v:g}", "p": round(PAD + v * inner, 1), "q": round(size - PAD - v * inner, 1)}
             for v in (0, 0.25, 0.5, 0.75, 1.0)]
    return {"size": size, "pad": PAD, "lines": lines, "equality": pts([0, 1], [0, 1]), "ticks": ticks,
            "x1": size - PAD, "y0": size - PAD}
