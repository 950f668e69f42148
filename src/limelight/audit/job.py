"""One system's exposure job, assembled one way: the audit's exposure stage
(:func:`limelight.audit.stages.exposure.exposure_stage`) and ``limelight exposure compute`` (a
one-system audit of that stage, its store written where ``--out`` says) both build an
:class:`ExposureJob` and run it (issue 55, "one door").

A job is a system (:class:`~limelight.retrieval.spec.System`), the documents it answers from
(an index directory, or a collection for a kind that opens over none), a query set read once
(a query file or log given as its path is read by the job, a log through the on-disk query
table, ``limelight.data.querytable``; or :func:`job_queries`' sample), checked and fingerprinted
once, in one pass (``queries_fingerprint(check=True)``: the job carries both), an engine (local
or Ray; a live service's answers journaled), the store's fingerprint and recorded settings, and
the store it computes or resumes (:func:`limelight.exposure.compute.compute_exposure`).

The fingerprint is one function, :meth:`System.fingerprint`, over the index the job reads. The
two doors keep the identities their stores recorded before they shared this job, so that every
store written by earlier code resumes (a store computed with another fingerprint would be
refused as "another index or retriever"). Both record the one settings form,
:meth:`System.settings`:

- the audit knows its index by its stage keys (``index_key``: the index stage's key, and the
  query vectors' for a system that encodes queries) and records the settings alone;
- ``exposure compute`` knows its index by the index's files (``index_dir``), or a collection by
  its document ids (``index_key={"documents": ...}``), and records the settings with the dense
  retriever's encoder identity (``encoder``) and where the documents came from (``where``).
  A store earlier code computed recorded another form (``model``); it resumes all the same
  (the fingerprint is unchanged) and is read by :meth:`System.from_recorded`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from limelight.errors import LimelightError, with_article
from limelight.retrieval.spec import System
from limelight.retrieval.systems import REMOTE

#: the pairs a job keeps in memory (queries × depth; ~56 MB) for what follows it: a larger job
#: holds one shard's pairs at a time, and what follows reads the store again (the same figures)
PAIRS_IN_MEMORY = 1 << 22

#: what a store records beside :meth:`System.settings`: nothing (the audit's) or, for a store
#: computed by ``limelight exposure compute``, the encoder's identity and ``where``
RECORDED = ("audit", "store")


def job_queries(source: Any, on_disk: str | os.PathLike | None = None, *, sample: int = 0,
                seed: int = 0):
    """An exposure job's query set, validated (``validate_queries``): ``source`` a query file or
    query log (``load_queries_file``; a log's distinct queries kept as a query table in
    ``on_disk``, read a batch at a time), or a ``Queries`` already made (a dataset's, generated
    ones); ``sample`` queries drawn with ``seed`` (0: all). For a caller that fingerprints the set
    itself and gives each job its ``queries_fp`` (the audit: once for every system); a job given
    a path, or queries without their fingerprint, reads and checks them itself."""
    from limelight.exposure.fingerprints import validate_queries

    if isinstance(source, str | os.PathLike):
        from limelight.data.loaders import load_queries_file

        source = load_queries_file(source, on_disk=on_disk)
    if sample:
        source = source.sample(sample, seed=seed)
    validate_queries(source)
    return source


@dataclass(frozen=True)
class ExposureJob:
    """One system's exposure job (see the module docstring). ``queries``: a query file or log
    (its path: read when the job is made, a log's distinct queries kept as a query table in
    ``on_disk``), or a ``Queries``; ``queries_fp`` their ``queries_fingerprint`` when the caller
    took it already, with the check (the audit's inputs: :func:`job_queries`), else the job
    takes both, once, when it is made; ``store`` is the store's folder (new or resumed);
    ``index_dir`` the index the system opens over (``None`` for a kind that opens over none);
    ``index_key`` what the index (or collection) is known by when not by ``index_dir``'s files;
    ``recorded`` what the store records (``RECORDED``: the settings, with ``where`` and the
    encoder's identity for ``"store"``; ``None``: the retriever's name);
    ``engine``/``address``/``engine_options`` as ``compute_exposure`` takes them; ``journal``
    where a live service's answers are journaled (a remote kind in this process: a
    ``ShardedReplay``; ``None``: the kind's own opener journals, as in an audit)."""

    system: System
    queries: Any
    store: Path
    depth: int = 100
    shard_size: int = 8192
    index_dir: Path | None = None
    index_key: Any = None
    recorded: str | None = "audit"
    where: dict = field(default_factory=dict)
    engine: str = "local"
    address: str | None = None
    engine_options: dict | None = None
    journal: Path | None = None
    pairs_in_memory: int = PAIRS_IN_MEMORY
    queries_fp: str | None = None
    on_disk: Path | None = None

    def __post_init__(self) -> None:
        from limelight.exposure.fingerprints import queries_fingerprint

        if self.recorded is not None and self.recorded not in RECORDED:
            raise LimelightError(f"recorded settings are one of {', '.join(RECORDED)}, not {self.recorded!r}")
        if isinstance(self.queries, str | os.PathLike):  # read once, here
            from limelight.data.loaders import load_queries_file

            object.__setattr__(self, "queries", load_queries_file(self.queries, on_disk=self.on_disk))
        if self.queries_fp is None:  # the one check of the job's queries, in its fingerprint's pass
            object.__setattr__(self, "queries_fp", queries_fingerprint(self.queries, check=True))

    @property
    def remote(self) -> bool:
        """Whether the system is a live service (its answers journaled)."""
        return self.system.registered.has(REMOTE)

    def open(self, *, threads: int | None = None, collection: Any = None,
             base_dir: str | os.PathLike | None = None):
        """The system's retriever: over ``index_dir`` for a kind that opens over an index, else
        over ``collection`` with the job's queries and ``base_dir`` (the folder its relative
        paths resolve against) given to its opener."""
        if self.system.registered.needs_index:
            return self.system.open(self.index_dir, threads=threads)
        if collection is None:
            raise LimelightError(f"{with_article(self.system.kind)} system needs the collection its "
                                 "results come from")
        return self.system.open(None, threads=threads, collection=collection, queries=self.queries,
                                base_dir=base_dir)

    def fingerprint(self) -> str | None:
        """The store's fingerprint (:meth:`System.fingerprint`: over ``index_key`` when the job
        has one, else over ``index_dir``'s files; ``None`` with neither: the retriever's own,
        ``retriever_fingerprint``, as the CtrlQGen stage's stores of generated queries record)."""
        if self.index_key is not None:
            return self.system.fingerprint(index_key=self.index_key)
        if self.index_dir is not None:
            return self.system.fingerprint(self.index_dir)
        return None

    def settings(self, retriever: Any = None) -> dict | None:
        """The settings the store records (:meth:`System.settings`; for ``recorded="store"``,
        with the opened dense retriever's encoder identity for a system over an index, and
        ``where``; ``None``: the retriever's name, ``compute_exposure``'s default)."""
        if self.recorded is None:
            return None
        if self.recorded == "audit":
            return self.system.settings()
        over_index = self.system.registered.needs_index
        return {**self.system.settings(retriever if over_index else None), **self.where}

    def shipped(self, retriever: Any):
        """The retriever as the engine runs it: a live service as a ``ShardedReplay`` journaling
        its answers in ``journal``, a system over an index on Ray as an ``IndexRetriever``
        (opened by path in each worker, memory-mapped), else as it is."""
        if self.remote and self.journal is not None:
            from limelight.scale.replay import ShardedReplay

            return ShardedReplay(self.system, retriever.doc_ids, self.journal, name=retriever.name)
        if self.engine == "ray" and self.system.registered.needs_index:
            from limelight.scale.exposure import IndexRetriever

            return IndexRetriever(self.index_dir, spec=self.system, retriever=retriever)
        return retriever

    def run(self, retriever: Any, progress: Any = None):
        """Compute (or resume) the store with ``retriever`` (:meth:`open`'s, or the audit's
        opener's): the fingerprint, the recorded settings, the engine; the queries are neither
        validated nor fingerprinted again. Returns the ``ExposureStore``."""
        from limelight.exposure.compute import compute_exposure

        settings, fingerprint = self.settings(retriever), self.fingerprint()
        return compute_exposure(self.shipped(retriever), self.queries, self.store, depth=self.depth,
                                shard_size=self.shard_size, pairs_in_memory=self.pairs_in_memory,
                                fingerprint=fingerprint, settings=settings, progress=progress,
                                engine=self.engine, address=self.address,
                                engine_options=self.engine_options, validated=True,
                                queries_fp=self.queries_fp)
