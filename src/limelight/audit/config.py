"""Audit configuration: a TOML file, validated up front with one-line errors naming file:line.

Example (``configs/debian.toml``)::

    [audit]
    name = "debian"
    depth = 100                 # n: documents kept per query (exposure depth)
    cutoffs = [10, 100]         # retrievability cutoffs c (each ≤ depth)
    group_field = "section"     # a collection field to break retrievability down by (optional)
    seed = 0

    [collection]
    source = "debian"           # shared collection, catalog, folder, JSONL file or irds:<id>
    # name = "debian"           # the collection's name (default: the shared name, or the folder's
                                # or file's); the default [ctrlqgen] schema is the one shipped
                                # under that name (debian, movies), never a path

    [queries]
    source = "log"              # "log" (shared query log), "dataset" (the collection's own
                                # queries), "generated" (CtrlQGen queries generated from the
                                # collection; [ctrlqgen] schema, intents, n, n_entities,
                                # generator, backbone: see limelight.audit.inputs), or a TSV / query-log
                                # file path
    # sample = 2000             # a seeded sample of n ≥ 1 queries (leave out: every distinct query)

    [quick]                     # what --quick changes
    queries = 2000

    [[systems]]
    name = "bm25"
    kind = "bm25"               # bm25 | dense | hybrid | reranked
    k1 = 0.9
    b = 0.4

    [[systems]]                 # a neural re-ranker over another system of this config
    name = "bm25_tk"
    kind = "reranked"
    first = "bm25"              # the first stage: a bm25, dense or hybrid system above
    checkpoint = "tk2.pt"       # a TK/KNRM checkpoint (limelight rerank train); relative paths
                                # resolve against this file's folder
    depth = 100                 # the first stage's top `depth` are re-ranked (≥ audit.depth)

    [stages]                    # each optional stage can be switched off
    eqi = true

    [rerank]                    # TK re-ranking of the first system on held-out judged queries
    max_steps = 1000            # optimizer-step budget (--quick: 30); eval_every, patience, layers,
                                # depth: see limelight.audit.stages.rerank.OPTIONS
    # checkpoint = "tk2.pt"     # evaluate this trained model instead of training one (relative to
                                # this file's folder; its train/validation queries are left out)

    [eqi]                       # docs, steps, methods (residual, append), k
    [robustness]                # methods ("all" or names), measure, mode (full, rerank, both)
    [ctrlqgen]                  # schema (shipped name or TOML file), intents, n, n_entities,
                                # generator, backbone; unknown keys are errors in every table

    [intervention]              # optional: Plackett-Luce policies over each system's top-n
    temperatures = [0.5, 1, 2]  # relative to each query's score spread (T = 0 is always added)
    samples = 16                # sampled rankings per query (Monte-Carlo)
    c = 10                      # retrievability cutoff of the expected r(d)

    [topics]                    # topic-aware retrievability (on unless [stages] topics = false)
    k = 20                      # topics of the searches (K-means, seeded by audit.seed)
    model = "tfidf"             # tfidf (their words) or vectors (the audit's query vectors)
    fairness = true             # group fairness with the topics as groups of documents
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from limelight._io import file_sha256
from limelight.audit.stage import StageOptions
from limelight.audit.stages import STAGE_OPTIONS, registered_stages
from limelight.errors import FormatError, LimelightError, with_article
from limelight.retrieval.spec import System
from limelight.retrieval.systems import FIRST_STAGE, SystemKind, get_kind, kind_names

OPTIONAL_STAGES = ("eqi", "robustness", "ctrlqgen", "rerank", "compare", "intervention", "topics")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

# allowed keys per table, with their types (bool is checked before int: bool is an int subclass)
_AUDIT_KEYS = {"name": str, "depth": int, "cutoffs": list, "group_field": str, "seed": int,
               "shard_size": int, "embedding_cache": str}
_COLLECTION_KEYS = {"source": str, "name": str}
_QUERY_KEYS = {"source": str, "sample": int}
_QUICK_KEYS = {"queries": int, "eval_queries": int}
_EVAL_KEYS = {"measures": list, "preference": str}
_TOP_KEYS = {"audit", "collection", "queries", "quick", "systems", "stages", "evaluation"}


@dataclass
class AuditConfig:
    """A validated audit configuration."""

    name: str
    collection: str
    systems: list[System]
    collection_name: str | None = None  # [collection] name (default: load_dataset's name)
    query_source: str = "log"
    query_sample: int = 0
    depth: int = 100
    cutoffs: list[int] = field(default_factory=lambda: [10, 100])
    group_field: str | None = None
    seed: int = 0
    shard_size: int = 8192
    embedding_cache: str = ".cache/embeddings"
    quick_queries: int = 2000
    quick_eval_queries: int = 0
    measures: list[str] = field(default_factory=lambda: ["nDCG@10", "AP", "R@100"])
    preference: str = "LexiRecall"
    stages: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(OPTIONAL_STAGES, True))
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # [eqi], [robustness], ...
    path: str | None = None
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(replace(self, systems=[]))  # a system describes itself (its settings)
        d.pop("text")
        d["systems"] = [{"name": s.name, **s.settings()} for s in self.systems]
        return d

    def system(self, name: str) -> System:
        for s in self.systems:
            if s.name == name:
                return s
        raise KeyError(name)


def _line_of(text: str, key: str, after: int = 0) -> int | None:
    """1-based line of the first ``key = ...`` (or ``[key]``) at or after line ``after``."""
    pat = re.compile(rf"^\s*(\"?{re.escape(key)}\"?\s*=|\[+\s*{re.escape(key)}\s*\]+)")
    lines = text.splitlines()
    for i in range(max(after - 1, 0), len(lines)):
        if pat.match(lines[i]):
            return i + 1
    for i, line in enumerate(lines):
        if pat.match(line):
            return i + 1
    return None


class _Checker:
    def __init__(self, path: str | None, text: str):
        self.path, self.text = path, text

    def fail(self, key: str, msg: str, after: int = 0):
        raise FormatError(self.path or "<config>", _line_of(self.text, key, after), msg)

    def fail_at(self, line: int | None, msg: str):
        raise FormatError(self.path or "<config>", line or None, msg)

    def key_line(self, key: str, start: int) -> int | None:
        """Line of ``key = ...`` inside the table that starts at line ``start`` (1-based)."""
        pat = re.compile(rf"^\s*\"?{re.escape(key)}\"?\s*=")
        lines = self.text.splitlines()
        for i in range(start, len(lines)):  # the lines after the table header
            if re.match(r"^\s*\[", lines[i]):
                break
            if pat.match(lines[i]):
                return i + 1
        return None

    def table(self, data: dict, name: str, allowed: dict[str, Any], after: int = 0) -> dict:
        if not isinstance(data, dict):
            self.fail(name, f"[{name}] must be a table")
        for k, v in data.items():
            if k not in allowed:
                self.fail(k, f"unknown key {k!r} in [{name}] (allowed: {', '.join(sorted(allowed))})", after)
            want = allowed[k]
            types = want if isinstance(want, tuple) else (want,)
            if isinstance(v, bool) and bool not in types or not isinstance(v, types):
                tn = " or ".join(t.__name__ for t in types)
                self.fail(k, f"{name}.{k} must be {with_article(tn)}, not {type(v).__name__} ({v!r})", after)
        return data


def _depth_and_cutoffs(ck: _Checker, audit: dict) -> tuple[int, list[int]]:
    """``audit.depth`` and ``audit.cutoffs`` (c = 100 added when the depth allows: results.json
    always reports gini_c100); ``audit.seed`` and ``audit.shard_size`` checked."""
    depth = audit.get("depth", 100)
    if depth < 1 or depth > 10000:
        ck.fail("depth", f"audit.depth must be between 1 and 10000, got {depth}")
    cutoffs = audit.get("cutoffs", [10, 100] if depth >= 100 else [depth])
    if not cutoffs or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= depth
                              for c in cutoffs):
        ck.fail("cutoffs", f"audit.cutoffs must be a non-empty list of integers in 1..depth ({depth}), got {cutoffs!r}")
    if 100 not in cutoffs and depth >= 100:
        cutoffs = [*cutoffs, 100]  # results.json always reports gini_c100
    for key in ("seed", "shard_size"):
        if audit.get(key, 1) < (0 if key == "seed" else 1):
            ck.fail(key, f"audit.{key} must be ≥ {0 if key == 'seed' else 1}")
    return depth, cutoffs


def _check_queries(ck: _Checker, qs: dict, quick: dict, text: str) -> str:
    """``[queries]`` and ``[quick]``; returns ``queries.source``."""
    qsrc = qs.get("source", "log")
    if qsrc not in ("log", "dataset", "generated") and not Path(qsrc).expanduser().is_file():
        ck.fail("source", f"queries.source must be \"log\", \"dataset\", \"generated\" or an existing "
                          f"query file, not {qsrc!r}", _line_of(text, "queries") or 0)
    if qs.get("sample", 1) < 1:  # 0 used to mean "every query" silently; leave the key out for that
        ck.fail("sample", f"queries.sample must be ≥ 1 (a seeded sample of that many queries), got "
                          f"{qs['sample']}; leave the key out to use every distinct query",
                _line_of(text, "queries") or 0)
    for key, table in (("queries", quick), ("eval_queries", quick)):
        if table.get(key, 0) < 0:
            ck.fail(key, f"quick.{key} must be ≥ 0", _line_of(text, "quick") or 0)
    return qsrc


def _parse_systems(ck: _Checker, raw: dict, text: str, depth: int, p: str | None) -> list[System]:
    """The ``[[systems]]`` tables (:func:`parse_systems`), at least one."""
    raw_systems = raw.get("systems")
    if not raw_systems:
        ck.fail("audit", "no systems: add at least one [[systems]] table (name, kind)")
    if not isinstance(raw_systems, list):
        ck.fail("systems", "systems must be an array of tables: [[systems]]")
    base = Path(p).resolve().parent if p else Path.cwd()
    return parse_systems(raw_systems, text, p, base, depth)


def parse_systems(tables: list, text: str, path: str | os.PathLike | None, base: Path,
                  depth: int | None, table: str = "systems") -> list[System]:
    """The one reader of systems: the audit's ``[[systems]]`` tables and the CLI's ``--system``
    file (``table="system"``: one ``[system]`` table) become :class:`~limelight.retrieval.spec.System`
    values, with the same keys (``name``, ``kind`` and the kind's parameters) and the same
    one-line errors naming the file (``path``, whose TOML ``text`` held the tables) and line.

    Kinds, unique names and parameter types are checked; a system of a kind that stacks over
    another (it declares a ``first`` parameter: ``reranked``) is resolved against the others
    (:func:`_check_stacked`; ``depth``: the audit's exposure depth its own must reach, ``None``:
    not checked); each kind's ``resolve`` checks the files a system names (relative to ``base``)
    and adds their content hash; dense and hybrid systems share one encoder."""
    ck = _Checker(None if path is None else str(path), text)
    header = r"^\s*\[\[\s*systems\s*\]\]" if table == "systems" else rf"^\s*\[\s*{table}\s*\]"
    starts = [i + 1 for i, ln in enumerate(text.splitlines()) if re.match(header, ln)]
    rows: list[tuple[str, SystemKind, dict[str, Any], int]] = []  # name, kind (looked up once), parameters, line
    for i, s in enumerate(tables):
        at = starts[i] if i < len(starts) else 0
        where = f"{table}[{i}]" if table == "systems" else table
        if not isinstance(s, dict):
            ck.fail_at(at, f"{where} must be a table")
        kind_name = s.get("kind")
        if kind_name not in kind_names():
            ck.fail("kind", f"{where}.kind must be one of {', '.join(kind_names())}, not {kind_name!r}", at)
        kind = get_kind(kind_name)  # the one lookup: the rows, their checks and the System carry it
        name = s.get("name", kind_name)
        if not isinstance(name, str) or not _NAME_RE.match(name):
            ck.fail("name", f"{where}.name {name!r} must be letters, digits, '.', '_' or '-'", at)
        if any(r[0] == name for r in rows):
            ck.fail("name", f"duplicate system name {name!r}", at)
        params = {k: v for k, v in s.items() if k not in ("name", "kind")}
        ck.table(params, _where(table, name), {k: v.type for k, v in kind.params.items()}, at)
        rows.append((name, kind, params, at))
    stacked: dict[str, tuple[str, str | None, str | None]] = {}  # name -> first, checkpoint, its sha256
    resolved: dict[str, dict[str, Any]] = {}
    for name, kind, params, at in rows:
        where = _where(table, name)
        if "first" in kind.params:  # stacked over another system of the config
            stacked[name] = _check_stacked(ck, where, kind, params, rows, depth, base, at)
        try:  # the kind's own checks of the files it names, and their content hash (run: sha256)
            resolved[name] = kind.resolved(params, base)
        except LimelightError as e:
            ck.fail_at(at, f"{where}: {e}")
    built: dict[str, System] = {}
    kinds = {name: kind for name, kind, _, _ in rows}

    def build(name: str) -> System:  # a stacked system after its first stage
        if name not in built:
            if name in stacked:
                first, checkpoint, sha = stacked[name]
                built[name] = System(kinds[name], resolved[name], build(first), checkpoint, sha, name)
            else:
                built[name] = System(kinds[name], resolved[name], name=name)
        return built[name]

    systems = [build(name) for name, _, _, _ in rows]
    enc = {(s.params.get("model"), s.params.get("max_seq_length")) for s in systems if s.uses_dense}
    if len(enc) > 1:
        ck.fail("model", "dense and hybrid systems of one audit must share model and max_seq_length "
                         f"(found {sorted(map(str, enc))})")
    return systems


def _where(table: str, name: str) -> str:
    """How messages name a system: ``systems.NAME`` (an audit's), ``system`` (a system file's)."""
    return f"{table}.{name}" if table == "systems" else table


def _read_text(p: Path) -> str:
    """A configuration file's text; a one-line error when it is not UTF-8."""
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(str(p), None, f"not UTF-8 text ({e.reason})") from None


def _toml(text: str, p: str | None) -> dict:
    """The tables of a configuration's TOML ``text``; invalid TOML is one line at its line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise FormatError(p or "<config>", int(m.group(1)) if m else None,
                          f"invalid TOML ({str(e).split(' (at')[0]})") from None


def load_system_file(path: str | os.PathLike) -> System:
    """The system of a ``--system FILE.toml`` (``limelight exposure compute``): one ``[system]``
    table with the keys of an audit's ``[[systems]]`` table (``kind``, its parameters, an
    optional ``name``), read by :func:`parse_systems` (relative paths against the file's
    folder)."""
    p = Path(path)
    if not p.is_file():
        raise LimelightError(f"{p}: no such system file")
    text = _read_text(p)
    raw = _toml(text, str(p))
    if set(raw) != {"system"} or not isinstance(raw["system"], dict):
        raise FormatError(str(p), None, "a system file holds one [system] table: kind = \"...\" and "
                                        "the kind's parameters (limelight systems lists them)")
    return parse_systems([raw["system"]], text, p, p.resolve().parent, None, table="system")[0]


def parse_config(text: str, path: str | os.PathLike | None = None) -> AuditConfig:
    """Parse and validate an audit configuration from TOML text."""
    p = None if path is None else str(path)
    raw = _toml(text, p)
    ck = _Checker(p, text)
    top = {*_TOP_KEYS, *STAGE_OPTIONS}  # the stages' tables, registered ones too
    switches = (*OPTIONAL_STAGES, *registered_stages())
    for k in raw:
        if k not in top:
            ck.fail(k, f"unknown table [{k}] (allowed: {', '.join(sorted(top))})")
    audit = ck.table(raw.get("audit", {}), "audit", _AUDIT_KEYS)
    coll = ck.table(raw.get("collection", {}), "collection", _COLLECTION_KEYS)
    qs = ck.table(raw.get("queries", {}), "queries", _QUERY_KEYS)
    quick = ck.table(raw.get("quick", {}), "quick", _QUICK_KEYS)
    ev = ck.table(raw.get("evaluation", {}), "evaluation", _EVAL_KEYS)
    stages = raw.get("stages", {})
    ck.table(stages, "stages", dict.fromkeys(switches, bool))
    if "source" not in coll:
        ck.fail("collection", "[collection] needs source = \"<shared collection, catalog, path or irds:id>\"")
    _check_collection(ck, coll, audit)
    depth, cutoffs = _depth_and_cutoffs(ck, audit)
    qsrc = _check_queries(ck, qs, quick, text)
    systems = _parse_systems(ck, raw, text, depth, p)
    measures = ev.get("measures", ["nDCG@10", "AP", "R@100"])
    if measures:
        from limelight.evaluation.measures import parse_measure

        for m in measures:
            try:
                parse_measure(m)
            except Exception as e:  # MeasureError
                ck.fail("measures", f"evaluation.measures: {e}")
    name = audit.get("name", Path(p).stem if p else "audit")
    options = {k: raw[k] for k in STAGE_OPTIONS if k in raw}
    base = Path(p).resolve().parent if p else Path.cwd()
    for table, opts in options.items():
        _check_stage_options(ck, STAGE_OPTIONS[table], opts, {"base": base, "depth": depth})
    return AuditConfig(
        name=name, collection=coll["source"], systems=systems, collection_name=coll.get("name"),
        query_source=qsrc,
        query_sample=qs.get("sample", 0), depth=depth, cutoffs=sorted(set(cutoffs)),
        group_field=audit.get("group_field"), seed=audit.get("seed", 0),
        shard_size=audit.get("shard_size", 8192),
        embedding_cache=audit.get("embedding_cache", ".cache/embeddings"),
        quick_queries=quick.get("queries", 2000), quick_eval_queries=quick.get("eval_queries", 0),
        measures=list(measures), preference=ev.get("preference", "LexiRecall"),
        stages={k: bool(stages.get(k, True)) for k in switches}, options=options,
        path=p, text=text)


def _check_collection(ck: _Checker, coll: dict, audit: dict) -> None:
    """``collection.source`` names a collection (nothing is loaded), ``collection.name`` is not
    empty, and ``audit.group_field`` is one of the collection's fields (read from its first
    records): an audit that cannot load them fails here, before ``--check`` passes (issue 42)."""
    from limelight.data.loaders import collection_source_problem, peek_fields

    at = _line_of(ck.text, "collection") or 0
    src = coll["source"]
    if (why := collection_source_problem(src)) is not None:
        ck.fail_at(ck.key_line("source", at) or at, f"collection.source {src!r}: {why}")
    if "name" in coll and not coll["name"].strip():
        ck.fail_at(ck.key_line("name", at) or at, "collection.name must not be empty")
    field_name = audit.get("group_field")
    fields = None if field_name is None else peek_fields(src)
    if fields is not None and field_name not in fields:
        ck.fail("group_field", f"audit.group_field {field_name!r} is not a field of {src} "
                               f"(fields: {', '.join(sorted(fields)) or 'none'})")


def _check_stage_options(ck: _Checker, schema: StageOptions, opts: object, context: dict) -> None:
    """One stage's ``[table]`` (:class:`~limelight.audit.stage.StageOptions`, declared by the
    stage's module): a table, no removed key (its advice told), known keys of the right types
    (an unknown key lists the allowed ones), then the stage's own check of the values, each
    error one line at the key's line; checked before any work."""
    table = schema.table
    at = _line_of(ck.text, table) or 0
    if not isinstance(opts, dict):
        ck.fail(table, f"[{table}] must be a table")
    for k in opts:
        if k in schema.removed:
            ck.fail_at(ck.key_line(k, at) or at, schema.removed[k])
    ck.table(opts, table, schema.types(), at)
    if schema.check is not None:
        schema.check(opts, lambda key, msg: ck.fail_at(ck.key_line(key, at) or at, msg), context)


