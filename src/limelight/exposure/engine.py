"""Engines that compute the shards of an exposure job.

``compute_exposure`` decides which shards a store still lacks and hands them, with a
``ShardJob``, to an engine: anything with ``compute(job, shards) -> ComputedShards``
(``ShardEngine``). The engine computes each shard's rows (``shards.batch_rows``: the same
retriever call and trec_eval tie order everywhere) and writes ``job.path(i)``; the store built
afterwards is the same whichever engine wrote it, and any engine resumes a store another began.

- ``LocalEngine`` (the default): this process, batch by batch, a background writer thread; it
  also fills ``job.sink`` (the store's index pieces) and hands back the pairs it computed.
- ``limelight.scale.RayEngine``: Ray tasks on a cluster. It registers itself under the name
  ``"ray"`` when ``limelight.scale`` is imported, so that ``compute_exposure(engine="ray")``
  finds it; this package never imports ``limelight.scale``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import LimelightError
from limelight.exposure.shards import (
    ShardSink,
    _PairBuffer,
    _run_rows,
    _search_topk,
    _ShardWriter,
    shard_path,
)
from limelight.progress import deferred_interrupt

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ShardJob:
    """What an engine needs to compute shards of a store: ``retriever`` (``search_batch`` or a
    callable returning a ``Run``) over ``doc_ids``, the ``queries`` cut into shards of
    ``shard_size`` (retrieved ``batch_size`` at a time), top-``depth`` rows, ``lex`` (the doc
    ids' lexical ranks, for the tie order; None for a callable retriever), ``progress(done,
    total)`` in queries, and ``sink``: what else to write as shards are written (the store's
    index pieces), for an engine that writes in this process (others leave it, and the store
    builds it from the shards)."""

    retriever: object
    queries: Queries
    store: Path
    depth: int
    shard_size: int
    batch_size: int
    doc_ids: IdMap
    lex: np.ndarray | None = None
    progress: Progress | None = None
    sink: ShardSink | None = None
    pairs_in_memory: int = 1 << 25

    @property
    def keeps_pairs(self) -> bool:
        """Whether an engine computing every shard in this process may hand back the job's
        pairs (at most ``pairs_in_memory`` of them: 33.5M, ~470 MB, by default); else it holds
        one shard's pairs at a time."""
        return len(self.queries) * min(self.depth, len(self.doc_ids)) <= self.pairs_in_memory

    @property
    def n_shards(self) -> int:
        return (len(self.queries) + self.shard_size - 1) // self.shard_size

    def bounds(self, i: int) -> tuple[int, int]:
        """The query codes ``s:e`` of shard ``i``."""
        return i * self.shard_size, min(len(self.queries), (i + 1) * self.shard_size)

    def path(self, i: int) -> Path:
        return shard_path(self.store, i)

    def n_done(self, shards: list[int]) -> int:
        """The number of queries outside ``shards`` (finished before they are computed)."""
        return len(self.queries) - sum(e - s for s, e in map(self.bounds, shards))


@dataclass
class ComputedShards:
    """What an engine hands back besides the shard files: ``retrieve_s`` (seconds computing);
    when it computed every shard of the job in this process, ``pairs`` (every ``(q, d, rank,
    score)`` in query order) and ``info`` (each query's ``n_retrieved`` and ``threshold``)."""

    retrieve_s: float = 0.0
    pairs: tuple | None = None
    info: tuple[np.ndarray, np.ndarray] | None = None


@runtime_checkable
class ShardEngine(Protocol):
    """Computes shards of an exposure job and writes each to ``job.path(i)`` atomically."""

    def compute(self, job: ShardJob, shards: list[int]) -> ComputedShards:
        """Compute and write ``shards`` (shard numbers, ascending), calling ``job.progress``
        from ``job.n_done(shards)`` on."""
        ...


