"""The manual's generated reference pages as Markdown text, read from the code (see gen_pages.py).

Importable without MkDocs: ``tests/test_manual.py`` checks these pages against the code too.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

#: one line of help for each key of the core tables (the stage tables and the system kinds carry
#: their own help in the code); checked both ways against the schema by ``core_tables``
CORE_HELP: dict[str, str] = {
    "audit.name": "the audit's name, shown in the report (default: the configuration file's name)",
    "audit.depth": "n: documents kept per query in the exposure store (1 to 10000)",
    "audit.cutoffs": "retrievability cutoffs c, each ≤ depth (c = 100 is added when depth ≥ 100)",
    "audit.group_field": "a collection field to break retrievability down by (e.g. section)",
    "audit.seed": "seed of every sample and every training run of the audit",
    "audit.shard_size": "queries per Parquet shard of an exposure store",
    "audit.embedding_cache": "folder of the dense embedding cache (relative to the working folder)",
    "collection.source": "shared collection or catalog name, a folder with docs.jsonl, a JSONL "
                         "file, or irds:<id>",
    "collection.name": "the collection's name (default: the shared name, or the folder's or "
                       "file's); the default [ctrlqgen] schema is the one shipped under it",
    "queries.source": "\"log\" (the shared query log), \"dataset\" (the collection's own queries), "
                      "\"generated\" (CtrlQGen queries of the collection) or a query file",
    "queries.sample": "a seeded sample of this many distinct queries (≥ 1; leave out: every one)",
    "quick.queries": "queries sampled under --quick",
    "quick.eval_queries": "judged queries kept under --quick (0: all)",
    "evaluation.measures": "measures of the system comparison (ir_measures spelling)",
    "evaluation.preference": "the preference of the pairwise comparison (LexiRecall, "
                             "LexiPrecision or a measure)",
}

#: where parse_config leaves each core key (table.key -> AuditConfig attribute)
_FIELD = {"audit.name": "name", "collection.source": "collection",
          "collection.name": "collection_name", "queries.source": "query_source",
          "queries.sample": "query_sample", "quick.queries": "quick_queries",
          "quick.eval_queries": "quick_eval_queries"}

_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "list",
               dict: "table"}


def _type_name(t: Any) -> str:
    types = t if isinstance(t, tuple) else (t,)
    return " or ".join(_TYPE_NAMES.get(x, getattr(x, "__name__", str(x))) for x in types)


def _value(v: Any) -> str:
    """A default as TOML-ish text in a code span."""
    if v is None:
        return "—"
    return "`" + json.dumps(v, ensure_ascii=False).replace("|", "\\|") + "`"


def _cell(text: str) -> str:
    """One table cell: one line, ``|`` escaped, ``<`` and ``>`` escaped outside code spans."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _defaults() -> Any:
    """The ``AuditConfig`` that the smallest configuration parses to: every default as the parser
    fills it in (the collection is a one-document JSONL file, so that no data folder is needed)."""
    from limelight.audit.config import parse_config

    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs.jsonl"
        docs.write_text('{"id": "d1", "text": "a document"}\n', encoding="utf-8")
        return parse_config(f'[collection]\nsource = "{docs.as_posix()}"\n\n'
                            '[[systems]]\nname = "bm25"\nkind = "bm25"\n')


def core_tables() -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """The core tables as (table, [(key, type, default, help)]), from the parser's schema."""
    import limelight.audit.config as config

    schema = {"audit": config._AUDIT_KEYS, "collection": config._COLLECTION_KEYS,
              "queries": config._QUERY_KEYS, "quick": config._QUICK_KEYS,
              "evaluation": config._EVAL_KEYS}
    keys = {f"{t}.{k}" for t, ks in schema.items() for k in ks}
    missing, stale = sorted(keys - set(CORE_HELP)), sorted(set(CORE_HELP) - keys)
    if missing or stale:
        raise RuntimeError(f"docs/_gen/reference.py CORE_HELP is out of date: keys without help "
                           f"{missing}, help for removed keys {stale}")
    cfg = _defaults()
    out = []
    for table, ks in schema.items():
        rows = []
        for k, t in ks.items():
            dotted = f"{table}.{k}"
            if dotted == "collection.source":
                default = "required"
            elif dotted == "audit.name":
                default = "the file's name"
            elif dotted == "queries.sample":
                default = "every query"
            else:
                default = _value(getattr(cfg, _FIELD.get(dotted, k)))
            rows.append((k, _type_name(t), default, CORE_HELP[dotted]))
        out.append((table, rows))
    out.append(("stages", [(k, "boolean", _value(v), f"run the optional {k} stage")
                           for k, v in cfg.stages.items()]))
    return out


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return lines + [""]


