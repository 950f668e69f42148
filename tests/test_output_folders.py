"""Nothing of the user's is lost: every command that writes a folder refuses one it did not write
(one line, exit 2, the folder untouched), replaces its own output of the same kind, and refuses
its own output when a foreign file sits inside; file outputs refuse a folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _inproc import run_cli

from limelight._io import OWNER_FILE, OutputRefusedError, atomic_dir, check_output_dir, read_owner


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in this process, in ``cwd`` (tests/_inproc.py: the console script's
    entry point, exit status and streams, without a new interpreter's imports)."""
    return run_cli(*args, cwd=cwd)


def one_line_refusal(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    assert "Traceback" not in p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def users_folder(root: Path) -> Path:
    """A folder of the user's: their collection and queries, and a subfolder."""
    d = root / "mycoll"
    (d / "notes").mkdir(parents=True)
    (d / "docs.jsonl").write_text('{"id": "a", "text": "apple pie"}\n{"id": "b", "text": "pear tart"}\n')
    (d / "queries.tsv").write_text("1\tapple\n")
    (d / "notes" / "todo.txt").write_text("keep me")
    return d


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ---- the helper ---------------------------------------------------------------------------------
def test_atomic_dir_refuses_a_foreign_folder_and_keeps_it(tmp_path):
    d = users_folder(tmp_path)
    before = snapshot(d)
    with pytest.raises(OutputRefusedError, match="not written by limelight"), atomic_dir(d, "index"):
        raise AssertionError("the body must not run")
    assert snapshot(d) == before
    assert [p.name for p in tmp_path.iterdir()] == ["mycoll"]  # no temporary left behind


def test_atomic_dir_replaces_its_own_output_of_the_same_kind(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out, "index") as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.npy").write_bytes(b"1")
        (tmp / "meta.json").write_text("{}")
    assert read_owner(out) == {"kind": "index", "files": ["meta.json", "sub/a.npy"]}
    with atomic_dir(out, "index") as tmp:
        (tmp / "meta.json").write_text('{"v": 2}')
    assert snapshot(out) == {"meta.json": b'{"v": 2}', OWNER_FILE: (out / OWNER_FILE).read_bytes()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_own_output_with_a_foreign_file_inside_is_refused_not_emptied(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out, "index") as tmp:
        (tmp / "meta.json").write_text("{}")
    (out / "mine.txt").write_text("the user's")
    with pytest.raises(OutputRefusedError, match="'mine.txt'"), atomic_dir(out, "index"):
        pass
    assert (out / "mine.txt").read_text() == "the user's"
    with pytest.raises(OutputRefusedError, match="holds limelight's index output, not an EQI model"):
        check_output_dir(tmp_path / "out", "EQI model")


def test_the_current_folder_and_its_parents_are_refused(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for p in (".", "..", str(work), "/"):
        with pytest.raises(OutputRefusedError, match="current folder or one above it"):
            check_output_dir(p, "index")
    check_output_dir(work / "empty-new", "index")  # a new folder is fine


def test_an_empty_folder_and_a_file_path(tmp_path):
    (tmp_path / "empty").mkdir()
    with atomic_dir(tmp_path / "empty", "index") as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / "empty" / "x").read_text() == "x"
    (tmp_path / "f.txt").write_text("user")
    with pytest.raises(OutputRefusedError, match="is a file"):
        check_output_dir(tmp_path / "f.txt", "index")
    assert (tmp_path / "f.txt").read_text() == "user"


# ---- every command that writes a folder ---------------------------------------------------------
def test_index_out_never_deletes_the_users_files(tmp_path):
    d = users_folder(tmp_path)
    before = snapshot(d)
    p = cli("index", "--collection", str(d / "docs.jsonl"), "--out", str(d))
    one_line_refusal(p, str(d), "not written by limelight")
    assert snapshot(d) == before
    # --out . and --out .. (the working directory and its parent) are refused, nothing emptied
    for out in (".", ".."):
        p = cli("index", "--collection", "docs.jsonl", "--out", out, cwd=d)
        one_line_refusal(p, "current folder")
        assert snapshot(d) == before


def test_index_replaces_its_own_index_and_refuses_a_foreign_file_inside(tmp_path):
    d = users_folder(tmp_path)
    out = tmp_path / "idx"
    for _ in range(2):  # a rebuild replaces limelight's own index
        p = cli("index", "--collection", str(d / "docs.jsonl"), "--out", str(out))
        assert p.returncode == 0, p.stderr
    assert json.loads((out / "meta.json").read_text())["n_docs"] == 2
    (out / "mine.txt").write_text("the user's")
    p = cli("index", "--collection", str(d / "docs.jsonl"), "--out", str(out))
    one_line_refusal(p, "mine.txt", "limelight did not write")
    assert (out / "mine.txt").read_text() == "the user's"


def test_folder_writers_refuse_a_foreign_folder(tmp_path):
    d = users_folder(tmp_path)
    before = snapshot(d)
    calls = [
        ["eqi", "train", "--store", str(tmp_path / "nostore"), "--out", str(d)],
        ["generate", "dataset", "--catalog", "debian", "--out", str(d)],
        ["generate", "train", "--catalog", "debian", "--out", str(d), "--steps", "1"],
        ["exposure", "compute", "--index", str(tmp_path / "noindex"), "--queries", str(d / "queries.tsv"),
         "--out", str(d)],
        ["audit", "quick", "--out", str(d)],
    ]
    for args in calls:
        p = cli(*args)
        one_line_refusal(p, str(d))
        assert snapshot(d) == before, args


def test_resumable_writers_refuse_a_file(tmp_path):
    f = tmp_path / "results.txt"
    f.write_text("the user's")
    for args in (["audit", "quick", "--out", str(f)],
                 ["exposure", "compute", "--index", str(tmp_path / "noindex"), "--queries", str(f),
                  "--out", str(f)]):
        p = cli(*args)
        one_line_refusal(p, str(f), "is a file")
        assert f.read_text() == "the user's"


def test_file_writers_refuse_a_folder(tmp_path, data_dir):
    d = users_folder(tmp_path)
    before = snapshot(d)
    queries = str(data_dir / "collections" / "adi" / "queries.tsv")
    p = cli("index", "--collection", "adi", "--out", str(tmp_path / "idx"))
    assert p.returncode == 0, p.stderr
    calls = [
        ["retrieve", "--index", str(tmp_path / "idx"), "--queries", queries, "--out", str(d)],
        ["rerank", "train", "adi", "--out", str(d)],
        ["rerank", "run", "adi", "--checkpoint", str(tmp_path / "none.pt"), "--out", str(d)],
        ["variations", "--queries", queries, "--out", str(d)],
    ]
    for args in calls:
        p = cli(*args)
        one_line_refusal(p, str(d), "is a folder")
        assert snapshot(d) == before, args


def test_sharded_replay_refuses_a_foreign_work_folder_and_keeps_it(tmp_path):
    """``exposure compute --url … --engine ray`` journals each shard under ``OUT.replay``: a
    folder there that limelight did not create is refused (one line) and left as it was; the
    replay's own folder, marked when created, is taken again (a resumed job)."""
    from limelight.data.ids import IdMap
    from limelight.retrieval.spec import System
    from limelight.scale.replay import WORK_FILE, ShardedReplay

    spec = System.of("http", url="http://127.0.0.1:9/", preset="elasticsearch")
    docs = IdMap(["a", "b"], kind="document")
    mine = tmp_path / "out.replay"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefusedError, match=r"out\.replay: exists and is not a sharded replay's work folder"):
        ShardedReplay(spec, docs, mine)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "mine"
    own = tmp_path / "st.replay"
    ShardedReplay(spec, docs, own)
    assert sorted(p.name for p in own.iterdir()) == [WORK_FILE]
    (own / "shards").mkdir()  # what a first run left
    ShardedReplay(spec, docs, own)  # resumed: taken again
    assert sorted(p.name for p in own.iterdir()) == [WORK_FILE, "shards"]