@contextlib.contextmanager
def _short_gil_switch(seconds: float = 0.0002):
    """Lower Python's GIL switch interval (default 5 ms) for the shard loop, restoring it after.

    The main thread's query analysis (a regex pass) holds the GIL for whole switch intervals,
    and pyarrow, though it runs native code, takes the GIL briefly and often; with 5 ms slices
    the writer threads wait most of the time instead of using the core the analysis leaves idle
    (measured with the first store layout, whose writer also inserted the pairs into DuckDB:
    those inserts took 3.1 s beside a GIL-bound thread instead of 0.8 s; 1.3 s at 1 ms)."""
    import sys

    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class LocalEngine(ShardEngine):
    """Shards computed in this process, batch after batch (the retriever uses the cores), each
    written by a background thread (``shards._ShardWriter``, with ``job.sink``) while the next
    is retrieved. Ctrl-C is deferred (``progress.deferred_interrupt``): the retrievers' loops
    stop at their next safe point, the shards finished before are written, and
    ``KeyboardInterrupt`` is raised."""

    def compute(self, job: ShardJob, shards: list[int]) -> ComputedShards:
        nq = len(job.queries)
        top_k = hasattr(job.retriever, "search_batch")  # (else a callable returning a Run)
        done = job.n_done(shards)
        # the whole job's pairs, kept for the analysis that follows, when they are few enough;
        # else one shard's, copied for the writer and overwritten by the next (bounded memory)
        keep = job.keeps_pairs and len(shards) == job.n_shards
        one = min(nq, job.shard_size)
        buf = _PairBuffer(nq - done if keep else one, job.depth, nq if keep else one, len(job.doc_ids))
        retrieve_s = 0.0
        with deferred_interrupt() as check, _short_gil_switch():
            # the writer's thread starts under the deferral: a Ctrl-C that landed between its
            # start and the ``try`` would leave it writing the store's tables while the caller
            # clears the store (a folder left behind)
            writer = _ShardWriter(job.depth, job.sink)
            try:
                for i in shards:
                    s, e = job.bounds(i)
                    if not keep:
                        buf.restart(s)
                    start = buf.pos
                    for b in range(s, e, job.batch_size):
                        check()
                        be = min(e, b + job.batch_size)
                        t0 = time.perf_counter()
                        if top_k:  # the rows of queries b:be, appended
                            buf.add_topk(*_search_topk(job.retriever, job.queries, b, be, job.depth,
                                                       job.doc_ids), b, job.lex)
                        else:
                            buf.add_rows(_run_rows(job.retriever, job.queries, b, be, job.depth,
                                                   job.doc_ids), b, be - b)
                        retrieve_s += time.perf_counter() - t0
                        if job.progress:
                            done += be - b
                            job.progress(done, nq)
                    rows, info = buf.rows(start, buf.pos), buf.info(s, e)
                    if not keep:  # (the writer's copies: the buffer is refilled by the next shard)
                        rows, info = tuple(a.copy() for a in rows), tuple(a.copy() for a in info)
                    writer.put(job.path(i), rows, s, e, info)  # a finished shard is kept
                check()
            finally:
                writer.close()
        if not keep:  # a resumed or large job: the pairs are read from the shards
            return ComputedShards(retrieve_s)
        return ComputedShards(retrieve_s, buf.rows(), (buf.n_retrieved, buf.threshold))

    def __repr__(self) -> str:
        return "LocalEngine()"


# ---- engines by name ------------------------------------------------------------------------------


def _local(address: str | None = None, **options) -> LocalEngine:
    """The local engine (it takes no options: ``engine_options`` are ignored, as they always were)."""
    if address is not None:
        raise LimelightError("an address goes with engine='ray'")
    return LocalEngine()


_ENGINES: dict[str, Callable[..., ShardEngine]] = {"local": _local}
# engines that register themselves when their package is imported (named in errors only)
_ELSEWHERE = {"ray": "limelight.scale"}  # name → the package that registers it


def register_engine(name: str, factory: Callable[..., ShardEngine]) -> None:
    """Make ``compute_exposure(engine=name, address=..., engine_options=...)`` use
    ``factory(address=address, **engine_options)``."""
    _ENGINES[name] = factory


def resolve_engine(engine: str | ShardEngine, address: str | None = None,
                   options: dict | None = None) -> ShardEngine:
    """The engine ``engine`` names (built with ``address`` and ``options``), or ``engine``
    itself when it is an engine object (then without ``address`` or ``options``)."""
    if not isinstance(engine, str):
        if address is not None or options:
            raise LimelightError("address and engine_options go with an engine name; "
                                 "give them to the engine object instead")
        if not isinstance(engine, ShardEngine):
            raise LimelightError(f"engine must be a name or have compute(job, shards), not "
                                 f"{type(engine).__name__}")
        return engine
    factory = _ENGINES.get(engine)
    if factory is None:
        if engine in _ELSEWHERE:
            pkg = _ELSEWHERE[engine]
            raise LimelightError(f"engine {engine!r} comes with {pkg} (the scale extra): `import "
                                 f"{pkg}` first, or pass {pkg}.RayEngine(...) as the engine")
        names = " or ".join(dict.fromkeys([*_ENGINES, *_ELSEWHERE]))
        raise LimelightError(f"unknown engine {engine!r} ({names})")
    return factory(address=address, **(options or {}))
