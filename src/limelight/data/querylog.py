"""A query log's distinct queries, without holding its lines (issue 44: logs of tens of millions
of lines).

``distinct_log_table(path, max_chars, out)`` writes the log's distinct normalised texts, in
order of first entry, each with the id and source of its first entry and the number of its
entries as weight o_q (lines longer than ``max_chars`` dropped with one warning that counts
them), to an Arrow IPC query table at ``out``, without holding them either: the file is read
in blocks, each block's distinct queries (and each line's id, as a 64-bit hash, to check that
ids do not repeat) spilled to hash partitions in a temporary folder beside ``out``, each
partition de-duplicated on its own, and the partitions merged by first entry. Its memory does
not grow with the log beyond ~10 bytes per distinct query. ``limelight.data.querytable.
QueryTable`` reads the table a batch at a time; ``distinct_log(path)`` reads it whole (what
``load_query_log(path)`` returns).

Any line this reader does not accept (wrong number of columns, an empty query, a repeated id, a
byte that is not UTF-8, a damaged file) makes both return None, and the caller reads the file
again with ``read_queries_tsv``, whose error names the line: the errors are those of the
whole-file reader, word for word.
"""

from __future__ import annotations

import os
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from limelight._io import open_text
from limelight.data.queries import Queries

LOG_HEADER = ["source", "qid", "query"]


class _Slow(Exception):
    """A line the block reader leaves to ``read_queries_tsv`` (which names it in its error)."""


def _blocks(path: Path, block_bytes: int) -> Iterator[bytes]:
    """The file's bytes (gunzipped for ``.gz``) in blocks that end after a newline."""
    rest = b""
    with open_text(path, "rb") as f:
        while True:
            data = f.read(block_bytes)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest = data[cut:]
            yield data[:cut]
    if rest:
        yield rest


def is_log(path: str | os.PathLike) -> bool:
    """Whether a query file's first line is the query log's header ``source qid query``."""
    try:
        with open_text(path, "rb") as f:
            first = f.readline(1 << 16).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        return False
    first = (first.splitlines() or [""])[0]
    return [c.strip().lower() for c in first.split("\t")] == LOG_HEADER


def distinct_log(path: str | os.PathLike, max_chars: int, name: str = "querylog",
                 block_bytes: int | None = None) -> Queries | None:
    """The distinct queries of the log at ``path`` in memory (see the module docstring), or
    None when a line needs the whole-file reader (its error names the line): the log is
    de-duplicated by ``distinct_log_table`` into a temporary folder, and its table read whole."""
    import tempfile

    from limelight.data.querytable import QueryTable

    with tempfile.TemporaryDirectory(prefix="limelight-log-") as tmp:
        out = distinct_log_table(path, max_chars, Path(tmp) / "queries.arrow", name,
                                 block_bytes or TABLE_BLOCK_BYTES)
        if out is None:
            return None
        table = QueryTable(out)
        return table.slice(0, len(table))


TABLE_BATCH = 1 << 16  # rows per record batch of ``distinct_log_table``'s output (the last: fewer)
TABLE_BLOCK_BYTES = 2 << 20  # its blocks: a block's lines and their objects take ~12x its bytes
_SPILL_ROWS = 4096  # rows per record batch of a sorted partition (fewer with many partitions)


