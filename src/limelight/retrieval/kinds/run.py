"""Kind ``run``: results the user already has, audited as a system.

The results are a TREC run (``qid Q0 docid rank score tag``), a Parquet file, or a SERP log in
JSONL or CSV/TSV (one row per result: the query's id or text, the document id, its rank or
score); one file or a folder of parts (files whose names start with ``.`` or ``_``, such as
``_SUCCESS``, are not parts), gzip transparent (``.gz``). An audit configuration::

    [[systems]]
    name = "production"
    kind = "run"
    path = "serp.jsonl.gz"          # relative to the configuration's folder
    match = "text"                  # the log's query text (normalised) is in the "query" field
    rank_column = "position"        # 1 first; a score column is used when there is one
    # unknown_docs = "drop"         # default "error": results of documents the collection lacks

Results are matched to the audit's queries by query id (``match = "id"``) or by normalised text
(``match = "text"``: lowercased, whitespace collapsed, as the query log is read:
:func:`limelight.data.queries.normalise_texts`; a TREC run has ids only, so it names a TSV of its
queries' texts in ``queries``). When several result lists normalise to one text, the first in the
file is kept and the others counted. A query of the audit without results retrieves nothing (it
exposes no document); :meth:`RunResults.coverage` counts them, and the audit's results and report
say how many.

Order within a query: score descending (ties by document id descending, as trec_eval), or with
ranks only, rank ascending (the stored score is then ``-rank``). A TREC run's rank column is
ignored, as trec_eval ignores it.

The settings of a ``run`` system hold the content hash of its files (``sha256``, filled in when
the configuration is read, :func:`resolve_run`), so that changed results rerun the audit's stages
that depend on them; a ``sha256`` written in the configuration pins the content (another content
is refused). Reading is columnar (pyarrow; a TREC run through
:func:`limelight.data.formats.read_trec_runs`, the reader ``limelight evaluate`` uses): no Python
work per line, except to name the line of an error.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from limelight._io import file_sha256, open_text
from limelight.data.formats import read_jsonl_lines, read_queries_tsv, read_text, read_trec_runs
from limelight.data.ids import IdMap
from limelight.data.queries import Queries, normalise_texts
from limelight.data.run import Run
from limelight.errors import FormatError, LimelightError
from limelight.retrieval.systems import DETERMINISTIC, Param, SystemKind, register_kind

FORMATS = ("auto", "trec", "parquet", "jsonl", "csv")
MATCHES = ("id", "text")
UNKNOWN_DOCS = ("error", "drop")
_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl",
             ".json": "jsonl", ".csv": "csv", ".tsv": "csv"}
#: the columns looked for when a ``*_column`` parameter is not set (the first one present)
_QUERY_ID_COLUMNS = ("query_id", "qid")
_QUERY_TEXT_COLUMNS = ("query", "query_text", "text")
_DOC_COLUMNS = ("doc_id", "docno", "docid")
_COLUMN_PARAMS = ("query_column", "doc_column", "score_column", "rank_column")
_SHOWN = 3  # ids named in an error

PARAMS = {
    "path": Param(str, None, "the results: a file, or a folder of parts (relative to the "
                             "configuration's folder; .gz read transparently)"),
    "format": Param(str, "auto", "auto (by suffix: .parquet, .jsonl/.ndjson, .csv/.tsv, anything "
                                 "else TREC), trec, parquet, jsonl or csv"),
    "match": Param(str, "id", "id: the results' query ids are the audit's; text: their normalised "
                              "query texts are (lowercase, whitespace collapsed)"),
    "query_column": Param(str, None, "JSONL/CSV/Parquet: the query id column (default query_id or "
                                     "qid) or with match = text the query text column (query, "
                                     "query_text or text)"),
    "doc_column": Param(str, None, "JSONL/CSV/Parquet: the document id column (default doc_id, "
                                   "docno or docid)"),
    "score_column": Param(str, None, "JSONL/CSV/Parquet: the score column, higher first (default "
                                     "score)"),
    "rank_column": Param(str, None, "JSONL/CSV/Parquet: the rank column, 1 first (default rank; "
                                    "used when there is no score column)"),
    "queries": Param(str, None, "a TREC run with match = text: a TSV (id<TAB>text) of the run's "
                                "queries"),
    "unknown_docs": Param(str, "error", "error: refuse results of documents the collection lacks "
                                        "(the first ones named); drop: leave them out, counted"),
    "sha256": Param(str, None, "the content hash of the file(s), filled in when the configuration "
                               "is read; written there, it pins the content"),
}


# ---- the files ------------------------------------------------------------------------------------
def _resolve_path(raw: str, base_dir: Path) -> Path:
    p = Path(raw).expanduser()
    return p if p.is_absolute() else base_dir / p


def result_parts(raw: str, base_dir: Path) -> list[Path]:
    """The files of the results ``raw`` (relative to ``base_dir``): the file, or the folder's
    files in name order (names starting with ``.`` or ``_`` left out, as Spark and Hadoop
    write them beside their parts)."""
    p = _resolve_path(raw, base_dir)
    if p.is_file():
        return [p]
    if p.is_dir():
        parts = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith((".", "_")))
        if not parts:
            raise LimelightError(f"path {raw!r}: the folder {p} holds no result files")
        return parts
    raise LimelightError(f"path {raw!r}: no such file or folder ({p})")


def _suffix_format(path: Path) -> str:
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    return _SUFFIXES.get(Path(name).suffix, "trec")


def result_format(parts: list[Path], fmt: str) -> str:
    """The format of the parts: ``fmt``, or with ``auto`` the one their suffixes say (one for
    all of them)."""
    if fmt not in FORMATS:
        raise LimelightError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt != "auto":
        return fmt
    found = {_suffix_format(p) for p in parts}
    if len(found) > 1:
        raise LimelightError(f"the parts of {parts[0].parent} have several formats ({', '.join(sorted(found))}): "
                             "keep one format per folder, or set format")
    return found.pop()


_HASHES: dict[tuple[str, int, int], str] = {}  # (file, size, mtime_ns) -> sha256: hashed once per process


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        _HASHES[key] = file_sha256(path)
    return _HASHES[key]


def content_sha256(parts: list[Path], queries: Path | None = None) -> str:
    """The content hash of the results: a single file's SHA-256 (what ``sha256sum`` prints), else
    the SHA-256 of each part's name and hash (and of the queries file's)."""
    if len(parts) == 1 and queries is None:
        return _sha256(parts[0])
    h = hashlib.sha256()
    for p in parts:
        h.update(f"{p.name}\t{_sha256(p)}\n".encode())
    if queries is not None:
        h.update(f"queries\t{_sha256(queries)}\n".encode())
    return h.hexdigest()


def resolve_run(params: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """The kind's ``resolve``: every parameter checked against the files (one line per mistake)
    and the content hash added as ``sha256`` (a ``sha256`` given must be the content's)."""
    raw = params.get("path")
    if not raw:
        raise LimelightError('a run system needs path = "<results file or folder>"')
    parts = result_parts(raw, base_dir)
    fmt = result_format(parts, params.get("format") or "auto")
    for key, allowed in (("match", MATCHES), ("unknown_docs", UNKNOWN_DOCS)):
        if params.get(key) is not None and params[key] not in allowed:
            raise LimelightError(f"{key} must be one of {', '.join(allowed)}, not {params[key]!r}")
    match = params.get("match") or "id"
    if fmt == "trec" and (given := [k for k in _COLUMN_PARAMS if params.get(k) is not None]):
        raise LimelightError(f"{given[0]} names a column of JSONL, CSV or Parquet results; {raw} is "
                             "a TREC run (qid Q0 docid rank score tag)")
    qraw, qpath = params.get("queries"), None
    if qraw is not None:
        if fmt != "trec" or match != "text":
            raise LimelightError('queries (the texts of a TREC run\'s queries) goes with a TREC run '
                                 'and match = "text"')
        qpath = _resolve_path(qraw, base_dir)
        if not qpath.is_file():
            raise LimelightError(f"queries {qraw!r}: no such file ({qpath})")
    elif fmt == "trec" and match == "text":
        raise LimelightError('match = "text" with a TREC run needs queries = "<TSV id<TAB>text of '
                             'its queries>": a TREC run holds query ids only')
    sha = content_sha256(parts, qpath)
    pinned = params.get("sha256")
    if pinned is not None and pinned != sha:
        raise LimelightError(f"sha256: the content of {raw} is not the one pinned (sha256 "
                             f"{sha[:16]}…, configured {pinned[:16]}…); remove sha256 to audit "
                             "the new content")
    return {**params, "sha256": sha}


# ---- reading ------------------------------------------------------------------------------------
class _Columns:
    """One part read: query keys (a string Arrow array, one per row), document ids (likewise)
    and the ordering value (score, or ``-rank``) as float64."""

    def __init__(self, q, d, value: np.ndarray):
        self.q, self.d, self.value = q, d, value


def _table_names(path: Path, fmt: str) -> list[str]:
    """The column names of a JSONL (first record), CSV (header) or Parquet (schema) file."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except Exception as e:  # pyarrow raises several types for a file that is not Parquet
            raise FormatError(path, None, f"not a readable Parquet file ({e})") from None
    text = _head(path)
    if fmt == "csv":
        first = text.split("\n", 1)[0]
        return next(csv.reader([first], delimiter=_delimiter(path))) if first.strip() else []
    for i, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise FormatError(path, i, f"invalid JSON: {e.msg} column {e.colno}") from None
            if not isinstance(obj, dict):
                raise FormatError(path, i, "expected a JSON object")
            return list(obj)
    return []


def _head(path: Path, size: int = 1 << 20) -> str:
    """The first ``size`` bytes of a (possibly gzipped) text file, decoded leniently."""
    try:
        with open_text(path, "rb") as f:
            return f.read(size).decode("utf-8", errors="replace")
    except (OSError, EOFError) as e:
        raise FormatError(path, None, f"cannot read file ({e})") from None


def _delimiter(path: Path) -> str:
    """A tab for ``.tsv`` files, else a comma."""
    return "\t" if ".tsv" in path.name.lower() else ","


def _pick(names: list[str], given: str | None, candidates: tuple[str, ...], what: str,
          param: str, path: Path) -> str:
    if given is not None:
        if given not in names:
            raise FormatError(path, None, f"no column {given!r} ({param}); columns: {', '.join(names) or 'none'}")
        return given
    for c in candidates:
        if c in names:
            return c
    raise FormatError(path, None, f"no {what} column ({' or '.join(candidates)}; set {param}); "
                                  f"columns: {', '.join(names) or 'none'}")


def _choose(names: list[str], params: dict[str, Any], path: Path) -> tuple[str, str, str, bool]:
    """(query column, document column, value column, whether the value is a rank)."""
    text = (params.get("match") or "id") == "text"
    qc = _pick(names, params.get("query_column"), _QUERY_TEXT_COLUMNS if text else _QUERY_ID_COLUMNS,
               "query text" if text else "query id", "query_column", path)
    dc = _pick(names, params.get("doc_column"), _DOC_COLUMNS, "document id", "doc_column", path)
    if params.get("score_column") is not None or (params.get("rank_column") is None and "score" in names):
        return qc, dc, _pick(names, params.get("score_column"), ("score",), "score", "score_column", path), False
    return qc, dc, _pick(names, params.get("rank_column"), ("rank",), "score or rank", "rank_column", path), True


def _read_arrow(path: Path, fmt: str, cols: tuple[str, str, str]):
    """The three columns of a part as an Arrow table, by pyarrow (ids of any scalar JSON type)."""
    import pyarrow as pa

    qc, dc, vc = cols
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=list(cols))
    if fmt == "csv":
        import pyarrow.csv as pv

        return pv.read_csv(
            path, read_options=pv.ReadOptions(block_size=1 << 24),
            parse_options=pv.ParseOptions(delimiter=_delimiter(path), newlines_in_values=False),
            convert_options=pv.ConvertOptions(
                include_columns=list(cols), null_values=[""], strings_can_be_null=True,
                column_types={qc: pa.string(), dc: pa.string(), vc: pa.float64()}))
    import pyarrow.json as pj

    first = json.loads(next(ln for ln in _head(path).split("\n") if ln.strip()))

    def kind(v: Any):
        return pa.int64() if isinstance(v, int) and not isinstance(v, bool) else pa.string()

    schema = pa.schema([(qc, kind(first.get(qc))), (dc, kind(first.get(dc))), (vc, pa.float64())])
    return pj.read_json(path, read_options=pj.ReadOptions(block_size=1 << 24),
                        parse_options=pj.ParseOptions(explicit_schema=schema,
                                                      unexpected_field_behavior="ignore"))


def _fast_part(path: Path, fmt: str, cols: tuple[str, str, str], rank: bool) -> _Columns | None:
    """A part by pyarrow, checked (ids present and non-empty, values finite); ``None`` when the
    precise pass must read it (to name the line of an error, or to read what pyarrow cannot)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        t = _read_arrow(path, fmt, cols)
    except Exception as e:  # pyarrow raises several types; the precise pass names the line
        if fmt == "parquet":
            raise FormatError(path, None, f"not a readable Parquet file ({e})") from None
        return None
    out = []
    for c in cols[:2]:
        col = t.column(c)
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            col = pc.cast(col, pa.string())
        col = col.combine_chunks()
        if col.null_count or (len(col) and pc.min(pc.utf8_length(col)).as_py() == 0):
            return None
        out.append(col)
    v = t.column(cols[2])
    if not (pa.types.is_integer(v.type) or pa.types.is_floating(v.type)) or v.null_count:
        return None
    value = v.combine_chunks().to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.isfinite(value).all():
        return None
    return _Columns(out[0], out[1], -value if rank else value)


def _number(path: Path, line: int | None, col: str, v: Any) -> float:
    try:
        x = float(v) if not isinstance(v, bool) else math.nan
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x):
        raise FormatError(path, line, f"{col} must be a finite number, got {v!r}")
    return x


