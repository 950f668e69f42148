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


HB_W, HB_ROW, HB_LABEL = 640, 22, 230  # horizontal bars: width, row height, label column


def hbars(rows: list[dict], max_value: float | None = None) -> dict:
    """Horizontal bars, one per row ``{"label", "value", "current", "ref"}`` (label on the left,
    value at the bar's end, ``ref``: a reference value drawn as a mark across the bar), on a linear axis from 0 to ``max_value`` (default: the largest value)
    with 5 ticks."""
    top = float(max_value if max_value is not None else
                max((max(r["value"], r.get("ref") or 0.0) for r in rows), default=0.0))
    top = top if top > 0 else 1.0
    x0, x1 = HB_LABEL, HB_W - 60
    y0 = 8
    bars = []
    for i, r in enumerate(rows):
        w = (x1 - x0) * max(float(r["value"]), 0.0) / top
        ref = r.get("ref")
        bars.append({**r, "x": x0, "y": y0 + i * HB_ROW, "w": round(w, 2), "h": HB_ROW - 6,
                     "ty": y0 + i * HB_ROW + HB_ROW / 2,
                     "ref_x": None if ref is None else round(x0 + (x1 - x0) * max(float(ref), 0.0) / top, 2)})
    y_axis = y0 + len(rows) * HB_ROW
    ticks = [{"v": v, "x": round(x0 + (x1 - x0) * v / top, 2)} for v in np.linspace(0, top, 5).tolist()]
    return {"w": HB_W, "h": y_axis + 40, "x0": x0, "x1": x1, "y0": y0, "y_axis": y_axis, "bars": bars,
            "ticks": ticks}


def histogram(bins: list[dict]) -> dict:
    """Vertical bars of a histogram ``[{"label", "n", "here"}]`` (counts on a linear axis),
    the bin marked ``here`` highlighted."""
    n = max(len(bins), 1)
    slot = (W - 2 * PAD - 20) / n
    bw = max(slot * 0.8, 1.0)
    top = max((b["n"] for b in bins), default=0) or 1
    scale = (H - 2 * PAD) / top
    x_left = PAD + 20
    out = []
    for i, b in enumerate(bins):
        hh = b["n"] * scale
        out.append({**b, "x": round(x_left + i * slot + (slot - bw) / 2, 2), "y": round(H - PAD - hh, 2),
                    "w": round(bw, 2), "h": round(hh, 2), "cx": round(x_left + (i + 0.5) * slot, 2)})
    yticks = [{"v": v, "y": round(H - PAD - v * scale, 2)}
              for v in sorted(set(np.linspace(0, top, 5).round().astype(int).tolist()))]
    return {"w": W, "h": H + 10, "pad": PAD, "x0": x_left, "x1": W - PAD, "y0": H - PAD, "y1": PAD,
            "bars": out, "yticks": yticks, "label_every": max(1, int(np.ceil(n / 12)))}
