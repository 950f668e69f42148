"""The Ray engine (limelight.scale) on a real two-node Ray cluster on loopback (the Ray test
files' ``cluster``, tests/conftest.py): a head node and one worker node, one CPU each, small
object stores; the exposure stores it writes must equal the local engine's, byte for byte, also
when a worker process is killed in the middle of a job."""

from __future__ import annotations

import filecmp
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _inproc import run_cli
from _shared import local_and_ray

# telemetry threads outlive ray.shutdown() and race later tests (CPython 3.11 ast.parse is not
# thread-safe); limelight's ray_session turns it off the same way
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray", reason="the ray engine needs the scale extra (in dev)")

from limelight.data import load_dataset, load_query_log  # noqa: E402
from limelight.errors import LimelightError  # noqa: E402
from limelight.exposure import ExposureStore, compute_exposure  # noqa: E402
from limelight.exposure.shards import shard_path  # noqa: E402
from limelight.retrieval.bm25 import BM25, BM25Index  # noqa: E402
from limelight.retrieval.index_dir import build_index, open_fingerprinted  # noqa: E402
from limelight.scale import IndexRetriever, compute_shards  # noqa: E402


@pytest.fixture(scope="module")
def cluster(cluster):
    """The Ray test files' loopback cluster (tests/conftest.py: ``ray start`` head + one worker
    node, one CPU and 150 MB of object store each), this process connected to it for the whole
    module, disconnected at its end."""
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("scale")


@pytest.fixture(scope="module")
def cranfield_index(work) -> Path:
    return build_index(load_dataset("cranfield").collection, work / "idx-cranfield")


@pytest.fixture(scope="module")
def log():
    return load_query_log()


@pytest.fixture(scope="module")
def local_store(cranfield_index, log, work):
    retriever, fp, _ = open_fingerprinted(cranfield_index)
    qs = log.head(4000)
    return compute_exposure(retriever, qs, work / "local", depth=100, shard_size=500, fingerprint=fp), fp


def same_store(a: Path, b: Path, n_shards: int) -> None:
    """Every shard file byte-identical, the index files equal, and every DuckDB table equal."""
    for i in range(n_shards):
        assert filecmp.cmp(shard_path(a, i), shard_path(b, i), shallow=False), f"shard {i} differs"
    assert sorted(p.name for p in (a / "shards").iterdir()) == sorted(p.name for p in (b / "shards").iterdir())
    for p in [*sorted((a / "doc_index").glob("part-*.npy")), a / "query_stats.parquet"]:
        assert filecmp.cmp(p, b / p.relative_to(a), shallow=False), p.name
    assert len(list((b / "doc_index").glob("part-*.npy"))) == n_shards
    for table, order in (("exposure", "q, rank"), ("queries", "q"), ("documents", "d")):
        with ExposureStore.open(a).connect() as ca, ExposureStore.open(b).connect() as cb:
            ta = ca.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchdf()
            tb = cb.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchdf()
        assert len(ta) > 0
        assert ta.equals(tb), table


def test_ray_store_identical_to_local(cluster, local_store, cranfield_index, log, work):
    st, fp = local_store
    assert sum(n["Alive"] for n in ray.nodes()) == 2  # head + worker (a node killed before: dead)
    seen = []
    out = work / "ray"
    rs = compute_exposure(IndexRetriever(cranfield_index), log.head(4000), out, depth=100,
                          shard_size=500, fingerprint=fp, engine="ray",
                          progress=lambda d, t: seen.append((d, t)))
    assert rs.n_shards == st.n_shards == 8
    assert seen[-1] == (4000, 4000) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    same_store(st.path, out, st.n_shards)
    r1, r2 = st.retrievability(c=100), ExposureStore.open(out).retrievability(c=100)
    np.testing.assert_array_equal(r1.r, r2.r)
    assert r1.gini == r2.gini
    assert not list((out / "shards").glob(".*.tmp"))


