"""Run an audit: load the inputs, run every stage through the stage cache, write ``results.json``,
the Parquet tables, the figures and the HTML report.

The library entry point is :func:`run_audit`; ``limelight audit CONFIG.toml --out DIR`` calls it.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from limelight._io import atomic_path
from limelight.audit.cache import StageCache, _jsonable, stable_hash
from limelight.audit.config import AuditConfig
from limelight.audit.layout import FORMAT, AuditDir
from limelight.errors import LimelightError

ProgressFn = Callable[[str, int, int], None]


@dataclass
class StageStatus:
    """What happened to one stage in this run."""

    name: str
    title: str
    status: str  # "done" (ran now) | "cached" (finished earlier, same key) | "skipped"
    reason: str = ""
    seconds: float = 0.0
    key: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return self.status in ("done", "cached")


class StageSkipped(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised inside a stage body to skip it with a reason shown in the report."""


@dataclass
class AuditInputs:
    """What the stages work on (loaded once)."""

    dataset: Any  # limelight.data.loaders.Dataset
    queries: Any  # Queries (the exposure query set)
    collection_fp: str
    queries_fp: str
    eval_queries: Any = None  # Queries with qrels, or None


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
    """Runs the stages of one audit into one directory."""

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
        self._qvec_key: str | None = None
        self._rerankers: dict[str, Any] = {}  # reranked system -> KernelReranker (docs encoded once)

    def _default_command(self) -> str:
        cfg = self.cfg.path or "CONFIG.toml"
        return " ".join(["limelight", "audit", shlex.quote(cfg), "--out", shlex.quote(str(self.dir.path))]
                        + (["--quick"] if self.quick else []))

    # ---- plumbing -----------------------------------------------------------------------------
    def _stage(self, name: str, title: str, key_parts: tuple, body: Callable[[Any], dict],
               outputs: tuple[Path, ...] = (), requires: tuple[str, ...] = ()) -> StageStatus:
        """Run ``body(bar)`` unless a finished record with the same key exists."""
        for r in requires:
            st = self.status(r)
            if st is None or not st.present:
                s = StageStatus(name, title, "skipped", f"needs stage {r!r}, which did not run")
                self.statuses.append(s)
                return s
        key = stable_hash(name, *key_parts)
        rec = self.cache.lookup(name, key)
        if rec is not None:
            s = StageStatus(name, title, "cached", seconds=rec.get("seconds", 0.0), key=key,
                            result=rec.get("result", {}))
            self.log(f"  {name}: cached")
            self.statuses.append(s)
            return s
        resuming = self.cache.begin(name, key, outputs)
        self.log(f"  {name}: {'resuming' if resuming else 'running'} ({title})")
        t0 = time.perf_counter()
        try:
            with self.bars.stage(name, title) as bar:
                result = body(bar)
        except StageSkipped as e:
            rec = self.cache.finish(name, key, {"skipped": str(e)}, time.perf_counter() - t0)
            s = StageStatus(name, title, "skipped", str(e), key=key)
            self.log(f"  {name}: skipped ({e})")
            self.statuses.append(s)
            return s
        secs = time.perf_counter() - t0
        self.cache.finish(name, key, result, secs)
        s = StageStatus(name, title, "done", seconds=secs, key=key, result=_jsonable(result))
        self.statuses.append(s)
        return s

    def _skip(self, name: str, title: str, reason: str) -> StageStatus:
        s = StageStatus(name, title, "skipped", reason)
        self.log(f"  {name}: skipped ({reason})")
        self.statuses.append(s)
        return s

    def status(self, name: str) -> StageStatus | None:
        for s in self.statuses:
            if s.name == name:
                return s
        return None

    def _cached_skip(self, name: str) -> bool:
        st = self.status(name)
        return st is not None and st.status == "skipped"

    # ---- inputs -------------------------------------------------------------------------------
    def load_inputs(self) -> AuditInputs:
        from limelight.data.loaders import load_dataset, load_query_log
        from limelight.exposure.exact import ids_fingerprint, queries_fingerprint, validate_queries

        cfg = self.cfg
        where = cfg.path or "<config>"
        ds = load_dataset(cfg.collection)
        coll = ds.collection
        if cfg.depth >= len(coll):
            from limelight.audit.config import _line_of
            from limelight.errors import FormatError

            raise FormatError(where, _line_of(cfg.text, "depth") if cfg.text else None,
                              f"audit.depth ({cfg.depth}) is not below the {len(coll)} documents of "
                              f"{ds.name}: every query would retrieve (nearly) every document, so r(d) "
                              f"is flat and Gini meaningless (0 under dense retrieval); audit a larger "
                              f"collection or set audit.depth and cutoffs below {len(coll)}")
        if cfg.group_field and cfg.group_field not in coll.fields:
            raise LimelightError(f"{where}: audit.group_field {cfg.group_field!r} is not a field of "
                                 f"{ds.name} (fields: {', '.join(sorted(coll.fields)) or 'none'})")
        src = cfg.query_source
        if src == "log":
            queries = load_query_log()
        elif src == "dataset":
            if ds.queries is None:
                raise LimelightError(f"{where}: queries.source = \"dataset\" but {ds.name} has no queries")
            queries = ds.queries
        elif src == "generated":
            import limelight.querygen as qg

            if not hasattr(qg, "generate_queries"):
                raise LimelightError(f"{where}: queries.source = \"generated\" needs "
                                     "limelight.querygen.generate_queries (CtrlQGen), not available yet")
            queries = qg.generate_queries(coll, **cfg.options.get("ctrlqgen", {}))
        else:
            from limelight.data.loaders import load_queries_file

            queries = load_queries_file(src)
        n = cfg.quick_queries if self.quick else cfg.query_sample
        if n:
            queries = queries.sample(n, seed=cfg.seed)
        validate_queries(queries)
        eval_q = None
        if ds.qrels is not None and ds.queries is not None:
            eval_q = ds.queries
            if self.quick and cfg.quick_eval_queries:
                eval_q = eval_q.sample(cfg.quick_eval_queries, seed=cfg.seed)
        text_h = stable_hash(ids_fingerprint(coll.ids), _text_digest(coll.texts))
        return AuditInputs(ds, queries, text_h, queries_fingerprint(queries), eval_q)

    # ---- retrievers ---------------------------------------------------------------------------
    def encoder(self):
        if self._encoder is None:
            from limelight.retrieval.dense import Encoder

            spec = next(s for s in self.cfg.systems if s.uses_dense)
            self._encoder = Encoder(spec.params.get("model"),
                                    max_seq_length=spec.params.get("max_seq_length"))
        return self._encoder

    def retriever(self, spec, query_vectors: bool = True):
        """The retriever of a system over the audit's index (dense query vectors looked up from
        the shared query encoding when ``query_vectors``). A reranked system is its first
        system's retriever followed by its checkpoint's ranker
        (:class:`limelight.rerank.ranker.RerankedRetriever`)."""
        from limelight.retrieval.bm25 import BM25, BM25Index

        if spec.kind == "reranked":
            return self._reranked(spec, query_vectors)
        idx = self.dir.index_dir
        p = spec.settings()

        def bm25():
            r = BM25(BM25Index.load(idx / "bm25"), k1=p["k1"], b=p["b"])
            r.name = spec.name
            return r

        def dense():
            from limelight.retrieval.dense import DenseIndex, DenseRetriever

            enc = self.encoder()
            if query_vectors and self.dir.query_vectors.exists():
                qt = self._inputs.queries.texts
                enc = LookupEncoder(enc, qt, np.load(self.dir.query_vectors))
            return DenseRetriever(DenseIndex.load(idx / "dense"), enc, name=spec.name)

        if spec.kind == "bm25":
            return bm25()
        if spec.kind == "dense":
            return dense()
        from limelight.retrieval.fusion import Hybrid

        return Hybrid(bm25(), dense(), k=p["rrf_k"], depth=p["fusion_depth"], name=spec.name)

    def _reranked(self, spec, query_vectors: bool):
        from limelight.rerank.ranker import KernelReranker, NeuralRanker, RerankedRetriever

        if spec.first is None or spec.checkpoint_path is None:
            raise LimelightError(f"system {spec.name!r}: a reranked system needs a validated config "
                                 "(first system and checkpoint resolved by parse_config)")
        first = self.retriever(spec.first, query_vectors)
        rr = self._rerankers.get(spec.name)
        if rr is None:
            ranker = NeuralRanker.load(spec.checkpoint_path)
            from limelight.audit.config import _file_sha256

            if _file_sha256(Path(spec.checkpoint_path)) != spec.checkpoint_sha256:
                raise LimelightError(f"{spec.checkpoint_path}: the checkpoint of system {spec.name!r} "
                                     "changed after the configuration was read; run the audit again")
            rr = self._rerankers[spec.name] = KernelReranker(ranker, self._inputs.dataset.collection)
        return RerankedRetriever(first, rr, depth=spec.settings()["depth"], name=spec.name)

    # ---- the audit ----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from limelight.audit import stages

        cfg = self.cfg
        self.log(f"audit {cfg.name}: loading {cfg.collection} and the queries")
        # the inputs first: an audit that cannot load them leaves no (empty) output directory
        self._inputs = inp = self.load_inputs()
        self.dir.path.mkdir(parents=True, exist_ok=True)
        self.cache = StageCache(self.dir)
        self._write_manifest(inp, running=True)
        with atomic_path(self.dir.config_toml) as tmp:
            tmp.write_text(cfg.text, encoding="utf-8")
        t0 = time.perf_counter()
        stages.index(self, inp)
        stages.query_vectors(self, inp)
        for spec in cfg.systems:
            stages.exposure(self, inp, spec)
        for spec in cfg.systems:
            stages.retrievability(self, inp, spec)
        stages.figures(self, inp)
        stages.compare(self, inp)
        stages.rerank(self, inp)
        stages.eqi(self, inp)
        stages.robustness(self, inp)
        stages.ctrlqgen(self, inp)
        stages.intervention(self, inp)
        results = self.results(inp)
        with atomic_path(self.dir.results_json) as tmp:
            tmp.write_text(json.dumps(_jsonable(results), indent=1, allow_nan=False), encoding="utf-8")
        self._write_manifest(inp, running=False, seconds=time.perf_counter() - t0)
        from limelight.report import write_report

        write_report(self.dir, command=self.command)
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
                           "n_docs": len(inp.dataset.collection), "fingerprint": inp.collection_fp,
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
                           "n_docs": len(inp.dataset.collection)},
            "queries": {"source": cfg.query_source, "n_queries": len(inp.queries),
                        "total_weight": float(np.sum(inp.queries.weights))},
            "depth": cfg.depth,
            "cutoffs": cfg.cutoffs,
            "group_field": cfg.group_field,
            "systems": systems,
            "stages": {s.name: {"status": "present" if s.present else "skipped", "reason": s.reason}
                       for s in self.statuses},
        }
        for name in ("compare", "rerank", "eqi", "robustness", "ctrlqgen", "intervention"):
            st = self.status(name)
            if st is not None and st.present:
                out[name] = st.result.get("summary", {})
        return out


def _text_digest(texts: np.ndarray) -> str:
    import hashlib

    h = hashlib.sha256()
    for i in range(0, len(texts), 4096):
        h.update("\x1e".join(map(str, texts[i:i + 4096].tolist())).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def run_audit(config: AuditConfig | str | os.PathLike, out: str | os.PathLike, quick: bool = False,
              progress: ProgressFn | None = None, show_progress: bool = False,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) the audit described by ``config`` into ``out``; returns ``results.json``.

    ``progress(stage, done, total)`` is called as stages advance. Finished stages whose inputs
    and settings did not change are skipped; an interrupted stage resumes from its partial output.
    """
    from limelight.audit.config import load_config

    cfg = config if isinstance(config, AuditConfig) else load_config(config)
    return AuditRunner(cfg, out, quick=quick, progress=progress, show_progress=show_progress,
                       log=log).run()
