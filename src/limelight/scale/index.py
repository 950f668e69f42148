"""The streaming BM25 index build on Ray: the documents' analysis as tasks, merged on the driver.

``build_index_ray(collection, out)`` (or ``build_index_ray_from(source, out)``, which streams a
JSONL file as ``limelight index`` does) writes the index directory that
``limelight.retrieval.index_dir.build_index`` writes, byte for byte (tested), with the analysis
spread over a Ray cluster:

- The driver reads the documents in chunks (as the single-process build does), appends them to
  ``docs.parquet`` and cuts their texts into *runs* of about ``run_chars`` characters. Each run
  is a Ray task (``index_run``): a ``BM25Builder`` of the run alone analyzes it and spills its
  postings (term, document, frequency; 12 bytes a posting), and the task writes them, with the
  run's vocabulary (in order of first appearance) and document lengths, to
  ``runs_dir/run-NNNNN/`` under a temporary name renamed when complete. It returns only counts.
- The driver merges the runs in document order as they are done: each run's terms are mapped
  to the final builder's term ids and its postings appended to that builder's spill (documents
  shifted by the documents before the run); the builder's own ``finish`` then lays out the CSC
  arrays. The merged spill is the one the single-process build writes (same postings, same
  order, only other term ids, which ``finish`` sorts away), hence the same files.
- Resumable: a run is named by its number and identified by the hash of the analyzer's
  configuration and its texts (``key`` in its ``meta.json``). A run found complete with the
  same key is not computed again: not within a job (Ray re-runs only the tasks a dead node
  took with it; their returns are counts, never objects on that node, so Ray has nothing to
  reconstruct) and not by a rerun after a failed job (the runs stay in ``runs_dir``, default
  ``OUT.runs`` beside the output, until the index is complete; ``keep_runs`` keeps them after).

Memory on the driver: the vocabulary, the document ids and lengths (as the single-process
build), the texts of the runs in flight (``2 ×`` the cluster's CPUs, ``run_chars`` each) and a
block of postings. Workers need ``runs_dir`` at the same path as the driver (a shared
filesystem on a real cluster).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from limelight._io import atomic_dir, check_output_dir, check_resumable_dir
from limelight.analysis import Analyzer
from limelight.data.collection import Collection
from limelight.errors import LimelightError
from limelight.retrieval.bm25_build import BM25Builder
from limelight.retrieval.index_dir import (
    DEFAULT_MEMORY_GB,
    DocsWriter,
    docs_and_bm25,
    memory_budget,
    write_meta,
)
from limelight.scale.cluster import cluster_cpus, ray_session

RUNS_FILE = "runs.json"
RUNS_FORMAT = "limelight-index-runs/1"
_SPILL = (("term", np.int32), ("doc", np.int32), ("tf", np.int32))
#: characters of text per run by default (a task of about a second or two on one core)
DEFAULT_RUN_CHARS = 8 << 20


def build_index_ray(collection: Collection, out: str | os.PathLike, *, address: str | None = None,
                    analyzer: Analyzer | None = None, memory_gb: float = DEFAULT_MEMORY_GB,
                    run_chars: int = DEFAULT_RUN_CHARS, runs_dir: str | os.PathLike | None = None,
                    keep_runs: bool = False, max_retries: int = 3, num_cpus: int | None = None,
                    progress: Callable[[int, int | None], None] | None = None) -> Path:
    """``build_index(collection, out)`` (BM25 only) with the analysis as Ray tasks on the
    cluster at ``address`` (a local one of ``num_cpus`` CPUs when ``None``); see the module
    docstring for ``run_chars``, ``runs_dir`` and ``keep_runs``. ``max_retries``: re-executions
    of a run whose node died. ``progress(documents, total)``: documents merged."""
    from limelight.data.stream import DocumentChunks, slices

    source = DocumentChunks(collection.name, tuple(collection.text_fields),
                            slices(collection, memory_budget(memory_gb) // 64), False)
    return _build(source, out, address, analyzer, memory_gb, run_chars, runs_dir, keep_runs,
                  max_retries, num_cpus, progress, len(collection))


def build_index_ray_from(source: str | os.PathLike, out: str | os.PathLike, **kwargs) -> Path:
    """``build_index_ray`` of the collection ``source`` names (what ``limelight index
    --collection`` takes), a JSONL file or a folder with ``docs.jsonl`` read in chunks."""
    from limelight.data.stream import document_chunks

    memory_gb = kwargs.pop("memory_gb", DEFAULT_MEMORY_GB)
    chunks = document_chunks(source, memory_budget(memory_gb) // 64)
    args = {"address": None, "analyzer": None, "run_chars": DEFAULT_RUN_CHARS, "runs_dir": None,
            "keep_runs": False, "max_retries": 3, "num_cpus": None, "progress": None}
    unknown = sorted(set(kwargs) - set(args))
    if unknown:
        raise TypeError(f"build_index_ray_from() got an unexpected keyword argument {unknown[0]!r}")
    args.update(kwargs)
    return _build(chunks, out, args["address"], args["analyzer"], memory_gb, args["run_chars"],
                  args["runs_dir"], args["keep_runs"], args["max_retries"], args["num_cpus"],
                  args["progress"], None)


# ---- a run (in a Ray worker) ----------------------------------------------------------------------
def run_path(runs_dir: str | os.PathLike, i: int) -> Path:
    """The folder of run ``i``."""
    return Path(runs_dir) / f"run-{i:05d}"


def run_done(runs_dir: str | os.PathLike, i: int, key: str) -> bool:
    """Whether run ``i`` is complete in ``runs_dir`` with the identity ``key``."""
    try:
        meta = json.loads((run_path(runs_dir, i) / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return meta.get("key") == key


def index_run(texts: list[str], runs_dir: str, i: int, key: str, analyzer: Analyzer,
              memory_bytes: int) -> tuple[int, int]:
    """Analyze run ``i`` (``texts``) and write it to ``runs_dir/run-NNNNN/`` atomically: the
    spill of a ``BM25Builder`` of the run (``term.i32``, ``doc.i32``, ``tf.i32``, the run's
    own term ids and documents), ``words.json`` (its vocabulary by term id), ``doc_len.npy``
    and ``meta.json``. Returns ``(documents, postings)``. Runs in a Ray worker; a run already
    complete with ``key`` is left as it is."""
    final = run_path(runs_dir, i)
    if run_done(runs_dir, i, key):
        meta = json.loads((final / "meta.json").read_text(encoding="utf-8"))
        return int(meta["n_docs"]), int(meta["n_postings"])
    tmp = Path(runs_dir) / f".run-{i:05d}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    tmp.mkdir(parents=True)
    try:
        b = BM25Builder(tmp, analyzer, memory_bytes)
        b.add(texts)
        spill = b.close_spill()  # the last batch: its postings spilled
        for name, _ in _SPILL:
            os.replace(spill / f"{name}.i32", tmp / f"{name}.i32")
        os.rmdir(spill)
        (tmp / "words.json").write_text(json.dumps(list(b.terms), ensure_ascii=False),
                                        encoding="utf-8")
        lens = np.concatenate(b.doc_lens) if b.doc_lens else np.zeros(0, dtype=np.int32)
        np.save(tmp / "doc_len.npy", lens.astype(np.int32))
        (tmp / "meta.json").write_text(json.dumps({"key": key, "n_docs": b.n_docs,
                                                   "n_postings": b.n_postings}), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:  # the same run finished elsewhere meanwhile (a retry): same contents
            if not run_done(runs_dir, i, key):
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
        return b.n_docs, b.n_postings
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_key(analyzer_config: str, texts: Iterable[str]) -> str:
    """The identity of a run: a hash of the analyzer's configuration and the run's texts."""
    h = hashlib.blake2b(analyzer_config.encode(), digest_size=16)
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


# ---- the driver -----------------------------------------------------------------------------------
def _runs_folder(out: Path, runs_dir, analyzer: Analyzer, run_chars: int) -> Path:
    """The runs folder (created, or resumed when it is this build's)."""
    folder = Path(runs_dir) if runs_dir is not None else out.with_name(out.name + ".runs")
    check_resumable_dir(folder, RUNS_FILE, "folder of index runs")
    desc = {"format": RUNS_FORMAT, "analyzer": analyzer.config(), "run_chars": int(run_chars)}
    marker = folder / RUNS_FILE
    if marker.is_file():
        try:
            old = json.loads(marker.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        if old != desc:  # another build's runs: their keys would not match anyway
            shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not marker.is_file():
        marker.write_text(json.dumps(desc), encoding="utf-8")
    return folder.resolve()


def _runs(chunks: Iterator[Collection], docs: DocsWriter, ids: list[str],
          run_chars: int) -> Iterator[list[str]]:
    """The texts of the documents cut into runs of about ``run_chars`` characters (at least one
    document each), as the chunks are read (each written to ``docs.parquet``, its ids kept)."""
    texts: list[str] = []
    chars = 0
    for chunk in chunks:
        docs.write(chunk)
        ids.extend(chunk.ids.strings.tolist())
        for t in chunk.texts.tolist():
            t = "" if t is None else t
            texts.append(t)
            chars += len(t) + 1
            if chars >= run_chars:
                yield texts
                texts, chars = [], 0
    if texts:
        yield texts


class _Merger:
    """The final ``BM25Builder``, fed the runs in order (``add_run``)."""

    def __init__(self, builder: BM25Builder, runs_dir: Path):
        self.builder, self.runs_dir = builder, runs_dir

    def add_run(self, i: int) -> int:
        """Append run ``i``'s postings to the builder's spill; returns its documents."""
        b = self.builder
        folder = run_path(self.runs_dir, i)
        words = json.loads((folder / "words.json").read_text(encoding="utf-8"))
        to_final = b.term_ids(words)  # the run's term ids → the builder's
        lens = np.load(folder / "doc_len.npy")
        files = [open(folder / f"{name}.i32", "rb") for name, _ in _SPILL]  # noqa: SIM115
        try:
            while True:  # a block at a time: bounded memory
                term, doc, tf = (np.fromfile(f, dtype=t, count=b.block)
                                 for f, (_, t) in zip(files, _SPILL, strict=True))
                if not len(term):
                    break
                b.add_postings(to_final[term], doc, tf)
        finally:
            for f in files:
                f.close()
        b.add_postings(*(np.zeros(0, dtype=np.int64),) * 3, doc_lens=lens)
        return len(lens)


def _build(source, out: str | os.PathLike, address: str | None, analyzer: Analyzer | None,
           memory_gb: float, run_chars: int, runs_dir, keep_runs: bool, max_retries: int,
           num_cpus: int | None, progress, total: int | None) -> Path:
    """Write an index directory from ``source`` (``DocumentChunks``) with the runs on Ray."""
    if run_chars < 1:
        raise LimelightError(f"run_chars must be ≥ 1, got {run_chars}")
    out = Path(out)
    analyzer = analyzer or Analyzer()
    budget = memory_budget(memory_gb)
    check_output_dir(out, "index")  # before the runs folder is made beside it
    runs = _runs_folder(out, runs_dir, analyzer, run_chars)
    with atomic_dir(out, "index") as tmp:
        with docs_and_bm25(tmp, analyzer, budget, source.name) as (docs, builder, ids):
            _analyze_and_merge(source, docs, ids, _Merger(builder, runs), analyzer, budget,
                               run_chars, address, max_retries, num_cpus, progress, total)
        write_meta(tmp, source, len(ids), ["bm25"])
    if not keep_runs:
        shutil.rmtree(runs, ignore_errors=True)
    return out


def _analyze_and_merge(source, docs: DocsWriter, ids: list[str], merger: _Merger,
                       analyzer: Analyzer, budget: int, run_chars: int, address: str | None,
                       max_retries: int, num_cpus: int | None, progress, total) -> None:
    """Submit the runs still missing as Ray tasks (a bounded window in flight) and merge every
    run in order as soon as it and the runs before it are complete."""
    from limelight.scale.exposure import _finish_error

    runs_dir = merger.runs_dir
    config = json.dumps(analyzer.config(), sort_keys=True)
    mem = max(64 << 20, budget // 4)  # a task's working memory: a fraction of the budget
    with ray_session(address, num_cpus=num_cpus if address is None else None) as ray:
        task = ray.remote(index_run).options(num_cpus=1, max_retries=max_retries,
                                             retry_exceptions=False)
        an_ref = ray.put(analyzer)
        window = 2 * cluster_cpus(ray)
        pending: dict = {}  # ref → run number
        done: set[int] = set()
        nxt = 0  # the next run to merge
        merged = 0

        def merge_ready() -> None:
            nonlocal nxt, merged
            while nxt in done:
                merged += merger.add_run(nxt)
                done.discard(nxt)
                nxt += 1
                if progress:
                    progress(merged, total)

        def wait_one() -> None:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    ray.get(ref)
                except Exception as e:  # noqa: BLE001 - told as one line
                    raise _finish_error(e, f"index run {i}", max_retries) from None
                done.add(i)
            merge_ready()

        try:
            for i, texts in enumerate(_runs(source.chunks, docs, ids, run_chars)):
                key = run_key(config, texts)
                if run_done(runs_dir, i, key):
                    done.add(i)
                else:
                    pending[task.remote(texts, str(runs_dir), i, key, an_ref, mem)] = i
                del texts
                merge_ready()
                while len(pending) >= window:
                    wait_one()
            while pending:
                wait_one()
        finally:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
    if done:  # pragma: no cover - every run is merged once the runs before it are
        raise LimelightError(f"index runs {sorted(done)} were not merged")