def _check_stacked(ck: _Checker, where: str, kind: SystemKind, params: dict, rows: list, depth: int | None,
                   base: Path, at: int) -> tuple[str, str | None, str | None]:
    """Resolve and validate a system stacked over another (its kind declares ``first``: a
    reranked system): its ``first`` system, its checkpoint when the kind declares one (a file
    that ``NeuralRanker.load`` reads; relative paths against the config file's folder) and its
    depth when the kind declares one (≥ the audit's exposure depth). Returns the first system's
    name, the checkpoint file (resolved) and its content hash."""
    declared = kind.params
    first = params.get("first")
    if first is None:
        ck.fail_at(at, f"{where} (kind {kind.name}) needs first = \"<name of the first-stage "
                       "system it stacks on>\"")
    names = [r[0] for r in rows]
    if first not in names:
        ck.fail_at(ck.key_line("first", at), f"{where}.first {first!r} is not a system of this config "
                                             f"(systems: {', '.join(names)})")
    first_kind = rows[names.index(first)][1]
    if not first_kind.has(FIRST_STAGE):
        able = [r[0] for r in rows if r[1].has(FIRST_STAGE)]
        ck.fail_at(ck.key_line("first", at),
                   f"{where}.first {first!r} is {with_article(first_kind.name)} system, which cannot be a first "
                   f"stage (systems that can: {', '.join(able) or 'none'})")
    checkpoint = sha = None
    if "checkpoint" in declared:
        checkpoint, sha = _check_checkpoint(ck, where, kind, params, base, at)
    if "depth" in declared:
        _check_stacked_depth(ck, where, kind, params, depth, at)
    return first, checkpoint, sha