def _ident(path: Path, line: int | None, col: str, v: Any) -> str:
    if v is None or isinstance(v, dict | list | bool) or str(v).strip() == "":
        raise FormatError(path, line, f"no {col} (got {v!r})")
    return str(v)


def _precise_part(path: Path, fmt: str, cols: tuple[str, str, str], rank: bool) -> _Columns:
    """A JSONL or CSV part read line by line: the exact error naming file and line, or (a file
    pyarrow could not read, e.g. ids that are numbers on some lines and strings on others) its
    columns."""
    import pyarrow as pa

    qc, dc, vc = cols
    rows: list[tuple[str, str, float]] = []
    if fmt == "jsonl":
        recs, lines = read_jsonl_lines(path)
        for rec, ln in zip(recs, lines, strict=True):
            rows.append((_ident(path, ln, qc, rec.get(qc)), _ident(path, ln, dc, rec.get(dc)),
                         _number(path, ln, vc, rec.get(vc))))
    else:
        reader = csv.reader(io.StringIO(read_text(path)), delimiter=_delimiter(path))
        try:
            header = next(reader)
            where = [header.index(c) for c in cols]
            for row in reader:
                if not row:
                    continue
                ln = reader.line_num
                if len(row) != len(header):
                    raise FormatError(path, ln, f"expected {len(header)} columns ({', '.join(header)}), "
                                                f"found {len(row)}")
                rows.append((_ident(path, ln, qc, row[where[0]]), _ident(path, ln, dc, row[where[1]]),
                             _number(path, ln, vc, row[where[2]])))
        except csv.Error as e:
            raise FormatError(path, reader.line_num, f"not CSV ({e})") from None
    q, d, v = zip(*rows, strict=True) if rows else ((), (), ())
    value = np.asarray(v, dtype=np.float64)
    return _Columns(pa.array(q, pa.string()), pa.array(d, pa.string()), -value if rank else value)


