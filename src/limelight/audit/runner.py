"""Run an audit: load the inputs, run every stage of :func:`limelight.audit.stages.audit_stages`
through the stage cache, write ``results.json`` and ``audit.json`` (the stages write the Parquet
tables and the figures).

The runner iterates the stages as data (:class:`limelight.audit.stage.Stage`) and owns the
caching, progress display and records; it does not write the HTML report, which belongs to the
layer above: ``limelight audit CONFIG.toml --out DIR`` (and :func:`limelight.report.run_audit`,
the same as a library call and the one ``run_audit``) runs the audit, then writes
``DIR/report.html``; ``AuditRunner(cfg, out).run()`` runs it without the report.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from limelight._io import atomic_path, scratch_dir
from limelight.audit.cache import StageCache, _jsonable, stable_hash
from limelight.audit.config import AuditConfig
from limelight.audit.inputs import AuditInputs, load_inputs
from limelight.audit.layout import FORMAT, AuditDir
from limelight.audit.stage import Stage, StageSkipped, StageStatus
from limelight.audit.stages import audit_stages, summary_stages
from limelight.errors import LimelightError, with_article
from limelight.retrieval.systems import EXACT_REVERSE, QUERY_VECTORS

__all__ = ["AuditInputs", "AuditRunner", "LookupEncoder", "StageSkipped", "StageStatus"]

ProgressFn = Callable[[str, int, int], None]


class _Bars:
    """One progress display per stage (``limelight.progress``: a transient rich bar on a
    terminal, plain lines every few seconds otherwise), plus the caller's callback."""

    def __init__(self, show: bool, hook: ProgressFn | None):
        self.show, self.hook = show, hook

    def stage(self, name: str, title: str):
        bars = self

        class _Ctx:
            def __enter__(self):
                self._cm = self._update = None
                if bars.show:
                    from limelight.progress import progress_bar

                    self._cm = progress_bar(f"{name} {title}", None, elapsed=True)
                    self._update = self._cm.__enter__()
                return self

            def update(self, done: int, total: int) -> None:
                if self._update is not None:
                    self._update(done, total)
                if bars.hook is not None:
                    bars.hook(name, done, total)

            def __exit__(self, *exc):
                if self._cm is not None:
                    self._cm.__exit__(*exc)
                return False

        return _Ctx()


class LookupEncoder:
    """An ``Encoder`` stand-in that serves pre-computed query vectors by text (vectorised lookup
    through a pandas index) and falls back to the real encoder for unseen texts. The dense and
    hybrid systems of an audit share one encoding of the query log."""

    def __init__(self, encoder, texts: np.ndarray, vectors: np.ndarray):
        import pandas as pd

        self._enc = encoder
        self._index = pd.Index(texts)
        self._vectors = vectors
        self.dim, self.normalize, self.fingerprint = encoder.dim, encoder.normalize, encoder.fingerprint
        self.name = encoder.name

    def compatible_with(self, identity: dict) -> bool:
        return self._enc.compatible_with(identity)

    def __getattr__(self, name: str):  # everything else (mismatch, variant, ...) is the encoder's
        if name == "_enc":
            raise AttributeError(name)
        return getattr(self._enc, name)

    def identity(self) -> dict:
        return self._enc.identity()

    def encode(self, texts, batch_size=None, show_progress=None, description="encoding") -> np.ndarray:
        texts = ["" if t is None else str(t) for t in texts]
        pos = self._index.get_indexer(texts)
        out = self._vectors[np.maximum(pos, 0)].astype(np.float32, copy=True)
        miss = np.flatnonzero(pos < 0)
        if len(miss):
            out[miss] = self._enc.encode([texts[i] for i in miss.tolist()], show_progress=False)
        return out


