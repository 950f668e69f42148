"""The audit report: one HTML file with everything inlined (PNG figures as data URLs, CSS, a few
lines of JS to sort tables), built only from what the audit directory holds, so that
``limelight serve`` or a notebook can regenerate it from ``DIR`` alone.

The report is a generic renderer: each stage of the audit owns its section
(:func:`limelight.audit.stages.report_sections`: headings, sentences, tables with their column
labels in words, figures with a caption) and this module turns those blocks into HTML — numbers
formatted for reading (thousands separators, percentages, 3 significant digits, never
scientific notation), glossary terms linked to the glossary appendix
(:mod:`limelight.report.glossary`) — after an overview that answers in words and one figure how
unequal exposure is, who is left out and how the systems differ. Stage timings are an appendix.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import limelight.report.glossary as glossary
from limelight._io import atomic_path
from limelight.audit.layout import AuditDir
from limelight.audit.stage import Figure, Heading, Table, Text
from limelight.audit.stages import report_sections
from limelight.audit.stages.common import pct

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:72em;margin:1.5em auto;
padding:0 1em;color:#1d232a;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #e5e8ec;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.92em}
th,td{border:1px solid #d6dbe0;padding:.25em .6em;text-align:right}
th{background:#f2f4f7;cursor:pointer;user-select:none}
th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
td.t,th.t{text-align:left}
figure{display:inline-block;margin:.5em 1em 1em 0;vertical-align:top;max-width:46%}
.summary{display:flex;gap:1.5em;align-items:flex-start}.summary .answers{flex:1}
.summary figure.lead{max-width:40%;margin:0}
figure img{max-width:100%;border:1px solid #e5e8ec}
figcaption{font-size:.85em;color:#4a5561}
code,pre{background:#f5f6f8;border-radius:3px;padding:.1em .3em;font-size:.88em}
pre{padding:.5em;white-space:pre-wrap;word-break:break-all}
a.gl{color:inherit;text-decoration:underline dotted}
.skipped{color:#8a5a00}.note{color:#8a5a00}.muted{color:#66717d;font-size:.9em}
.summary p{font-size:1.05em;margin:.4em 0}
dl.glossary dt{font-weight:600;margin-top:.6em}dl.glossary dd{margin-left:1.5em}
"""

# sort a table by the clicked header; numbers numerically, text alphabetically
_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], i = th.cellIndex;
    var asc = !th.classList.contains("asc");
    table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
    th.classList.add(asc ? "asc" : "desc");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[i].dataset.v, y = b.cells[i].dataset.v;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


