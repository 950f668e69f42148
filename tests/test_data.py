"""The data model and formats, on the shared data."""

from __future__ import annotations

import gzip
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from _inproc import run_cli
from _shared import format_error

from limelight.data import (
    IdMap,
    Qrels,
    Queries,
    Run,
    load_catalog,
    load_dataset,
    load_query_log,
    read_queries_tsv,
    read_run_parquet,
    read_trec_qrels,
    read_trec_run,
    write_run_parquet,
    write_trec_qrels,
    write_trec_run,
)
from limelight.errors import FormatError, LimelightError, UnknownIdError


def test_idmap_roundtrip_and_errors():
    m, codes = IdMap.from_unique(["b", "a", "b", "c"], kind="document")
    assert list(m) == ["b", "a", "c"]
    assert codes.tolist() == [0, 1, 0, 2]
    assert m.decode(codes).tolist() == ["b", "a", "b", "c"]
    assert m.lookup("c") == 2
    with pytest.raises(UnknownIdError, match="unknown document id 'zz'"):
        m.encode(["a", "zz"])
    assert m.encode(["a", "zz"], missing=-1).tolist() == [1, -1]
    # lexical rank: byte-wise string order, as trec_eval's strcmp
    assert m.lexical_rank().tolist() == [1, 0, 2]
    with pytest.raises(ValueError, match="duplicate"):
        IdMap(["x", "x"])


