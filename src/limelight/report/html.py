"""The audit report: one HTML file with everything inlined (PNG figures as data URLs, CSS, a few
lines of JS to sort tables), built only from what the audit directory holds, so that
``limelight serve`` or a notebook can regenerate it from ``DIR`` alone.
"""

from __future__ import annotations

import base64
import html
import json
import math
import shlex
from pathlib import Path
from typing import Any

import pandas as pd

from limelight._io import atomic_path
from limelight.audit.layout import AuditDir

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:72em;margin:1.5em auto;
padding:0 1em;color:#1d232a;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #e5e8ec;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.92em}
th,td{border:1px solid #d6dbe0;padding:.25em .6em;text-align:right}
th{background:#f2f4f7;cursor:pointer;user-select:none;white-space:nowrap}
th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
td.t,th.t{text-align:left}
figure{display:inline-block;margin:.5em 1em 1em 0;vertical-align:top;max-width:46%}
figure img{max-width:100%;border:1px solid #e5e8ec}
figcaption{font-size:.85em;color:#4a5561}
code,pre{background:#f5f6f8;border-radius:3px;padding:.1em .3em;font-size:.88em}
pre{padding:.5em;white-space:pre-wrap;word-break:break-all}
.skipped{color:#8a5a00}.present{color:#1b6e2d}.muted{color:#66717d;font-size:.9em}
.kpi{display:inline-block;margin:0 1.5em .5em 0}.kpi b{font-size:1.3em;display:block}
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


def _fmt(v: Any) -> tuple[str, str]:
    """(display text, sort value) of a cell."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–", ""
    if isinstance(v, bool):
        return str(v), str(int(v))
    if isinstance(v, int) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu"):
        return f"{int(v):,}", str(int(v))
    if isinstance(v, float) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") == "f"):
        f = float(v)
        if f != 0 and (abs(f) < 1e-3 or abs(f) >= 1e6):
            return f"{f:.3e}", repr(f)
        return f"{f:.4f}", repr(f)
    return str(v), str(v)


def table_html(df: pd.DataFrame, max_rows: int | None = None, caption: str | None = None) -> str:
    """A sortable HTML table of ``df`` (numbers right-aligned, sorted numerically)."""
    if max_rows is not None and len(df) > max_rows:
        df = df.head(max_rows)
    num = {c: pd.api.types.is_numeric_dtype(df[c]) for c in df.columns}
    head = "".join(f'<th class="{"" if num[c] else "t"}">{_esc(c)}</th>' for c in df.columns)
    rows = []
    for rec in df.itertuples(index=False):
        cells = []
        for c, v in zip(df.columns, rec, strict=True):
            text, key = _fmt(v)
            cells.append(f'<td class="{"" if num[c] else "t"}" data-v="{_esc(key)}">{_esc(text)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption class=\"muted\">{_esc(caption)}</caption>" if caption else ""
    return (f'<table class="sortable">{cap}<thead><tr>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _figure(path: Path, caption: str, command: str) -> str:
    if not path.exists():
        return f'<p class="skipped">figure {_esc(path.name)} missing</p>'
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<figure><img alt="{_esc(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_esc(caption)}<br>Reproduce: <code>{_esc(command)}</code></figcaption></figure>")


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
    parts = (_overview(audit, command) + _replays(audit) + _retrievability(audit, out)
             + _diffs(audit, out) + _stage_sections(audit, out))
    parts.append(f'<p class="muted">Files: <code>{_esc(audit.results_json)}</code>, tables in '
                 f'<code>{_esc(audit.tables_dir)}</code>, exposure stores in '
                 f'<code>{_esc(audit.systems_dir)}</code> (Parquet shards and a per-document index).</p>')
    body = "\n".join(parts)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>limelight audit: {_esc(res["audit"])}</title>'
            f"<style>{_CSS}</style></head><body>\n{body}\n<script>{_JS}</script></body></html>\n")


def _overview(audit: AuditDir, command: str) -> list[str]:
    """Title, inputs, the command that reproduces the audit, headline numbers and stages."""
    man, res = audit.manifest, audit.results()
    coll, qs = man["collection"], man["queries"]
    systems = res["systems"]
    parts: list[str] = []
    a = parts.append
    a(f"<h1>limelight audit: {_esc(res['audit'])}</h1>")
    a(f'<p class="muted">Collection <b>{_esc(coll["name"])}</b> ({coll["n_docs"]:,} documents, source '
      f'<code>{_esc(coll["source"])}</code>); {qs["n_queries"]:,} distinct queries from '
      f'<code>{_esc(qs["source"])}</code> (total weight o<sub>q</sub> {qs["total_weight"]:,.0f}); '
      f'exposure depth n = {res["depth"]}; cutoffs c = {", ".join(map(str, res["cutoffs"]))}'
      f'{"; <b>quick run (a sample of the queries)</b>" if res.get("quick") else ""}.</p>')
    a(f"<p>Reproduce the whole audit: <code>{_esc(command)}</code> (finished stages are reused).</p>")

    # headline numbers
    a("<h2>Systems at a glance</h2><div>")
    for n, s in systems.items():
        if "gini_c100" in s:
            a(f'<span class="kpi">{_esc(n)}<b>Gini {s["gini_c100"]:.3f}</b>'
              f'retrievable {s["retrievable_fraction"]:.1%}</span>')
    a("</div>")
    for n, s in systems.items():
        if (cov := s.get("coverage")) is not None:
            a(f'<p class="muted">{_esc(n)}: queries with results {cov["with_results"]:,}, without '
              f'{cov["without_results"]:,} (of {cov["queries"]:,}; a query without results exposes '
              f'nothing){_coverage_notes(cov)}.</p>')
    st_df = _read(audit, "systems")
    if st_df is not None:
        a(table_html(st_df, caption="Retrievability r(d) = Σ_q o_q·[rank_q(d) ≤ c] over every "
                                    "document of the collection; Gini over all documents "
                                    "(retrieved-only Gini for comparison only)."))

    # stages
    a("<h2>Stages</h2>")
    srows = [{"stage": s["name"], "what": s["title"], "status": s["status"],
              "seconds": s["seconds"] if s["status"] == "done" else None, "reason": s["reason"]}
             for s in man.get("stages", [])]
    a(table_html(pd.DataFrame(srows), caption="done = ran now; cached = finished earlier with the "
                                               "same inputs and settings; skipped = not run, with the reason"))

    return parts


def _coverage_notes(cov: dict) -> str:
    """What else a system's coverage says (result lists no query matches, unknown documents
    left out, repeated lists), as a clause, or ``""``."""
    notes = [f"{cov[k]:,} {what}" for k, what in (
        ("unmatched_result_lists", "result lists match no query"),
        ("duplicate_result_lists", "result lists repeat an earlier query and were left out"),
        ("unknown_doc_results", "results of documents the collection lacks were left out"))
        if cov.get(k)]
    return "; " + "; ".join(notes) if notes else ""


def _replays(audit: AuditDir) -> list[str]:
    """How the queries went to each system that is a live service (its replay journals under
    the system's folder): asked, answered, failed, retried, attempts, latency percentiles."""
    from limelight.retrieval.replay import replay_summaries

    rows = [{"system": n, **s} for n in audit.results()["systems"]
            for s in replay_summaries(audit.system_dir(n))]
    if not rows:
        return []
    return ["<h2>Queries replayed against live services</h2>",
            table_html(pd.DataFrame(rows), caption="Per system and depth k asked: distinct queries "
                       "asked, answered (refused: a 4xx taken as no results), failed (still without "
                       "an answer), retried; attempts (times queries were sent, retries included); "
                       "latency of the answering requests (ms). "
                       "Journal: systems/NAME/replay/ (Parquet log per query: status, attempts, "
                       "latency).")]


def _retrievability(audit: AuditDir, out: str) -> list[str]:
    """Lorenz curves, the rank-size plot and retrievability by group."""
    res = audit.results()
    systems = res["systems"]
    parts: list[str] = []
    a = parts.append
    a("<h2>Retrievability and inequality</h2>")
    figs = audit.figures_dir
    for c in res["cutoffs"]:
        cmds = "; ".join(f"limelight retrievability --store {out}/systems/{n}/exposure --c {c}"
                         for n in systems)
        a(_figure(figs / f"lorenz_c{c}.png", f"Lorenz curves of r(d) at c={c} (Gini in the legend)", cmds))
    a(_figure(figs / "rank_size.png", "Rank-size plot: number of queries exposing each document (depth n)",
              f"python -c \"from limelight.audit import AuditDir; print(AuditDir('{audit.path}')"
              f".store('{next(iter(systems))}').n_exposing())\""))
    group = res.get("group_field")
    if group:
        grp = _read(audit, "groups")
        if grp is not None:
            a(f"<h2>Retrievability by {_esc(group)}</h2>")
            a(_figure(figs / "groups.png", f"Mean r(d) per {group}: most and least retrievable groups",
                      f"python -c \"import pandas as pd; print(pd.read_parquet('{audit.table('groups')}'))\""))
            a(table_html(grp.sort_values(["system", "r_mean"], ascending=[True, False]),
                         caption=f"Per {group} and system (documents in several groups count in each). "
                                 f"Table: {audit.table('groups')}"))

    return parts


def _diffs(audit: AuditDir, out: str) -> list[str]:
    """What changes from the first system to each other one."""
    figs, group = audit.figures_dir, audit.results().get("group_field")
    parts: list[str] = []
    a = parts.append
    diff = _read(audit, "diff")
    if diff is not None and len(diff):
        first = diff["from"].iloc[0]
        a(f"<h2>What changes from {_esc(first)} to each other system</h2>")
        for to in diff["to"]:
            a(_figure(figs / f"diff_{first}_{to}.png",
                      f"r(d) under {to} against {first}, and the groups whose share moves most",
                      f"limelight exposure diff {out}/systems/{first}/exposure "
                      f"{out}/systems/{to}/exposure"
                      + (f" --group-field {group}" if group else "")))
        a(table_html(diff, caption=f"Per pair: Gini, retrievable fractions, documents that gain, "
                                   f"lose, become (ir)retrievable. Table: {audit.table('diff')}"))
        movers = _read(audit, "diff_movers")
        if movers is not None:
            a(table_html(movers, caption=f"The biggest winners and losers of r(d). "
                                         f"Table: {audit.table('diff_movers')}"))

    return parts


def _rerank_caption(stage: dict | None) -> str:
    """The re-ranking table's caption: which model (trained here: steps, why it stopped, its
    training/validation queries; or the checkpoint) and on how many held-out queries."""
    summ = ((stage or {}).get("result") or {}).get("summary") or {}
    src = summ.get("source")
    if src == "trained here":
        model = (f"trained here: {summ.get('steps')} of {summ.get('max_steps')} optimizer steps "
                 f"(stopped: {summ.get('stopped')}; best validation at step {summ.get('best_step')}) "
                 f"on {summ.get('train_queries')} judged queries, {summ.get('val_queries')} for "
                 "validation")
    elif src:
        about = [f"{summ['steps']} training steps" if summ.get("steps") is not None else "",
                 f"weakly supervised: {summ['weak']}" if summ.get("weak") else "",
                 f"{summ.get('excluded_queries', 0)} judged queries left out as its training or "
                 "validation queries"]
        model = f"checkpoint {src} ({'; '.join(x for x in about if x)})"
    else:
        return "First stage vs TK re-ranked on held-out queries."
    return (f"First stage vs {summ.get('model', 'TK')} re-ranked on {summ.get('test_queries')} "
            f"held-out judged queries; model {model}.")


def _stage_sections(audit: AuditDir, out: str) -> list[str]:
    """One section per optional stage (comparison, re-ranking, EQI, robustness, CtrlQGen,
    intervention): its tables, or why it was skipped."""
    man, figs = audit.manifest, audit.figures_dir
    stages = {s["name"]: s for s in man.get("stages", [])}
    parts: list[str] = []
    a = parts.append

    def section(stage: str, heading: str, tables: list[tuple[str, str]]) -> None:
        a(f"<h2>{_esc(heading)}</h2>")
        s = stages.get(stage)
        if s is None or s["status"] == "skipped":
            reason = s["reason"] if s else "not run"
            a(f'<p class="skipped">Skipped: {_esc(reason)}</p>')
            return
        if s.get("reason"):  # ran, but left part out (e.g. EQI for a reranked system)
            a(f'<p class="skipped">{_esc(s["reason"])}</p>')
        for name, cap in tables:
            df = _read(audit, name)
            if df is not None:
                a(table_html(df, caption=f"{cap} Table: {audit.table(name)}"))
        summ = s.get("result", {}).get("summary")
        if summ and not any(audit.table(n).exists() for n, _ in tables):
            a(f"<pre>{_esc(json.dumps(summ, indent=1, default=str)[:4000])}</pre>")

    section("compare", "System comparison (standard measures and LexiRecall)",
            [("evaluation", "Mean over judged queries; p-values against the first system (Holm)."),
             ("preferences", "All-pairs LexiRecall preferences: wins/ties/losses with sign tests.")])
    section("rerank", "TK re-ranking", [("rerank", _rerank_caption(stages.get("rerank")))])
    section("eqi", "Exposing-query identification (RELQ) and exact reverse search",
            [("relq", "Mean RELQ (Li et al., WWW 2022, eq. 1-4) of each EQI method against the exact "
                      "exposing-query lists of the store, on a seeded sample of exposed documents."),
             ("reverse", "Exact reverse search: the top exposing queries of each system's most "
                         "exposed document (1-based ranks, from the exposure store).")])
    section("robustness", "Query-variation robustness (Penha et al., ECIR 2022, Table 4)",
            [("robustness", "Per system, variation method and category: mean, drop against the "
                            "original queries, paired t-test with Bonferroni correction.")])
    if (figs / "robustness.png").exists() and stages.get("robustness", {}).get("status") != "skipped":
        a(_figure(figs / "robustness.png", "Relative drop per variation method and system",
                  f"limelight audit {shlex.quote(str(man.get('config') or 'CONFIG.toml'))} --out {out}  "
                  "(stage robustness; library: limelight.querygen.robustness.robustness_report)"))
    section("ctrlqgen", "CtrlQGen synthetic queries: retrievability effect",
            [("ctrlqgen", "Gini and retrievable fraction of the first system under the query log, "
                          "the generated queries of each intent, and both together."),
             ("ctrlqgen_sample_narrow", "A few generated narrow queries."),
             ("ctrlqgen_sample_broad", "A few generated broad queries.")])
    section("intervention", "Changing who is in the limelight: stochastic rankings",
            [("intervention", "Gini and retrievable fraction of the expected r(d) under a "
                              "Plackett-Luce policy over each system's top-n at temperature T "
                              "(relative to each query's score spread; T = 0 is the system itself; "
                              "limelight.exposure.stochastic). With relevance judgments, the same "
                              "policy's expected nDCG@10 and EE-L/EE-D/EE-R over the judged "
                              "queries: the price in relevance.")])
    if (figs / "intervention.png").exists() and stages.get("intervention", {}).get("status") != "skipped":
        a(_figure(figs / "intervention.png", "Gini of the expected r(d) against the temperature "
                  "(and, with judgments, expected nDCG@10 against that Gini)",
                  f"limelight audit {shlex.quote(str(man.get('config') or 'CONFIG.toml'))} --out {out}  "
                  "(stage intervention; library: "
                  "limelight.exposure.stochastic.stochastic_store_exposure)"))
    return parts


def write_report(audit: AuditDir | str | Path, command: str | None = None) -> Path:
    """Write ``DIR/report.html`` atomically; returns its path."""
    audit = audit if isinstance(audit, AuditDir) else AuditDir(audit)
    page = render_report(audit, command)
    with atomic_path(audit.report_html) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return audit.report_html