def _partitions(path: Path) -> int:
    """Spill partitions for the log at ``path``: one per ~4 MB of gzip, ~16 MB of plain text."""
    try:
        size = path.stat().st_size
    except OSError:
        return 1
    per = 4 << 20 if str(path).endswith(".gz") else 16 << 20
    return int(min(max(size // per, 1), 256))


def distinct_log_table(path: str | os.PathLike, max_chars: int, out: str | os.PathLike,
                       name: str = "querylog", block_bytes: int = TABLE_BLOCK_BYTES,
                       partitions: int | None = None) -> Path | None:
    """Write the distinct queries of the log at ``path`` — those of ``distinct_log(path,
    max_chars)``, in the same order, with the same ids, texts, weights, sources and long-line
    warning — to one Arrow IPC file at ``out`` (written atomically), and return ``Path(out)``;
    None (nothing written) in the cases ``distinct_log`` returns None.

    The file's schema is ``qid: string, text: string, weight: float64, source: string`` with
    metadata ``{b"name": name}``, in uncompressed record batches of ``TABLE_BATCH`` rows (the
    last: fewer). Unlike ``distinct_log`` it does not hold the distinct queries: each block's
    distinct queries, and each line's id hash, are spilled to ``partitions`` hash partitions in
    a temporary folder beside ``out`` (removed at the end, also on failure); each partition is
    then aggregated on its own, and the partitions merged by first entry. Its memory is about
    10 bytes per distinct query (the merge's first-line numbers and partition labels) plus a
    block's worth (``block_bytes``: its lines as Python objects take ~12 times that), whatever
    the log's size. ``partitions`` (1 to 256) defaults to one per ~4 MB of a ``.gz`` log
    (~16 MB of a plain one). Errors writing the spill or ``out`` are raised, not taken for the
    log's.
    """
    import shutil
    import tempfile

    from limelight._io import atomic_path, check_output_file

    path, out = Path(path), Path(out)
    check_output_file(out)
    n_parts = int(partitions) if partitions is not None else _partitions(path)
    if not 1 <= n_parts <= 256:
        raise ValueError(f"partitions must be from 1 to 256, not {n_parts}")
    out.parent.mkdir(parents=True, exist_ok=True)
    spill = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".spill", dir=out.parent))
    try:
        try:
            parts, long = _spill_log(path, max_chars, block_bytes, n_parts, spill)
        except (_Slow, UnicodeDecodeError):
            return None
        if long is not None:
            n_long, (qid, n) = long
            warnings.warn(f"{path}: {n_long} log line(s) longer than {max_chars:,} characters "
                          f"skipped (first: query {qid!r}, {n:,} characters)", stacklevel=2)
        with atomic_path(out) as tmp:
            _merge_partitions(parts, tmp, name)
        return out
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _read_blocks(path: Path, block_bytes: int) -> Iterator[bytes]:
    """``_blocks``, with an unreadable or damaged file as ``_Slow`` (so that errors writing the
    spill or the output are not taken for the log's)."""
    try:
        yield from _blocks(path, block_bytes)
    except (OSError, EOFError, zlib.error) as e:
        raise _Slow from e


_SPILL_FIELDS = (("key", "string"), ("qid", "string"), ("source", "string"),
                 ("line", "int64"), ("count", "int64"))


def _spill_log(path: Path, max_chars: int, block_bytes: int, n_parts: int, spill: Path):
    """Pass 1 and 2 of ``distinct_log_table``: spill each block's distinct queries (key, id
    and source of its first line there, that line's number, its count in the block) to hash
    partition ``hash(key) % n_parts`` (an Arrow IPC stream each) and every line's id hash to
    partition ``hash(qid) % n_parts`` (raw int64); then check that no id hash repeats. Returns
    the sorted partitions (``_aggregate``) and ``(n_long, (first long id, its length))`` or
    None. Raises ``_Slow`` where ``_distinct_log`` does. Long because it is one pass over the
    lines with its bookkeeping inline, as ``_distinct_log`` (per-line calls would double its
    time)."""
    import pyarrow as pa

    pool = _pool()
    schema = pa.schema([(n, getattr(pa, t)()) for n, t in _SPILL_FIELDS])
    sinks = [pa.OSFile(str(spill / f"q{p:03d}.arrows"), "wb") for p in range(n_parts)]
    writers = [pa.ipc.new_stream(s, schema) for s in sinks]
    id_files = [open(spill / f"h{p:03d}.i64", "wb") for p in range(n_parts)]  # noqa: SIM115
    n_long, first_long = 0, None
    header = True
    base = 0  # number of (non-blank) lines before this block
    n_rows = 0
    try:
        for block in _read_blocks(path, block_bytes):
            lines = block.decode("utf-8").splitlines()
            if header:
                lines, header = lines[1:], False
            h = np.empty(len(lines), np.int64)
            k = 0
            bindex: dict[str, int] = {}
            bids: list[str] = []
            bsources: list[str] = []
            blines: list[int] = []
            bcounts: list[int] = []
            for ln in lines:
                if not ln.strip():
                    continue
                parts = ln.split("\t")
                if len(parts) != 3:
                    raise _Slow
                src, qid, qtext = parts
                qid = f"{src}:{qid}".strip()
                qtext = qtext.strip()
                if not qtext:
                    raise _Slow
                h[k] = hash(qid)
                k += 1
                if len(qtext) > max_chars:
                    n_long += 1
                    if first_long is None:
                        first_long = (qid, len(qtext))
                    continue
                key = " ".join(qtext.lower().split())
                j = bindex.get(key)
                if j is None:
                    bindex[key] = len(bids)
                    bids.append(qid)
                    bsources.append(src)
                    blines.append(base + k)
                    bcounts.append(1)
                else:
                    bcounts[j] += 1
            hk = h[:k]
            base += k
            del lines, h
            _split_write(hk, hk % n_parts, n_parts, id_files)
            if bids:
                keys = list(bindex)
                n_rows += len(keys)
                part = np.fromiter(map(hash, keys), np.int64, len(keys)) % n_parts
                batch = pa.record_batch([_strings(keys), _strings(bids), _strings(bsources),
                                         _arrow(np.asarray(blines, np.int64)),
                                         _arrow(np.asarray(bcounts, np.int64))], schema=schema)
                del bindex, keys, bids, bsources, blines, bcounts
                _split_batch(batch, part, n_parts, writers, pool)
                del batch
    finally:
        for w in writers:
            w.close()
        for s in sinks:
            s.close()
        for f in id_files:
            f.close()
    _check_ids(spill, n_parts)
    if not n_rows and not n_long:
        raise _Slow  # an empty log: the whole-file reader's error
    parts_out = [_aggregate(spill, p, n_parts) for p in range(n_parts)]
    return parts_out, ((n_long, first_long) if n_long else None)


def _check_ids(spill: Path, n_parts: int) -> None:
    """Raise ``_Slow`` if an id hash repeats within a partition of them (a repeated id, or
    once in ~10^12 logs a hash collision: the whole-file reader decides)."""
    for p in range(n_parts):
        hp = np.fromfile(spill / f"h{p:03d}.i64", np.int64)
        (spill / f"h{p:03d}.i64").unlink()
        hp.sort()
        if len(hp) > 1 and (hp[1:] == hp[:-1]).any():
            raise _Slow
        del hp


def _split_write(values: np.ndarray, part: np.ndarray, n_parts: int, files) -> None:
    """Append ``values`` to ``files[p]`` for the rows whose ``part`` is p."""
    if n_parts == 1:
        values.tofile(files[0])
        return
    order = np.argsort(part, kind="stable")
    values = values[order]
    bounds = np.searchsorted(part[order], np.arange(n_parts + 1))
    for p in np.flatnonzero(np.diff(bounds)):
        values[bounds[p]:bounds[p + 1]].tofile(files[p])


def _pool():
    """The memory pool of ``distinct_log_table``'s Arrow buffers: the system allocator, which
    returns freed memory (mimalloc, Arrow's default, keeps tens of MB more resident)."""
    import pyarrow as pa

    return pa.system_memory_pool()


def _strings(xs: list[str]):
    """An Arrow string array of ``xs``, none of which holds a newline (log fields and keys never
    do: the lines are split at them). Built from buffers: ``pa.array`` of a list imports pandas
    (~50 MB)."""
    import pyarrow as pa

    if not xs:
        return pa.array([], pa.string())
    ends = np.flatnonzero(np.frombuffer(("\n".join(xs) + "\n").encode("utf-8"), np.uint8) == 10)
    if len(ends) != len(xs):
        raise ValueError("a string holds a newline")
    offsets = np.empty(len(xs) + 1, np.int32)
    offsets[0] = 0
    offsets[1:] = ends - np.arange(len(xs))
    return pa.StringArray.from_buffers(len(xs), pa.py_buffer(offsets),
                                       pa.py_buffer("".join(xs).encode("utf-8")))


def _arrow(x: np.ndarray):
    """A numeric numpy array as an Arrow array (from its buffer: no pandas import)."""
    import pyarrow as pa

    x = np.ascontiguousarray(x)
    return pa.Array.from_buffers(pa.from_numpy_dtype(x.dtype), len(x), [None, pa.py_buffer(x)])


def _numpy(a, dtype) -> np.ndarray:
    """A numeric Arrow array or chunked array without nulls as numpy (no pandas import)."""
    import pyarrow as pa

    if isinstance(a, pa.ChunkedArray):
        if not a.num_chunks:
            return np.zeros(0, dtype)
        return np.concatenate([_numpy(c, dtype) for c in a.chunks])
    size = np.dtype(dtype).itemsize
    return np.frombuffer(a.buffers()[1], dtype, count=len(a), offset=a.offset * size)


def _split_batch(batch, part: np.ndarray, n_parts: int, writers, pool) -> None:
    """Write ``batch``'s rows whose ``part`` is p to ``writers[p]`` (rows kept in order; one
    partition's copy at a time)."""
    import pyarrow.compute as pc

    if n_parts == 1:
        writers[0].write_batch(batch)
        return
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_parts + 1))
    for p in np.flatnonzero(np.diff(bounds)):
        writers[p].write_batch(pc.take(batch, _arrow(order[bounds[p]:bounds[p + 1]]),
                                       memory_pool=pool))