def test_run_tie_order_is_trec_eval(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("q1 Q0 d1 1 1.0 t\nq1 Q0 d3 2 1.0 t\nq1 Q0 d2 3 2.0 t\nq2 Q0 d9 1 0.5 t\n")
    run = read_trec_run(p)
    docs, scores = run.query("q1")
    # score descending, then docid descending; the file's rank column is ignored
    assert docs.tolist() == ["d2", "d3", "d1"]
    assert scores.tolist() == [2.0, 1.0, 1.0]
    assert run.ranks().tolist() == [1, 2, 3, 1]


def test_trec_run_roundtrip_gz_and_parquet(tmp_path, trec_eval_dir):
    run = read_trec_run(trec_eval_dir / "results.test")
    assert run.n_queries == len(set(line.split()[0] for line in open(trec_eval_dir / "results.test")))
    out = tmp_path / "run.txt.gz"
    write_trec_run(run, out)
    with gzip.open(out, "rt") as f:
        first = f.readline().split()
    assert first[3] == "1" and len(first) == 6
    back = read_trec_run(out)
    assert back.to_dict().keys() == run.to_dict().keys()
    np.testing.assert_allclose(back.score, run.score, atol=1e-6)
    assert (back.docids.decode(back.d) == run.docids.decode(run.d)).all()
    pq = tmp_path / "run.parquet"
    write_run_parquet(run, pq)
    again = read_run_parquet(pq)
    assert again.to_dict() == run.to_dict()


def test_run_conversions(trec_eval_dir):
    run = read_trec_run(trec_eval_dir / "results.test")
    d = run.to_dict()
    assert Run.from_dict(d).to_dict() == d
    df = run.to_pandas()
    assert list(df.columns) == ["query_id", "doc_id", "score", "rank"]
    assert Run.from_pandas(df).to_dict() == d
    assert Run.from_ir_measures(run.to_ir_measures()).to_dict() == d
    assert Run.from_ranx(run.to_ranx()).to_dict() == d
    top = run.topk(5)
    assert top.depths().max() == 5
    assert top.query("301")[0].tolist() == run.query("301")[0][:5].tolist()


def test_qrels_conversions(trec_eval_dir):
    q = read_trec_qrels(trec_eval_dir / "qrels.test")
    d = q.to_dict()
    assert Qrels.from_dict(d).to_dict() == d
    assert Qrels.from_pandas(q.to_pandas()).to_dict() == d
    assert Qrels.from_ir_measures(q.to_ir_measures()).to_dict() == d
    assert Qrels.from_ranx(q.to_ranx()).to_dict() == d  # ranx keeps grade-0 judgments too
    n_rel = q.n_relevant()
    assert n_rel.sum() == int((q.rel >= 1).sum())


def test_run_words_after_the_tag_are_ignored_like_trec_eval(tmp_path):
    p = tmp_path / "junk.run"
    p.write_text("q1 Q0 d1 1 2.0 tag more junk here\nq1 Q0 d2 2 1.0 tag\n")
    assert read_trec_run(p).to_dict() == {"q1": {"d1": 2.0, "d2": 1.0}}


@pytest.mark.parametrize("read, content, line, msg", [
    (read_trec_run, "q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2\n", 2, "expected 6 columns"),
    (read_trec_run, "q1 Q0 d1 1 abc t\n", 1, "not a number"),
    (read_trec_run, "q1 Q0 d1 1 nan t\n", 1, "not a finite number"),
    (read_trec_run, "q1 Q0 d1 1 1.0 t\nq1 Q0 d1 2 0.5 t\n", 2, "duplicate result"),
    (read_trec_run, "\n", None, "empty run"),
    (read_trec_qrels, "q1 0 d1 1\nq1 0 d2\n", 2, "expected 4 columns"),
    (read_trec_qrels, "q1 0 d1 x\n", 1, "not a number"),
    (read_trec_qrels, "q1 0 d1 1.5\n", 1, "not an integer"),
    (read_trec_qrels, "q1 0 d1 1\nq1 0 d1 0\n", 2, "duplicate judgment"),
])
def test_a_malformed_run_or_qrels_names_file_and_line(tmp_path, read, content, line, msg):
    p, err = format_error(tmp_path, content, read)
    assert msg in err and err.startswith(f"{p}:{line}:" if line else f"{p}:")


def test_a_missing_run_file(tmp_path):
    with pytest.raises(LimelightError, match="no such file"):
        read_trec_run(tmp_path / "nope.run")


def test_qrels_unknown_docs_against_collection(tmp_path):
    ds = load_dataset("adi")
    p = tmp_path / "q.txt"
    p.write_text("1 0 17 1\n1 0 not-a-doc 1\n")
    with pytest.raises(FormatError, match="unknown document id 'not-a-doc'") as e:
        read_trec_qrels(p, doc_map=ds.collection.ids, strict_docs=True)
    assert ":2:" in str(e.value)
    lenient = read_trec_qrels(p, doc_map=ds.collection.ids)
    assert len(lenient) == 2
    out = tmp_path / "out.qrels"
    write_trec_qrels(lenient, out)
    assert read_trec_qrels(out).to_dict() == lenient.to_dict()


def test_queries_tsv_errors(tmp_path):
    p, err = format_error(tmp_path, "1\thello\n2\t   \n", read_queries_tsv, "q.tsv")
    assert err.startswith(f"{p}:2:") and "query '2' is empty" in err
    _, err = format_error(tmp_path, "1\thello\n1\tworld\n", read_queries_tsv, "q.tsv")
    assert "duplicate query id '1'" in err
    with pytest.raises(LimelightError, match="weight"):
        Queries.from_lists(["a"], ["x"], weights=[-1.0])


@pytest.mark.parametrize("name, n_docs, n_queries, n_qrels", [
    ("adi", 82, 35, 170), ("cranfield", 1400, 225, 1837), ("med", 1033, 30, 696),
    ("cacm", 3204, 64, 796), ("npl", 11429, 93, 2083), ("scifact", 5183, 300, 339),
])
def test_shared_collections_load(name, n_docs, n_queries, n_qrels):
    ds = load_dataset(name)
    assert len(ds.collection) == n_docs - (name == "cacm")  # CACM repeats id 28 once
    assert len(ds.queries) == n_queries
    assert len(ds.qrels) == n_qrels
    assert ds.qrels.docids is ds.collection.ids or set(ds.qrels.docids) >= set()
    # title and text joined by a space (the reference setting)
    rec = ds.collection.doc(ds.collection.ids[0])
    assert rec["indexed_text"] == f"{rec.get('title') or ''} {rec.get('text') or ''}".strip()


def test_catalogs_and_query_log():
    deb = load_catalog("debian")
    assert len(deb) == 63666
    doc = deb.doc("0ad")
    assert doc["section"] == "games" and "use::gameplaying" in doc["tags"]
    assert "strategy game of ancient warfare" in doc["indexed_text"]
    movies = load_catalog("movies")
    assert len(movies) == 3201 and len(movies.fields["Title"]) == 3201
    log = load_query_log()
    assert log.weights.sum() == 149104  # every log entry counted once
    assert len(log) == len(set(log.texts.tolist()))
    assert (log.texts == np.char.lower(log.texts.astype(str)).astype(object)).all()
    raw = load_query_log(distinct=False)
    assert len(raw) == 149104


def test_collection_pandas_roundtrip():
    ds = load_dataset("adi")
    df = ds.collection.to_pandas()
    assert {"doc_id", "text", "title"} <= set(df.columns)
    q = Queries.from_pandas(ds.queries.to_pandas())
    assert q.to_dict() == ds.queries.to_dict()
    assert isinstance(q.to_pandas(), pd.DataFrame)


def test_cli_user_error_is_one_line(tmp_path):
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 d1 1 abc t\n")
    code = ("import sys; sys.argv=['limelight','info']; from limelight.data import read_trec_run;"
            "from limelight.cli import main; import limelight.cli as c;"
            f"c.app.command('boom')(lambda: read_trec_run({str(bad)!r}));"
            "sys.argv=['limelight','boom']; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0
    assert p.stderr.startswith(f"error: {bad}:1: score 'abc' is not a number")


def test_duplicate_doc_ids(tmp_path):
    _, err = format_error(tmp_path, '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n',
                          lambda p: load_dataset(p.parent), "docs.jsonl")
    assert ":2:" in err and "duplicate document id 'a'" in err
    with pytest.warns(UserWarning, match="first kept"):
        ds = load_dataset("cacm")
    assert ds.collection.doc("28")["title"] == "Request for Methods or Programs"


# ---- one decoding path, one message for non-UTF-8 bytes (issue 42) ----------------------------
def _not_utf8(path, line: int, byte: int, col: int) -> str:
    return (f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x} at column {col}); re-save the file "
            "as UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def _latin1(path, text: str, gz: bool = False):
    data = text.encode("latin-1")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_non_utf8_jsonl_is_told_at_its_own_line(tmp_path, gz):
    """The text stream decoded blocks ahead of the line it returned: a bad byte on line 2 (or
    line 400) was reported at line 1 (or wherever the block began)."""
    from limelight.data.formats import read_jsonl, read_jsonl_docs

    good = "".join(f'{{"id": "d{i}", "text": "plain text {i}"}}\n' for i in range(1, 400))
    p = _latin1(tmp_path / ("docs.jsonl.gz" if gz else "docs.jsonl"),
                good + '{"id": "d400", "text": "café"}\n', gz)
    for read in (read_jsonl, read_jsonl_docs):
        with pytest.raises(FormatError) as e:
            read(p)
        assert str(e.value) == _not_utf8(p, 400, 0xE9, 28)
    p = _latin1(tmp_path / "two.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": "é"}\n')
    with pytest.raises(FormatError) as e:
        read_jsonl_docs(p)
    assert str(e.value) == _not_utf8(p, 2, 0xE9, 22)


def test_non_utf8_collection_folder_and_catalog_name_the_line(tmp_path):
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "x"}\n', encoding="utf-8")
    _latin1(tmp_path / "queries.tsv", "q1\tfine\nq2\tthé vert\n")
    with pytest.raises(FormatError) as e:
        load_dataset(tmp_path)
    assert str(e.value) == _not_utf8(tmp_path / "queries.tsv", 2, 0xE9, 6)
    movies = _latin1(tmp_path / "films.json", '[{"Title": "A"},\n {"Title": "Amélie"}]\n')
    with pytest.raises(FormatError) as e:
        load_catalog(movies)
    assert str(e.value) == _not_utf8(movies, 2, 0xE9, 15)


