"""Readers and writers: TREC runs and qrels, JSONL documents, TSV queries, Parquet.

TREC runs and qrels are read in two passes. The fast pass parses the file with pyarrow's
columnar CSV reader (gzip transparent, whitespace normalised, ids interned by
``dictionary_encode``: no Python object per line) and validates the parsed columns. Only when
it fails, or a check on the columns fails (non-finite or non-numeric score or rank, duplicate
(qid, docid), wrong column count, comment lines, unusual whitespace, non-UTF-8 bytes), the
precise line-by-line pass reads the file again: it gives the same result or the exact one-line
error naming the file and line. Every writer writes a temporary file, then renames it.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from limelight._io import atomic_path, open_text
from limelight.data.collection import Collection, check_documents, first_copy
from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import FormatError, LimelightError

PathLike = str | os.PathLike


# what reading a (possibly gzipped) file raises for a damaged one
_READ_ERRORS = (OSError, EOFError, zlib.error)


def not_utf8(path: PathLike, data: bytes, err: UnicodeDecodeError, first_line: int = 1) -> FormatError:
    """The one message of every text reader for bytes that are not UTF-8:
    ``PATH:LINE: not UTF-8 text (byte 0xNN at column C); re-save the file as UTF-8 ...``.

    ``data`` is what was decoded (a whole file, or one of its lines) and ``first_line`` the
    line number of its first line; the line and the column (in characters, 1-based) come from
    the error's byte offset.
    """
    start = err.start
    line = first_line + data.count(b"\n", 0, start)
    bol = data.rfind(b"\n", 0, start) + 1
    col = len(data[bol:start].decode("utf-8", errors="replace")) + 1  # valid UTF-8 up to start
    return FormatError(path, line, f"not UTF-8 text (byte 0x{data[start]:02x} at column {col}); "
                                   "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def decode_utf8(path: PathLike, data: bytes, first_line: int = 1) -> str:
    """``data`` (read from ``path``) as text, or the one-line ``not_utf8`` error naming the line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise not_utf8(path, data, e, first_line) from None