class AuditRunner:
    """Runs the stages of one audit into one directory: iterates
    :func:`~limelight.audit.stages.audit_stages` through the stage cache (:meth:`run_stage`) and
    is the :class:`~limelight.audit.stage.Audit` the stage bodies see (configuration, directory,
    inputs, statuses and keys of earlier stages, the encoder and each system's retriever)."""

    def __init__(self, config: AuditConfig, out: str | os.PathLike, quick: bool = False,
                 progress: ProgressFn | None = None, show_progress: bool = False,
                 log: Callable[[str], None] | None = None, command: str | None = None):
        self.cfg = config
        self.dir = AuditDir(out)
        self.quick = quick
        self.bars = _Bars(show_progress, progress)
        self.log = log or (lambda s: None)
        self.command = command or self._default_command()
        self.statuses: list[StageStatus] = []
        self._encoder = None
        self._rerankers: dict[str, Any] = {}  # reranked system -> KernelReranker (docs encoded once)

    def _default_command(self) -> str:
        cfg = self.cfg.path or "CONFIG.toml"
        return " ".join(["limelight", "audit", shlex.quote(cfg), "--out", shlex.quote(str(self.dir.path))]
                        + (["--quick"] if self.quick else []))

    # ---- the stages ---------------------------------------------------------------------------
    @property
    def inputs(self) -> AuditInputs:
        """The collection and query sets the stages work on (loaded by :meth:`run`)."""
        return self._inputs

    def run_stage(self, stage: Stage) -> StageStatus:
        """Run ``stage`` unless it does not apply (``stage.skip``), a stage it reads did not run,
        or a finished record with the same key exists; record and return its status."""
        reason = stage.skip(self)
        if reason:
            s = StageStatus(stage.name, stage.title, "skipped", reason)
            self.log(f"  {stage.name}: skipped ({reason})")
            return self._record(s)
        for r in stage.inputs:
            st = self.status(r)
            if st is None or not st.present:
                return self._record(StageStatus(stage.name, stage.title, "skipped",
                                                f"needs stage {r!r}, which did not run"))
        s = self._run_body(stage, stable_hash(stage.name, *stage.key(self)))
        if s.present and stage.note is not None and (note := stage.note(self)):
            s.reason = note
        return s

    def _run_body(self, stage: Stage, key: str) -> StageStatus:
        name, title = stage.name, stage.title
        rec = self.cache.lookup(name, key)
        if rec is not None:
            self.log(f"  {name}: cached")
            return self._record(StageStatus(name, title, "cached", seconds=rec.get("seconds", 0.0),
                                            key=key, result=rec.get("result", {})))
        outputs = list(stage.outputs(self))
        resuming = self.cache.begin(name, key, outputs)
        self.log(f"  {name}: {'resuming' if resuming else 'running'} ({title})")
        t0 = time.perf_counter()
        try:
            with self.bars.stage(name, title) as bar:
                result = stage.body(self, bar)
        except StageSkipped as e:
            self.cache.finish(name, key, {"skipped": str(e)}, time.perf_counter() - t0, outputs)
            self.log(f"  {name}: skipped ({e})")
            return self._record(StageStatus(name, title, "skipped", str(e), key=key))
        except BaseException:
            self.cache.interrupted(name, key, outputs)  # what it wrote is limelight's to replace
            raise
        secs = time.perf_counter() - t0
        self.cache.finish(name, key, result, secs, outputs)
        return self._record(StageStatus(name, title, "done", seconds=secs, key=key,
                                        result=_jsonable(result)))

    def _record(self, status: StageStatus) -> StageStatus:
        self.statuses.append(status)
        return status

    def status(self, name: str) -> StageStatus | None:
        """The status of stage ``name`` in this run (``None`` before it is reached)."""
        for s in self.statuses:
            if s.name == name:
                return s
        return None

    def key(self, name: str) -> str | None:
        """The cache key of stage ``name`` in this run (``None``: not reached, or skipped before
        its key was formed)."""
        st = self.status(name)
        return st.key if st is not None else None

    def load_inputs(self, on_disk: str | os.PathLike | None = None) -> AuditInputs:
        """Load the audit's inputs (:func:`limelight.audit.inputs.load_inputs`; ``on_disk``: the
        folder a query log's distinct queries are kept in)."""
        return load_inputs(self.cfg, self.quick, on_disk)

    # ---- retrievers ---------------------------------------------------------------------------
    def encoder(self):
        if self._encoder is None:
            from limelight.retrieval.dense import Encoder

            spec = next(s for s in self.cfg.systems if s.uses_dense)
            self._encoder = Encoder(spec.params.get("model"),
                                    max_seq_length=spec.params.get("max_seq_length"))
        return self._encoder

    def retriever(self, spec, query_vectors: bool = True):
        """The retriever of a system over the audit's index: the system's
        :class:`~limelight.retrieval.spec.System` (its kind looked up when it was parsed) opened under
        its name, dense query vectors looked up from the shared query encoding when
        ``query_vectors``. A reranked system is its first system's retriever followed by its
        checkpoint's ranker (:func:`limelight.rerank.ranker.open_reranked`, loaded once)."""

        if spec.first is None and "first" in spec.registered.params:
            raise LimelightError(f"system {spec.name!r}: {with_article(spec.kind)} system needs a validated config "
                                 "(first system and checkpoint resolved by parse_config)")
        base = Path(self.cfg.path).resolve().parent if self.cfg.path else Path.cwd()
        # a system over the index reads its documents there, as exposure compute opens it (the
        # same texts): the collection is read for one that does not open over it (its results'
        # ids are checked against it), or given when a stage has read it already
        ds = self._inputs.dataset
        coll = ds.collection if not spec.registered.needs_index or ds.loaded else None
        context: dict[str, Any] = {"collection": coll,
                                   "queries": self._inputs.queries, "base_dir": base,
                                   "work_dir": self.dir.system_dir(spec.name),
                                   "reranker": self._rerankers.get(spec.name)}
        encoder = None
        if spec.needs_dense:
            encoder = self.encoder()
            if query_vectors and self.dir.query_vectors.exists():
                encoder = LookupEncoder(encoder, self._inputs.queries.texts,
                                        np.load(self.dir.query_vectors))
        retriever = spec.open(self.dir.index_dir, name=spec.name, encoder=encoder, **context)
        if query_vectors:
            self._reuse_dense_lists(retriever)
        if getattr(retriever, "reranker", None) is not None:  # loaded once per audit
            self._rerankers[spec.name] = retriever.reranker
        return retriever

    def _reuse_dense_lists(self, retriever) -> None:
        """A hybrid's dense half answers the log's queries from the exposure store of a plain
        dense system of this run (same index, encoder and query vectors, so the same lists)
        instead of searching FAISS again (the demo's hybrid: 114,926 searches saved)."""
        from limelight.exposure.stored import StoredTopK
        from limelight.retrieval.fusion import Hybrid

        if not isinstance(retriever, Hybrid) or isinstance(retriever.dense, StoredTopK):
            return
        for s in self.cfg.systems:
            st = self.status(f"exposure-{s.name}")
            kind = s.registered  # lists from the query vectors alone: a plain dense system
            if kind.has(QUERY_VECTORS) and kind.has(EXACT_REVERSE) and st is not None and st.present:
                store = self.dir.store(s.name)
                if store.doc_ids == retriever.dense.doc_ids:
                    retriever.dense = StoredTopK(retriever.dense, store)
                    return

    # ---- the audit ----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run (or resume) every stage, then write ``results.json`` and mark ``audit.json``
        complete; returns ``results.json``. The HTML report is the caller's to write
        (``limelight.report.write_report(runner.dir, command=runner.command)``)."""
        self.dir.check_writable()
        self.log(f"audit {self.cfg.name}: loading {self.cfg.collection} and the queries")
        # a query log's distinct queries stay on disk while the stages read them (a query table
        # in a scratch folder of the audit's, removed when the audit ends, as exposure compute keeps them)
        with scratch_dir(self.dir.path, "queries") as tmp:
            return self._run(str(tmp))

    def _run(self, on_disk: str) -> dict[str, Any]:
        cfg = self.cfg
        # the inputs first: an audit that cannot load them leaves no (empty) output directory
        self._inputs = inp = self.load_inputs(on_disk)
        self.dir.path.mkdir(parents=True, exist_ok=True)
        self.cache = StageCache(self.dir)
        self._write_manifest(inp, running=True)
        with atomic_path(self.dir.config_toml) as tmp:
            tmp.write_text(cfg.text, encoding="utf-8")
        t0 = time.perf_counter()
        for stage in audit_stages(cfg):
            self.run_stage(stage)
        results = self.results(inp)
        with atomic_path(self.dir.results_json) as tmp:
            tmp.write_text(json.dumps(_jsonable(results), indent=1, allow_nan=False), encoding="utf-8")
        self._write_manifest(inp, running=False, seconds=time.perf_counter() - t0)
        return results

    def _write_manifest(self, inp: AuditInputs, running: bool, seconds: float | None = None) -> None:
        cfg = self.cfg
        man = {
            "format": FORMAT,
            "name": cfg.name,
            "complete": not running,
            "quick": self.quick,
            "command": self.command,
            "config": cfg.path,
            "collection": {"source": cfg.collection, "name": inp.dataset.name,
                           "n_docs": inp.dataset.n_docs, "fingerprint": inp.collection_fp,
                           "group_field": cfg.group_field},
            "queries": {"source": cfg.query_source, "n_queries": len(inp.queries),
                        "total_weight": float(np.sum(inp.queries.weights)),
                        "fingerprint": inp.queries_fp,
                        "n_eval_queries": 0 if inp.eval_queries is None else len(inp.eval_queries)},
            "depth": cfg.depth,
            "cutoffs": cfg.cutoffs,
            "systems": [{"name": s.name, **s.settings()} for s in cfg.systems],
            "stages": [asdict(s) for s in self.statuses],
        }
        if seconds is not None:
            man["seconds"] = round(seconds, 3)
        with atomic_path(self.dir.manifest_path) as tmp:
            tmp.write_text(json.dumps(_jsonable(man), indent=1, allow_nan=False), encoding="utf-8")

    def results(self, inp: AuditInputs) -> dict[str, Any]:
        """``results.json``: deterministic figures only (no timings), so reruns compare equal."""
        cfg = self.cfg
        systems = {}
        for spec in cfg.systems:
            st = self.status(f"retrievability-{spec.name}")
            ex = self.status(f"exposure-{spec.name}")
            entry: dict[str, Any] = {"kind": spec.kind, "settings": spec.settings()}
            if ex is not None and ex.present:
                entry["n_pairs"] = ex.result.get("n_pairs")
                if "coverage" in ex.result:  # a system answering some queries only (e.g. a run file)
                    entry["coverage"] = ex.result["coverage"]
            if st is not None and st.present:
                for c, d in st.result["cutoffs"].items():
                    entry[f"gini_c{c}"] = d["gini"]
                    entry[f"gini_retrieved_only_c{c}"] = d["gini_retrieved_only"]
                    entry[f"retrievable_fraction_c{c}"] = d["retrievable_fraction"]
                c100 = st.result["cutoffs"].get("100") or st.result["cutoffs"][str(max(cfg.cutoffs))]
                entry["retrievable_fraction"] = c100["retrievable_fraction"]
                entry["mean_exposing_queries"] = st.result.get("mean_exposing_queries")
            systems[spec.name] = entry
        out: dict[str, Any] = {
            "audit": cfg.name,
            "quick": self.quick,
            "collection": {"source": cfg.collection, "name": inp.dataset.name,
                           "n_docs": inp.dataset.n_docs},
            "queries": {"source": cfg.query_source, "n_queries": len(inp.queries),
                        "total_weight": float(np.sum(inp.queries.weights))},
            "depth": cfg.depth,
            "cutoffs": cfg.cutoffs,
            "group_field": cfg.group_field,
            "systems": systems,
            "stages": {s.name: {"status": "present" if s.present else "skipped", "reason": s.reason}
                       for s in self.statuses},
        }
        for name in ("compare", "rerank", "eqi", "robustness", "ctrlqgen", "intervention", *summary_stages()):
            st = self.status(name)
            if st is not None and st.present:
                out[name] = st.result.get("summary", {})
        return out
