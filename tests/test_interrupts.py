"""Ctrl-C on long commands (issue 52, items 10 and 12): SIGINT sent to the command's process
group stops it within 2 s with status 130 and a line saying how to resume, what it finished is
kept, and the rerun does only the rest.

These tests need a process of their own per command (a signal to a process group; ``main``'s
exit): each is as small as it can be, 120 log queries over adi (82 documents) cut into
shards of 5, so that the job is still running when the first progress line says a shard is
done (``LIMELIGHT_PROGRESS_SECONDS=0``: a line per batch), which is when the signal is sent:
23 more shards lie between that line and the end (the process ran 5-12 s more at load 12
for the bm25, run, dense and hybrid kinds, against the milliseconds this process takes to send
the signal). The rerun runs in-process; its first progress line says how many queries it found
done.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _search_engine import in_thread
from _shared import cli_until
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data.loaders import load_collection
from limelight.exposure.store import ExposureStore

runner = CliRunner()
N_QUERIES, SHARD = 120, 5
STEPS = 10  # generate train's steps
DONE = re.compile(r": ([1-9]\d*)/(\d+) \(")  # a progress line with something done


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_dir):
    """An adi index (BM25 and dense), N_QUERIES log queries, and a TREC run of them (BM25)."""
    d = tmp_path_factory.mktemp("interrupts")
    with gzip.open(data_dir / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        (d / "log.tsv").write_text("".join(next(f) for _ in range(N_QUERIES + 1)), encoding="utf-8")
    invoke("index", "--collection", "adi", "--out", d / "idx", "--dense")
    invoke("retrieve", "--index", d / "idx", "--queries", d / "log.tsv", "--out", d / "bm25.run",
           "--k", 10)
    return d


def invoke(*args, code: int = 0):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == code, (res.output, res.exception)
    return res


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


RESUME = "rerun the same command to resume"


def interrupt(args: list, cwd, ready: re.Pattern = DONE, ignored: bool = False,
              resume: str = RESUME) -> str:
    """Run ``limelight ARGS`` in a process group of its own, send SIGINT to the group when a
    line of its stderr matches ``ready``; assert status 130 within 2 s, no traceback and a last
    line saying how to resume (``resume``); return its stderr. ``ignored``: the command starts
    with SIGINT ignored, as a shell starts a background command (``limelight ... &`` in a
    script). The command shares this process's model cache (``LIMELIGHT_CACHE``): its working
    folder is a test's own, where it would export the ONNX encoder again (7 CPU s a dense run)."""
    p, seen = cli_until(args, cwd, ready, preexec_fn=_ignore_sigint if ignored else None)
    try:
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        try:
            rc = p.wait(timeout=2)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running 2 s after Ctrl-C: {''.join(seen)}") from None
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = "".join(seen) + p.stderr.read()
    assert rc == 130 and took < 2, (rc, took, err)
    assert "Traceback" not in err and resume in err.splitlines()[-1], err
    return err


def first_done(output: str) -> int:
    """The number of queries the first progress line of a rerun found done."""
    m = re.search(r": (\d+)/\d+ \(", output)
    assert m, output
    return int(m.group(1))