def _read_bytes(path: PathLike) -> bytes:
    """A file's bytes, gunzipped for ``.gz``; one-line errors for a missing or damaged file."""
    try:
        with open_text(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise LimelightError(f"{path}: no such file") from None
    except _READ_ERRORS as e:
        raise FormatError(path, None, f"cannot read file ({e})") from None
    return data


def read_text(path: PathLike) -> str:
    """A UTF-8 text file (``.gz`` transparent) as one string: the decoding path of every text
    reader here (runs, qrels, query files), so a non-UTF-8 byte is always told the same way,
    naming its line and column (``not_utf8``)."""
    return decode_utf8(path, _read_bytes(path))


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


def _read_trec_run_precise(path: PathLike, name: str | None = None,
                           doc_map: IdMap | None = None) -> Run:
    """The line-by-line reader: slow, but names the exact file and line of any error."""
    text = read_text(path)
    qid, _q0, docid, rank, score, _tag, lineno = _split_columns(path, text, 6, "qid Q0 docid rank score tag", extra_ok=True)
    if len(qid) == 0:
        raise FormatError(path, None, "empty run: no result lines")
    _to_float(path, rank, lineno, "rank")
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


# ---- the fast, columnar pass ------------------------------------------------------------------
# Bytes that str.split()/str.splitlines() treat as whitespace or line breaks besides ' ', '\t'
# and '\n' (ASCII controls; the UTF-8 forms of U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
# U+2029, U+202F, U+205F, U+3000): files containing them go to the precise pass.
_ODD_BYTES = tuple(bytes([c]) for c in b"\x00\x0b\x0c\r\x1c\x1d\x1e\x1f")
_ODD_UTF8 = re.compile(rb"\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f|\xe3\x80\x80")
_TAB_TO_SPACE = bytes.maketrans(b"\t", b" ")
_COMMENT = re.compile(rb"^[ \t]*#", re.MULTILINE)


_BLOCK_SIZE = 1 << 22  # bytes per CSV block (each block has its own id dictionary)


class _Fallback(Exception):
    """The fast pass cannot read this file exactly: use the precise pass."""


def _file_bytes(path: PathLike) -> bytes:
    """The file's bytes (gunzipped for ``.gz``), CRLF as LF; ``_Fallback`` for bytes that
    Python's line and word splitting treats specially, the ``not_utf8`` error for non-UTF-8."""
    data = _read_bytes(path)
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    if any(c in data for c in _ODD_BYTES):  # memchr per byte: faster than one regex scan
        raise _Fallback
    if not data.isascii():
        decode_utf8(path, data)  # the precise pass would say the same: not UTF-8, this line
        if _ODD_UTF8.search(data):
            raise _Fallback
    if b"#" in data and _COMMENT.search(data):  # comment lines
        raise _Fallback
    return data


def _normalise(data: bytes) -> bytes:
    """Fields separated by exactly one space: tabs become spaces (``bytes.translate``), runs of
    blanks collapse, lines are stripped of leading and trailing blanks.

    Line breaks and every other byte stay where they are (line numbers do not move). Each step
    is one pass of C over the buffer, none when there is nothing to change: no Python work per
    line (a regex rewrite cost 0.17 s per 89k-line run, most of reading it).
    """
    if b"\t" in data:
        data = data.translate(_TAB_TO_SPACE)
    while b"  " in data:  # each pass halves every run of blanks: log2(longest run) passes
        data = data.replace(b"  ", b" ")
    if b"\n " in data:
        data = data.replace(b"\n ", b"\n")
    if b" \n" in data:
        data = data.replace(b" \n", b"\n")
    if data.startswith(b" "):
        data = data[1:]
    if data.endswith(b" "):
        data = data[:-1]
    return data


def _parse_fast(path: PathLike, names: Sequence[str], types: dict, check: Sequence[str]):
    """(Arrow table, file bytes as parsed) of a whitespace-separated file; only ``types``'
    columns.

    A file with tabs is parsed with the tab as delimiter, as it is (blanks beside a tab, as in
    trec_eval's ``results.test``, are trimmed from numbers by pyarrow, as ``str.split`` drops
    them); one without tabs with the space as delimiter. The ``check`` columns (ids and other
    words, dictionary-typed) must then hold no empty field and, with tabs, no blank: otherwise,
    or when the parse fails (runs of blanks, padded lines, spaces beside tabs between words),
    the file is normalised (``_normalise``) and parsed once more with the space.
    """
    data = _file_bytes(path)
    delimiter = "\t" if b"\t" in data else " "
    normalised = False
    while True:
        try:
            t = _arrow_columns(data, names, types, delimiter)
            if not any(_bad_words(t.column(c), blank=delimiter != " ") for c in check):
                return t, data
        except Exception:
            if normalised:
                raise
        if normalised:
            raise _Fallback
        data, delimiter, normalised = _normalise(data), " ", True


def _numpy(col) -> np.ndarray:
    """A numeric Arrow array or column (chunked) without nulls as one numpy array, read from the
    buffers (``to_numpy`` loads pyarrow's pandas shim, which imports pandas: 0.2 s)."""
    from limelight.data.ids import arrow_numpy

    chunks = [arrow_numpy(c) for c in getattr(col, "chunks", [col])]
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _bad_words(col, blank: bool = False) -> bool:
    """Whether a dictionary-typed or string column holds an empty string or, with ``blank``, a
    value with a space in it (from the offsets and the data buffer of its few distinct values:
    ``pyarrow.compute`` with a Python scalar would import pandas, 0.2 s)."""
    import pyarrow as pa

    for chunk in col.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        if len(values):
            offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)
            offsets = offsets[values.offset:values.offset + len(values) + 1]
            if (np.diff(offsets) == 0).any():
                return True
            if blank and b" " in memoryview(values.buffers()[2])[offsets[0]:offsets[-1]].tobytes():
                return True
    return False


