"""Exact exposure as Ray tasks over query shards.

``RayEngine`` is an exposure engine (``limelight.exposure.engine.ShardEngine``):
``compute_exposure(..., engine=RayEngine(address=...))``, or ``engine="ray"`` (the name this
module registers when imported), calls ``compute_shards`` for the shards a store still lacks:
one Ray task per shard of queries computes its rows exactly as the local engine does
(``limelight.exposure.shards.batch_rows``: the same retriever call, the same trec_eval tie
order) and writes ``shards/part-NNNNN.parquet`` with the same writer (``write_shard``), so the
store completed afterwards (its per-document index and manifest, written by the driver) is the
local engine's store, byte for byte.

How the index reaches the workers:

- ``IndexRetriever`` (what the CLI uses) travels as its index path and ``System``; each
  worker process opens the index once, memory-mapped, so every process on a node shares the
  node's page cache. The index directory must be readable at the same path on every node.
- any other retriever object (a ``BM25`` built in memory, a ``DenseRetriever``, a callable
  returning a ``Run``) is put once into Ray's object store; each worker process reads it once
  (numpy arrays zero-copy from shared memory) and keeps it for the shards it runs next.

Idempotence: a shard file is written to a temporary name and renamed onto its final name, so a
task that is retried after its worker died, or runs twice, replaces the shard with the same rows;
it never appends. The driver checks each shard's row count against what its task computed.
With ``write_on="driver"`` tasks return their rows through the object store and the driver
writes the shards (for clusters without a filesystem shared with the driver).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import LimelightError
from limelight.exposure.engine import ComputedShards, ShardEngine, ShardJob, register_engine
from limelight.exposure.shards import batch_rows, shard_path, write_shard
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1
from limelight.retrieval.spec import System
from limelight.scale.cluster import cluster_cpus, ray_session

# per worker process: opened indexes and retrievers read from the object store
_CACHE: dict[str, object] = {}


class IndexRetriever:
    """A retriever over a ``limelight index`` directory that pickles as its path and
    :class:`~limelight.retrieval.spec.System` and opens the index (memory-mapped) on
    first use in each process.

    ``model``: ``bm25``, ``dense`` or ``hybrid``; ``k1``, ``b`` for BM25 (or any ``spec``
    instead of the three); ``threads`` for BM25's kernels in this process (Ray tasks set it to
    their CPUs). ``retriever`` is an already opened retriever over the same index, used in this
    process instead of opening it again.
    """

    def __init__(self, index_dir: str | os.PathLike, model: str = "bm25", k1: float = DEFAULT_K1,
                 b: float = DEFAULT_B, threads: int | None = None, retriever=None, *,
                 spec: System | None = None):
        if spec is None:
            spec = System.from_model(model, float(k1), float(b))
        else:
            model, k1, b = spec.kind, spec.param("k1", k1), spec.param("b", b)
        self.index_dir = str(Path(index_dir).resolve())
        self.model, self.k1, self.b, self.threads = model, float(k1), float(b), threads
        self.spec = spec
        self.name = f"{model}:{Path(self.index_dir).name}"
        self._retriever = retriever

    def _key(self) -> str:
        return f"index:{self.index_dir}:{self.spec!r}"

    @property
    def retriever(self):
        """The opened retriever (opened once per process)."""
        if self._retriever is None:
            r = _CACHE.get(self._key())
            if r is None:
                if not Path(self.index_dir).is_dir():
                    raise LimelightError(f"{self.index_dir}: no such index directory on this node "
                                         "(the ray engine needs it at the same path on every node)")
                r = self.spec.open(self.index_dir)
                _CACHE[self._key()] = r
            self._retriever = r
        _set_threads(self._retriever, self.threads)
        return self._retriever

    @property
    def doc_ids(self) -> IdMap:
        return self.retriever.doc_ids

    def search_batch(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` document codes and scores, as the opened retriever returns them."""
        return self.retriever.search_batch(texts, k)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_retriever": None}

    def __repr__(self) -> str:
        return f"IndexRetriever({self.index_dir!r}, model={self.model!r})"


