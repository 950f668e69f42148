"""A real two-node Ray cluster started with Ray's CLI on loopback (``ray start --head`` and a
second raylet with ``ray start --address=...``, one CPU each, temporary directories; the Ray test
files' shared ``cluster``, tests/conftest.py): the exposure job with one node SIGKILLed in the
middle gives the single-process store byte for byte, and no shard that had been written before the
kill is written again (same inode, same mtime); Ray Data embeddings on the two-node cluster equal
the local encoder's."""

from __future__ import annotations

import filecmp
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray", reason="the ray engine needs the scale extra (in dev)")

from limelight.data import load_dataset, load_query_log  # noqa: E402
from limelight.exposure import compute_exposure  # noqa: E402
from limelight.exposure.shards import shard_path  # noqa: E402
from limelight.retrieval.index_dir import build_index, open_fingerprinted  # noqa: E402
from limelight.scale import IndexRetriever  # noqa: E402


def _stamps(store: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime in ns) of every finished shard file of a store."""
    out = {}
    for p in (store / "shards").glob("part-*.parquet"):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        out[p.name] = (st.st_ino, st.st_mtime_ns)
    return out


def test_stop_ends_every_node_and_its_processes():
    """``LoopbackCluster.stop`` (what ends every Ray test's cluster): each node's process group is
    gone afterwards, the head's included (its ``ray start --block`` does not end on SIGTERM, so
    what is left of a group after the grace is killed), and the cluster's folder is removed.
    First of the Ray files (tests/_file_order.py): a cluster of its own, before the shared one
    starts for the tests after it, so that the shared one is stopped only after the last of them."""
    from limelight.scale.loopback import LoopbackCluster

    c = LoopbackCluster(nodes=2, num_cpus=1, object_store_mb=100)
    c.start()
    c.kill_node(1)  # the case the Ray tests end with: a node lost in the middle of a job
    groups = {p.pid for p in c.procs}  # each node started in a session (process group) of its own
    assert _live_in_groups(groups)
    c.stop(grace=1.0)
    assert all(p.poll() is not None for p in c.procs)
    assert _live_in_groups(groups) == []  # zombies not yet reaped by init aside
    assert not c.temp_dir.exists()


def test_ray_data_embeddings_on_two_nodes_equal_local(cluster):
    """CPU: MiniLM loaded on two Ray nodes and locally to compare the vectors."""
    from limelight.retrieval.dense import Encoder
    from limelight.scale import RayEncoder

    texts = load_query_log().texts[:300].tolist()  # two chunks of 256 texts
    local = Encoder()
    remote = RayEncoder(address=cluster.address, workers=2)  # two actors, one CPU each
    np.testing.assert_array_equal(remote.encode(texts), local.encode(texts))
    assert cluster.alive_nodes() == 2


def test_node_killed_mid_job_gives_identical_store_and_keeps_finished_shards(cluster,
                                                                             tmp_path):
    index = build_index(load_dataset("npl").collection, tmp_path / "idx-npl")
    r, fp, _ = open_fingerprinted(index)
    qs = load_query_log().head(12000)
    node = cluster.workers()[-1]  # the live worker node (node 1, or its replacement: conftest)
    ref = compute_exposure(r, qs, tmp_path / "local", depth=100, shard_size=400, fingerprint=fp)
    out = tmp_path / "ray"
    before_kill: dict[str, tuple[int, int]] = {}
    killed = threading.Event()
    stop = threading.Event()

    def killer():
        while not stop.is_set():
            # mid-job: shards already written, and a shard task running on the worker node
            if (out.exists() and len(_stamps(out)) >= 2
                    and cluster.runs_task(node, "exposure_shard")):
                before_kill.update(_stamps(out))
                cluster.kill_node(node)
                killed.set()
                return
            time.sleep(0.01)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        st = compute_exposure(IndexRetriever(index), qs, out, depth=100, shard_size=400,
                              fingerprint=fp, engine="ray", address=cluster.address)
    finally:
        stop.set()
        t.join()
    assert killed.is_set(), "the job ended before a shard task ran on the worker node to be killed"
    assert cluster.procs[node].poll() is not None
    assert cluster.wait_alive(1) == 1  # declared dead
    # the single-process store, byte for byte
    assert st.n_shards == ref.n_shards == 30
    for i in range(ref.n_shards):
        assert filecmp.cmp(shard_path(ref.path, i), shard_path(out, i), shallow=False), i
    for p in [*sorted((ref.path / "doc_index").glob("part-*.npy")),
              ref.path / "query_stats.parquet"]:
        assert filecmp.cmp(p, out / p.relative_to(ref.path), shallow=False), p.name
    # nothing that had finished was computed again: same files, never replaced
    after = _stamps(out)
    assert 2 <= len(before_kill) < ref.n_shards
    assert {k: after[k] for k in before_kill} == before_kill


def _live_in_groups(groups: set[int]) -> list[int]:
    """The processes (not zombies) whose process group is one of ``groups`` (from /proc)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in groups:
            live.append(int(stat.parent.name))
    return live