_PART_FIELDS = (("qid", "string"), ("text", "string"), ("weight", "float64"),
                ("source", "string"))


def _aggregate(spill: Path, p: int, n_parts: int) -> tuple[Path, np.ndarray]:
    """Pass 3: partition ``p``'s distinct queries (id and source of the first line, the count
    summed), sorted by first line, written as an IPC file in small batches beside its stream
    (which is removed). Returns that file and the sorted first-line numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    src = spill / f"q{p:03d}.arrows"
    pool = _pool()
    with pa.OSFile(str(src), "rb", memory_pool=pool) as f:
        t = pa.ipc.open_stream(f, memory_pool=pool).read_all()
    src.unlink()
    # the rows are in line order: a key's codes in order of first entry, its first row where
    # the running maximum of the codes reaches it
    key = t.column("key")
    if key.nbytes > (1 << 30):  # beyond a string array's 2 GB of 32-bit offsets once combined
        key = pc.cast(key, pa.large_string(), memory_pool=pool)
    enc = pc.dictionary_encode(key.combine_chunks(memory_pool=pool), memory_pool=pool)
    del key
    codes = _numpy(enc.indices, np.int32)
    n_keys = len(enc.dictionary)
    seen = np.maximum.accumulate(codes) if len(codes) else codes
    first = np.flatnonzero(codes > np.concatenate(([-1], seen[:-1]))[:len(codes)])
    del seen
    weight = np.bincount(codes, weights=_numpy(t.column("count"), np.int64), minlength=n_keys)
    del codes
    lines = _numpy(t.column("line"), np.int64)[first]
    first = _arrow(first)
    part = pa.table([pc.take(t.column("qid"), first, memory_pool=pool),
                     pc.cast(enc.dictionary, pa.string(), memory_pool=pool),
                     _arrow(weight.astype(np.float64)),
                     pc.take(t.column("source"), first, memory_pool=pool)],
                    names=[n for n, _ in _PART_FIELDS])
    del t, enc, weight
    dst = spill / f"s{p:03d}.arrow"
    rows = max(min(_SPILL_ROWS, (TABLE_BATCH * 16) // n_parts), 256)
    with pa.OSFile(str(dst), "wb") as f, pa.ipc.new_file(f, part.schema) as w:
        w.write_table(part, max_chunksize=rows)
    return dst, np.ascontiguousarray(lines, dtype=np.int64)


class _Cursor:
    """The next rows of a sorted partition's IPC file, read a small batch at a time."""

    def __init__(self, path: Path):
        import pyarrow as pa

        self._f = pa.OSFile(str(path), "rb", memory_pool=_pool())
        self._r = pa.ipc.open_file(self._f, memory_pool=_pool())
        self._i = 0
        self._pending = None  # the rest of the current batch

    def take(self, n: int) -> list:
        """The next ``n`` rows, as record batches."""
        got = []
        while n > 0:
            if self._pending is None or self._pending.num_rows == 0:
                self._pending = self._r.get_batch(self._i)
                self._i += 1
            b = self._pending
            m = min(n, b.num_rows)
            got.append(b.slice(0, m))
            self._pending = b.slice(m)
            n -= m
        return got

    def close(self) -> None:
        """Close the file."""
        self._f.close()