def test_object_store_retriever_driver_writes_and_idempotent_retries(cluster, local_store, work):
    """An in-memory BM25 shipped through the object store; shards written by the driver or by
    the workers; computing a shard again (a retry) replaces it with the same rows."""
    st, fp = local_store
    out = work / "rerun"
    shutil.copytree(st.path, out)
    bm25 = BM25(BM25Index.build(load_dataset("cranfield").collection))
    lex = st.doc_ids.lexical_rank()
    kw = dict(depth=100, shard_size=500, batch_size=500, doc_ids=st.doc_ids, lex=lex)
    for i in (0, 3, 7):
        shard_path(out, i).unlink()
    compute_shards(bm25, st.queries, out, [0, 3, 7], write_on="driver", **kw)
    for _ in range(2):  # workers write; the second run re-computes finished shards (a retry)
        compute_shards(bm25, st.queries, out, [0, 3, 7], write_on="worker", **kw)
        for i in range(st.n_shards):
            assert filecmp.cmp(shard_path(st.path, i), shard_path(out, i), shallow=False)
        assert sorted((out / "shards").iterdir()) == [shard_path(out, i) for i in range(st.n_shards)]
    assert len(ExposureStore(out, st.manifest, st.queries, st.doc_ids).pairs()) == len(st.pairs())


def test_resume_across_engines(cluster, local_store, cranfield_index, log, work):
    """A store started by the local engine and interrupted is finished by the ray engine."""
    st, fp = local_store
    out = work / "resume"
    shutil.copytree(st.path, out)
    (out / "query_stats.parquet").unlink()
    man = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**man, "complete": False}))
    for i in (1, 5, 6):
        shard_path(out, i).unlink()
    (out / "shards" / ".part-00005.parquet.abc.tmp").write_bytes(b"partial")  # a killed write
    before = {i: shard_path(out, i).stat().st_mtime_ns for i in (0, 2, 3, 4, 7)}
    r, _, _ = open_fingerprinted(cranfield_index)
    compute_exposure(r, log.head(4000), out, depth=100, shard_size=500, fingerprint=fp, engine="ray")
    assert {i: shard_path(out, i).stat().st_mtime_ns for i in before} == before  # kept
    same_store(st.path, out, st.n_shards)


def test_callable_retriever_and_task_errors(cluster, local_store, work):
    st, fp = local_store
    bm25 = BM25(BM25Index.build(load_dataset("cranfield").collection))
    qs = st.queries.head(1000)

    def as_run(sub, k):  # a callable returning a Run (pickled to the workers)
        return bm25.retrieve(sub, k)

    a = compute_exposure(as_run, qs, work / "callable-local", depth=30, shard_size=400,
                         doc_ids=st.doc_ids)
    b = compute_exposure(as_run, qs, work / "callable-ray", depth=30, shard_size=400,
                         doc_ids=st.doc_ids, engine="ray")
    same_store(a.path, b.path, a.n_shards)

    class OutOfRange:  # a retriever that breaks its contract: the worker's error comes back
        doc_ids = st.doc_ids

        def search_batch(self, texts, k):
            return np.full((len(texts), k), len(self.doc_ids) + 5), np.zeros((len(texts), k))

    with pytest.raises(LimelightError, match="outside its collection") as e:
        compute_exposure(OutOfRange(), qs, work / "bad", depth=10, shard_size=400, engine="ray")
    assert "\n" not in str(e.value)
    with pytest.raises(LimelightError, match="largest node of the cluster has 1 CPUs"):
        compute_exposure(bm25, qs, work / "bad4", depth=10, shard_size=400, engine="ray",
                         engine_options={"cpus_per_task": 2})
    with pytest.raises(LimelightError, match="unknown engine"):
        compute_exposure(bm25, qs, work / "bad2", engine="spark")
    with pytest.raises(LimelightError, match="address goes with"):
        compute_exposure(bm25, qs, work / "bad3", address="127.0.0.1:6379")