# ---- numbers for reading ----------------------------------------------------------------------------
def fmt_number(v: float, digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits, thousands separators and never scientific
    notation (1,088,000 · 0.000838 · 12.3); 0 as ``0``."""
    f = float(v)
    if f == 0 or not math.isfinite(f):
        return "0" if f == 0 else str(f)
    if f.is_integer() and abs(f) < 1e15:  # a count stored as a float (weights, r(d))
        return f"{f:,.0f}"
    mag = math.floor(math.log10(abs(f)))
    if mag >= digits - 1:  # an integer part of `digits` digits or more: round to an integer
        return f"{round(f, -(mag - digits + 1)):,.0f}"
    decimals = min(digits - 1 - mag, 12)
    s = f"{f:,.{decimals}f}"
    if float(s.replace(",", "")) == 0:
        return "≈ 0"
    return s


def fmt_seconds(s: float) -> str:
    """A duration for reading: ``0.4 s``, ``12 s``, ``7 min 3 s``, ``1 h 2 min``."""
    s = float(s)
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(round(s % 60))} s"
    return f"{int(s // 3600)} h {int(round(s % 3600 / 60))} min"


def _fmt(v: Any, how: str = "") -> tuple[str, str]:
    """(display text, sort value) of a cell under format ``how`` (see :class:`Table`)."""
    if v is None or (isinstance(v, float | np.floating) and math.isnan(v)):
        return "–", ""
    if isinstance(v, bool | np.bool_):
        return ("yes" if v else "no"), str(int(v))
    if isinstance(v, int | np.integer):
        return f"{int(v):,}", str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        if how == "percent":
            return pct(f), repr(f)
        if how == "points":  # a difference of shares, in percentage points
            return ("+" if f > 0 else "") + fmt_number(100 * f) + " points", repr(f)
        if how == "p":
            return ("< 0.001" if f < 0.001 else f"{f:.3f}"), repr(f)
        if how == "int":
            return f"{f:,.0f}", repr(f)
        if how == "seconds":
            return fmt_seconds(f), repr(f)
        text = fmt_number(f)
        if how == "signed" and f > 0:
            text = "+" + text
        return text, repr(f)
    return str(v), str(v)


# ---- glossary terms in text ---------------------------------------------------------------------------
_TERM = re.compile(r"\[\[([a-z0-9_]+)(?:\|([^\]]*))?\]\]")


def inline(text: str) -> str:
    """``text`` as HTML: escaped, each ``[[key]]`` / ``[[key|words]]`` a link to glossary term
    ``key`` (shown as its words)."""
    out, pos = [], 0
    for m in _TERM.finditer(text):
        out.append(_esc(text[pos:m.start()]))
        t = glossary.term(m.group(1))
        shown = m.group(2) if m.group(2) is not None else t.label
        out.append(f'<a class="gl" href="#{t.anchor}" title="{_esc(t.sentence)}">{_esc(shown)}</a>')
        pos = m.end()
    out.append(_esc(text[pos:]))
    return "".join(out)


# ---- blocks -------------------------------------------------------------------------------------------
def table_html(df: pd.DataFrame, max_rows: int | None = None, caption: str | None = None,
               formats: Mapping[str, str] | None = None, ids: tuple | list = (),
               raw: tuple | list = ()) -> str:
    """A sortable HTML table of ``df`` (numbers right-aligned, formatted for reading and sorted
    numerically; ``formats``, ``ids`` and ``raw`` as in :class:`limelight.audit.stage.Table`)."""
    formats = formats or {}
    if max_rows is not None and len(df) > max_rows:
        df = df.head(max_rows)
    num = {c: pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
           for c in df.columns}
    head = "".join(f'<th class="{"" if num[c] else "t"}">{_esc(c)}</th>' for c in df.columns)
    rows = []
    for rec in df.itertuples(index=False):
        cells = []
        for c, v in zip(df.columns, rec, strict=True):
            text, key = _fmt(v, formats.get(c, ""))
            shown = f"<code>{_esc(text)}</code>" if c in ids and text != "–" else _esc(text)
            mark = " data-raw" if c in raw else ""
            cells.append(f'<td class="{"" if num[c] else "t"}"{mark} data-v="{_esc(key)}">{shown}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    cap = f'<caption class="muted">{caption}</caption>' if caption else ""
    return (f'<table class="sortable">{cap}<thead><tr>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _figure(path: Path, caption: str, command: str, lead: bool = False) -> str:
    if not path.exists():
        return f'<p class="skipped">The figure {_esc(path.name)} is missing.</p>'
    data = base64.b64encode(path.read_bytes()).decode()
    alt = _TERM.sub(lambda m: m.group(2) or glossary.term(m.group(1)).label, caption)
    repro = f"<br>Reproduce: <code>{_esc(command)}</code>" if command else ""
    return (f'<figure{" class=lead" if lead else ""}><img alt="{_esc(alt)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{inline(caption)}{repro}</figcaption></figure>')


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def render_blocks(blocks: list) -> tuple[str, list[tuple[str, str]]]:
    """HTML of a stage's report blocks, and its ``(anchor, heading)`` entries for the contents."""
    parts, toc = [], []
    for b in blocks:
        if isinstance(b, Heading):
            anchor = _slug(b.text)
            if b.level <= 2:
                toc.append((anchor, b.text))
            parts.append(f'<h{b.level} id="{anchor}">{inline(b.text)}</h{b.level}>')
        elif isinstance(b, Text):
            parts.append(f'<p class="{_esc(b.tone)}">{inline(b.text)}</p>' if b.tone
                         else f"<p>{inline(b.text)}</p>")
        elif isinstance(b, Table):
            cap = inline(b.caption) + (f" Table: <code>{_esc(b.source)}</code>" if b.source else "")
            parts.append(table_html(b.frame, b.max_rows, cap, b.formats, tuple(b.ids), tuple(b.raw)))
        elif isinstance(b, Figure):
            parts.append(_figure(Path(b.path), b.caption, b.command))
        else:  # pragma: no cover - a stage returned something else
            raise TypeError(f"not a report block: {b!r}")
    return "\n".join(parts), toc


def _read(audit: AuditDir, name: str) -> pd.DataFrame | None:
    p = audit.table(name)
    return pd.read_parquet(p) if p.exists() else None


def render_report(audit: AuditDir | str | Path, command: str | None = None) -> str:
    """The report of an audit directory as an HTML string."""
    audit = audit if isinstance(audit, AuditDir) else AuditDir(audit)
    man = audit.manifest
    res = audit.results()
    out = shlex.quote(str(audit.path))
    command = command or man.get("command") or f"limelight audit {out}/config.toml --out {out}"
    stages = {s["name"]: s for s in man.get("stages", [])}
    sections, toc = [], []
    for hook in report_sections():
        body, entries = render_blocks(hook(audit, stages))
        if body:
            sections.append(body)
            toc += entries
    toc += [("appendix-stages", "Appendix: the audit's stages and their timings"),
            ("glossary", "Glossary")]
    parts = _overview(audit, command, toc) + sections + _appendix(audit) + _glossary()
    parts.append(f'<p class="muted">Files: <code>{_esc(audit.results_json)}</code>, tables in '
                 f'<code>{_esc(audit.tables_dir)}</code>, exposure stores in '
                 f'<code>{_esc(audit.systems_dir)}</code> (Parquet shards and a per-document index).</p>')
    body = "\n".join(parts)
    names = json.dumps(list(res["systems"]))
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="limelight-names" content="{_esc(names)}">'
            f'<link rel="icon" href="data:,"><title>limelight audit: {_esc(res["audit"])}</title>'
            f"<style>{_CSS}</style></head><body>\n{body}\n<script>{_JS}</script></body></html>\n")