def _merge_partitions(parts: list[tuple[Path, np.ndarray]], out: Path, name: str) -> None:
    """Pass 4: merge the sorted partitions by first line into the IPC file ``out``, a
    ``TABLE_BATCH`` of rows at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pool = _pool()
    schema = pa.schema([(n, getattr(pa, t)()) for n, t in _PART_FIELDS],
                       metadata={b"name": name.encode()})
    labels = _merge_labels([lines for _, lines in parts])
    for i in range(len(parts)):
        parts[i] = (parts[i][0], None)  # the first lines are not needed any more
    cursors = [_Cursor(path) for path, _ in parts]
    n_parts = len(parts)
    try:
        with pa.OSFile(str(out), "wb") as f, pa.ipc.new_file(f, schema) as w:
            for start in range(0, len(labels), TABLE_BATCH):
                lab = labels[start:start + TABLE_BATCH]
                counts = np.bincount(lab, minlength=n_parts)
                pieces = []
                for p in np.flatnonzero(counts):
                    pieces += cursors[p].take(int(counts[p]))
                t = pa.Table.from_batches(pieces, schema=pieces[0].schema)
                if n_parts > 1:  # rows in partition order -> in order of first line
                    order = np.argsort(lab, kind="stable")
                    inv = np.empty_like(order)
                    inv[order] = np.arange(len(order))
                    t = pc.take(t, _arrow(inv), memory_pool=pool)
                t = t.replace_schema_metadata(schema.metadata).combine_chunks(memory_pool=pool)
                for b in t.to_batches():
                    w.write_batch(b)
    finally:
        for c in cursors:
            c.close()


def _merge_labels(lines: list[np.ndarray], window: int = 1 << 18) -> np.ndarray:
    """The partition of each output row (int16), output rows in order of first line: the
    partitions' sorted first lines merged a window of line numbers at a time (about ``window``
    rows each), so that the merge holds no more than the labels and a window."""
    total = sum(len(x) for x in lines)
    labels = np.empty(total, np.int16)
    if not total:
        return labels
    hi = max(int(x[-1]) for x in lines if len(x)) + 1
    n_win = -(-total // window)
    edges = np.linspace(0, hi, n_win + 1).astype(np.int64)
    edges[-1] = hi
    cut = [np.searchsorted(x, edges) for x in lines]
    pos = 0
    for i in range(n_win):
        chunks = [x[c[i]:c[i + 1]] for x, c in zip(lines, cut, strict=True)]
        m = sum(len(c) for c in chunks)
        if not m:
            continue
        lab = np.repeat(np.arange(len(lines), dtype=np.int16), [len(c) for c in chunks])
        order = np.argsort(np.concatenate(chunks), kind="stable")
        labels[pos:pos + m] = lab[order]
        pos += m
    return labels
