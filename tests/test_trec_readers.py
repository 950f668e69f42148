"""The columnar TREC readers (fast pass) against the precise line-by-line pass, on every real
run and qrels file of the shared data and on the whitespace variants TREC files come in."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from _shared import format_error

from limelight.data.formats import (
    _fast_run_parts,
    _read_trec_qrels_precise,
    _read_trec_run_precise,
    read_trec_qrels,
    read_trec_run,
    read_trec_runs,
)
from limelight.data.ids import IdMap
from limelight.errors import FormatError


def _real_files(data_dir):
    runs = data_dir / "runs"
    files = sorted(p for p in runs.rglob("*") if p.is_file() and p.suffix not in (".md", ".py"))
    files += sorted((data_dir / "collections").glob("*/qrels.txt"))
    return files


def _outcome(fn, path):
    try:
        return fn(path)
    except FormatError as e:
        return e


def _same_run(a, b) -> bool:
    return (a.qids == b.qids and a.docids == b.docids and np.array_equal(a.q, b.q)
            and np.array_equal(a.d, b.d) and np.array_equal(a.score, b.score)
            and np.array_equal(a.offsets, b.offsets) and a.meta == b.meta and a.name == b.name)


def _same_qrels(a, b) -> bool:
    return (a.qids == b.qids and a.docids == b.docids and np.array_equal(a.q, b.q)
            and np.array_equal(a.d, b.d) and np.array_equal(a.rel, b.rel))


def test_fast_and_precise_passes_agree_on_every_shared_file(data_dir):
    """Same ids, codes, scores (float64), tie order and tag, or the same one-line error."""
    files = _real_files(data_dir)
    assert len(files) >= 30
    n_runs = n_qrels = 0
    for f in files:
        for fast, precise, same in ((read_trec_run, _read_trec_run_precise, _same_run),
                                    (read_trec_qrels, _read_trec_qrels_precise, _same_qrels)):
            a, b = _outcome(precise, f), _outcome(fast, f)
            if isinstance(a, Exception) or isinstance(b, Exception):
                assert str(a) == str(b), f  # the same one-line error (file and line)
                continue
            assert same(a, b), f
            n_runs += fast is read_trec_run
            n_qrels += fast is read_trec_qrels
    assert n_runs >= 8 and n_qrels >= 10


CANONICAL = ("q1 Q0 d3 1 2.5 tag\nq1 Q0 d1 2 2.5 tag\nq1 Q0 d2 3 1.0 tag\n"
             "q2 Q0 dé 1 0.25 tag\nq2 Q0 d1 2 0.25 tag\nq10 Q0 d9 1 -1e-3 tag\n")


@pytest.mark.parametrize("variant", ["canonical", "tabs", "blanks", "crlf", "blank_lines",
                                     "comment", "junk_after_tag", "gzip", "unsorted"])
def test_whitespace_variants_read_as_the_precise_pass_reads_them(tmp_path, variant):
    text = CANONICAL
    if variant == "tabs":
        text = text.replace(" ", "\t")
    elif variant == "blanks":
        text = "\n".join("  " + ln.replace(" ", " \t  ") + "   " for ln in text.splitlines()) + "\n"
    elif variant == "crlf":
        text = text.replace("\n", "\r\n")
    elif variant == "blank_lines":
        text = "\n\n" + text.replace("\n", "\n\n  \n")
    elif variant == "comment":
        text = "# a comment\n" + text
    elif variant == "junk_after_tag":
        text = text.replace("tag\n", "tag more words\n")
    elif variant == "unsorted":
        text = "".join(reversed(text.splitlines(keepends=True)))
    p = tmp_path / ("r.run.gz" if variant == "gzip" else "r.run")
    if variant == "gzip":
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_bytes(text.encode())
    fast, precise = read_trec_run(p), _read_trec_run_precise(p)
    assert _same_run(fast, precise)
    if variant not in ("comment", "junk_after_tag"):  # these two take the precise pass
        _fast_run_parts(p)  # the columnar pass reads it (no fallback)
    assert fast.query("q1")[0].tolist() == ["d3", "d1", "d2"]  # ties: docid descending
    assert fast.score.dtype == np.float64


LONG = ("301\tQ0\tFR940202-2-00150\t1\t  12.345678901234567890123\tSTANDARD\n"
        "301\tQ0\tFR940202-2-00151\t2\t  12.3456789012345678\tSTANDARD\n"
        "301 \tQ0\t FR940202-2-00152\t3\t-0.1000000000000000055511151231257827\tSTANDARD \n"
        "302\tQ0\tLA041990-0151\t1\t1.7976931348623157e308\tSTANDARD\n"
        "302\tQ0\tLA041990-0152\t2\t4.9406564584124654e-324\tSTANDARD\n"
        "302\t\tQ0\tLA041990-0153\t3\t-2.2250738585072014e-308\tSTANDARD\n")


@pytest.mark.parametrize("gz", [False, True])
def test_tabs_mixed_blanks_and_long_floats_take_the_columnar_pass(tmp_path, gz):
    """Real submissions are tab-separated, some with blanks beside the tabs (trec_eval's own
    results.test pads scores with two spaces) and with 17+ digit scores: the columnar pass
    reads them (no fallback) exactly as the precise pass does, to the last bit of every score."""
    p = tmp_path / ("long.run.gz" if gz else "long.run")
    p.write_bytes(gzip.compress(LONG.encode()) if gz else LONG.encode())
    _fast_run_parts(p)  # no _Fallback, no exception
    fast, precise = read_trec_run(p), _read_trec_run_precise(p)
    assert _same_run(fast, precise)
    assert fast.meta["tag"] == "STANDARD"
    want = {d: float(s) for q, _, d, _, s, _ in (ln.split() for ln in LONG.splitlines())}
    got = dict(zip(fast.docids.decode(fast.d).tolist(), fast.score.tolist(), strict=True))
    assert got == want  # bit-exact: Python's float() of each score


@pytest.mark.parametrize("text", [
    "q1\tQ0\td 1\t1\t2.0\tt\nq1\tQ0\td2\t2\t1.0\tt\n",  # a blank inside a tab field: 7 words
    "q1\tQ0\td1\t1\t2.0\tt\nq1 Q0 d2 2 1.0 t\n",  # one line with tabs, one with spaces
    "q1\tQ0\td1\t1\t2.0\tt\t\nq1\tQ0\td2\t2\t1.0\tt\n",  # a trailing tab
    "q1\tQ0\td1\t 1 \t 2.0 \tt\n",  # blanks around numbers only: the tab parse trims them
])
def test_tab_files_with_blanks_read_as_str_split_reads_them(tmp_path, text):
    """A file with tabs is parsed with the tab as delimiter only where that gives the words
    ``str.split`` gives (no blank inside an id or tag); otherwise it is normalised first."""
    p = tmp_path / "t.run"
    p.write_text(text)
    assert _same_run(read_trec_run(p), _read_trec_run_precise(p))
    assert read_trec_runs([p, p])[0].docids.decode(read_trec_run(p).d).tolist() == \
        read_trec_run(p).docids.decode(read_trec_run(p).d).tolist()


@pytest.mark.parametrize("raw, want", [
    (b"a\tb\tc\n", b"a b c\n"),
    (b"  a \t  b\t\t c  \n\t\n d e\t", b"a b c\n\nd e"),
    (b"a" + b" " * 1000 + b"b\n", b"a b\n"),
    (b"a b c\n", b"a b c\n"),
    (b" \n \n", b"\n\n"),
])
def test_normalise_collapses_blanks_and_keeps_every_line(raw, want):
    from limelight.data.formats import _normalise

    out = _normalise(raw)
    assert out == want
    assert out.count(b"\n") == raw.count(b"\n")  # line numbers of later errors do not move


def test_many_runs_share_one_document_map_with_the_qrels_first(data_dir):
    d = data_dir / "runs" / "trec_eval_test"
    qrels = read_trec_qrels(d / "qrels.test")
    paths = [d / "results.test", d / "results-302.test", d / "results.test"]
    runs = read_trec_runs(paths, doc_map=qrels.docids)
    shared = runs[0].docids
    assert all(r.docids is shared for r in runs)
    assert shared.has_prefix(qrels.docids)
    assert shared.strings[:len(qrels.docids)].tolist() == qrels.docids.strings.tolist()
    q2 = qrels.with_doc_map(shared)
    assert q2.docids is shared and np.array_equal(q2.d, qrels.d)  # re-pointed, not re-encoded
    for r, p in zip(runs, paths, strict=True):
        alone = read_trec_run(p)
        assert r.qids == alone.qids and np.array_equal(r.score, alone.score)
        assert (r.docids.decode(r.d) == alone.docids.decode(alone.d)).all()
    assert read_trec_runs(paths, threads=1)[1].docids.strings.tolist() == \
        read_trec_runs(paths, threads=3)[1].docids.strings.tolist()


def test_precise_errors_survive_read_trec_runs(tmp_path, data_dir):
    good = data_dir / "runs" / "trec_eval_test" / "results.test"
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 x 0.5 t\n")
    with pytest.raises(FormatError) as e:
        read_trec_runs([good, bad])
    assert str(e.value) == f"{bad}:2: rank 'x' is not a number"


@pytest.mark.parametrize("content, line, msg", [
    ("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 two 0.5 t\n", 2, "rank 'two' is not a number"),
    ("q1 Q0 d1 - 1.0 t\n", 1, "rank '-' is not a number"),
    ("q1 Q0 d1 inf 1.0 t\n", 1, "rank 'inf' is not a finite number"),
])
def test_non_numeric_rank_is_an_error_naming_file_and_line(tmp_path, content, line, msg):
    p, err = format_error(tmp_path, content, read_trec_run, "rank.run")
    assert err == f"{p}:{line}: {msg}"


def test_non_utf8_and_wrong_columns_keep_their_one_line_errors(tmp_path):
    p = tmp_path / "latin1.run"
    p.write_bytes("q1 Q0 d\xe9 1 1.0 t\n".encode("latin-1"))
    with pytest.raises(FormatError) as e:
        read_trec_run(p)
    assert str(e.value) == (f"{p}:1: not UTF-8 text (byte 0xe9 at column 8); re-save the file "
                            "as UTF-8 (e.g. iconv -f latin1 -t utf-8)")
    p = tmp_path / "cols.qrels"
    p.write_text("q1 0 d1 1\nq1 0 d2 1 extra\n")
    with pytest.raises(FormatError) as e:
        read_trec_qrels(p)
    assert str(e.value).startswith(f"{p}:2: expected 4 columns")


def test_arrow_backed_idmap_behaves_as_a_plain_one():
    import pyarrow as pa

    ids = ["b", "a", "é", "Z", "ab", "10", "9"]
    m, plain = IdMap.from_arrow(pa.array(ids), "document"), IdMap(ids, "document")
    assert m == plain and len(m) == 7 and m[2] == "é" and "ab" in m and m.lookup("Z") == 3
    assert m.lexical_rank().tolist() == plain.lexical_rank().tolist()  # byte-wise, as strcmp
    assert m.encode(["a", "x"], missing=-1).tolist() == [1, -1]
    assert m.nbytes() > 0


def test_many_csv_blocks_give_the_same_ids_and_order(data_dir, monkeypatch, tmp_path):
    """Each CSV block has its own id dictionary: unified in first-seen order."""
    import limelight.data.formats as formats

    monkeypatch.setattr(formats, "_BLOCK_SIZE", 4096)
    d = data_dir / "runs" / "trec_eval_test"
    for f in (d / "results.test", d / "qrels.test"):
        fast = (read_trec_run if f.name.startswith("results") else read_trec_qrels)(f)
        precise = (_read_trec_run_precise if f.name.startswith("results") else _read_trec_qrels_precise)(f)
        assert (_same_run if f.name.startswith("results") else _same_qrels)(fast, precise)
    paths = [d / "results.test", d / "results-302.test"]
    runs = read_trec_runs(paths, doc_map=read_trec_qrels(d / "qrels.test").docids)
    for r, p in zip(runs, paths, strict=True):
        alone = _read_trec_run_precise(p)
        assert (r.docids.decode(r.d) == alone.docids.decode(alone.d)).all()
