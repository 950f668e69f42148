"""A query log's distinct queries written to an Arrow IPC file through hash partitions spilled
beside it (issue 44: peak memory flat in the number of distinct queries): the same queries, in
the same order, as the whole-file reader (``read_queries_tsv`` then ``_distinct``), and None
where that reader has an error to give, leaving nothing behind."""

from __future__ import annotations

import gzip
import os
import warnings
import zlib

import pyarrow as pa
import pytest

from limelight.data.formats import read_queries_tsv
from limelight.data.loaders import MAX_LOG_QUERY_CHARS, _distinct, data_root
from limelight.data.querylog import TABLE_BATCH, distinct_log, distinct_log_table
from limelight.errors import LimelightError

SHARED_LOG = data_root() / "querylogs" / "queries.tsv.gz"


def _whole_file(p):
    """The whole-file reader's distinct log, or None where it raises (its one-line error)."""
    try:
        return _distinct(read_queries_tsv(p, name="querylog"), p)
    except (LimelightError, OSError, EOFError, zlib.error):
        return None


def _read(path):
    with pa.OSFile(str(path), "rb") as f:
        r = pa.ipc.open_file(f)
        return r.read_all(), [r.get_batch(i).num_rows for i in range(r.num_record_batches)]


def _same(table, qs) -> None:
    """The table holds the queries ``qs``: every column equal, in order."""
    assert table.column("qid").to_pylist() == qs.ids.strings.tolist()
    assert table.column("qid").to_pylist() == qs.fields["log_id"].tolist()
    assert table.column("text").to_pylist() == qs.texts.tolist()
    assert table.column("weight").to_pylist() == qs.weights.tolist()
    assert table.column("source").to_pylist() == qs.fields["source"].tolist()


def _both(p, folder, **kw):
    """``distinct_log`` and ``distinct_log_table`` of the log ``p`` with their warnings; checks
    that only the output (or nothing) is left in ``folder``."""
    folder.mkdir(exist_ok=True)
    before = sorted(os.listdir(folder))
    with warnings.catch_warnings(record=True) as w1:
        warnings.simplefilter("always")
        ref = _whole_file(p)
    out = folder / "q.arrow"
    with warnings.catch_warnings(record=True) as w2:
        warnings.simplefilter("always")
        got = distinct_log_table(p, MAX_LOG_QUERY_CHARS, out, **kw)
    assert sorted(os.listdir(folder)) == sorted(before + (["q.arrow"] if got else []))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        in_memory = distinct_log(p, MAX_LOG_QUERY_CHARS, block_bytes=kw.get("block_bytes"))
    assert (in_memory is None) == (got is None)
    if got is not None:  # the table read whole: what load_query_log returns
        _same(_read(got)[0], in_memory)
    return ref, got, [str(x.message) for x in w1], [str(x.message) for x in w2]


@pytest.mark.parametrize(("partitions", "block_bytes"),
                         [(1, 1 << 16), (3, 1 << 16), (None, 1 << 16), (16, 1 << 20), (None, None)])
def test_table_equals_distinct_log_on_the_shared_log(tmp_path, partitions, block_bytes):
    kw = {"partitions": partitions} | ({"block_bytes": block_bytes} if block_bytes else {})
    ref, got, m1, m2 = _both(SHARED_LOG, tmp_path / "out", **kw)
    assert got == tmp_path / "out" / "q.arrow" and m1 == m2 == []
    table, sizes = _read(got)
    _same(table, ref)
    assert len(ref) > TABLE_BATCH  # more than one batch, all full but the last
    assert sizes[:-1] == [TABLE_BATCH] * (len(sizes) - 1) and 0 < sizes[-1] <= TABLE_BATCH
    assert sum(sizes) == len(ref)
    assert table.schema.equals(pa.schema([("qid", pa.string()), ("text", pa.string()),
                                          ("weight", pa.float64()), ("source", pa.string())]))
    assert table.schema.metadata == {b"name": b"querylog"}


def test_table_name_and_overwrite(tmp_path):
    p = tmp_path / "log.tsv"
    p.write_text("source\tqid\tquery\na\t1\tX  y\nb\t1\tx Y\nb\t2\tz\n")
    out = tmp_path / "o" / "q.arrow"
    assert distinct_log_table(p, MAX_LOG_QUERY_CHARS, out, name="mylog") == out
    assert distinct_log_table(p, MAX_LOG_QUERY_CHARS, out, name="mylog", partitions=2) == out
    table, sizes = _read(out)
    assert table.schema.metadata == {b"name": b"mylog"} and sizes == [2]
    assert table.to_pydict() == {"qid": ["a:1", "b:2"], "text": ["x y", "z"],
                                 "weight": [2.0, 1.0], "source": ["a", "b"]}
    assert os.listdir(out.parent) == ["q.arrow"]


def _lines(n: int, start: int = 0) -> str:
    return "".join(f"s\t{i}\tquery number {i % 97}\n" for i in range(start, start + n))