def finished_queries(store) -> int:
    return SHARD * len(list((store / "shards").glob("*.parquet"))) if store.exists() else 0


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid", "run", "http", "pyterrier"])
def test_exposure_compute_stops_and_resumes(kind, work, tmp_path, monkeypatch):
    """``exposure compute`` of each kind of system a command line gives (over an index: bm25,
    dense, hybrid; a run file; a live service; a PyTerrier pipeline, PISA's BM25 fed frames of
    5 queries): Ctrl-C stops it, the finished shards are kept, the rerun computes only the
    other queries and completes the store. (Kind reranked runs in an audit only: its first
    stage is another system of the audit: test_audit_of_a_reranked_system_stops_and_resumes.)

    CPU: each kind runs as a real process (the dense and hybrid kinds load MiniLM) so that a real SIGINT reaches it."""
    out = tmp_path / "store"
    pt = tmp_path / "pisa.toml"
    pt.write_text('[system]\nkind = "pyterrier"\nbatch_size = 5\nargs = {index = "pisa"}\n'
                  'factory = "limelight.retrieval.kinds.pyterrier:pisa_bm25"\n')
    system = {"bm25": ["--index", work / "idx"],
              "dense": ["--index", work / "idx", "--model", "dense"],
              "hybrid": ["--index", work / "idx", "--model", "hybrid"],
              "run": ["--run", work / "bm25.run", "--collection", "adi"],
              "pyterrier": ["--system", pt, "--collection", "adi"]}
    args = ["exposure", "compute", "--queries", work / "log.tsv", "--out", out, "--depth", 10,
            "--shard-size", SHARD]
    monkeypatch.setenv("LIMELIGHT_PROGRESS_SECONDS", "0")
    if kind == "http":
        with in_thread(load_collection("adi"), tmp_path) as (url, count):
            system["http"] = ["--url", url, "--preset", "elasticsearch", "--collection", "adi"]
            err = interrupt(args + system[kind], tmp_path)
            asked = len(count.read_text().splitlines())
            res = invoke(*args, *system[kind])
            assert len(count.read_text().splitlines()) == N_QUERIES  # none asked twice
    else:
        err = interrupt(args + system[kind], tmp_path)
        asked = None
        res = invoke(*args, *system[kind])
    assert "interrupted after" in err
    done = first_done(res.output)
    assert 0 < done < N_QUERIES and (asked is None or done <= asked)
    assert ExposureStore.open(out).n_queries == N_QUERIES


