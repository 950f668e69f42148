"""The replay of a live search service (system kind ``http``) on Ray, one journal per shard.

``compute_exposure(ShardedReplay(spec, doc_ids, work_dir), queries, store, engine="ray")`` asks
the service every query of the log from Ray tasks, one task per shard of the store (as any
Ray exposure job), each through the kind's own client and journal
(``limelight.retrieval.kinds.http.HttpRetriever``: concurrency, rate, retries, failure budget;
answers journaled): shard ``i``'s task opens the system with its own work folder,
``work_dir/shards/NNNNN/`` (the journal under its ``replay/<request hash>/``), so that tasks
never write into one journal together, and writes the shard's rows as the local engine would.

What is committed, and so never asked again:

- a finished shard: its file exists, ``compute_exposure`` does not hand it to a task again (in
  this job or a rerun), and its journal holds every one of its answers;
- within a shard, every journal part written (the client writes one every 2,048 answers or 5
  seconds, and at the end of the shard): a task re-run after its node died reads those answers
  back and asks the service only the rest.

Answers a killed task had received but not yet journaled are asked again (they were never
committed). The store is the single-process replay's store, byte for byte, for a service
that answers the same query the same way (tested against a real engine on loopback).
``ShardedReplay`` carries the same fingerprint as the kind's retriever, so a store begun by one
can be finished by the other; their journals are separate (a shard's queries answered in the
single-process journal are asked again on Ray).

Rate and concurrency: the client's ``rate`` and ``concurrency`` hold per task, so with T shard
tasks running at once the service sees up to T × ``rate`` queries/s; give each task the T-th
part of what the service allows.

Credentials: the template's ``env:NAME`` references are read in each worker process (and once
on the driver, to fail early): the variables must be set where the nodes run (``ray start``'s
environment).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from limelight._io import atomic_path, check_resumable_dir
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError, with_article
from limelight.retrieval.kinds.http import HttpRetriever, request_identity
from limelight.retrieval.replay import JOURNAL_FILE, summarize_log
from limelight.retrieval.spec import System
from limelight.retrieval.systems import REMOTE

WORK_FILE = "sharded-replay.json"  # marks a work folder as a ShardedReplay's


class ShardedReplay:
    """An ``http`` system (``spec``, a ``System`` of kind ``http``, or its parameters)
    over the documents ``doc_ids``, for ``compute_exposure(..., engine="ray")``: each shard's
    task replays its queries with a journal of its own under ``work_dir/shards/NNNNN/``.

    Called directly (``retriever(queries, k)``, as the local engine calls it) it replays with
    one journal under ``work_dir/local/``."""

    def __init__(self, spec: System | dict[str, Any], doc_ids: IdMap,
                 work_dir: str | os.PathLike, name: str = "http"):
        params = dict(spec.params) if isinstance(spec, System) else dict(spec)
        if isinstance(spec, System) and not spec.registered.has(REMOTE):
            raise LimelightError(f"ShardedReplay replays a remote (http) system, not {with_article(spec.kind)} one")
        self.params = params
        self.doc_ids = doc_ids
        self.work_dir = Path(work_dir).resolve()
        self.name = name
        self.fingerprint = "http:" + request_identity(params, 0)  # as HttpRetriever's
        self.deterministic = bool(params.get("deterministic", False))
        HttpRetriever(params, IdMap([], kind="document"))  # the template and its env, checked here
        self._local: HttpRetriever | None = None
        # the work folder is limelight's: a new one gets a marker, an existing one must have it
        check_resumable_dir(self.work_dir, WORK_FILE, "sharded replay's work folder")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if not (self.work_dir / WORK_FILE).is_file():
            with atomic_path(self.work_dir / WORK_FILE) as tmp:
                tmp.write_text(json.dumps({"kind": "http", "fingerprint": self.fingerprint}),
                               encoding="utf-8")

    def shard_dir(self, shard: int) -> Path:
        """The work folder of shard ``shard`` (its journal under ``replay/``)."""
        return self.work_dir / "shards" / f"{int(shard):05d}"

    def for_shard(self, shard: int) -> HttpRetriever:
        """The kind's retriever for shard ``shard``, journaled in ``shard_dir(shard)`` (what a
        Ray task runs with)."""
        return HttpRetriever(self.params, self.doc_ids, self.shard_dir(shard), self.name)

    def __call__(self, queries: Queries, k: int) -> Run:
        """``retriever(queries, k)`` in this process (one journal, ``work_dir/local/``)."""
        if self._local is None:
            self._local = HttpRetriever(self.params, self.doc_ids, self.work_dir / "local",
                                        self.name)
        return self._local(queries, k)

    def replay_summary(self) -> list[dict[str, Any]]:
        """The figures of every journal of this replay together (``summarize_log`` over the
        shards' logs and the local one), per depth asked: queries asked, answered, failed,
        retried, attempts, latency p50/p95/p99 (ms)."""
        import pandas as pd
        import pyarrow.parquet as pq

        folders = sorted(self.work_dir.glob("shards/*/replay/*")) + sorted(
            self.work_dir.glob("local/replay/*"))
        by_k: dict[Any, list] = {}
        for f in folders:
            try:
                desc = json.loads((f / JOURNAL_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            by_k.setdefault((desc.get("url"), desc.get("k")), []).extend(
                pq.read_table(p).to_pandas() for p in sorted(f.glob("log-*.parquet")))
        out = []
        for (url, k), frames in sorted(by_k.items(), key=lambda x: str(x[0])):
            log = pd.concat(frames, ignore_index=True) if frames else None
            out.append({"url": url, "k": k, **summarize_log(log)})
        return out

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_local": None}

    def __repr__(self) -> str:
        return f"ShardedReplay({self.params.get('url')!r}, work_dir={str(self.work_dir)!r})"