@pytest.mark.parametrize("partitions", [1, 2, 5])
def test_repeated_id_in_another_block_and_partition(tmp_path, partitions):
    """The same id on line 3 and on line ~2000 (other block, other text): None, like
    ``distinct_log``, and nothing left beside the output."""
    p = tmp_path / "log.tsv.gz"
    with gzip.open(p, "wt") as f:
        f.write("source\tqid\tquery\n" + _lines(2000) + "s\t2\tsomething else entirely\n"
                + _lines(10, 5000))
    ref, got, _, _ = _both(p, tmp_path / "out", partitions=partitions, block_bytes=1 << 10)
    assert ref is None and got is None
    with gzip.open(p, "wt") as f:  # the same log without the repeat: a table
        f.write("source\tqid\tquery\n" + _lines(2000) + "s\tx\tsomething else entirely\n")
    ref, got, _, _ = _both(p, tmp_path / "out2", partitions=partitions, block_bytes=1 << 10)
    _same(_read(got)[0], ref)
    assert len(ref) == 98 and ref.weights.sum() == 2001


def test_long_lines_same_warning_and_skip(tmp_path):
    p = tmp_path / "log.tsv"
    long = "word " * (MAX_LOG_QUERY_CHARS // 4)
    p.write_text("source\tqid\tquery\r\ns\t1\tHello  World\n\ns\t2\t" + long + "\ns\t3\thello world\n"
                 "t\t1\tA\x00B\nt\t9\t" + long + "x\n")
    for partitions in (1, 3):
        ref, got, m1, m2 = _both(p, tmp_path / f"out{partitions}", partitions=partitions,
                                 block_bytes=1 << 12)
        assert m1 == m2 and len(m2) == 1 and "2 log line(s)" in m2[0] and "'s:2'" in m2[0]
        table, _ = _read(got)
        _same(table, ref)
        assert table.column("text").to_pylist() == ["hello world", "a\x00b"]
    p.write_text("source\tqid\tquery\ns\t2\t" + long + "\n")  # only long lines: no queries
    ref, got, m1, m2 = _both(p, tmp_path / "only-long")
    assert m1 == m2 and len(m2) == 1 and len(ref) == 0
    table, sizes = _read(got)
    assert table.num_rows == 0 and sizes == [] and table.schema.metadata == {b"name": b"querylog"}


@pytest.mark.parametrize("content", [
    b"source\tqid\tquery\ns\t1\ta\ns\t2\n",            # a wrong number of columns
    b"source\tqid\tquery\ns\t1\ta\ns\t2\ta\tb\n",
    b"source\tqid\tquery\ns\t1\ta\ns\t2\t  \n",         # an empty query
    b"source\tqid\tquery\ns\t1\ta\ns\t2\t\xff\n",       # not UTF-8
    b"source\tqid\tquery\ns\t1\ta\ns\t1\tb\n",          # a repeated id
    b"source\tqid\tquery\n",                            # an empty log
    b"source\tqid\tquery\n\n  \n",
])
@pytest.mark.parametrize("partitions", [1, 4])
def test_lines_for_the_whole_file_reader_give_none(tmp_path, content, partitions):
    p = tmp_path / "log.tsv"
    p.write_bytes(content)
    ref, got, _, _ = _both(p, tmp_path / "out", partitions=partitions)
    assert got is None  # left to the whole-file reader: its error, or (an empty log) its empty set
    assert ref is None or (len(ref) == 0 and b"\ns\t" not in content)


def test_damaged_or_missing_file_gives_none(tmp_path):
    good = gzip.compress(b"source\tqid\tquery\n" + _lines(3000).encode())
    p = tmp_path / "log.tsv.gz"
    p.write_bytes(good[:len(good) // 2])  # cut short
    ref, got, _, _ = _both(p, tmp_path / "out", block_bytes=1 << 10, partitions=2)
    assert ref is None and got is None
    p.write_bytes(b"not gzip at all")
    assert _both(p, tmp_path / "out")[:2] == (None, None)
    assert _both(tmp_path / "missing.tsv", tmp_path / "out")[:2] == (None, None)


def test_spill_removed_after_a_failure_writing_the_output(tmp_path):
    """An error after the spill was written (here: a name that is not a string) is raised, and
    neither the spill folder nor a temporary output is left."""
    p = tmp_path / "log.tsv"
    p.write_text("source\tqid\tquery\n" + _lines(500))
    out = tmp_path / "out" / "q.arrow"
    with pytest.raises(AttributeError):
        distinct_log_table(p, MAX_LOG_QUERY_CHARS, out, name=None, partitions=3)
    assert os.listdir(out.parent) == []
    with pytest.raises(ValueError, match="partitions"):
        distinct_log_table(p, MAX_LOG_QUERY_CHARS, out, partitions=0)
    assert os.listdir(out.parent) == []