def _read_table_parts(parts: list[Path], fmt: str, params: dict[str, Any]):
    """(query keys: distinct strings, q codes, document dictionary, d codes, values) of JSONL,
    CSV or Parquet parts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    got = []
    for p in parts:
        names = _table_names(p, fmt)
        qc, dc, vc, rank = _choose(names, params, p)
        part = _fast_part(p, fmt, (qc, dc, vc), rank)
        if part is None and fmt == "parquet":
            raise FormatError(p, None, f"column {qc!r} or {dc!r} has missing or empty ids, or "
                                       f"{vc!r} missing or non-finite numbers")
        got.append(part if part is not None else _precise_part(p, fmt, (qc, dc, vc), rank))
    q = pc.dictionary_encode(pa.concat_arrays([g.q for g in got]))
    d = pc.dictionary_encode(pa.concat_arrays([g.d for g in got]))
    value = np.concatenate([g.value for g in got])
    return (q.dictionary, q.indices.to_numpy().astype(np.int32), d.dictionary,
            d.indices.to_numpy().astype(np.int32), value)


def _read_trec_parts(parts: list[Path], doc_ids: IdMap):
    """(query ids: distinct strings, q codes, document map, d codes, scores) of TREC parts,
    read by ``limelight evaluate``'s reader onto the collection's map (its ids first)."""
    runs = read_trec_runs(parts, doc_map=doc_ids)
    if len(runs) == 1:
        r = runs[0]
        return r.qids.to_arrow(), r.q, r.docids, r.d, r.score
    import pyarrow as pa
    import pyarrow.compute as pc

    q = pc.dictionary_encode(pa.concat_arrays([r.qids.to_arrow() for r in runs]))
    codes = q.indices.to_numpy().astype(np.int32)
    starts = np.cumsum([0] + [len(r.qids) for r in runs])
    qc = np.concatenate([codes[s:][r.q] for s, r in zip(starts, runs, strict=False)])
    return (q.dictionary, qc, runs[0].docids, np.concatenate([r.d for r in runs]),
            np.concatenate([r.score for r in runs]))


def _doc_codes(ddict, d: np.ndarray, doc_ids: IdMap) -> tuple[np.ndarray, np.ndarray | None]:
    """Codes of the rows' documents in ``doc_ids`` (-1: unknown) and the distinct unknown codes
    of ``ddict`` in the order they first occur in the files (``None``: none). ``ddict`` is an
    ``IdMap`` whose first ids are ``doc_ids``' and the others the files' in first-seen order (the
    TREC reader's), or an Arrow dictionary of rows in file order."""
    n = len(doc_ids)
    if isinstance(ddict, IdMap):
        if len(ddict) == n:
            return d, None
        return np.where(d < n, d, -1).astype(np.int32), np.arange(n, len(ddict))
    else:
        import pyarrow.compute as pc

        rec = pc.index_in(ddict, value_set=doc_ids.to_arrow()).fill_null(-1)
        codes = rec.to_numpy().astype(np.int32)[d]
    bad = np.flatnonzero(codes < 0)
    if not len(bad):
        return codes, None
    _, first = np.unique(d[bad], return_index=True)
    return codes, d[bad][np.sort(first)]


def _name_unknown(ddict, codes: np.ndarray) -> list[str]:
    if isinstance(ddict, IdMap):
        return [ddict[int(c)] for c in codes[:_SHOWN]]
    return [ddict[int(c)].as_py() for c in codes[:_SHOWN]]


def _keys(qdict, match: str, qfile: Path | None, where: str) -> np.ndarray:
    """The matching key of each result query: its id, or its normalised text (from the query
    column, or for a TREC run from the ``queries`` file)."""
    raw = np.asarray(qdict.to_pylist(), dtype=object)
    if match == "id":
        return raw
    if qfile is not None:
        qs = read_queries_tsv(qfile)
        pos = qs.ids.encode(raw.tolist(), missing=-1)
        if (pos < 0).any():
            raise LimelightError(f"{where}: query {raw[int(np.flatnonzero(pos < 0)[0])]!r} of the run "
                                 f"is not in {qfile}")
        raw = qs.texts[pos]
    return normalise_texts(raw.tolist())


def _duplicate(q: np.ndarray, d: np.ndarray, n_docs: int) -> int | None:
    """A row whose (query, document) pair occurs earlier, or ``None``."""
    key = q.astype(np.int64) * max(n_docs, 1) + d
    order = np.argsort(key, kind="stable")
    same = np.flatnonzero(key[order][1:] == key[order][:-1])
    return None if not len(same) else int(order[same[0] + 1])


def read_results(params: dict[str, Any], base_dir: Path, doc_ids: IdMap, *,
                 collection_name: str = "the collection", name: str = "run") -> RunResults:
    """The results of a ``run`` system (its resolved ``params``) over the collection's
    ``doc_ids``: matched keys, the collection's document codes, rows in ranking order."""
    raw = params["path"]
    parts = result_parts(raw, base_dir)
    fmt = result_format(parts, params.get("format") or "auto")
    match = params.get("match") or "id"
    qfile = _resolve_path(params["queries"], base_dir) if params.get("queries") else None
    if fmt == "trec":
        qdict, q, ddict, d, value = _read_trec_parts(parts, doc_ids)
    else:
        qdict, q, ddict, d, value = _read_table_parts(parts, fmt, params)
    where = str(parts[0] if len(parts) == 1 else parts[0].parent)
    keys = _keys(qdict, match, qfile, where)
    # result lists whose keys coincide (texts that normalise alike): the first is kept
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    keep = first[inverse.reshape(-1)] == np.arange(len(keys))
    new = np.where(keep, np.cumsum(keep) - 1, -1).astype(np.int32)
    d, unknown = _doc_codes(ddict, d, doc_ids)
    info = {"result_lists": len(keys), "duplicate_result_lists": int((~keep).sum()),
            "results": len(q), "unknown_doc_results": 0, "unknown_docs": 0}
    if unknown is not None:
        n_rows = int((d < 0).sum())
        if (params.get("unknown_docs") or "error") == "error":
            shown = ", ".join(repr(x) for x in _name_unknown(ddict, unknown))
            raise LimelightError(f"{where}: {n_rows:,} results name {len(unknown):,} document ids "
                                 f"that {collection_name} lacks (first: {shown}); unknown_docs = "
                                 "\"drop\" leaves them out and counts them")
        info.update(unknown_doc_results=n_rows, unknown_docs=len(unknown))
    qn = new[q]
    rows = (qn >= 0) & (d >= 0)
    if not rows.all():
        qn, d, value = qn[rows], d[rows], value[rows]
    if not (fmt == "trec" and len(parts) == 1):  # the TREC reader refuses duplicates in a file
        dup = _duplicate(qn, d, len(doc_ids))
        if dup is not None:
            raise LimelightError(f"{where}: query {keys[keep][qn[dup]]!r} lists document "
                                 f"{doc_ids[int(d[dup])]!r} twice")
    run = Run.from_codes(IdMap(keys[keep], kind="query"), doc_ids, qn, d, value, name)
    return RunResults(run, match, info, where)


# ---- the system -----------------------------------------------------------------------------------
class RunResults:
    """The retriever of a ``run`` system: ``results(queries, k)`` (and ``retrieve``) is the
    ``Run`` of the results of ``queries`` (top ``k``), on the collection's ``doc_ids``; a query
    without results retrieves nothing. :meth:`coverage` counts the queries with and without."""

    def __init__(self, run: Run, match: str, info: dict[str, int], where: str,
                 queries: Queries | None = None):
        self.run, self.match, self.info, self.where = run, match, info, where
        self.doc_ids = run.docids
        self.name = run.name
        self.queries = queries

    def __repr__(self) -> str:
        return f"RunResults({self.where!r}, lists={self.run.n_queries}, results={len(self.run)})"

    def _codes(self, queries: Queries) -> np.ndarray:
        """Each query's result list (-1: none), by id or normalised text (one lookup in C)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = queries.ids.strings if self.match == "id" else normalise_texts(queries.texts.tolist())
        pos = pc.index_in(pa.array(keys.tolist(), pa.string()), value_set=self.run.qids.to_arrow())
        return pos.fill_null(-1).to_numpy().astype(np.int64)

    def __call__(self, queries: Queries, k: int | None = None) -> Run:
        pos = self._codes(queries)
        has = np.flatnonzero(pos >= 0)
        off = self.run.offsets
        starts = off[pos[has]]
        lens = off[pos[has] + 1] - starts
        if k is not None:
            lens = np.minimum(lens, k)
        idx = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - (np.cumsum(lens) - lens), lens)
        return Run.from_codes(queries.ids, self.doc_ids, np.repeat(has, lens), self.run.d[idx],
                              self.run.score[idx], self.name, sort=False)

    def retrieve(self, queries: Queries, k: int = 1000) -> Run:
        """The top ``k`` results of ``queries`` (those the file has)."""
        return self(queries, k)

    def coverage(self, queries: Queries | None = None) -> dict[str, int]:
        """How many of ``queries`` (default: the audit's) have results and how many do not
        (they expose nothing), and what the files hold beside: result lists no query matches,
        lists that repeat an earlier one's key, results of unknown documents left out."""
        queries = queries if queries is not None else self.queries
        if queries is None:
            raise LimelightError("coverage: which queries? (none were given when the system opened)")
        pos = self._codes(queries)
        depth = np.diff(self.run.offsets)
        has = (pos >= 0) & (depth[np.maximum(pos, 0)] > 0) if len(depth) else pos >= 0
        matched = len(np.unique(pos[pos >= 0]))
        return {"queries": len(queries), "with_results": int(has.sum()),
                "without_results": int(len(queries) - has.sum()),
                "unmatched_result_lists": self.run.n_queries - matched, **self.info}

    def check_matches(self, queries: Queries) -> None:
        """A one-line error when no result list matches one of ``queries``."""
        if len(queries) and not (self._codes(queries) >= 0).any():
            ours = ", ".join(repr(x) for x in self.run.qids.strings[:_SHOWN].tolist())
            first = queries.take(np.arange(min(len(queries), _SHOWN)))
            keys = first.ids.strings if self.match == "id" else normalise_texts(first.texts.tolist())
            theirs = ", ".join(repr(x) for x in keys.tolist())
            hint = ('; match = "text" matches by query text' if self.match == "id" else "")
            raise LimelightError(f"{self.where}: none of its {self.run.n_queries:,} queries matches "
                                 f"one of the {len(queries):,} queries by {self.match} (results: "
                                 f"{ours}; queries: {theirs}){hint}")


def open_run(spec: Any, index_dir: Any = None, *, name: str | None = None, collection: Any = None,
             queries: Queries | None = None, base_dir: str | Path | None = None,
             **_: Any) -> RunResults:
    """The results of ``spec`` (paths relative to ``base_dir``) over ``collection``'s documents;
    with ``queries`` (the audit's), checked to match some of them and counted for
    :meth:`RunResults.coverage`. No index is used."""
    if collection is None:
        raise LimelightError("a run system needs the collection its results come from (its "
                             "document ids): --collection, or the audit's [collection]")
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    params = resolve_run(dict(spec.params), base)
    res = read_results(params, base, collection.ids, collection_name=getattr(collection, "name", "the collection"),
                       name=name or "run")
    if queries is not None:
        res.check_matches(queries)
        res.queries = queries
    return res


KIND = register_kind(SystemKind(
    "run",
    PARAMS,
    frozenset({DETERMINISTIC}),
    open_run,
    "results you already have: a TREC run, Parquet, or a JSONL/CSV SERP log (file or folder of parts)",
    labels=("path", "queries"),
    needs_index=False,
    resolve=resolve_run,
))
