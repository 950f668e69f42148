"""Exact exposure: every (query, document, rank, score) of every query's top-n, stored once.

``compute_exposure`` runs a retriever over a query collection in batches, streams each shard of
queries to a Parquet file (``limelight.exposure.shards``: int32 codes, written atomically in a
background thread while the next shard is retrieved) and, in a fresh job, appends it and its
queries in the background to the DuckDB database being built (a resumed job loads all shards in
one statement instead); the database appears, complete, only at the end
(``limelight.exposure.store`` describes the directory). An engine computes the shards
(``limelight.exposure.engine``): this process by default, or Ray tasks (``limelight.scale``).

Interrupting the job loses at most the shards being written; running it again with the same
retriever and queries skips the finished shards. A store computed with another retriever, depth
or query set is an ``IndexMismatchError``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import IndexMismatchError, LimelightError
from limelight.exposure.engine import (
    ComputedShards,
    Progress,
    ShardEngine,
    ShardJob,
    resolve_engine,
)
from limelight.exposure.fingerprints import (
    ids_fingerprint,
    queries_fingerprint,
    retriever_fingerprint,
    validate_queries,
)
from limelight.exposure.shards import _committed_shards, _query_info, shard_path
from limelight.exposure.store import (
    DB_NAME,
    FORMAT,
    ExposureStore,
    _clear_store,
    _DatabaseBuilder,
    _load_database,
    _queries_table,
    _remove_db,
    _write_inputs,
    _write_manifest,
)

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class ExposureOptions:
    """How a store is cut and built (none of it changes the pairs): ``shard_size`` queries per
    Parquet shard (part of the store's identity: a resumed job must use the same), retrieved
    ``batch_size`` at a time (default: a shard at a time); ``load``: build ``exposure.duckdb``
    (else only the shards: a later run loads them); ``art_indexes``: DuckDB ART indexes on
    ``exposure(d)`` and ``exposure(q)``; ``materialize=False``: ``exposure`` is a DuckDB view
    over the shards instead of a table (no load cost)."""

    shard_size: int = 8192
    batch_size: int | None = None
    load: bool = True
    art_indexes: bool = False
    materialize: bool = True

    def __post_init__(self) -> None:
        if self.shard_size < 1:
            raise LimelightError(f"shard size must be ≥ 1, got {self.shard_size}")


class ExposureKeywords(TypedDict, total=False):
    """``compute_exposure``'s keywords besides its parameters: the fields of ``ExposureOptions``
    and, with an engine name, its ``address`` and ``engine_options``."""

    shard_size: int
    batch_size: int | None
    load: bool
    art_indexes: bool
    materialize: bool
    address: str | None
    engine_options: dict | None


_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(ExposureOptions))


def compute_exposure(
    retriever,
    queries: Queries,
    out: str | os.PathLike,
    depth: int = 100,
    *,
    doc_ids: IdMap | None = None,
    fingerprint: str | None = None,
    settings: dict | None = None,
    progress: Progress | None = None,
    engine: str | ShardEngine = "local",
    options: ExposureOptions | None = None,
    **keywords: Unpack[ExposureKeywords],
) -> ExposureStore:
    """Compute (or resume) the exact exposure of ``queries`` under ``retriever`` into ``out``.

    ``retriever`` is anything with ``search_batch(texts, k) -> (docs, scores)`` (padded ``-1``)
    and ``doc_ids``, or a callable ``f(queries, k) -> Run`` (then ``doc_ids`` is required).
    ``progress(done, total)`` is called with numbers of queries. ``fingerprint`` identifies the
    retriever (default: ``retriever_fingerprint``); ``settings`` are recorded in the manifest.
    ``options`` (``ExposureOptions``) cut and build the store; its fields may also be given as
    keywords (``shard_size=500``), which override ``options``.

    ``engine`` computes the shards: an engine object (``LocalEngine()``,
    ``limelight.scale.RayEngine(address=...)``) or a registered name: ``"local"`` (the default)
    or ``"ray"`` (registered by ``limelight.scale``), built with the keywords ``address`` (the
    cluster; a local one when ``None``) and ``engine_options`` (``cpus_per_task``, ``write_on``,
    ``max_retries``, ``num_cpus``). The store is the same, and any engine resumes a store
    another started.
    """
    eng = resolve_engine(engine, keywords.pop("address", None), keywords.pop("engine_options", None))
    if depth < 1:
        raise LimelightError(f"depth must be ≥ 1, got {depth}")
    unknown = sorted(set(keywords) - _OPTION_NAMES)
    if unknown:
        raise TypeError(f"compute_exposure() got an unexpected keyword argument {unknown[0]!r}")
    opts = dataclasses.replace(options or ExposureOptions(), **keywords)
    validate_queries(queries)
    doc_ids = _documents_of(retriever, doc_ids)
    store = Path(out)
    manifest = _manifest(retriever, queries, doc_ids, depth, opts.shard_size, fingerprint, settings)
    if _resumable(store, manifest) == "complete":
        if progress:
            progress(len(queries), len(queries))
        return ExposureStore.open(store)
    created = not (store / "manifest.json").exists()  # a new store: removed again if the job fails before a shard
    qtable = None  # the query set as Arrow, built once (queries.parquet and the database's table)
    if created:
        if store.exists() and any(store.iterdir()):
            raise LimelightError(f"{store}: exists and is not an exposure store; use an empty or new directory")
        store.mkdir(parents=True, exist_ok=True)
        # the query set and documents first, so that a partial store is self-describing
        qtable = _write_inputs(store, queries, doc_ids)
        _write_manifest(store, {**manifest, "complete": False})
    try:
        return _run_job(retriever, queries, store, manifest, doc_ids, opts, eng, progress, qtable)
    except BaseException:
        if created and not _committed_shards(store):
            _clear_store(store)  # nothing finished: a rerun (with other arguments too) starts afresh
        raise


def _documents_of(retriever, doc_ids: IdMap | None) -> IdMap:
    """The documents of a job (``doc_ids``, else the retriever's), the retriever checked."""
    if not hasattr(retriever, "search_batch") and not callable(retriever):
        raise LimelightError("retriever must have search_batch(texts, k) or be a callable returning a Run")
    doc_ids = doc_ids if doc_ids is not None else getattr(retriever, "doc_ids", None)
    if doc_ids is None:
        raise LimelightError("doc_ids is required for a retriever without doc_ids")
    if len(doc_ids) == 0:
        raise LimelightError("the collection has no documents")
    return doc_ids


def _manifest(retriever, queries: Queries, doc_ids: IdMap, depth: int, shard_size: int,
              fingerprint: str | None, settings: dict | None) -> dict:
    """The manifest of a job (without ``complete``)."""
    nq = len(queries)
    return {
        "format": FORMAT,
        "retriever": fingerprint or retriever_fingerprint(retriever, doc_ids),
        "settings": settings or {"retriever": str(getattr(retriever, "name", type(retriever).__name__))},
        "depth": int(depth),
        "shard_size": int(shard_size),
        "n_shards": int((nq + shard_size - 1) // shard_size),
        "n_queries": nq,
        "n_docs": len(doc_ids),
        "queries": queries_fingerprint(queries),
        "queries_name": queries.name,
        "documents": ids_fingerprint(doc_ids),
    }


# what must agree between a store's manifest and a job that resumes it
_KEYS = ("format", "retriever", "depth", "shard_size", "n_queries", "n_docs", "queries", "documents")


def _resumable(store: Path, manifest: dict) -> str:
    """What ``store`` is to the job of ``manifest``: ``"new"`` (no store, or an unfinished one
    from another job without a finished shard, now cleared), ``"resume"`` or ``"complete"``;
    an ``IndexMismatchError`` when it holds another job's shards."""
    man_path = store / "manifest.json"
    if not man_path.exists():
        return "new"
    try:
        old = json.loads(man_path.read_text())
    except json.JSONDecodeError:
        raise IndexMismatchError(f"{man_path}: corrupt manifest; remove {store} to start over") from None
    diff = [k for k in _KEYS if old.get(k) != manifest[k]]
    if diff and not old.get("complete") and not _committed_shards(store):
        _clear_store(store)  # an unfinished job without a finished shard: nothing to keep
        return "new"
    if diff:
        raise IndexMismatchError(_mismatch_message(store, old, manifest, diff))
    return "complete" if old.get("complete") and (store / DB_NAME).exists() else "resume"


_DIFFERENCES = {"retriever": "another index or retriever", "queries": "another query set",
                "n_queries": "another query set", "documents": "another collection",
                "n_docs": "another collection", "depth": "another depth",
                "shard_size": "another shard size", "format": "another format"}


def _mismatch_message(store: Path, old: dict, new: dict, diff: list[str]) -> str:
    """One line naming everything that differs between a store's manifest and this job."""
    what = list(dict.fromkeys(_DIFFERENCES[k] for k in diff))
    details = []
    for k in diff:
        if k == "retriever":
            so, sn = old.get("settings") or {}, new.get("settings") or {}
            changed = [f"{x} {so.get(x)!r} → {sn.get(x)!r}" for x in sorted(set(so) | set(sn))
                       if so.get(x) != sn.get(x)]
            details.append(", ".join(changed) if changed else "same settings, the index or retriever changed")
        elif k == "queries":
            if "n_queries" not in diff:
                details.append("same number of queries, other ids, texts or weights")
        elif k == "documents":
            if "n_docs" not in diff:
                details.append("other document ids")
        else:
            details.append(f"{k} {old.get(k)} → {new[k]}")
    return (f"{store}: this exposure store was computed with {' and '.join(what)} "
            f"({'; '.join(details)}); use another --out or remove it")


def _missing_shards(store: Path, n_shards: int) -> list[int]:
    """The shards ``store`` lacks, after removing what a killed job left half-written."""
    shards = store / "shards"
    shards.mkdir(exist_ok=True)
    for stale in shards.glob(".*.tmp"):  # left by a job killed mid-write
        stale.unlink(missing_ok=True)
    for stale in store.glob(f".{DB_NAME}*.tmp"):
        _remove_db(stale)
    return [i for i in range(n_shards) if not shard_path(store, i).exists()]


def _run_job(retriever, queries: Queries, store: Path, manifest: dict, doc_ids: IdMap,
             opts: ExposureOptions, engine: ShardEngine, progress: Progress | None,
             qtable: pa.Table | None) -> ExposureStore:
    """The shards still missing from ``store`` (by ``engine``), then its database."""
    nq, depth = len(queries), int(manifest["depth"])
    todo = _missing_shards(store, int(manifest["n_shards"]))
    has_batch = hasattr(retriever, "search_batch")
    # a fresh job offers the engine the database to build while it retrieves (resumed jobs,
    # and engines that write elsewhere, load the shards at the end)
    builder = None
    if todo and len(todo) == int(manifest["n_shards"]) and opts.load:
        builder = _DatabaseBuilder(store, depth, qtable if qtable is not None else _queries_table(queries),
                                   opts.materialize)
    job = ShardJob(retriever, queries, store, depth, opts.shard_size, opts.batch_size or opts.shard_size,
                   doc_ids, doc_ids.lexical_rank() if has_batch and todo else None, progress, builder)
    if progress:
        progress(job.n_done(todo), nq)
    try:
        res = engine.compute(job, todo) if todo else ComputedShards()
    except BaseException:
        if builder is not None:
            _remove_db(builder.path)
        raise
    t0 = time.perf_counter()
    st = ExposureStore(store, {**manifest, "complete": False}, queries, doc_ids)
    if res.pairs is not None:  # computed in this call: keep the pairs in memory for analysis
        st._pairs = res.pairs
    if opts.load:
        info = res.info if res.info is not None else _pairs_info(st, nq, depth)
        built = builder.path if builder is not None and builder.finished else None
        _load_database(store, queries, *info, art_indexes=opts.art_indexes, materialize=opts.materialize,
                       qtable=qtable, built=built)
        st.manifest["complete"] = True
        _write_manifest(store, st.manifest)
    st.manifest = {**st.manifest, "timings": {"retrieve_s": res.retrieve_s, "load_s": time.perf_counter() - t0}}
    return st


def _pairs_info(st: ExposureStore, nq: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    q, _, rank, score = st.pair_arrays()
    return _query_info(q, rank, score, nq, depth)


def exposure_from_run(run: Run, queries: Queries, doc_ids: IdMap, out: str | os.PathLike,
                      depth: int | None = None, shard_size: int = 8192) -> ExposureStore:
    """A store from an existing ``Run`` (e.g. read from a TREC file) over ``doc_ids``."""
    depth = depth or int(run.depths().max(initial=1))
    by_q = run

    def fn(sub: Queries, k: int) -> Run:
        codes = by_q.qids.encode(sub.ids.strings, missing=-1)
        keep = np.isin(by_q.q, codes[codes >= 0])
        return Run.from_codes(by_q.qids, by_q.docids, by_q.q[keep], by_q.d[keep], by_q.score[keep],
                              by_q.name, sort=False)

    return compute_exposure(fn, queries, out, depth=depth, doc_ids=doc_ids, shard_size=shard_size,
                            fingerprint=f"run:{run.name}:{len(run)}")
