"""The index build and the replay of a live service on a real two-node Ray cluster on this
machine (``LoopbackCluster``: ``ray start --head`` and a second raylet, one CPU each; the Ray
test files' shared ``cluster``, tests/conftest.py), with the worker node SIGKILLed while it runs a
task:

- the streaming BM25 index build (``build_index_ray``: runs of documents analyzed as tasks,
  merged on the driver) writes the single-process ``build_index`` directory byte for byte; no
  run finished before the kill is written again (same inode and mtime), and a rerun over the
  kept runs submits nothing;
- the replay of a real search engine (PISA BM25 behind a small ASGI app, ``_search_engine.py``,
  a process of its own on loopback; system kind ``http``, Elasticsearch preset) as Ray exposure
  tasks, a journal per shard (``ShardedReplay``), gives the single-process replay's shards byte
  for byte; by the engine's own count, every query whose answer had been journaled before the
  kill, and every query of a shard finished before it, reached the engine exactly once.
"""

from __future__ import annotations

import collections
import filecmp
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _shared import local_and_ray

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray", reason="the ray engine needs the scale extra (in dev)")
pytest.importorskip("pyterrier_pisa", reason="the replay test's engine is PISA (in dev)")

from _file_stamps import stamps  # noqa: E402
from _inproc import run_cli  # noqa: E402
from _search_engine import running  # noqa: E402

from limelight.data import load_catalog, load_dataset, load_query_log  # noqa: E402
from limelight.exposure import compute_exposure  # noqa: E402
from limelight.exposure.shards import shard_path  # noqa: E402
from limelight.retrieval.index_dir import build_index  # noqa: E402
from limelight.retrieval.spec import System  # noqa: E402
from limelight.scale import ShardedReplay, build_index_ray  # noqa: E402


class Killer:
    """In the background: once ``ready()`` holds and the cluster's worker node runs a ``task``,
    call ``snapshot()`` (kept in ``self.before``) and SIGKILL that node. A node lost by an
    earlier test is replaced first (``add_node``), so that the cluster has two nodes."""

    def __init__(self, cluster, task: str, ready, snapshot):
        self.cluster, self.task, self.ready, self.snapshot = cluster, task, ready, snapshot
        alive = cluster.workers()
        self.node = alive[0] if alive else cluster.add_node()
        self.before = None
        self.killed = threading.Event()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.ready() and self.cluster.runs_task(self.node, self.task):
                self.before = self.snapshot()
                self.cluster.kill_node(self.node)
                self.killed.set()
                return
            time.sleep(0.01)

    def __enter__(self) -> Killer:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def _same_tree(a: Path, b: Path) -> list[str]:
    """The files of ``a`` that differ from (or are missing in) ``b``; the two have the same files."""
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert fa == fb
    return [str(p) for p in fa if not filecmp.cmp(a / p, b / p, shallow=False)]


