"""``limelight exposure compute`` and ``eqi query`` as the fourth newcomer trial met them (issue 52,
items 1, 8, 11, 13, 14, 15), in-process through the CLI (``main`` for one-line errors, Typer's
runner for the rest). The http kind asks a real service on loopback: limelight's BM25 over adi
behind the Elasticsearch API, in a thread of this process (``_search_engine.in_thread``), which
counts the queries it answers and can send Ctrl-C to this process after a given number (a job
interrupted at a known point, without a subprocess)."""

from __future__ import annotations

import gzip
import json

import pytest
from _search_engine import in_thread
from typer.testing import CliRunner

from limelight.cli import app, main
from limelight.data.loaders import load_collection
from limelight.exposure.store import ExposureStore

runner = CliRunner()
N_QUERIES = 200


@pytest.fixture(scope="module")
def log(tmp_path_factory, data_dir):
    """The first 200 queries of the shared query log (about half find nothing in adi)."""
    path = tmp_path_factory.mktemp("log") / "log.tsv"
    with gzip.open(data_dir / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(N_QUERIES + 1)]
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def adi():
    return load_collection("adi")


def invoke(*args, code: int = 0):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == code, (res.output, res.exception)
    return res


def one_line(capsys, *args) -> str:
    """The message of a refused command run through ``main``: status 2, one line, no traceback."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def summary(res) -> dict:
    return json.loads(res.stdout.strip().splitlines()[-1])


def url_args(log, url, out, *more):
    return ["exposure", "compute", "--queries", log, "--url", url, "--preset", "elasticsearch",
            "--collection", "adi", "--depth", 10, "--out", out, "--json", *more]


def answered(count) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


def test_url_store_resumed_or_complete_reports_the_whole_store(tmp_path, log, adi):
    """Items 1 and 8: interrupted after 80 answers (shards of 50), resumed, then run again on
    the complete store: each summary counts the queries with results over the whole store (the
    resumed one counted only its own queries; the rerun on the complete store failed with a
    TypeError)."""
    with in_thread(adi, tmp_path, interrupt_after=80) as (url, count):
        res = invoke(*url_args(log, url, tmp_path / "s", "--shard-size", 50), code=130)
        assert "rerun the same command to resume" in res.output
        resumed = summary(invoke(*url_args(log, url, tmp_path / "s", "--shard-size", 50)))
        again = summary(invoke(*url_args(log, url, tmp_path / "s", "--shard-size", 50)))
    assert answered(count) == N_QUERIES  # each query asked once
    st = ExposureStore.open(tmp_path / "s")
    truth = int((st.n_retrieved() > 0).sum())
    assert 0 < truth < N_QUERIES
    for s in (resumed, again):
        assert (s["queries_with_results"], s["queries_without_results"]) == (truth, N_QUERIES - truth)


def test_url_journal_holds_with_one_shard(tmp_path, log, adi):
    """Item 11: interrupted before its only shard (the default shard size) is finished, the
    rerun asks the service only the queries it had not answered (the journal beside the store,
    OUT.replay, as for ``--engine ray``), and the store equals a store computed in one go."""
    with in_thread(adi, tmp_path, interrupt_after=80) as (url, count):
        res = invoke(*url_args(log, url, tmp_path / "s"), code=130)
        assert "interrupted after 0 of 1 shard (" in res.output and "s.replay" in res.output
        assert 80 <= answered(count) < N_QUERIES
        invoke(*url_args(log, url, tmp_path / "s"))
        assert answered(count) == N_QUERIES  # the rest only: none asked twice
    a = ExposureStore.open(tmp_path / "s")
    assert a.n_queries == N_QUERIES and (tmp_path / "s.replay").is_dir()


def test_run_errors_name_the_cli_options(tmp_path, capsys, data_dir):
    """Item 13: ``--run`` errors suggest the options ``--unknown-docs drop`` and ``--match text``
    (no configuration key a command-line user cannot type), and the options work."""
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    base = ["exposure", "compute", "--queries", qfile, "--collection", "adi", "--depth", 10]
    bad = tmp_path / "bad.run"
    bad.write_text("1 Q0 no-such-doc 1 3.0 x\n1 Q0 2 2 2.0 x\n")
    err = one_line(capsys, *base, "--out", tmp_path / "a", "--run", bad)
    assert "--unknown-docs drop leaves them out" in err and "unknown_docs" not in err
    res = invoke(*base, "--out", tmp_path / "a", "--run", bad, "--unknown-docs", "drop", "--json")
    assert summary(res)["pairs"] == 1
    texts = dict(line.split("\t", 1) for line in qfile.read_text().splitlines())
    by_text = tmp_path / "by_text.jsonl"  # results keyed by the query's text, not its id
    by_text.write_text(json.dumps({"qid": "their-1", "query": texts["1"].strip().upper(), "doc_id": "2",
                                   "score": 1.0}) + "\n")
    err = one_line(capsys, *base, "--out", tmp_path / "b", "--run", by_text)
    assert "--match text matches by query text" in err and "match =" not in err
    res = invoke(*base, "--out", tmp_path / "b", "--run", by_text, "--match", "text",
                 "--json")
    assert summary(res)["queries_with_results"] == 1
    err = one_line(capsys, *base, "--out", tmp_path / "c", "--index", tmp_path, "--match", "text")
    assert "--match goes with --run or --url" in err


def test_trec_run_by_text_takes_its_queries_as_an_option(tmp_path, capsys, data_dir):
    """Item 13: ``--match text`` with a TREC run needs the run's query texts, which the error
    asked for as the TOML key ``queries = "..."``; it names ``--run-queries`` (no key a
    command-line user cannot type), and the option works."""
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    base = ["exposure", "compute", "--queries", qfile, "--collection", "adi", "--depth", 10]
    texts = dict(line.split("\t", 1) for line in qfile.read_text().splitlines())
    theirs = tmp_path / "their_queries.tsv"  # the run's own query ids, with the log's texts
    theirs.write_text(f"their-1\t{texts['1'].strip().upper()}\n")
    run = tmp_path / "by_text.run"
    run.write_text("their-1 Q0 2 1 3.0 x\ntheir-1 Q0 5 2 2.0 x\n")
    err = one_line(capsys, *base, "--out", tmp_path / "a", "--run", run, "--match", "text")
    assert "needs --run-queries" in err and "queries =" not in err, err
    err = one_line(capsys, *base, "--out", tmp_path / "a", "--run", run, "--run-queries", theirs)
    assert err.startswith("error: --run-queries") and "--match text" in err, err
    res = invoke(*base, "--out", tmp_path / "a", "--run", run, "--match", "text", "--run-queries",
                 theirs, "--json")
    assert summary(res)["queries_with_results"] == 1 and summary(res)["pairs"] == 2


def test_compute_help_shows_the_system_table():
    """Item 14: the help of ``--system`` names the ``[system]`` table (Rich took it for markup)."""
    res = invoke("exposure", "compute", "--help")
    assert "[system]" in res.output


def test_exact_reverse_on_a_run_store_names_the_capability(tmp_path, capsys, data_dir):
    """Item 15: ``eqi query --text`` over a store of a run says that exact reverse search needs a
    system whose kind can re-score queries, and which kinds can (from the registry), not
    "unknown model 'run'"."""
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    run = tmp_path / "r.run"
    run.write_text("1 Q0 2 1 3.0 x\n2 Q0 3 1 2.0 x\n")
    invoke("exposure", "compute", "--queries", qfile, "--collection", "adi", "--depth", 10,
           "--out", tmp_path / "s", "--run", run)
    err = one_line(capsys, "eqi", "query", "--store", tmp_path / "s", "--text", "library catalogues")
    assert "unknown model" not in err
    assert "needs a system whose kind can re-score" in err and "a run system, which cannot" in err
    assert "kinds that can: bm25, dense)" in err