@pytest.mark.parametrize("gz", [False, True])
def test_every_query_reader_gives_the_same_non_utf8_line(tmp_path, gz):
    """``retrieve`` reads queries with ``load_queries``, ``exposure compute`` with
    ``load_queries_file``; a TSV and the query log's format: one message, line and column."""
    from limelight.data.loaders import load_queries, load_queries_file

    tsv = _latin1(tmp_path / ("q.tsv.gz" if gz else "q.tsv"), "q1\tfine\nq2\tcafé au lait\n", gz)
    log = _latin1(tmp_path / ("log.tsv.gz" if gz else "log.tsv"),
                  "source\tqid\tquery\nmq\t1\tfine\nmq\t2\tcrème brûlée\n", gz)
    for read in (read_queries_tsv, load_queries, load_queries_file, load_query_log):
        with pytest.raises(FormatError) as e:
            read(tsv)
        assert str(e.value) == _not_utf8(tsv, 2, 0xE9, 7)
        with pytest.raises(FormatError) as e:
            read(log)
        assert str(e.value) == _not_utf8(log, 3, 0xE8, 8)


@pytest.mark.parametrize("gz", [False, True])
def test_non_utf8_runs_and_qrels_name_the_line_in_both_passes(tmp_path, gz):
    from limelight.data.formats import (
        _read_trec_qrels_precise,
        _read_trec_run_precise,
        read_trec_runs,
    )

    sfx = ".gz" if gz else ""
    run = _latin1(tmp_path / f"r.run{sfx}", "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq1 Q0 dé 3 0.5 t\n", gz)
    qrels = _latin1(tmp_path / f"q.qrels{sfx}", "q1 0 d1 1\nq1\t0\tdë\t1\n", gz)
    for read in (read_trec_run, _read_trec_run_precise, lambda p: read_trec_runs([p, p])):
        with pytest.raises(FormatError) as e:
            read(run)
        assert str(e.value) == _not_utf8(run, 3, 0xE9, 8)
    for read in (read_trec_qrels, _read_trec_qrels_precise):
        with pytest.raises(FormatError) as e:
            read(qrels)
        assert str(e.value) == _not_utf8(qrels, 2, 0xEB, 7)


def test_retrieve_with_a_latin1_query_file_names_line_and_fix(tmp_path):
    """Through the real entry point: one line, exit 2, the line and the way to fix the file."""
    idx = tmp_path / "idx"
    cmd = [sys.executable, "-m", "limelight.cli"]
    p = run_cli("index", "--collection", "adi", "--out", str(idx))  # the index: in this process
    assert p.returncode == 0, p.stderr
    q = _latin1(tmp_path / "q.tsv", "1\tcomputer science\n2\tthéorie des graphes\n")
    p = subprocess.run([*cmd, "retrieve", "--index", str(idx), "--queries", str(q),
                        "--out", str(tmp_path / "run.txt")], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr == f"error: {_not_utf8(q, 2, 0xE9, 5)}\n"


def test_document_errors_name_the_file_line_after_blank_lines(tmp_path):
    p = tmp_path / "docs.jsonl"
    p.write_text('{"id": "a", "text": "x"}\n\n\n{"text": "no id"}\n', encoding="utf-8")
    with pytest.raises(FormatError) as e:
        load_dataset(tmp_path)
    assert str(e.value) == f"{p}:4: document without 'id'"
