"""Numbers and terms as the pages show them: thousands separators, 3 significant digits,
percentages, never scientific notation; glossary terms as links (``term``, ``sym``).

Jinja filters and globals of ``create_app``; every function returns text (``Markup`` for links,
with the label and title escaped)."""

from __future__ import annotations

import math
import re

from markupsafe import Markup, escape

import limelight.report.glossary as G

GLOSSARY = "/glossary"


def num(x: float | int | None, digits: int = 3) -> str:
    """``x`` for reading: integers (and values ≥ 100) with thousands separators, others with
    ``digits`` significant digits in fixed notation (``0.000179``, ``12.3``); ``–`` for none."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(round(float(x))):,}"
    v = float(x)
    if abs(v) >= 10 ** (digits - 1):
        return f"{round(v):,}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    out = f"{v:,.{decimals}f}"
    return out.rstrip("0").rstrip(".") if "." in out else out


def pct(x: float | None, digits: int = 3) -> str:
    """A share (0-1) as a percentage with ``digits`` significant digits (``12.3 %``, ``0.0179 %``);
    "100 %" only for a share of exactly 1: a share just under it gets the digits that tell
    them apart (``99.998 %``), and "more than 99.99999 %" beyond those."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    v = float(x)
    out = num(100.0 * v, digits)
    if v < 1.0:
        for d in range(digits + 1, 10):
            if out != "100":
                break
            out = num(100.0 * v, d)
        if out == "100":
            return "more than 99.99999 %"
    return f"{out} %"


def term(key: str, text: str | None = None) -> Markup:
    """The words of glossary term ``key`` (or ``text``) linked to its entry; the symbol and
    formula in the link's title."""
    t = G.term(key)
    tip = " · ".join(x for x in (t.symbol, t.formula) if x)
    return Markup('<a class="term" href="{}#{}" title="{}">{}</a>').format(
        GLOSSARY, t.anchor, tip, text if text is not None else t.label)


_SUB = re.compile(r"_(\{[^}]*\}|[^\s_{}(),·]+)")


def notation(symbol: str) -> Markup:
    """A symbol in the papers' notation as HTML: ``o_q`` → ``o<sub>q</sub>``, ``μ_{q→d}`` →
    ``μ<sub>q→d</sub>`` (the rest escaped)."""
    out, pos = [], 0
    for m in _SUB.finditer(symbol):
        out.append(escape(symbol[pos:m.start()]))
        out.append(Markup("<sub>{}</sub>").format(m.group(1).strip("{}")))
        pos = m.end()
    out.append(escape(symbol[pos:]))
    return Markup("").join(out)


def sym(key: str) -> Markup:
    """The symbol of glossary term ``key`` as a link to its entry (``(μ)`` after the words)."""
    t = G.term(key)
    return Markup('<a class="sym" href="{}#{}" title="{}">{}</a>').format(
        GLOSSARY, t.anchor, t.label, notation(t.symbol))


def browsing_label(spec: str) -> str:
    """The words of a browsing model spelled ``spec`` (its spelling when it is not one offered)."""
    b = G.browsing_choice(spec)
    return b.label if b is not None else f"custom model {spec}"


def highlight(html_text: str) -> Markup:
    """HTML already escaped by ``limelight.retrieval.explain.highlight_html`` (text escaped,
    ``<mark>`` added), marked safe for the template."""
    return Markup(html_text)


FILTERS = {"num": num, "pct": pct}
GLOBALS = {"term": term, "sym": sym, "notation": notation, "browsing_label": browsing_label, "highlight": highlight,
           "browsing_choices": G.BROWSING_CHOICES, "escape": escape}
