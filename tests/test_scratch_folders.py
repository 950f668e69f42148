"""A resumable job's scratch folder (``limelight._io.scratch_dir``): a query log's distinct
queries are kept on disk inside the job's own output folder, not the system's temporary
folder, so that a killed job (SIGKILL: no clean-up runs) leaves nothing in the temporary folder
and the rerun that resumes it removes what it left."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal

import pytest
from _shared import cli_until
from typer.testing import CliRunner

from limelight._io import (
    OWNER_FILE,
    SCRATCH_PREFIX,
    OutputRefusedError,
    check_resumable_dir,
    scratch_dir,
)
from limelight.audit.layout import AuditDir
from limelight.cli import app
from limelight.exposure.store import ExposureStore

runner = CliRunner()
N_QUERIES, SHARD = 120, 5
DONE = re.compile(r": ([1-9]\d*)/(\d+) \(")  # a progress line with something done
SCRATCH = f"{SCRATCH_PREFIX}queries"


def invoke(*args, env=None):
    res = runner.invoke(app, [str(a) for a in args], env=env)
    assert res.exit_code == 0, (res.output, res.exception)
    return res


def test_scratch_dir_is_made_in_the_output_and_removed(tmp_path):
    out = tmp_path / "a" / "b"
    with scratch_dir(out, "queries") as s:
        assert s == out / SCRATCH and s.is_dir()
        (s / "table.arrow").write_text("x")
        check_resumable_dir(out, "manifest.json", "exposure store")  # only scratch: still new
    assert not (tmp_path / "a").exists()  # made by it and left empty: removed up to what was there
    out.mkdir(parents=True)
    (out / "kept.txt").write_text("y")
    with pytest.raises(RuntimeError), scratch_dir(out, "queries"):
        raise RuntimeError
    assert sorted(p.name for p in out.iterdir()) == ["kept.txt"]


def test_a_killed_jobs_scratch_is_removed_by_the_rerun_and_a_foreign_one_refused(tmp_path):
    out = tmp_path / "out"
    stale = out / SCRATCH
    stale.mkdir(parents=True)
    (stale / OWNER_FILE).write_text(json.dumps({"kind": "scratch", "files": []}))
    (stale / "old.arrow").write_text("left by a killed job")
    with scratch_dir(out, "queries") as s:
        assert not (s / "old.arrow").exists()
    assert list(out.iterdir()) == []
    foreign = out / SCRATCH
    foreign.mkdir()
    (foreign / "mine.txt").write_text("not limelight's")
    with pytest.raises(OutputRefusedError, match="not made by limelight"), scratch_dir(out, "queries"):
        pass
    assert (foreign / "mine.txt").read_text() == "not limelight's"


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_dir):
    d = tmp_path_factory.mktemp("scratch")
    with gzip.open(data_dir / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        (d / "log.tsv").write_text("".join(next(f) for _ in range(N_QUERIES + 1)), encoding="utf-8")
    invoke("index", "--collection", "adi", "--out", d / "idx")
    return d


def _kill_after_first_shard(args: list, cwd, tmpdir) -> None:
    """Run ``limelight ARGS`` (its temporary folder ``tmpdir``) and SIGKILL it once a progress
    line says a shard is done."""
    p, _ = cli_until(args, cwd, DONE, env={"TMPDIR": str(tmpdir)})
    try:
        os.killpg(p.pid, signal.SIGKILL)
        assert p.wait(timeout=10) == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()


@pytest.mark.parametrize("command", ["exposure", "audit"])
def test_a_killed_job_leaves_nothing_in_the_temporary_folder(command, work, tmp_path):
    """``exposure compute`` and ``audit`` over a query log, killed (SIGKILL) after the first
    shard: the system's temporary folder is left empty (it held ``limelight-queries-*``), the
    scratch folder is in the job's output; the rerun resumes, completes and removes it."""
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    out = tmp_path / "out"
    if command == "exposure":
        args = ["exposure", "compute", "--queries", work / "log.tsv", "--out", out, "--depth", 10,
                "--shard-size", SHARD, "--index", work / "idx"]
    else:
        cfg = tmp_path / "audit.toml"
        cfg.write_text(f'[audit]\nname = "adi-kill"\ndepth = 10\ncutoffs = [10]\nshard_size = {SHARD}\n'
                       f'[collection]\nsource = "adi"\n[queries]\nsource = "{work / "log.tsv"}"\n'
                       '[[systems]]\nname = "bm25"\nkind = "bm25"\n[stages]\nrerank = false\n'
                       'eqi = false\nrobustness = false\ncompare = false\ntopics = false\n')
        args = ["audit", cfg, "--out", out]
    _kill_after_first_shard(args, tmp_path, systmp)
    assert list(systmp.iterdir()) == []
    assert (out / SCRATCH).is_dir()
    invoke(*args, env={"TMPDIR": str(systmp)})
    assert not (out / SCRATCH).exists() and list(systmp.iterdir()) == []
    store = out if command == "exposure" else AuditDir(out).store_dir("bm25")
    assert ExposureStore.open(store).n_queries == N_QUERIES