def _kill_a_shard_worker(cluster) -> int | None:
    """SIGKILL one of ``cluster``'s Ray worker processes executing an exposure shard right now
    (Ray titles a busy worker ``ray::<task name>``); its pid, or None when none runs one. Only
    the cluster's own processes are looked at (another cluster's workers, or a process that
    reused the pid of a worker that just ended, are never signalled): the process is held by a
    pidfd, its title read again through /proc while held, and the signal sent to that pidfd."""
    for i in [0, *cluster.workers()]:
        for pid in cluster.node_pids(i):  # (the nodes' descendants: never this process)
            try:
                fd = os.pidfd_open(pid)
            except OSError:  # ended since the scan
                continue
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::exposure_shard"):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    return pid
            except OSError:  # ended while held: nothing to kill
                continue
            finally:
                os.close(fd)
    return None


def test_killed_worker_process_job_completes_identically(cluster, log, work):
    npl = build_index(load_dataset("npl").collection, work / "idx-npl")
    r, fp, _ = open_fingerprinted(npl)
    qs = log.head(16000)
    ref = compute_exposure(r, qs, work / "npl-local", depth=100, shard_size=800, fingerprint=fp)
    killed: list[int] = []
    stop = threading.Event()

    def killer():
        while not stop.is_set() and not killed:
            pid = _kill_a_shard_worker(cluster)
            if pid is not None:
                killed.append(pid)
            time.sleep(0.005)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        out = work / "npl-ray"
        compute_exposure(IndexRetriever(npl), qs, out, depth=100, shard_size=800, fingerprint=fp,
                         engine="ray")
    finally:
        stop.set()
        t.join()
    assert killed, "no shard task was seen running, so none was killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)  # it really died
    same_store(ref.path, out, ref.n_shards)


def test_cli_engine_ray_with_address(cluster, local_store, cranfield_index, work):
    st, _ = local_store
    qfile = work / "queries.tsv"
    qfile.write_text("".join(f"{q}\t{t}\n" for q, t in zip(st.queries.ids.strings[:1200],
                                                            st.queries.texts[:1200], strict=True)))
    cmd = [sys.executable, "-m", "limelight.cli", "exposure", "compute", "--index", str(cranfield_index),
           "--queries", str(qfile), "--depth", "50", "--shard-size", "300", "--json"]
    env = {**os.environ, "RAY_ADDRESS": ""}
    a, b = local_and_ray(cmd, work / "cli-local", work / "cli-ray", cluster.address)
    sa, sb = json.loads(a.stdout), json.loads(b.stdout)
    assert {k: v for k, v in sa.items() if k not in ("store", "seconds")} == \
        {k: v for k, v in sb.items() if k not in ("store", "seconds")}
    same_store(work / "cli-local", work / "cli-ray", 4)
    bad = subprocess.run([*cmd, "--out", str(work / "cli-bad"), "--engine", "ray", "--address",
                          "127.0.0.1:9"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: cannot reach a Ray cluster")
    assert len(bad.stderr.strip().splitlines()) == 1
    bad = run_cli(*cmd[3:], "--out", work / "cli-bad", "--engine", "spark")  # in this process
    assert bad.returncode == 2 and "unknown engine 'spark'" in bad.stderr


def test_ray_data_embeddings_equal_local_encoder(cluster, local_store):
    """CPU: MiniLM through Ray Data and locally, to compare the vectors."""
    from limelight.retrieval.dense import Encoder
    from limelight.scale import RayEncoder

    st_texts = local_store[0].queries.texts[:48].tolist()
    texts = [*st_texts[:20], "", *st_texts[20:]]
    # the float32 torch back-end: batch-independent up to rounding (an int8 variant, where
    # the Encoder has one, quantizes activations per batch)
    kw = {"variant": "torch-fp32"} if "variant" in inspect.signature(Encoder).parameters else {}
    local = Encoder(batch_size=4, **kw)
    remote = RayEncoder(batch_size=4, workers=1, **kw)  # chunks of 8 x 4 texts: two chunks
    assert remote.identity() == local.identity()
    a, b = local.encode(texts), remote.encode(texts)
    assert a.shape == b.shape == (len(texts), local.dim)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert remote.encode([]).shape == (0, local.dim)
    # the default variant runs every text alone: the actors' vectors are the local ones exactly
    default, ray_default = Encoder(), RayEncoder(workers=1)
    assert ray_default.identity() == default.identity()
    np.testing.assert_array_equal(ray_default.encode(texts), default.encode(texts))