# ---- the index build ------------------------------------------------------------------------------
def test_index_build_with_a_node_killed_equals_the_single_process_build(cluster, tmp_path):
    coll = load_dataset("npl").collection  # 11,429 documents, 3.1M characters
    ref = build_index(coll, tmp_path / "local")
    chars = sum(len(t) + 1 for t in coll.texts.tolist())
    runs = tmp_path / "runs"

    def run_files():
        return list(runs.glob("run-*/meta.json"))

    with Killer(cluster, "index_run", lambda: len(run_files()) >= 2,
                lambda: stamps(run_files())) as k:
        out = build_index_ray(coll, tmp_path / "ray", address=cluster.address,
                              run_chars=chars // 16, runs_dir=runs, keep_runs=True)
    assert k.killed.is_set(), "the build ended before a run task ran on the worker node to be killed"
    assert cluster.wait_alive(1) == 1  # declared dead
    assert _same_tree(ref, out) == []  # every file of the index directory, byte for byte
    after = stamps(run_files())
    assert len(after) == 16 or len(after) == 17  # the last run holds what is left
    assert 2 <= len(k.before) < len(after)
    assert {n: after[n] for n in k.before} == k.before  # finished runs: never written again
    # a rerun (another output) finds every run complete: nothing is analyzed, the same index
    again = build_index_ray(coll, tmp_path / "again", address=cluster.address,
                            run_chars=chars // 16, runs_dir=runs, keep_runs=True)
    assert stamps(run_files()) == after
    assert _same_tree(ref, again) == []
    # without keep_runs the runs folder goes once the index is complete
    build_index_ray(coll, tmp_path / "third", address=cluster.address, run_chars=chars // 16,
                    runs_dir=runs)
    assert not runs.exists() and _same_tree(ref, tmp_path / "third") == []


def test_cli_index_engine_ray(cluster, tmp_path):
    """``limelight index --engine ray --address`` writes ``limelight index``'s directory; bad
    engine options are one line and exit status 2."""
    cmd = [sys.executable, "-m", "limelight.cli", "index", "--collection", "npl"]
    a, b = local_and_ray(cmd, tmp_path / "a", tmp_path / "b", cluster.address)
    assert a.stdout.replace(str(tmp_path / "a"), "X") == b.stdout.replace(str(tmp_path / "b"), "X")
    assert _same_tree(tmp_path / "a", tmp_path / "b") == []
    assert not (tmp_path / "b.runs").exists()
    for extra, message in ((["--engine", "spark"], "unknown engine 'spark'"),
                           (["--address", cluster.address], "--address goes with --engine ray"),
                           (["--engine", "ray", "--dense"], "--engine ray builds the BM25 index")):
        # refused before any work: in this process (tests/_inproc.py), no interpreter started
        bad = run_cli(*cmd[3:], "--out", tmp_path / "bad", *extra)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


# ---- the replay of a live service -----------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """PISA BM25 over the movies catalog behind the test ASGI app (``_search_engine.py``), on a
    free loopback port; yields (base URL, the file of its own count: a JSON line per query)."""
    with running(tmp_path_factory.mktemp("ray-engine"), timeout=120) as (url, count):
        yield url, count


def _asked(count: Path, since: int = 0) -> list[str]:
    """The queries the engine answered, in order, from line ``since`` of its count."""
    lines = count.read_text(encoding="utf-8").splitlines() if count.exists() else []
    return [json.loads(x) for x in lines[since:]]


def _journaled(work: Path) -> set[str]:
    """The query texts answered in the journals of a sharded replay (parts written, each
    renamed into place once complete)."""
    import pyarrow.parquet as pq

    out: set[str] = set()
    for p in work.glob("shards/*/replay/*/log-*.parquet"):
        t = pq.read_table(p, columns=["query", "ok"]).to_pydict()
        out.update(q for q, ok in zip(t["query"], t["ok"], strict=True) if ok)
    return out


def test_http_replay_with_a_node_killed_equals_the_single_process_replay(cluster, engine,
                                                                         tmp_path):
    """CPU: a two-node Ray cluster replays 400 queries twice (with and without a killed node) to compare the stores."""
    url, count = engine
    coll = load_catalog("movies")
    qs = load_query_log().head(400)
    texts = qs.texts.tolist()
    assert len(set(texts)) == len(texts)
    depth, shard = 20, 25  # 16 shards
    # the single-process replay (the local engine, one journal), as fast as the engine goes
    r = System.of("http", url=url, preset="elasticsearch").open(
        None, collection=coll, work_dir=tmp_path / "work-local")
    ref = compute_exposure(r, qs, tmp_path / "local", depth=depth, shard_size=shard)
    seen = len(_asked(count))
    assert sorted(_asked(count)) == sorted(texts)  # each query once
    # on the cluster: 20 queries/s per task (rate is a client setting: the same fingerprint), so
    # that a shard takes about a second and a task is running when the worker node dies
    spec = System.of("http", url=url, preset="elasticsearch", rate=20, concurrency=2)
    replay = ShardedReplay(spec, coll.ids, tmp_path / "work-ray")
    out = tmp_path / "ray"

    def shard_files():
        return list((out / "shards").glob("part-*.parquet"))

    def snapshot():
        return {"shards": stamps(shard_files()), "journaled": _journaled(tmp_path / "work-ray")}

    with Killer(cluster, "exposure_shard", lambda: len(shard_files()) >= 2, snapshot) as k:
        st = compute_exposure(replay, qs, out, depth=depth, shard_size=shard, engine="ray",
                              address=cluster.address)
    assert k.killed.is_set(), "the replay ended before a shard task ran on the worker node to be killed"
    assert cluster.procs[k.node].poll() is not None
    assert cluster.wait_alive(1) == 1  # declared dead
    # the single-process store, byte for byte
    assert st.n_shards == ref.n_shards == 16
    for i in range(ref.n_shards):
        assert filecmp.cmp(shard_path(ref.path, i), shard_path(out, i), shallow=False), i
    for p in [*sorted((ref.path / "doc_index").glob("part-*.npy")), ref.path / "query_stats.parquet"]:
        assert filecmp.cmp(p, out / p.relative_to(ref.path), shallow=False), p.name
    # finished shards were not written again
    after = stamps(shard_files())
    before = k.before["shards"]
    assert 2 <= len(before) < ref.n_shards
    assert {n: after[n] for n in before} == before
    # the engine's own count: every query asked; none asked again once its answer was committed
    asked = collections.Counter(_asked(count, seen))
    assert set(asked) == set(texts)
    done_before = {t for name in before for t in texts[int(name[5:10]) * shard:][:shard]}
    committed = k.before["journaled"] | done_before
    assert len(committed) >= 2 * shard
    assert {t: asked[t] for t in committed} == dict.fromkeys(committed, 1)
    again = {t: n for t, n in asked.items() if n > 1}  # answers lost with the node, if any
    assert len(again) <= 2 * shard  # at most the shards in flight on the worker node
    [s] = replay.replay_summary()
    assert s["answered"] == len(texts) and s["failed"] == 0
    # the CLI: exposure compute --url ... --engine ray (journals beside the store, OUT.replay)
    qfile = tmp_path / "queries.tsv"
    qfile.write_text("".join(f"{q}\t{t}\n" for q, t in zip(qs.ids.strings.tolist(), texts,
                                                            strict=True)))
    cli = tmp_path / "cli"
    p = subprocess.run([sys.executable, "-m", "limelight.cli", "exposure", "compute", "--url", url,
                        "--preset", "elasticsearch", "--collection", "movies", "--queries",
                        str(qfile), "--out", str(cli), "--depth", str(depth), "--shard-size",
                        str(shard), "--engine", "ray", "--address", cluster.address, "--json"],
                       capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""})
    assert p.returncode == 0, p.stderr
    for i in range(ref.n_shards):
        assert filecmp.cmp(shard_path(ref.path, i), shard_path(cli, i), shallow=False), i
    assert len(list((tmp_path / "cli.replay").glob("shards/*/replay/*/log-*.parquet"))) >= 16