# ---- the first screen ---------------------------------------------------------------------------------
def _overview(audit: AuditDir, command: str, toc: list[tuple[str, str]]) -> list[str]:
    """Title, inputs, the findings in words (how unequal, who is left out, how the systems
    differ) beside one figure, the contents and the command that reproduces the audit."""
    from limelight.audit.stages.retrievability import c_main, systems_table

    man, res = audit.manifest, audit.results()
    coll, qs = man["collection"], man["queries"]
    parts: list[str] = []
    a = parts.append
    a(f"<h1>Who is in the limelight? An audit of {_esc(coll['name'])}</h1>")
    a(f'<p class="muted">Audit <b>{_esc(res["audit"])}</b>: {coll["n_docs"]:,} documents '
      f'(<code>{_esc(coll["source"])}</code>); {qs["n_queries"]:,} distinct searches from '
      f'<code>{_esc(qs["source"])}</code>, issued {qs["total_weight"]:,.0f} times in all; '
      f'{inline("[[depth]]")}: {res["depth"]}; {inline("[[cutoff]]")}: '
      f'{", ".join(map(str, res["cutoffs"]))}'
      f'{"; <b>quick run (a sample of the searches)</b>" if res.get("quick") else ""}.</p>')
    table = systems_table(audit)
    c = c_main(res["cutoffs"])
    a('<div class="summary">')
    findings = _findings(audit, table, c) if len(table) else [
        ("", "No system has retrievability figures: see the stages in the appendix for why.")]
    a('<div class="answers">')
    for label, text in findings:
        a(f"<p><b>{_esc(label)}</b> {inline(text)}</p>" if label else f"<p>{inline(text)}</p>")
    a("</div>")
    fig = audit.figures_dir / f"lorenz_c{c}.png"
    if fig.exists():
        a(_figure(fig, f"How evenly each system spreads attention, top {c}: the share of all "
                       f"[[retrievability]] (up) held by the least retrievable share of documents "
                       f"(across); the diagonal is equality.",
                  "; ".join(f"limelight retrievability --store {shlex.quote(str(audit.store_dir(n)))} --c {c}"
                            for n in table["system"].unique()), lead=True))
    a("</div>")
    a("<p>Contents: " + " · ".join(f'<a href="#{anchor}">{_esc(t)}</a>' for anchor, t in toc) + "</p>")
    a(f'<p class="muted">Reproduce the whole audit: <code>{_esc(command)}</code> (finished stages '
      "are reused).</p>")
    return parts


