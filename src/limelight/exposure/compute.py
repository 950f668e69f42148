"""Exact exposure: every (query, document, rank, score) of every query's top-n, stored once.

``compute_exposure`` runs a retriever over a query collection in batches and streams each shard
of queries to a Parquet file (``limelight.exposure.shards``: int32 codes, written atomically in a
background thread while the next shard is retrieved): the shards are the only copy of the pairs.
When every shard is written, the store's index (each query's number of documents and threshold,
and the pairs' row numbers grouped by document) is written from the pairs, then the manifest
says the store is complete (``limelight.exposure.store`` describes the directory). An engine
computes the shards (``limelight.exposure.engine``): this process by default, or Ray tasks
(``limelight.scale``).

Interrupting the job (even with SIGKILL) loses at most the shards being written; running it
again with the same retriever and queries skips the finished shards. A store computed with
another retriever, depth or query set is an ``IndexMismatchError``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack

import numpy as np

from limelight._io import check_resumable_dir
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import IndexMismatchError, LimelightError
from limelight.exposure.docindex import (
    INDEX_DIR,
    QUERY_STATS,
    IndexWriter,
    complete_index,
    remove_lookup_tables,
    remove_piece,
)
from limelight.exposure.engine import (
    ComputedShards,
    LocalEngine,
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
from limelight.exposure.shards import _committed_shards, shard_path
from limelight.exposure.store import (
    BUILDING_DB,
    DB_NAME,
    FORMAT,
    OLD_FORMAT,
    ExposureStore,
    _clear_store,
    _remove_db,
    _write_inputs,
    _write_manifest,
    is_complete,
)


@dataclass(frozen=True)
class ExposureOptions:
    """How a store is cut and built (none of it changes the pairs): ``shard_size`` queries per
    Parquet shard (part of the store's identity: a resumed job must use the same), retrieved
    ``batch_size`` at a time (default: a shard at a time); ``load``: complete the store (write
    its index; else only the shards: a later run completes it). The pairs are stored once, as
    Parquet shards, with a per-document index (``limelight.exposure.store``). A job of at most
    ``pairs_in_memory`` pairs (queries × depth) keeps them in memory for the analysis that
    follows; a larger one holds one shard's pairs at a time, and the store's analyses read the
    shards one by one (bounded memory, the same figures)."""

    shard_size: int = 8192
    batch_size: int | None = None
    load: bool = True
    pairs_in_memory: int = 1 << 25

    def __post_init__(self) -> None:
        if self.shard_size < 1:
            raise LimelightError(f"shard size must be ≥ 1, got {self.shard_size}")


class ExposureKeywords(TypedDict, total=False):
    """``compute_exposure``'s keywords besides its parameters: the fields of ``ExposureOptions``
    and, with an engine name, its ``address`` and ``engine_options``."""

    shard_size: int
    batch_size: int | None
    load: bool
    pairs_in_memory: int
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
    validated: bool = False,
    queries_fp: str | None = None,
    **keywords: Unpack[ExposureKeywords],
) -> ExposureStore:
    """Compute (or resume) the exact exposure of ``queries`` under ``retriever`` into ``out``.

    ``retriever`` is anything with ``search_batch(texts, k) -> (docs, scores)`` (padded ``-1``)
    and ``doc_ids``, or a callable ``f(queries, k) -> Run`` (then ``doc_ids`` is required).
    ``progress(done, total)`` is called with numbers of queries. ``fingerprint`` identifies the
    retriever (default: ``retriever_fingerprint``); ``settings`` are recorded in the manifest.
    ``options`` (``ExposureOptions``) cut and build the store; its fields may also be given as
    keywords (``shard_size=500``), which override ``options``. ``validated``: the caller has
    checked ``queries`` already (an exposure job checks its query set once, as it takes its
    fingerprint: ``limelight.audit.job.ExposureJob``), so they are not read again here;
    ``queries_fp``: their ``queries_fingerprint`` when the caller has it (the job's; an audit
    takes it once for all its systems' stores), else it is taken here.

    ``engine`` computes the shards: an engine object (``LocalEngine()``,
    ``limelight.scale.RayEngine(address=...)``) or a registered name: ``"local"`` (the default)
    or ``"ray"`` (registered by ``limelight.scale``), built with the keywords ``address`` (the
    cluster; a local one when ``None``) and ``engine_options`` (``cpus_per_task``, ``write_on``,
    ``max_retries``, ``num_cpus``). The store is the same, and any engine resumes a store
    another started.
    """
    eng, opts = _engine_and_options(engine, depth, options, keywords)
    depth = int(depth)
    if not validated:
        validate_queries(queries)
    doc_ids = _documents_of(retriever, doc_ids)
    store = Path(out)
    manifest = _manifest(retriever, queries, doc_ids, depth, opts.shard_size, fingerprint, settings,
                         queries_fp)
    if _resumable(store, manifest) == "complete":
        if progress:
            progress(len(queries), len(queries))
        return ExposureStore.open(store)
    created = not (store / "manifest.json").exists()  # a new store: removed again if the job fails before a shard
    if created:
        check_resumable_dir(store, "manifest.json", "exposure store")
        store.mkdir(parents=True, exist_ok=True)
        _write_manifest(store, {**manifest, "complete": False})
    try:
        todo = _shards_to_compute(store, manifest)

        def write_inputs() -> None:  # the query set and the documents: a partial store describes itself
            if not ((store / "queries.parquet").exists() and (store / "documents.parquet").exists()):
                _write_inputs(store, queries, doc_ids)

        # the local engine's writer thread writes them before its first shard, while the first batch
        # is retrieved, and each shard's index piece beside the shard; other engines ignore the sink
        local = isinstance(eng, LocalEngine) and bool(todo)
        if not local:
            write_inputs()
        lex = doc_ids.lexical_rank() if hasattr(retriever, "search_batch") and todo else None
        job = ShardJob(retriever, queries, store, depth, opts.shard_size, opts.batch_size or opts.shard_size,
                       doc_ids, lex, progress, IndexWriter(store, len(doc_ids), depth, opts.shard_size,
                                                           write_inputs if local else None),
                       pairs_in_memory=opts.pairs_in_memory)
        if progress:
            progress(job.n_done(todo), len(queries))
        res = eng.compute(job, todo) if todo else ComputedShards()
        write_inputs()  # (an engine that left the sink)
        # a query set read from disk stays there: the store reads its own copy when asked
        return _completed(store, manifest, res, doc_ids, opts, None if queries.on_disk else queries)
    except BaseException:
        if created and not _committed_shards(store):
            _clear_store(store)  # nothing finished: a rerun (with other arguments too) starts afresh
        raise


def _engine_and_options(engine: str | ShardEngine, depth: int, options: ExposureOptions | None,
                        keywords: dict) -> tuple[ShardEngine, ExposureOptions]:
    """``compute_exposure``'s engine and options, checked (``keywords``: its own)."""
    eng = resolve_engine(engine, keywords.pop("address", None), keywords.pop("engine_options", None))
    if depth < 1:
        raise LimelightError(f"depth must be ≥ 1, got {depth}")
    unknown = sorted(set(keywords) - _OPTION_NAMES)
    if unknown:
        raise TypeError(f"compute_exposure() got an unexpected keyword argument {unknown[0]!r}")
    return eng, dataclasses.replace(options or ExposureOptions(), **keywords)


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
              fingerprint: str | None, settings: dict | None, queries_fp: str | None = None) -> dict:
    """The manifest of a job (without ``complete``; ``queries_fp``: the queries' fingerprint
    when known)."""
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
        "queries": queries_fp or queries_fingerprint(queries),
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
    # the first layout's shards are this layout's: its stores resume (and complete) as this one
    diff = [k for k in _KEYS if old.get(k) != manifest[k] and not (k == "format" and old.get(k) == OLD_FORMAT)]
    if diff and not old.get("complete") and not _committed_shards(store):
        _clear_store(store)  # an unfinished job without a finished shard: nothing to keep
        return "new"
    if diff:
        raise IndexMismatchError(_mismatch_message(store, old, manifest, diff))
    return "complete" if is_complete(store, old) else "resume"


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
            sn = new.get("settings") or {}
            so = _in_the_one_form(old.get("settings") or {}, sn)
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


def _in_the_one_form(old: dict, new: dict) -> dict:
    """A store's recorded settings in the form this job's are (``System.settings``): those of a
    store of earlier code (the ``model`` form) read by the one migration, so that a refusal
    names the parameters that differ, not the two forms' keys. Keys that are no setting but the
    job records too (the encoder's identity, where the documents came from) are kept."""
    if "kind" in old or "kind" not in new or "model" not in old:
        return old
    from limelight.retrieval.spec import System

    try:
        migrated = System.from_recorded(old).settings()
    except LimelightError:  # a kind no longer registered: name the keys as they are
        return old
    return {**{k: v for k, v in old.items() if k in new and k not in migrated}, **migrated}


def _remove_half_written(store: Path) -> None:
    """Remove the shard and index files a killed writer left half-written (``.*.tmp``, as
    ``atomic_path`` names them): before a job computes the shards a store lacks, and once every
    shard is written (a Ray worker killed while writing a shard leaves its temporary file beside
    the shard its retried task wrote)."""
    for stale in [*(store / "shards").glob(".*.tmp"), *(store / INDEX_DIR).glob(".*.tmp")]:
        stale.unlink(missing_ok=True)


def _missing_shards(store: Path, n_shards: int) -> list[int]:
    """The shards ``store`` lacks, after removing what a killed job left half-written (and the
    index pieces of the missing shards)."""
    (store / "shards").mkdir(exist_ok=True)
    (store / INDEX_DIR).mkdir(exist_ok=True)
    _remove_half_written(store)
    for stale in store.glob(".*.tmp"):  # the query statistics half-written; a first-layout database
        if stale.is_file():
            _remove_db(stale)
    _remove_db(store / DB_NAME)  # a resumed first-layout store: its pairs are the shards alone
    _remove_db(store / BUILDING_DB)
    todo = [i for i in range(n_shards) if not shard_path(store, i).exists()]
    for i in todo:
        remove_piece(store, i)
    return todo


def _shards_to_compute(store: Path, manifest: dict) -> list[int]:
    """The shards still missing from ``store`` (the store marked incomplete while they are
    computed; what a killed job left half-written removed; the query statistics and lookup
    tables of an earlier run removed when they no longer cover every shard)."""
    if json.loads((store / "manifest.json").read_text()).get("complete"):
        _write_manifest(store, {**manifest, "complete": False})  # being completed again
    todo = _missing_shards(store, int(manifest["n_shards"]))
    if todo:
        (store / QUERY_STATS).unlink(missing_ok=True)
        remove_lookup_tables(store)
    return todo


def _completed(store: Path, manifest: dict, res: ComputedShards, doc_ids: IdMap,
               opts: ExposureOptions, queries: Queries | None) -> ExposureStore:
    """The store once every shard is written: its index and manifest (``opts.load``), with the
    pairs computed in this call kept in memory for analysis and ``queries`` (``None``: the store
    reads its own copy)."""
    nq, depth = int(manifest["n_queries"]), int(manifest["depth"])
    t0 = time.perf_counter()
    _remove_half_written(store)  # every writer of this job has ended
    st = ExposureStore(store, {**manifest, "complete": False}, queries, doc_ids)
    st.pairs_in_memory = opts.pairs_in_memory  # (the store's analyses keep to the job's budget)
    if res.pairs is not None:  # computed in this call: keep the pairs in memory for analysis
        st._pairs = res.pairs
    if opts.load:
        complete_index(store, nq, len(doc_ids), depth, opts.shard_size)
        st.manifest = {**manifest, "n_pairs": sum(p.n_rows for p in st.pieces()), "complete": True}
        _write_manifest(store, st.manifest)
    st.manifest = {**st.manifest, "timings": {"retrieve_s": res.retrieve_s, "load_s": time.perf_counter() - t0}}
    return st


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