def _set_threads(retriever, n: int | None) -> None:
    """Cap the thread count of a retriever (BM25's numba kernels; the parts of a Hybrid)."""
    if n is None:
        return
    for r in (retriever, getattr(retriever, "lexical", None), getattr(retriever, "dense", None)):
        if hasattr(r, "threads"):
            r.threads = n


def _resolve(shared: list):
    """The retriever of a task: an ``IndexRetriever`` as it came, or an object-store reference
    (wrapped in a list so that Ray does not fetch it per task) read once per process."""
    kind, obj = shared
    if kind == "inline":
        return obj
    import ray

    key = f"ref:{obj.hex()}"
    r = _CACHE.get(key)
    if r is None:
        r = ray.get(obj)
        _CACHE.clear()  # a new job: drop the retrievers of earlier ones
        _CACHE[key] = r
    return r


def exposure_shard(shared: list, sub: Queries, s: int, batch_size: int, depth: int,
                   doc_ids: IdMap, lex: np.ndarray | None, path: str | None, threads: int,
                   shard: int = 0):
    """One shard (number ``shard``, queries with codes ``s, s+1, ...``): its rows, written to
    ``path`` (then the row count is returned) or returned (``path`` None). Runs in a Ray worker.
    A retriever with ``for_shard(shard)`` (``limelight.scale.replay.ShardedReplay``) hands the
    shard the retriever it runs with. A shard file already at ``path`` is kept and its row count
    returned: shards are written whole (atomically), so it is an earlier attempt of this task
    whose node died after writing it and before the driver heard back (Ray retries the task)."""
    if path is not None and Path(path).exists():
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    retriever = _resolve(shared)
    if hasattr(retriever, "for_shard"):
        retriever = retriever.for_shard(shard)
    _set_threads(retriever, threads)
    n = len(sub)
    parts = [batch_rows(retriever, sub, b, min(n, b + batch_size), depth, doc_ids, lex)
             for b in range(0, n, batch_size)]
    q, d, rank, score = (np.concatenate([p[j] for p in parts]) for j in range(4))
    rows = (q + np.int32(s), d, rank, score)
    if path is None:
        return rows
    write_shard(Path(path), rows, depth)
    return len(q)


def _cause(e: BaseException) -> BaseException:
    """The user-level error inside a Ray task error."""
    return getattr(e, "cause", None) or e


def compute_shards(retriever, queries: Queries, store: Path, todo: list[int], *, depth: int,
                   shard_size: int, batch_size: int, doc_ids: IdMap, lex: np.ndarray | None,
                   address: str | None = None, progress: Callable[[int, int], None] | None = None,
                   done: int = 0, cpus_per_task: int = 1, write_on: str = "worker",
                   max_retries: int = 3, num_cpus: int | None = None) -> None:
    """Compute the shards ``todo`` of an exposure store as Ray tasks (called by ``RayEngine``
    for ``compute_exposure``, which has written the manifest and will load the
    database). ``max_retries``: re-executions of a shard whose worker process or node died.
    ``num_cpus`` sizes a local cluster (ignored with ``address``)."""
    if write_on not in ("worker", "driver"):
        raise LimelightError(f"write_on must be worker or driver, not {write_on!r}")
    if cpus_per_task < 1:
        raise LimelightError(f"cpus_per_task must be ≥ 1, got {cpus_per_task}")
    nq = len(queries)
    with ray_session(address, num_cpus=num_cpus if address is None else None) as ray:
        biggest = max((int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]),
                      default=0)
        if cpus_per_task > biggest:  # Ray would wait for such a node forever
            raise LimelightError(f"cpus_per_task={cpus_per_task}, but the largest node of the "
                                 f"cluster has {biggest} CPUs")

        task = ray.remote(exposure_shard).options(num_cpus=cpus_per_task, max_retries=max_retries,
                                                  retry_exceptions=False)
        if isinstance(retriever, IndexRetriever):
            shared = ["inline", retriever]
        else:
            shared = ["ref", ray.put(retriever)]
        lex_ref = ray.put(lex) if lex is not None else None
        doc_ref = ray.put(doc_ids)
        window = 2 * cluster_cpus(ray)  # shards in flight: bounded, so texts are shipped lazily
        pending: dict = {}
        sizes: dict[int, int] = {}
        it = iter(todo)

        def submit() -> bool:
            i = next(it, None)
            if i is None:
                return False
            s, e = i * shard_size, min(nq, (i + 1) * shard_size)
            sub = queries.slice(s, e)
            path = None if write_on == "driver" else str(shard_path(store, i))
            pending[task.remote(shared, sub, s, batch_size, depth, doc_ref, lex_ref, path,
                                cpus_per_task, i)] = i
            sizes[i] = e - s
            return True

        while len(pending) < window and submit():
            pass
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    i = pending.pop(ref)
                    _finish_shard(ray, ref, shard_path(store, i), i, depth, write_on, max_retries)
                    done += sizes.pop(i)
                    if progress:
                        progress(done, nq)
                    submit()
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