def _check_checkpoint(ck: _Checker, where: str, kind: SystemKind, params: dict, base: Path,
                      at: int) -> tuple[str, str]:
    """A stacked system's ``checkpoint``: a loadable TK/KNRM file (relative to ``base``);
    returns it resolved, with its content hash."""
    raw = params.get("checkpoint")
    if raw is None:
        ck.fail_at(at, f"{where} (kind {kind.name}) needs checkpoint = \"<TK or KNRM checkpoint>\" "
                       "(limelight rerank train ... --out FILE.pt)")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = base / path
    path = path.resolve()
    if not path.is_file():
        ck.fail_at(ck.key_line("checkpoint", at), f"{where}.checkpoint {raw!r}: no such file ({path})")
    from limelight.rerank.ranker import NeuralRanker

    try:
        NeuralRanker.load(path)
    except LimelightError as e:
        msg = str(e)
        msg = msg[len(str(path)) + 2:] if msg.startswith(f"{path}: ") else msg
        ck.fail_at(ck.key_line("checkpoint", at),
                   f"{where}.checkpoint {raw!r} is not a loadable TK/KNRM checkpoint ({msg})")
    return str(path), file_sha256(path)


def _check_stacked_depth(ck: _Checker, where: str, kind: SystemKind, params: dict, depth: int | None,
                         at: int) -> None:
    """A stacked system's ``depth`` (its first stage's candidates): ≥ 1 and ≥ the audit's."""
    rdepth = params.get("depth", kind.params["depth"].default)
    if rdepth < 1:
        ck.fail_at(ck.key_line("depth", at), f"{where}.depth must be ≥ 1, got {rdepth}")
    if depth is not None and depth > rdepth:
        line = ck.key_line("depth", at)
        if line is not None:
            ck.fail_at(line, f"{where}.depth ({rdepth}) must be ≥ audit.depth ({depth}): the exposure "
                             "depth cannot exceed the number of re-ranked candidates")
        ck.fail("depth", f"audit.depth ({depth}) exceeds {where}.depth ({rdepth}, the default): "
                         f"set {where}.depth ≥ {depth} or lower audit.depth")


def load_config(path: str | os.PathLike) -> AuditConfig:
    """Read and validate an audit configuration file."""
    p = Path(path)
    if not p.is_file():
        raise FormatError(str(p), None, "no such configuration file")
    return parse_config(_read_text(p), p)