def _arrow_columns(data: bytes, names: Sequence[str], types: dict, delimiter: str = " "):
    """Parse ``data`` (fields separated by one ``delimiter``) with pyarrow (no quoting, no
    nulls); only ``types``' columns."""
    import pyarrow as pa
    import pyarrow.csv as pv

    return pv.read_csv(
        pa.py_buffer(data),
        # serial within a file (files are read in parallel instead): a failed parallel read
        # can leave Arrow tasks running into interpreter exit, which aborts the process
        read_options=pv.ReadOptions(column_names=list(names), use_threads=False,
                                    block_size=_BLOCK_SIZE),
        parse_options=pv.ParseOptions(delimiter=delimiter, quote_char=False, escape_char=False,
                                      double_quote=False, newlines_in_values=False,
                                      ignore_empty_lines=True),
        convert_options=pv.ConvertOptions(column_types=types, include_columns=list(types),
                                          null_values=[], true_values=[], false_values=[],
                                          strings_can_be_null=False, quoted_strings_can_be_null=False),
    )


def _int32_array(values: np.ndarray):
    """An Arrow int32 array over a numpy buffer (no ``pyarrow.compute``)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


def _unified(chunks: list):
    """(union dictionary in first-seen order over ``chunks``, each chunk's int32 codes into it)
    of dictionary arrays (``unify_dictionaries``, C++; ``dictionary_encode`` would import
    ``pyarrow.compute``: 0.13 s of start-up)."""
    import pyarrow as pa

    t = pa.table({"c": pa.chunked_array(chunks, type=chunks[0].type)}).unify_dictionaries()
    out = t.column("c").chunks
    return out[0].dictionary, [_numpy(c.indices).astype(np.int32, copy=False) for c in out]


def _encode(col):
    """(distinct values in first-seen order as an Arrow array, int32 codes) of a
    dictionary-typed column read by the CSV reader (one dictionary per block)."""
    dictionary, codes = _unified(list(col.chunks))
    return dictionary, codes[0] if len(codes) == 1 else np.concatenate(codes)


def _has_duplicates(q: np.ndarray, d: np.ndarray, nq: int, nd: int) -> bool:
    """Whether some (q, d) pair occurs twice (a bitmap when small, else a sort)."""
    if len(q) < 2:
        return False
    key = q.astype(np.int64) * max(nd, 1) + d
    if nq * nd <= 8 * len(q) + (1 << 20):
        return bool((np.bincount(key, minlength=nq * nd) > 1).any())
    key.sort()
    return bool((key[1:] == key[:-1]).any())


def _first_tag(data: bytes) -> str:
    """The tag (sixth field) of the first non-blank line of a parsed run."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        words = (data[start:] if end < 0 else data[start:end]).split()
        if words or end < 0:
            return words[5].decode("utf-8") if len(words) > 5 else ""
        start = end + 1


def _fast_run_parts(path: PathLike):
    """Fast pass over one run: (query map, q codes, doc dictionary, doc codes, scores, tag).

    Raises ``_Fallback`` (or any exception) when the precise pass must decide.
    """
    import pyarrow as pa

    dict_t = pa.dictionary(pa.int32(), pa.string())
    t, data = _parse_fast(path, ("qid", "Q0", "docid", "rank", "score", "tag"),
                          {"qid": dict_t, "Q0": dict_t, "docid": dict_t,
                           "rank": pa.float64(), "score": pa.float64(), "tag": dict_t},
                          ("qid", "Q0", "docid", "tag"))
    if t.num_rows == 0:
        raise _Fallback
    score = _numpy(t.column("score"))
    if not np.isfinite(score).all() or not np.isfinite(_numpy(t.column("rank"))).all():
        raise _Fallback
    qdict, q = _encode(t.column("qid"))
    ddict, d = _encode(t.column("docid"))
    if _has_duplicates(q, d, len(qdict), len(ddict)):
        raise _Fallback
    return IdMap.from_arrow(qdict, "query"), q, ddict, d, np.ascontiguousarray(score), _first_tag(data)


def _release_arrow_memory() -> None:
    """Give the parser's freed buffers back to the system (Arrow's allocator keeps them for
    reuse otherwise, several times the size of the runs read)."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # an allocator without the call: nothing to give back
        pass


def _recode_docs(base: IdMap | None, dicts: list) -> tuple[IdMap, list[np.ndarray]]:
    """One document map for several runs: ``base``'s ids first (codes kept), then new ids in
    first-seen order over the runs; and, per run, its dictionary codes → shared codes."""
    import pyarrow as pa

    parts = ([base.to_arrow()] if base is not None else []) + list(dicts)
    if not parts:
        return IdMap([], "document"), []
    identity = [pa.DictionaryArray.from_arrays(_int32_array(np.arange(len(p))), p) for p in parts]
    union, per_part = _unified(identity)
    if base is not None and len(union) == len(base):
        shared = base
    else:
        shared = IdMap.from_arrow(union, "document", base=base)
    return shared, per_part[1:] if base is not None else per_part


def read_trec_run(path: PathLike, name: str | None = None, doc_map: IdMap | None = None) -> Run:
    """Read a TREC run (``qid Q0 docid rank score tag``, ``.gz`` transparent).

    The rank column is ignored: ranks are recomputed from scores, ties broken by docid
    descending (trec_eval); it must still be a number. Duplicate (qid, docid) lines and
    non-finite scores are errors naming the file and line. With ``doc_map``, every document
    must be in it (an unknown one is an error naming the line).
    """
    try:
        qmap, q, ddict, d, s, tag = _fast_run_parts(path)
        if doc_map is None:
            dmap = IdMap.from_arrow(ddict, "document")
        else:
            import pyarrow.compute as pc

            rec = pc.index_in(ddict, value_set=doc_map.to_arrow())
            if rec.null_count:
                raise _Fallback
            d = _numpy(rec).astype(np.int32)[d]
            dmap = doc_map
    except LimelightError:
        raise
    except Exception:
        return _read_trec_run_precise(path, name, doc_map)
    finally:
        _release_arrow_memory()
    run = Run.from_codes(qmap, dmap, q, d, s, name or Path(path).name)
    run.meta["tag"] = tag
    return run


def read_trec_runs(paths: Sequence[PathLike], doc_map: IdMap | None = None,
                   names: Sequence[str] | None = None, threads: int | None = None,
                   progress: Callable[[int], None] | None = None) -> list[Run]:
    """Read several TREC runs onto **one** document ``IdMap``, files parsed in parallel.

    The shared map holds ``doc_map``'s ids first, with their codes (e.g. the qrels' documents:
    ``Qrels.with_doc_map`` then re-points the qrels without re-encoding), then the runs' other
    documents in first-seen order. Each file is read as ``read_trec_run`` reads it: a file the
    fast pass cannot read exactly is re-read by the precise pass (same result, or the one-line
    error naming its file and line).

    ``progress(n)``: called with the number of files parsed so far, after each. Between files
    a deferred Ctrl-C (``progress.deferred_interrupt``) stops the read (``KeyboardInterrupt``;
    the files not yet started are not parsed).
    """
    paths = list(paths)
    if names is not None and len(names) != len(paths):
        raise ValueError("names and paths differ in length")
    if not paths:
        return []

    def fast(p):
        try:
            return _fast_run_parts(p)
        except Exception:
            return None

    from limelight.progress import check_interrupt

    parts: list = []

    def parsed(part) -> None:  # one more file parsed (in the calling thread): report, stop if asked
        parts.append(part)
        if progress is not None:
            progress(len(parts))
        check_interrupt()

    workers = threads if threads is not None else min(len(paths), os.cpu_count() or 1, 4)
    if workers > 1 and len(paths) > 1:
        ex = ThreadPoolExecutor(workers)
        try:
            for part in ex.map(fast, paths):
                parsed(part)
        finally:  # on Ctrl-C: the files not started are dropped, not parsed
            ex.shutdown(wait=True, cancel_futures=True)
    else:
        for p in paths:
            parsed(fast(p))
    # files the fast pass rejected: the precise pass (raises the exact error, or reads them)
    precise = {}
    for i, (p, part) in enumerate(zip(paths, parts, strict=True)):
        if part is None:
            r = _read_trec_run_precise(p)
            precise[i] = r
            check_interrupt()
    dicts = [part[2] if part is not None else precise[i].docids.to_arrow()
             for i, part in enumerate(parts)]
    shared, recodes = _recode_docs(doc_map, dicts)
    runs = []
    for i, p in enumerate(paths):
        name = names[i] if names is not None else Path(p).name
        if parts[i] is None:
            r = precise[i]
            run = Run.from_codes(r.qids, shared, r.q, recodes[i][r.d], r.score, name, sort=False)
            run.meta.update(r.meta)
        else:
            qmap, q, _dd, d, s, tag = parts[i]
            run = Run.from_codes(qmap, shared, q, recodes[i][d], s, name)
            run.meta["tag"] = tag
        runs.append(run)
        parts[i] = None
    parts.clear()
    del dicts
    _release_arrow_memory()
    return runs


_GZIP_FAST = {"method": "gzip", "compresslevel": 1}  # run files: fast to write, 12-16 % larger than level 9


def write_trec_run(run: Run, path: PathLike, tag: str | None = None, gzip: bool | None = None) -> None:
    """Write ``qid Q0 docid rank score tag`` lines (1-based ranks), atomically; gzip-compressed
    when ``gzip`` (default: when the name ends with ``.gz``).

    Scores are written exactly, in their shortest form (float32 scores, as BM25 and dense give,
    as float32): reading the file back gives the same scores, hence the same order and ties (a
    fixed 6 decimals merged nearby scores into ties that trec_eval breaks by document id).

    gzip at level 1: a million lines in ~1.9 CPU s against ~5.0 at zlib's default level 9, for a
    file 12-16 % larger (the README's whole-log run, 11.7M lines: 186 MB in 45 CPU s for the whole
    ``limelight retrieve``, against 160 MB in 75 CPU s)."""
    tag = tag or run.meta.get("tag") or run.name.replace(" ", "_") or "limelight"
    import pandas as pd

    score = run.score
    if (as32 := score.astype(np.float32)).astype(np.float64).tobytes() == score.tobytes():
        score = as32
    df = pd.DataFrame({
        "q": run.qids.decode(run.q), "Q0": "Q0", "d": run.docids.decode(run.d),
        "rank": run.ranks(), "score": score, "tag": tag,
    })
    with atomic_path(path) as tmp:
        gz = str(path).endswith(".gz") if gzip is None else gzip
        df.to_csv(tmp, sep=" ", header=False, index=False, compression=_GZIP_FAST if gz else None)


def _read_trec_qrels_precise(path: PathLike, name: str | None = None, doc_map: IdMap | None = None,
                    strict_docs: bool = False) -> Qrels:
    """The line-by-line qrels reader: names the exact file and line of any error."""
    text = read_text(path)
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


def read_trec_qrels(path: PathLike, name: str | None = None, doc_map: IdMap | None = None,
                    strict_docs: bool = False) -> Qrels:
    """Read TREC qrels (``qid iter docid rel``, ``.gz`` transparent). Grades must be integers;
    duplicate (qid, docid) lines are errors naming the file and line. With ``doc_map`` and
    ``strict_docs``, a judged document missing from the collection is an error naming the line;
    without ``strict_docs`` such documents are appended to the map."""
    if doc_map is not None:  # collection-sized maps: the precise pass (small files)
        return _read_trec_qrels_precise(path, name, doc_map, strict_docs)
    try:
        import pyarrow as pa

        dict_t = pa.dictionary(pa.int32(), pa.string())
        t, _data = _parse_fast(path, ("qid", "iter", "docid", "rel"),
                               {"qid": dict_t, "iter": dict_t, "docid": dict_t, "rel": pa.float64()},
                               ("qid", "iter", "docid"))
        if t.num_rows == 0:
            raise _Fallback
        relf = _numpy(t.column("rel"))
        if not np.isfinite(relf).all() or (relf != np.round(relf)).any():
            raise _Fallback
        qdict, q = _encode(t.column("qid"))
        ddict, d = _encode(t.column("docid"))
        if _has_duplicates(q, d, len(qdict), len(ddict)):
            raise _Fallback
    except LimelightError:
        raise
    except Exception:
        return _read_trec_qrels_precise(path, name, doc_map, strict_docs)
    return Qrels.from_codes(IdMap.from_arrow(qdict, "query"), IdMap.from_arrow(ddict, "document"),
                            q, d, relf.astype(np.int32), name or Path(path).name)


def write_trec_qrels(qrels: Qrels, path: PathLike) -> None:
    import pandas as pd

    df = pd.DataFrame({"q": qrels.qids.decode(qrels.q), "it": 0, "d": qrels.docids.decode(qrels.d),
                       "rel": qrels.rel})
    with atomic_path(path) as tmp:
        df.to_csv(tmp, sep=" ", header=False, index=False)


def read_queries_tsv(path: PathLike, name: str | None = None, header: bool | None = None) -> Queries:
    """Read ``id<TAB>text`` lines (or the query log's ``source<TAB>qid<TAB>query`` with header).

    Empty query texts and duplicate ids are errors naming the line.
    """
    text = read_text(path)
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


def json_object(path: str | Path, lineno: int, line: str) -> dict:
    """One JSONL line as its JSON object; a one-line ``FormatError`` naming ``path:lineno``."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise FormatError(path, lineno, f"invalid JSON: {e.msg} column {e.colno}") from None
    except RecursionError:
        raise FormatError(path, lineno, "invalid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise FormatError(path, lineno, "expected a JSON object")
    return obj


def jsonl_records(path: PathLike) -> Iterator[tuple[dict, int, int]]:
    """``(object, line number, bytes of the line)`` of each non-blank line of a JSONL file
    (``.gz`` transparent), in order; errors name the line. Lines are read as bytes and decoded
    one by one, so a non-UTF-8 byte is told at its own line (a text stream decodes blocks ahead
    of the line it returns). The one JSONL reader: ``read_jsonl_lines`` and the streamed
    collection (``limelight.data.stream``) read through it."""
    try:
        f = open_text(path, "rb")
    except FileNotFoundError:
        raise LimelightError(f"{path}: no such file") from None
    except OSError as e:
        raise FormatError(path, None, f"cannot read file ({e})") from None
    i = 0
    try:
        with f:
            for i, raw in enumerate(f, start=1):
                ln = decode_utf8(path, raw, i)
                if ln.strip():
                    yield json_object(path, i, ln), i, len(raw)
    except _READ_ERRORS as e:  # a damaged line: the one after the last line read
        raise FormatError(path, i + 1, f"cannot read file ({e})") from None


def read_jsonl_lines(path: PathLike) -> tuple[list[dict], list[int]]:
    """JSON objects, one per line (``.gz`` transparent), and the line number of each; errors
    name the line (``jsonl_records``)."""
    out: list[dict] = []
    lines: list[int] = []
    for obj, i, _ in jsonl_records(path):
        out.append(obj)
        lines.append(i)
    return out, lines


def read_jsonl(path: PathLike) -> list[dict]:
    """JSON objects, one per line (``.gz`` transparent); errors name the line."""
    return read_jsonl_lines(path)[0]


def read_jsonl_docs(path: PathLike, text_fields=("title", "text"), id_field: str = "id",
                    name: str | None = None, duplicates: str = "error") -> Collection:
    """Documents from JSONL (``id`` plus text fields); a missing id names the line.

    A repeated id is an error naming the line, or with ``duplicates="first"`` the later
    copies are dropped with a warning (the shared CACM has one repeated id).
    """
    recs, lines = read_jsonl_lines(path)
    check_documents(recs, lines, text_fields, id_field, path)  # ids TREC files can hold
    seen: set[str] = set()
    keep = []
    for i, r in zip(lines, recs, strict=True):  # i: the record's line in the file
        if id_field not in r:
            raise FormatError(path, i, f"document without {id_field!r}")
        if first_copy(str(r[id_field]), seen, duplicates, path, i):
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