def _finish_shard(ray, ref, path: Path, i: int, depth: int, write_on: str, max_retries: int) -> None:
    """The end of shard ``i``'s task ``ref``: its rows written to ``path`` by the driver with
    ``write_on="driver"``, their count checked; the task's error as one line."""
    try:
        res = ray.get(ref)
    except Exception as e:  # noqa: BLE001 - told as one line
        raise _finish_error(e, f"shard {i}", max_retries) from None
    if write_on == "driver":
        write_shard(path, res, depth)
        n_rows = len(res[0])
    else:
        n_rows = int(res)
    _check_shard(path, n_rows)


def _finish_error(e: BaseException, what: str, max_retries: int) -> BaseException:
    """The one-line error of a Ray task ``what`` that failed with ``e``: a ``LimelightError``
    raised in the task as itself, another error of the task as its type and first line, a task
    whose worker or node died more than ``max_retries`` times as that; anything else as it is."""
    from ray.exceptions import RayError, RayTaskError

    if isinstance(e, RayTaskError):
        c = _cause(e)
        if isinstance(c, LimelightError):
            return c
        return LimelightError(f"{what}: {type(c).__name__}: "
                              f"{str(c).strip().splitlines()[0] if str(c).strip() else ''}")
    if isinstance(e, RayError):
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return LimelightError(f"{what} failed after {max_retries} retries "
                              f"({first}); run the job again to resume")
    return e


def _check_shard(path: Path, n_rows: int) -> None:
    import pyarrow.parquet as pq

    if not path.exists():
        raise LimelightError(f"{path}: a worker wrote this shard where the driver cannot see it "
                             "(use a filesystem shared by every node, or write_on='driver')")
    got = pq.ParquetFile(path).metadata.num_rows
    if got != n_rows:
        raise LimelightError(f"{path}: {got} rows, but its task computed {n_rows}")


@dataclass(frozen=True)
class RayEngine(ShardEngine):
    """The shards of an exposure job as Ray tasks (``compute_shards``) on the cluster at
    ``address`` (a local one, of ``num_cpus`` CPUs, when ``None``): ``cpus_per_task`` per shard
    task, shards written by the workers or the driver (``write_on``), ``max_retries``
    re-executions of a shard whose worker died. ``compute_exposure(engine="ray",
    address=..., engine_options={...})`` builds one."""

    address: str | None = None
    cpus_per_task: int = 1
    write_on: str = "worker"
    max_retries: int = 3
    num_cpus: int | None = None

    def compute(self, job: ShardJob, shards: list[int]) -> ComputedShards:
        t0 = time.perf_counter()
        compute_shards(job.retriever, job.queries, job.store, shards, depth=job.depth,
                       shard_size=job.shard_size, batch_size=job.batch_size, doc_ids=job.doc_ids,
                       lex=job.lex, address=self.address, progress=job.progress,
                       done=job.n_done(shards), cpus_per_task=self.cpus_per_task,
                       write_on=self.write_on, max_retries=self.max_retries, num_cpus=self.num_cpus)
        return ComputedShards(retrieve_s=time.perf_counter() - t0)


register_engine("ray", RayEngine)