def config_reference() -> str:
    """The audit configuration reference: every table and key, with type, default and help."""
    from limelight.audit.stage import NO_DEFAULT
    from limelight.audit.stages import STAGE_OPTIONS
    from limelight.retrieval.systems import CAPABILITIES, describe_kinds

    lines = ["# Audit configuration reference", "",
             "An audit is configured by one TOML file (`limelight audit FILE.toml --out DIR`; "
             "`limelight audit FILE.toml --out DIR --check` only validates it). This page is "
             "generated from the configuration's schema at every build of the manual: the "
             "parser's tables, the options each stage declares and the registered system kinds "
             "(`limelight systems`). Unknown tables and keys are errors naming the file and line, "
             "as are values of the wrong type.", "",
             "## Core tables", ""]
    for table, rows in core_tables():
        lines += [f"### `[{table}]`", ""]
        lines += _table([(f"`{k}`", t, d, h) for k, t, d, h in rows],
                        ("key", "type", "default", "meaning"))
    lines += ["## `[[systems]]`: the audited systems", "",
              "Each `[[systems]]` table is one system: `name` (letters, digits, `.`, `_`, `-`; "
              "unique; default: its kind) and `kind`, then the kind's parameters. A stage that "
              "needs a capability a system lacks is skipped for that system, and the report "
              "says why.", "",
              "| capability | meaning |", "|---|---|"]
    lines += [f"| `{c}` | {_cell(s)} |" for c, s in CAPABILITIES.items()] + [""]
    for kind in describe_kinds():
        lines += [f"### kind `{kind['kind']}`", "", _cell(kind["description"]), "",
                  "Capabilities: " + (", ".join(f"`{c}`" for c in kind["capabilities"]) or "none")
                  + ".", ""]
        rows = [(f"`{n}`", p["type"], _value(p["default"]), p["help"])
                for n, p in kind["parameters"].items()]
        lines += _table(rows, ("key", "type", "default", "meaning")) if rows else ["No parameters.", ""]
    lines += ["## Stage tables", "",
              "The optional stages read their own table; `--quick` (the `quick` column) changes "
              "some defaults. A default computed from the audit is described in the key's help.",
              ""]
    for table, schema in STAGE_OPTIONS.items():
        lines += [f"### `[{table}]`", ""]
        rows = []
        for k, o in schema.keys.items():
            default = ("—" if o.default is NO_DEFAULT else
                       "computed" if callable(o.default) else _value(o.default))
            quick = "" if o.quick is NO_DEFAULT else _value(o.quick)
            rows.append((f"`{k}`", _type_name(o.type), default, quick, o.help))
        lines += _table(rows, ("key", "type", "default", "quick", "meaning"))
        if schema.removed:
            lines += ["Removed keys (an error that says what to write instead):", ""]
            lines += [f"- `{k}`: {_cell(v)}" for k, v in schema.removed.items()] + [""]
    return "\n".join(lines)


# ---- the CLI reference ------------------------------------------------------------------------
def _annotation(p: Any) -> str:
    """The type of a Typer parameter in words (``Path`` → path, ``list[str]`` → list of string)."""
    t = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    if t is None:
        return ""
    args = getattr(t, "__args__", None)
    if args and getattr(t, "__origin__", None) is list:
        return f"list of {_annotation_name(args[0])}"
    if args:  # Optional[X]
        return " or ".join(_annotation_name(a) for a in args if a is not type(None))
    return _annotation_name(t)


def _annotation_name(t: Any) -> str:
    return {Path: "path", bool: "flag"}.get(t) or _TYPE_NAMES.get(t) or getattr(t, "__name__", str(t))


def _param_rows(cmd: Any) -> list[tuple[str, str, str, str]]:
    rows = []
    for p in cmd.params:
        if getattr(p, "hidden", False) or p.name == "help":
            continue
        if "Argument" in type(p).__name__:
            name = f"`{p.name.upper()}`"
        else:
            name = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        if p.required:
            default = "required"
        elif p.default in (None, (), [], False) or callable(p.default):
            default = ""
        else:
            default = _value(str(p.default) if isinstance(p.default, Path) else p.default)
        rows.append((name, default, _annotation(p), getattr(p, "help", None) or ""))
    return rows


def _command(cmd: Any, path: list[str], lines: list[str], level: int, parent: Any = None) -> None:
    from typer._click.core import Context

    ctx = Context(cmd, info_name=path[-1], parent=parent)
    lines += [f"{'#' * level} `{' '.join(path)}`", ""]
    if cmd.help:
        lines += [cmd.help.strip(), ""]
    lines += ["```text", f"{' '.join(path)} {' '.join(cmd.collect_usage_pieces(ctx))}", "```", ""]
    rows = _param_rows(cmd)
    if rows:
        lines += _table(rows, ("argument / option", "default", "type", "meaning"))
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            _command(cmd.get_command(ctx, name), [*path, name], lines, min(level + 1, 4), ctx)


