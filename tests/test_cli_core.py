"""The core CLI (index, search, retrieve, info) end to end on a shared collection."""

from __future__ import annotations

import json
import subprocess

import ir_measures
import pytest
from _inproc import run_cli
from ir_measures import nDCG
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data import load_dataset, read_trec_run

runner = CliRunner()


def cli(*args: str) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in this process (tests/_inproc.py: the console script's entry point)."""
    return run_cli(*args)


@pytest.fixture(scope="module")
def adi_index(tmp_path_factory):
    out = tmp_path_factory.mktemp("idx") / "adi"
    res = runner.invoke(app, ["index", "--collection", "adi", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_index_search_retrieve(adi_index, tmp_path, data_dir):
    res = runner.invoke(app, ["search", "--index", str(adi_index), "--json", "--k", "5",
                              "information retrieval systems"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["score"] >= rows[-1]["score"]
    run_path = tmp_path / "adi.run"
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    res = runner.invoke(app, ["retrieve", "--index", str(adi_index), "--queries", str(qfile),
                              "--k", "1000", "--out", str(run_path)])
    assert res.exit_code == 0, res.output
    run = read_trec_run(run_path)
    assert run.n_queries == 35
    ds = load_dataset("adi")
    score = ir_measures.calc_aggregate([nDCG @ 10], ds.qrels.to_ir_measures(), run.to_ir_measures())[nDCG @ 10]
    assert abs(score - 0.422) <= 0.01  # the README's bm25s reference point
    info = runner.invoke(app, ["info", "--index", str(adi_index)])
    assert json.loads(info.output)["n_docs"] == 82


def test_cli_errors_are_one_line(adi_index, tmp_path):
    p = cli("search", "--index", str(adi_index), "   ")
    assert p.returncode == 2 and p.stderr.strip() == "error: empty query"
    p = cli("search", "--index", str(tmp_path / "nowhere"), "x")
    assert p.returncode == 2 and "not a limelight index" in p.stderr and p.stderr.count("\n") == 1
    p = cli("retrieve", "--index", str(adi_index), "--queries", str(tmp_path / "none.tsv"),
            "--out", str(tmp_path / "r.run"))
    assert p.returncode == 2 and "no such file" in p.stderr
    assert not (tmp_path / "r.run").exists()
    p = cli("search", "--index", str(adi_index), "--model", "dense", "x")
    assert p.returncode == 2 and "no dense index" in p.stderr


def test_corrupt_index_is_named(adi_index, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(adi_index, broken)
    arrays = sorted((broken / "bm25").glob("*.npy"))
    arrays[0].write_bytes(b"garbage")
    p = cli("search", "--index", str(broken), "x")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and str(broken / "bm25") in p.stderr


def test_index_is_atomic(tmp_path):
    # a collection that fails to load leaves no half-written index behind
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"id": "1", "text": "a"}\n{oops\n')
    out = tmp_path / "idx"
    p = cli("index", "--collection", str(bad), "--out", str(out))
    assert p.returncode == 2 and f"{bad}:2" in p.stderr
    assert not out.exists()
    assert not any(x.name.startswith(".idx") for x in tmp_path.iterdir())


# ---- issue 24: a new user's session ---------------------------------------------------------------


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("error: ")
    for n in needles:
        assert n in p.stderr, p.stderr


def test_k_below_one_is_an_error_naming_the_value(adi_index, tmp_path, data_dir):
    # issue 24 item 3: --k 0 used to return every document
    one_line_error(cli("search", "--index", str(adi_index), "--k", "0", "library"), "--k", "got 0")
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    out = tmp_path / "r.run"
    one_line_error(cli("retrieve", "--index", str(adi_index), "--queries", str(qfile), "--k", "0",
                       "--out", str(out)), "--k", "got 0")
    one_line_error(cli("retrieve", "--index", str(adi_index), "--queries", str(qfile), "--k", "-3",
                       "--out", str(out)), "got -3")
    assert not out.exists()


def test_huge_k_is_capped_at_the_collection(adi_index, tmp_path, data_dir):
    # issue 24 item 6: --k 10^12 was a MemoryError
    p = cli("search", "--index", str(adi_index), "--k", "1000000000000", "--json", "library")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    rows = json.loads(p.stdout)
    assert 0 < len(rows) <= 82
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    out = tmp_path / "r.run"
    p = cli("retrieve", "--index", str(adi_index), "--queries", str(qfile), "--k", "99999999999999",
            "--out", str(out))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    full = tmp_path / "full.run"
    assert cli("retrieve", "--index", str(adi_index), "--queries", str(qfile), "--k", "82",
               "--out", str(full)).returncode == 0
    assert out.read_text() == full.read_text()  # capped at the 82 documents


def test_version():
    # issue 24 item 16
    from limelight import __version__

    p = cli("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"limelight {__version__}", p.stdout + p.stderr


def test_broken_docs_jsonl_error_is_not_cut(tmp_path, data_dir):
    # issue 24 item 16: "invalid JSON (Invalid control character at)" stopped mid-sentence
    lines = (data_dir / "collections" / "adi" / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "docs.jsonl"
    broken = lines[1].replace('"text": "', '"text": "\x01', 1)  # a raw control character
    assert broken != lines[1]
    bad.write_text("\n".join([lines[0], broken, *lines[2:5]]) + "\n")
    p = cli("index", "--collection", str(bad), "--out", str(tmp_path / "idx"))
    one_line_error(p, f"{bad}:2: invalid JSON", "column")
    assert not p.stderr.rstrip().endswith(" at)")


def test_progress_lines_when_stderr_is_not_a_terminal(adi_index, tmp_path, data_dir, monkeypatch):
    # issue 24 item 16: piped output was silent during long jobs; now a plain line every few s
    # (in-process: run_cli's captured stderr is not a terminal, as a pipe is not)
    import gzip

    with gzip.open(data_dir / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        head = [next(f) for _ in range(3001)]  # the header and 3,000 real queries
    qfile = tmp_path / "log.tsv"
    qfile.write_text("".join(head), encoding="utf-8")
    monkeypatch.setenv("LIMELIGHT_PROGRESS_SECONDS", "0")
    p = run_cli("retrieve", "--index", adi_index, "--queries", qfile, "--k", "10", "--out", tmp_path / "r.run")
    assert p.returncode == 0, p.stderr
    assert "retrieving: 2048/3000 (68%)" in p.stderr and "retrieving: 3000/3000 (100%)" in p.stderr
    p = run_cli("index", "--collection", "adi", "--out", tmp_path / "idx")
    assert p.returncode == 0 and "BM25: analyzing adi: 82/82 (100%)" in p.stderr, p.stderr
    p = run_cli("index", "--collection", "adi", "--out", tmp_path / "idx-dense", "--dense")
    assert p.returncode == 0 and "encoding adi: 82/82 (100%)" in p.stderr, p.stderr


def test_readme_tour_is_consistent():
    # issue 24 item 16: the tour wrote --out st and read --store st/scifact; it must run verbatim
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A short tour", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = []
    for ln in tour.replace("\\\n", " ").splitlines():
        ln = ln.split("#", 1)[0].strip()
        if ln.startswith("limelight "):
            commands.append(shlex.split(ln))
    assert len(commands) >= 15
    written: set[str] = set()
    for cmd in commands:
        assert not [w for w in cmd if re.fullmatch(r"[A-Z][A-Z_]+", w)], f"placeholder in {cmd}"
        for opt in ("--store", "--index", "--audit", "--checkpoint", "-c"):
            if opt in cmd and cmd[1] not in ("robustness",):
                value = cmd[cmd.index(opt) + 1]
                assert value in written, f"{' '.join(cmd)}: {opt} {value} is not written earlier"
        if "--out" in cmd:
            written.add(cmd[cmd.index("--out") + 1])
    result = runner.invoke(app, ["--help"])
    names = set(re.findall(r"│ (\w[\w-]*) ", result.output))
    assert {c[1] for c in commands} <= names, {c[1] for c in commands} - names


# ---- issue 42: ids TREC files can hold; non-string texts warned, in one line -------------------
GOOD_DOCS = ['{"id": "d1", "title": "solar power", "text": "panels on roofs"}',
             '{"id": 7, "title": "wind power", "text": "turbines at sea"}']


@pytest.mark.parametrize("bad, words", [
    ('{"id": "", "title": "t", "text": "x"}', "empty document 'id'"),
    ('{"id": "d 3", "title": "t", "text": "x"}', "document id 'd 3' contains whitespace"),
    ('{"id": "d\\t3", "title": "t", "text": "x"}', "document id 'd\\t3' contains whitespace"),
    ('{"id": null, "title": "t", "text": "x"}', "document 'id' is null"),
    ('{"id": ["d3"], "title": "t", "text": "x"}', "document 'id' must be a string or an integer, not list"),
    ('{"title": "t", "text": "x"}', "document without 'id'"),
])
def test_index_refuses_ids_trec_files_cannot_hold(tmp_path, bad, words):
    """Issue 42: an empty id, an id with a space or a tab, a null id were indexed; ``retrieve``
    then wrote run lines that ``evaluate`` rejects. One line naming file:line, exit 2."""
    f = tmp_path / "docs.jsonl"
    f.write_text("\n".join([GOOD_DOCS[0], "", GOOD_DOCS[1], bad]) + "\n")  # a blank line 2
    p = cli("index", "--collection", str(f), "--out", str(tmp_path / "idx"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"error: {f}:4: {words}"), p.stderr
    assert not (tmp_path / "idx").exists()


def test_index_warns_once_with_a_count_on_non_string_texts(tmp_path):
    """Issue 42 (items 2 and 8): non-string titles and texts are indexed as text with one
    warning that counts them; the CLI shows it as one ``warning:`` line, no Python source."""
    f = tmp_path / "docs.jsonl"
    f.write_text("\n".join([*GOOD_DOCS, '{"id": "d3", "title": 2019, "text": "a year"}',
                            '{"id": "d4", "title": null, "text": ["list", "of words"]}']) + "\n")
    p = cli("index", "--collection", str(f), "--out", str(tmp_path / "idx"))
    assert p.returncode == 0, p.stderr
    warned = [ln for ln in p.stderr.splitlines() if "non-string" in ln]
    assert warned == [f"warning: {f}: 2 document(s) with a non-string title or text (first: line 3, "
                      "title = 2019), indexed as text"]
    assert ".py:" not in p.stderr and "UserWarning" not in p.stderr
    search = runner.invoke(app, ["search", "--index", str(tmp_path / "idx"), "--json", "words"])
    assert [r["doc_id"] for r in json.loads(search.output)] == ["d4"]
    search = runner.invoke(app, ["search", "--index", str(tmp_path / "idx"), "--json", "2019"])
    assert [r["doc_id"] for r in json.loads(search.output)] == ["d3"]


def test_cli_warnings_are_one_line_without_python_source(tmp_path):
    """Issue 42: warnings reached CLI users as Python's ``file.py:75: UserWarning: ...`` plus
    the source line; the CLI prints ``warning: MESSAGE``, one line each (here: the repeated id
    of the shared CACM, dropped while indexing)."""
    p = cli("index", "--collection", "cacm", "--out", str(tmp_path / "idx"))
    assert p.returncode == 0, p.stderr
    warned = [ln for ln in p.stderr.splitlines() if "duplicate document id" in ln]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "docs.jsonl:" in warned[0]
    assert warned[0].endswith("dropped (first kept)")
    assert "UserWarning" not in p.stderr and ".py:" not in p.stderr and "warnings.warn" not in p.stderr