def test_dense_stops_within_its_batch_when_started_in_the_background(work, tmp_path, data_dir):
    """Item 10 as the trial met it: ``exposure compute --model dense`` started with SIGINT
    ignored (a script's ``limelight ... &``) and one batch of 2,000 queries (the default shard
    size): Ctrl-C stops it within the batch (it ran to the end, exit 0; then, with SIGINT
    honoured, to the end of its batch and a 1.5-2 s teardown), nothing half-written is left."""
    log = tmp_path / "log2000.tsv"
    with gzip.open(data_dir / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        log.write_text("".join(next(f) for _ in range(2001)), encoding="utf-8")
    err = interrupt(["exposure", "compute", "--queries", log, "--out", tmp_path / "s", "--depth", 10,
                     "--index", work / "idx", "--model", "dense"], tmp_path,
                    ready=re.compile(r": 0/2000 \("), ignored=True)
    assert "interrupted after 0 of 1 shard;" in err
    assert not (tmp_path / "s").exists()  # nothing finished: the store is left out, a rerun starts afresh


def adi_audit(tmp_path, work, name: str, depth: int, more: str = "") -> Path:
    """``tmp_path/audit.toml``: an audit ``name`` of adi under the work log with BM25 (and the
    systems of ``more``), exposure depth ``depth``, the optional stages that run after the
    exposure (compare, topics, rerank, EQI, robustness) off: what is interrupted and resumed is
    the exposure."""
    cfg = tmp_path / "audit.toml"
    cfg.write_text(f"""
[audit]
name = "{name}"
depth = {depth}
cutoffs = [10]
shard_size = {SHARD}

[collection]
source = "adi"

[queries]
source = "{work / 'log.tsv'}"

[[systems]]
name = "bm25"
kind = "bm25"
{more}
[stages]
rerank = false
eqi = false
robustness = false
compare = false
topics = false
""")
    return cfg


def test_audit_stops_and_resumes(work, tmp_path, monkeypatch, data_dir):
    """``audit``: Ctrl-C during the exposure stage prints the resume line (it printed none);
    the rerun reuses the finished stages (the index) and completes the audit."""
    cfg = adi_audit(tmp_path, work, "adi-interrupt", depth=10)
    err = interrupt(["audit", cfg, "--out", tmp_path / "out"], tmp_path)
    assert "interrupted; the finished stages are kept in" in err
    monkeypatch.setenv("LIMELIGHT_PROGRESS_SECONDS", "0")
    res = invoke("audit", cfg, "--out", tmp_path / "out")
    assert 0 < first_done(res.output.split("exposure", 1)[1]) < N_QUERIES


def test_audit_of_a_reranked_system_stops_and_resumes(work, tmp_path, monkeypatch):
    """Kind ``reranked`` (a tiny real TK over BM25's top 20; it runs inside an audit only, its
    first stage being another system of the audit): Ctrl-C while the re-ranker's exposure is
    being computed stops the audit with the resume line; the rerun keeps BM25's store and the
    re-ranker's finished shards and computes only its other queries. CPU: two audits (one in a
    process of its own, which imports torch and the audit's stages afresh, and the in-process
    rerun) re-rank the log's top 20 with TK: 25-31 CPU s at load 0.5-2."""
    from _tiny_models import tiny_tk

    tiny_tk(tmp_path / "tk.pt")
    cfg = adi_audit(tmp_path, work, "adi-reranked-interrupt", depth=20, more="""
[[systems]]
name = "tk"
kind = "reranked"
first = "bm25"
checkpoint = "tk.pt"
depth = 20
""")
    out = tmp_path / "out"
    err = interrupt(["audit", cfg, "--out", out], tmp_path, ready=re.compile(r"\btk\b.*: ([1-9]\d*)/\d+ \("))
    assert "interrupted; the finished stages are kept in" in err
    kept = {f.name: f.stat().st_mtime_ns for f in (out / "systems" / "tk" / "exposure" / "shards").glob("*.parquet")}
    assert kept  # the re-ranker's finished shards
    monkeypatch.setenv("LIMELIGHT_PROGRESS_SECONDS", "0")
    res = invoke("audit", cfg, "--out", out)
    assert 0 < first_done(res.output.split("exposure-tk:", 1)[1]) < N_QUERIES
    shards = out / "systems" / "tk" / "exposure" / "shards"
    assert all(shards.joinpath(n).stat().st_mtime_ns == t for n, t in kept.items())  # not rewritten
    assert ExposureStore.open(out / "systems" / "tk" / "exposure").n_queries == N_QUERIES


def test_index_stops_and_leaves_nothing(tmp_path, monkeypatch):
    """``index``: Ctrl-C while the documents are analysed stops it; the local build writes its
    folder whole or not at all, so the line says that nothing was written and the rerun builds
    it (it said "what was finished is kept ... resume", which an index never did)."""
    out = tmp_path / "idx"
    err = interrupt(["index", "--collection", "debian", "--out", out, "--memory-gb", 0.05], tmp_path,
                    ready=re.compile(r"analyzing debian: [1-9]\d*, "),
                    resume="rerun the same command to build it")
    assert f"no index was written to {out}" in err and not out.exists()


def test_generate_train_stops_and_resumes(tmp_path, monkeypatch):
    """``generate train`` (a tiny real T5, CtrlQGen on the movies catalog, 10 steps): Ctrl-C
    after a progress line stops it at its next step with a checkpoint, exit 130 and the line
    saying to rerun with --resume; the resumed run starts at the step it stopped at. The
    signal follows the first step's progress line; the 8 or more steps left are its margin.

    CPU: a real T5 trained in a real process, stopped by a real SIGINT, then resumed."""
    from _tiny_models import tiny_t5

    t5 = tiny_t5(tmp_path / "t5")
    args = ["generate", "train", "--catalog", "movies", "--backbone", t5, "--steps", STEPS,
            "--batch-size", 2, "--n-queries", 8, "--train-layers", 1, "--out", tmp_path / "gen",
            "--checkpoint-dir", tmp_path / "ck"]
    err = interrupt(args, tmp_path, resume="rerun with --resume to continue")
    stopped = int(re.search(rf"stopped \(interrupted\) at step (\d+)/{STEPS}", err).group(1))
    assert 0 < stopped < STEPS and (tmp_path / "ck" / "train_state.pt").exists()
    res = invoke(*args, "--resume")
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["resumed_from"] == stopped and info["steps"] == STEPS


def test_evaluate_on_a_large_run_stops(trec_eval_dir, tmp_path):
    """``evaluate`` over many runs (trec_eval's 30,100-line test run given 200 times: ~6M lines,
    several seconds to read here): a progress line per file read and per run evaluated, and
    Ctrl-C stops it between files within 2 s (it was silent until the table). It writes nothing,
    so its line says so and that the rerun is the same command."""
    run = trec_eval_dir / "results.comment.test"
    err = interrupt(["evaluate", *[run] * 200, "--qrels", trec_eval_dir / "qrels.comment.test"],
                    tmp_path, ready=re.compile(r"(reading|evaluating) 200 runs: [1-9]\d*/200 \("),
                    resume="nothing was written; rerun the same command")
    assert err.splitlines()[-1] == "interrupted; nothing was written; rerun the same command"