def cli_reference() -> str:
    """Every command and group of ``limelight``, walked from the Typer app: usage, arguments and
    options with defaults and help."""
    import typer

    from limelight.cli import app

    root = typer.main.get_command(app)
    lines = ["# Command-line reference", "",
             "Generated from the Typer application at every build of the manual "
             "(`limelight COMMAND --help` prints the same). Bad input is one line on stderr and "
             "exit status 2.", ""]
    _command(root, ["limelight"], lines, 2)
    return "\n".join(lines)


# ---- the glossary -------------------------------------------------------------------------------
#: the evaluation measures of ``limelight.evaluation.measures`` (every name of its registry):
#: formula and source; checked both ways against the registry by ``glossary_page``
MEASURES: dict[str, tuple[str, str]] = {
    "AP": ("AP = (1/|Rel|) Σ_{i: d_i relevant} P@i", "trec_eval; Buckley & Voorhees 2000"),
    "nDCG": ("nDCG@k = DCG@k / IDCG@k, DCG@k = Σ_{i≤k} gain(d_i) / log₂(i + 1), linear gains",
             "Järvelin & Kekäläinen, TOIS 2002; trec_eval's ndcg_cut"),
    "RR": ("RR = 1 / rank of the first relevant document", "trec_eval recip_rank"),
    "P": ("P@k = |relevant in top k| / k", "trec_eval P_k"),
    "R": ("R@k = |relevant in top k| / |Rel|", "trec_eval recall_k"),
    "Rprec": ("Rprec = P@|Rel|", "trec_eval Rprec"),
    "RBP": ("RBP(p) = (1 − p) Σ_i rel(d_i) · p^(i−1)", "Moffat & Zobel, TOIS 2008"),
    "TSE": ("TSE(e) = Σ_i e(rank of the i-th relevant document) over all relevant documents, "
            "unretrieved ones imputed at the bottom of the corpus (e: rr, ndcg, rbp, lin)",
            "Diaz & Mitra, Recall, Robustness, and Lexicographic Evaluation, TOIS 2023 (§3.2)"),
    "LexiRecall": ("compare the rankings' recall levels from the last relevant document up: the "
                   "first difference decides (metric form §7.3.2)",
                   "Diaz & Mitra, TOIS 2023"),
    "LexiPrecision": ("compare the rankings' positions of the relevant documents from the first "
                      "one down: the first difference decides", "Diaz & Mitra, TOIS 2023"),
    "EE-L": ("EE-L = ‖ε − ε*‖² (ε: expected exposure of each document under RBP patience γ, "
             "ε*: the ideal policy's); lower is fairer", "Diaz et al., CIKM 2020"),
    "EE-D": ("EE-D = ‖ε‖²: how concentrated exposure is; lower is more spread",
             "Diaz et al., CIKM 2020"),
    "EE-R": ("EE-R = 2 ε·ε*: how much exposure goes to relevant documents",
             "Diaz et al., CIKM 2020"),
}


def glossary_page() -> str:
    """The glossary: the report's and the web app's terms (``limelight.report.glossary``), then
    the evaluation measures (``limelight.evaluation.measures``)."""
    from limelight.evaluation import measures
    from limelight.report.glossary import BROWSING_CHOICES, TERMS

    names = set(measures.registered())
    if names != set(MEASURES):
        raise RuntimeError(f"docs/_gen/reference.py MEASURES is out of date: without a formula "
                           f"{sorted(names - set(MEASURES))}, no longer measures "
                           f"{sorted(set(MEASURES) - names)}")
    lines = ["# Glossary", "",
             "The words, symbols and formulas of the report and the web app (generated from "
             "`limelight.report.glossary`, the same entries `limelight serve` shows at "
             "`/glossary`), then the evaluation measures that `limelight evaluate` and an audit's "
             "`[evaluation] measures` accept. The papers themselves are in the shared folder "
             "beside the repository (`../shared/papers/README.md` maps them).", "",
             "## Exposure, retrievability and fairness", ""]
    for t in TERMS.values():
        title = t.label + (f" ({t.symbol})" if t.symbol else "")
        lines += [f"### {_cell(title)} {{ #{t.anchor} }}", "", _cell(t.sentence), "",
                  f"Formula: `{t.formula}`", ""]
        if t.paper:
            lines += [f"Source: {_cell(t.paper)}.", ""]
    lines += ["## Browsing models offered by the pages", "",
              "| spelling | label | meaning |", "|---|---|---|"]
    lines += [f"| `{b.spec}` | {_cell(b.label)} | {_cell(b.sentence)} |" for b in BROWSING_CHOICES]
    lines += ["", "## Evaluation measures", "",
              "Spelled as in ir_measures (`nDCG@10`, `AP(rel=2)@100`, `RBP(p=0.8)`, "
              "`TSE(e=ndcg)`, `EE-L(gamma=0.5)`); `rel` is the lowest grade counted relevant.", "",
              "| measure | formula | source |", "|---|---|---|"]
    lines += [f"| `{n}` | {_cell(f)} | {_cell(s)} |" for n, (f, s) in MEASURES.items()]
    return "\n".join(lines) + "\n"