def _findings(audit: AuditDir, table: pd.DataFrame, c: int) -> list[tuple[str, str]]:
    """The three answers of the first screen, in words: ``(question, answer)``."""
    res = audit.results()
    at = table[table["c"] == c].set_index("system")
    n_docs = res["collection"]["n_docs"]
    fair, unfair = at["gini"].idxmin(), at["gini"].idxmax()
    out = []
    u = at.loc[unfair]
    out.append(("How unequal?", f"Under {unfair}, the 10 % most retrievable documents get "
               f"{pct(u['top10'])} of all the attention searches give in their top {c} "
               f"([[gini|inequality]] {u['gini']:.2f} on a scale from 0, everyone equal, to 1)."))
    left = "; ".join(f"{int(r['never']):,} under {n}" for n, r in at.iterrows())
    never = f"Of {n_docs:,} documents, no search shows in its top {c}: {left}."
    lowest = _left_out_group(audit)
    out.append(("Who is left out?", never + (f" {lowest}" if lowest else "")))
    if len(at) > 1:
        f = at.loc[fair]
        out.append(("How do the systems differ?", f"{fair} spreads attention most evenly "
                   f"(inequality {f['gini']:.2f}; its top 10 % of documents get "
                   f"{pct(f['top10'])}), {unfair} least ({u['gini']:.2f}); "
                   f"{fair} leaves {int(f['never']):,} documents unseen, {unfair} "
                   f"{int(u['never']):,}."))
    return out


def _left_out_group(audit: AuditDir) -> str:
    """The group with the largest attention deficit (group fairness) or, without it, the least
    retrievable group, in a sentence; ``""`` without a group field."""
    res = audit.results()
    group = res.get("group_field")
    if not group:
        return ""
    fair = _read(audit, "fairness")
    if fair is not None and len(fair):
        first = fair[fair["system"] == fair["system"].iloc[0]]
        w = first.loc[first["gap"].idxmin()]
        return (f"The {group} most left out under {w['system']} is {w['group']}: "
                f"{pct(w['size_share'])} of the documents, "
                f"{pct(w['exposure_share'])} of the attention.")
    grp = _read(audit, "groups")
    if grp is None or not len(grp):
        return ""
    first = grp[grp["system"] == grp["system"].iloc[0]]
    big = first[first["n_docs"] >= 20] if (first["n_docs"] >= 20).any() else first
    w = big.loc[big["r_mean"].idxmin()]
    return (f"The least retrievable {group} under {w['system']} is {w['group']} "
            f"({int(w['n_docs']):,} documents, each shown by {fmt_number(w['r_mean'])} searches "
            "on average).")


# ---- appendices ---------------------------------------------------------------------------------------
def _appendix(audit: AuditDir) -> list[str]:
    """Every stage: what it does, whether it ran, how long it took, and why it was skipped."""
    rows = [{"stage": s["name"], "what it does": s["title"],
             "status": {"done": "ran now", "cached": "reused"}.get(s["status"], s["status"]),
             "time": s["seconds"] if s["status"] == "done" else None, "note": s["reason"]}
            for s in audit.manifest.get("stages", [])]
    if not rows:
        return []
    return ['<h2 id="appendix-stages">Appendix: the audit\'s stages and their timings</h2>',
            table_html(pd.DataFrame(rows), caption="ran now: computed in this run; reused: "
                       "finished earlier with the same inputs and settings; skipped: not run, "
                       "with the reason.", formats={"time": "seconds"}, ids=("stage",))]


def _glossary() -> list[str]:
    """Every term of :mod:`limelight.report.glossary`: words, symbol, formula, meaning, source."""
    items = []
    for t in glossary.TERMS.values():
        sym = f" <span class=muted>({_esc(t.symbol)})</span>" if t.symbol else ""
        paper = f' <span class="muted">{_esc(t.paper)}.</span>' if t.paper else ""
        items.append(f'<dt id="{t.anchor}">{_esc(t.label)}{sym}</dt><dd>{_esc(t.sentence)} '
                     f"<code>{_esc(t.formula)}</code>{paper}</dd>")
    return ['<h2 id="glossary">Glossary</h2>', '<dl class="glossary">' + "".join(items) + "</dl>"]


def write_report(audit: AuditDir | str | Path, command: str | None = None) -> Path:
    """Write ``DIR/report.html`` atomically; returns its path."""
    audit = audit if isinstance(audit, AuditDir) else AuditDir(audit)
    page = render_report(audit, command)
    with atomic_path(audit.report_html) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return audit.report_html
