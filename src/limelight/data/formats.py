"""Readers and writers: TREC runs and qrels, JSONL documents, TSV queries, Parquet.

TREC files are read with a vectorized fast path; when it finds anything wrong, a line-by-line
pass names the exact file and line. Every writer writes a temporary file, then renames it.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from limelight._io import atomic_path, open_text
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import FormatError, LimelightError

PathLike = str | os.PathLike


def _read_text(path: PathLike) -> str:
    try:
        with open_text(path) as f:
            return f.read()
    except FileNotFoundError:
        raise LimelightError(f"{path}: no such file") from None
    except (UnicodeDecodeError, OSError, EOFError) as e:
        raise FormatError(path, None, f"cannot read file ({e})") from None


def _split_columns(path: PathLike, text: str, ncols: int, what: str,
                   extra_ok: bool = False) -> list[np.ndarray]:
    """Whitespace-separated columns of a text file; precise errors on the first bad line.

    With ``extra_ok``, words after the last column are ignored (trec_eval does so for runs).
    """
    lines = text.splitlines()
    rows = [ln.split() for ln in lines]
    cols: list[list[str]] = [[] for _ in range(ncols)]
    lineno: list[int] = []
    for i, parts in enumerate(rows, start=1):
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) > ncols and extra_ok:
            parts = parts[:ncols]
        elif len(parts) != ncols:
            raise FormatError(path, i, f"expected {ncols} columns ({what}), found {len(parts)}: "
                              f"{lines[i - 1][:80]!r}")
        for c, v in zip(cols, parts, strict=True):
            c.append(v)
        lineno.append(i)
    out = [np.asarray(c, dtype=object) for c in cols]
    out.append(np.asarray(lineno, dtype=np.int64))
    return out


def _to_float(path: PathLike, values: np.ndarray, lineno: np.ndarray, what: str) -> np.ndarray:
    try:
        arr = values.astype(np.float64)
    except ValueError:
        for v, ln in zip(values.tolist(), lineno.tolist(), strict=True):
            try:
                float(v)
            except ValueError:
                raise FormatError(path, ln, f"{what} {v!r} is not a number") from None
        raise
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FormatError(path, int(lineno[i]), f"{what} {values[i]!r} is not a finite number")
    return arr


def _to_int(path: PathLike, values: np.ndarray, lineno: np.ndarray, what: str) -> np.ndarray:
    f = _to_float(path, values, lineno, what)
    frac = f != np.round(f)
    if frac.any():
        i = int(np.flatnonzero(frac)[0])
        raise FormatError(path, int(lineno[i]), f"{what} {values[i]!r} is not an integer")
    return f.astype(np.int32)


def _check_duplicates(path, q, d, lineno, qmap: IdMap, dmap: IdMap, what: str) -> None:
    order = np.lexsort((lineno, d, q))
    qs, ds = q[order], d[order]
    dup = (qs[1:] == qs[:-1]) & (ds[1:] == ds[:-1])
    if dup.any():
        j = int(np.flatnonzero(dup)[0]) + 1
        raise FormatError(path, int(lineno[order[j]]),
                          f"duplicate {what} for query {qmap[qs[j]]!r}, document {dmap[ds[j]]!r}")


def read_trec_run(path: PathLike, name: str | None = None, doc_map: IdMap | None = None) -> Run:
    """Read a TREC run (``qid Q0 docid rank score tag``, ``.gz`` transparent).

    The rank column is ignored: ranks are recomputed from scores, ties broken by docid
    descending (trec_eval). Duplicate (qid, docid) lines and non-finite scores are errors.
    """
    text = _read_text(path)
    qid, _q0, docid, _rank, score, _tag, lineno = _split_columns(path, text, 6, "qid Q0 docid rank score tag", extra_ok=True)
    if len(qid) == 0:
        raise FormatError(path, None, "empty run: no result lines")
    s = _to_float(path, score, lineno, "score")
    qmap, q = IdMap.from_unique(qid, kind="query")
    if doc_map is None:
        doc_map, d = IdMap.from_unique(docid, kind="document")
    else:
        d = doc_map.encode(docid, missing=-1)
        if (d < 0).any():
            i = int(np.flatnonzero(d < 0)[0])
            raise FormatError(path, int(lineno[i]), f"unknown document id {docid[i]!r}")
    _check_duplicates(path, q, d, lineno, qmap, doc_map, "result")
    run = Run.from_codes(qmap, doc_map, q, d, s, name or Path(path).name)
    run.meta["tag"] = str(_tag[0])
    return run


def read_trec_run_ranks(path: PathLike) -> pd.DataFrame:
    """The rank column of a TREC run as written (for tools that trust file ranks, such as
    Azzopardi's retrievability scripts): ``query_id, doc_id, rank`` (1-based)."""
    text = _read_text(path)
    qid, _q0, docid, rank, _score, _tag, lineno = _split_columns(path, text, 6, "qid Q0 docid rank score tag", extra_ok=True)
    r = _to_int(path, rank, lineno, "rank")
    return pd.DataFrame({"query_id": qid, "doc_id": docid, "rank": r})


def write_trec_run(run: Run, path: PathLike, tag: str | None = None) -> None:
    """Write ``qid Q0 docid rank score tag`` lines (1-based ranks), atomically."""
    tag = tag or run.meta.get("tag") or run.name.replace(" ", "_") or "limelight"
    df = pd.DataFrame({
        "q": run.qids.decode(run.q), "Q0": "Q0", "d": run.docids.decode(run.d),
        "rank": run.ranks(), "score": run.score, "tag": tag,
    })
    with atomic_path(path) as tmp:
        compression = "gzip" if str(path).endswith(".gz") else None
        df.to_csv(tmp, sep=" ", header=False, index=False, float_format="%.6f",
                  compression=compression)


def read_trec_qrels(path: PathLike, name: str | None = None, doc_map: IdMap | None = None,
                    strict_docs: bool = False) -> Qrels:
    """Read TREC qrels (``qid iter docid rel``). With ``doc_map`` and ``strict_docs``, a
    judged document missing from the collection is an error naming the line."""
    text = _read_text(path)
    qid, _it, docid, rel, lineno = _split_columns(path, text, 4, "qid iter docid rel")
    if len(qid) == 0:
        raise FormatError(path, None, "empty qrels: no judgment lines")
    r = _to_int(path, rel, lineno, "relevance grade")
    qmap, q = IdMap.from_unique(qid, kind="query")
    if doc_map is not None:
        d = doc_map.encode(docid, missing=-1)
        unknown = d < 0
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            if strict_docs:
                raise FormatError(path, int(lineno[i]), f"unknown document id {docid[i]!r}")
            doc_map = doc_map.union(IdMap(sorted(set(docid[unknown].tolist())), "document"))
            d = doc_map.encode(docid)
    else:
        doc_map, d = IdMap.from_unique(docid, kind="document")
    _check_duplicates(path, q, d, lineno, qmap, doc_map, "judgment")
    return Qrels.from_codes(qmap, doc_map, q, d, r, name or Path(path).name)


def write_trec_qrels(qrels: Qrels, path: PathLike) -> None:
    df = pd.DataFrame({"q": qrels.qids.decode(qrels.q), "it": 0, "d": qrels.docids.decode(qrels.d),
                       "rel": qrels.rel})
    with atomic_path(path) as tmp:
        df.to_csv(tmp, sep=" ", header=False, index=False)


def read_queries_tsv(path: PathLike, name: str | None = None, header: bool | None = None) -> Queries:
    """Read ``id<TAB>text`` lines (or the query log's ``source<TAB>qid<TAB>query`` with header).

    Empty query texts and duplicate ids are errors naming the line.
    """
    text = _read_text(path)
    lines = text.splitlines()
    if not lines:
        raise FormatError(path, None, "empty query file")
    first = lines[0].split("\t")
    if header is None:
        header = [c.strip().lower() for c in first] in (["source", "qid", "query"], ["id", "text"],
                                                        ["qid", "query"], ["query_id", "text"])
    cols = [c.strip().lower() for c in first] if header else None
    start = 1 if header else 0
    ids, texts, extra = [], [], []
    seen: dict[str, int] = {}
    for i in range(start, len(lines)):
        ln = lines[i]
        if not ln.strip():
            continue
        parts = ln.split("\t")
        if cols == ["source", "qid", "query"]:
            if len(parts) != 3:
                raise FormatError(path, i + 1, f"expected source<TAB>qid<TAB>query, found {len(parts)} columns")
            src, qid, qtext = parts
            qid = f"{src}:{qid}"
            extra.append(src)
        else:
            if len(parts) < 2:
                raise FormatError(path, i + 1, "expected id<TAB>text")
            qid, qtext = parts[0], "\t".join(parts[1:])
        qid = qid.strip()
        if not qtext.strip():
            raise FormatError(path, i + 1, f"query {qid!r} is empty")
        if qid in seen:
            raise FormatError(path, i + 1, f"duplicate query id {qid!r} (first on line {seen[qid]})")
        seen[qid] = i + 1
        ids.append(qid)
        texts.append(qtext.strip())
    fields = {"source": np.asarray(extra, dtype=object)} if extra else {}
    return Queries(IdMap(ids, kind="query"), np.asarray(texts, dtype=object), fields=fields,
                   name=name or Path(path).name)


def write_queries_tsv(queries: Queries, path: PathLike) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for qid, t in zip(queries.ids, queries.texts.tolist(), strict=True):
            f.write(f"{qid}\t{' '.join(t.split())}\n")


def read_jsonl(path: PathLike) -> list[dict]:
    """JSON objects, one per line (``.gz`` transparent); errors name the line."""
    out = []
    try:
        f = open_text(path)
    except FileNotFoundError:
        raise LimelightError(f"{path}: no such file") from None
    with f:
        for i, ln in enumerate(f, start=1):
            if not ln.strip():
                continue
            try:
                obj = json.loads(ln)
            except json.JSONDecodeError as e:
                raise FormatError(path, i, f"invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise FormatError(path, i, "expected a JSON object")
            out.append(obj)
    return out


def read_jsonl_docs(path: PathLike, text_fields=("title", "text"), id_field: str = "id",
                    name: str | None = None, duplicates: str = "error") -> Collection:
    """Documents from JSONL (``id`` plus text fields); a missing id names the line.

    A repeated id is an error naming the line, or with ``duplicates="first"`` the later
    copies are dropped with a warning (the shared CACM has one repeated id).
    """
    recs = read_jsonl(path)
    seen: set[str] = set()
    keep = []
    for i, r in enumerate(recs, start=1):
        if id_field not in r:
            raise FormatError(path, i, f"document without {id_field!r}")
        did = str(r[id_field])
        if did in seen:
            if duplicates != "first":
                raise FormatError(path, i, f"duplicate document id {did!r}")
            warnings.warn(f"{path}:{i}: duplicate document id {did!r} dropped (first kept)",
                          stacklevel=2)
            continue
        seen.add(did)
        keep.append(r)
    recs = keep
    if not recs:
        raise FormatError(path, None, "no documents")
    return Collection.from_records(recs, text_fields, id_field, name or Path(path).parent.name)


# ---- Parquet ---------------------------------------------------------------------------------
def write_run_parquet(run: Run, path: PathLike) -> None:
    """Columnar run: ``query_id`` and ``doc_id`` as dictionary-encoded strings, ``score``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    qd = pa.DictionaryArray.from_arrays(pa.array(run.q), pa.array(run.qids.strings.tolist(), pa.string()))
    dd = pa.DictionaryArray.from_arrays(pa.array(run.d), pa.array(run.docids.strings.tolist(), pa.string()))
    table = pa.table({"query_id": qd, "doc_id": dd, "score": pa.array(run.score)},
                     metadata={"limelight": json.dumps({"kind": "run", "name": run.name})})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_run_parquet(path: PathLike, name: str | None = None) -> Run:
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(path)
    except FileNotFoundError:
        raise LimelightError(f"{path}: no such file") from None
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise FormatError(path, None, f"not a readable Parquet file ({e})") from None
    missing = {"query_id", "doc_id", "score"} - set(t.column_names)
    if missing:
        raise FormatError(path, None, f"missing column(s) {sorted(missing)}")
    meta = json.loads((t.schema.metadata or {}).get(b"limelight", b"{}"))

    def codes(col):
        c = t.column(col).combine_chunks()
        if hasattr(c, "dictionary"):
            return IdMap(c.dictionary.to_pylist(), col), c.indices.to_numpy().astype(np.int32)
        return IdMap.from_unique(c.to_numpy(zero_copy_only=False).astype(object), col)

    qmap, q = codes("query_id")
    dmap, d = codes("doc_id")
    qmap.kind, dmap.kind = "query", "document"
    s = t.column("score").to_numpy()
    if not np.isfinite(s).all():
        raise FormatError(path, None, "non-finite score")
    return Run.from_codes(qmap, dmap, q, d, s, name or meta.get("name") or Path(path).stem)


def load_run(path: PathLike, name: str | None = None) -> Run:
    """A run from TREC text (optionally .gz) or Parquet, by file name."""
    if str(path).endswith(".parquet"):
        return read_run_parquet(path, name)
    return read_trec_run(path, name)


def isfinite_or_none(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
