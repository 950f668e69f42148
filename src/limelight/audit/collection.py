"""The audit's collection: read once when the audit starts, for its checks, its size and its
fingerprint, then let go; read again where a stage reads documents (:class:`AuditDataset`); the
BM25 index built from it by a child process (:func:`build_bm25`; a small collection's in the
audit's own process). An audit of BM25 systems thus holds no document and none of what an index
build leaves behind (Debian: ~240 MB of collection and ~360 MB left by the build), as
``limelight exposure compute`` over an index holds neither (issue 55: an audit of a 10M-line log
in exposure compute's memory; docs/scale.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from limelight.audit.cache import stable_hash
from limelight.errors import LimelightError

#: the working memory of the audit's BM25 build (``limelight index --memory-gb``, whose default
#: is 2): Debian's build then peaks at ~630 MB, the collection it reads included (~1 GB with 2),
#: below what the audit's exposure stage needs; the index's files are the same whatever the budget
BM25_MEMORY_GB = 0.5
#: a collection of at most this many documents is indexed in the audit's own process: there a
#: child's start (an interpreter, limelight's imports, numba's cached kernels: 1.3-1.7 CPU s)
#: costs ten times the build (adi, med, cranfield: 0.01-0.16 CPU s in a warm process) and the
#: build leaves little behind (scifact's 5,183 documents: ~50 MB, npl's 11,429: none measurable
#: after it); a larger one (Debian: ~600 MB) is indexed by a child
IN_PROCESS_MAX_DOCS = 20_000
#: seconds an interrupted build is given to remove its unfinished folder before it is killed
_STOP_SECONDS = 5.0


class AuditDataset:
    """The audit's dataset (``AuditInputs.dataset``): its ``name``, judged ``queries`` and
    ``qrels``, the collection's size (``n_docs``) and the values of ``[audit] group_field``
    (``field``) are held for the whole audit; the collection itself, every document's text and
    fields (Debian's 63,666 records: ~240 MB), is not. ``collection`` reads it again on first use,
    checked against the fingerprint the audit took when it started, and holds it from then on:
    the stages that read documents do (a dense index, EQI, the re-ranker, CtrlQGen, a system
    that does not open over the index), the others never do; the BM25 index's build reads it in
    its own process (:func:`build_bm25`)."""

    def __init__(self, ds, source: str, rename: str | None, fingerprint: str,
                 keep: tuple[str, ...] = ()):
        coll = ds.collection
        self.name, self.queries, self.qrels = ds.name, ds.queries, ds.qrels
        #: ``[collection] source`` and ``name``: what ``load_audit_dataset`` reads again
        self.source, self.rename, self.fingerprint = source, rename, fingerprint
        self.n_docs = len(coll)
        self._kept = {f: coll.fields[f] for f in keep if f in coll.fields}
        self._collection = None

    @property
    def loaded(self) -> bool:
        """Whether the collection has been read again for a stage (and is held)."""
        return self._collection is not None

    @property
    def collection(self):
        """The collection (a ``Collection``), read again on first use (see the class)."""
        if self._collection is None:
            self._collection = reload_collection(self.source, self.rename, self.fingerprint)
        return self._collection

    def field(self, name: str) -> np.ndarray:
        """The values of the documents' field ``name`` (``[audit] group_field``'s are held)."""
        if self._collection is None and name in self._kept:
            return self._kept[name]
        return self.collection.fields[name]


def load_audit_dataset(source: str, rename: str | None = None):
    """The dataset of ``[collection] source`` (``load_dataset``), named ``[collection] name``
    (``rename``) when that is set."""
    from limelight.data.loaders import load_dataset

    ds = load_dataset(source)
    if rename:  # [collection] name: the collection's name, not its file's
        ds.name = ds.collection.name = rename
    return ds


def collection_fingerprint(coll) -> str:
    """The audit's fingerprint of a collection: its ids and its documents' texts (the index
    stage's key)."""
    from limelight.exposure.fingerprints import ids_fingerprint

    return stable_hash(ids_fingerprint(coll.ids), _text_digest(coll.texts))


def reload_collection(source: str, rename: str | None, fingerprint: str):
    """The collection of ``[collection] source`` read again during an audit, which must still
    be the one the audit started on (``fingerprint``): a one-line error if it changed since."""
    coll = load_audit_dataset(source, rename).collection
    if collection_fingerprint(coll) != fingerprint:
        raise LimelightError(f"{source}: the collection changed while the audit ran (its documents "
                             "differ from those it started on); run the audit again")
    return coll


def _text_digest(texts: np.ndarray) -> str:
    h = hashlib.sha256()
    for i in range(0, len(texts), 4096):
        h.update("\x1e".join(map(str, texts[i:i + 4096].tolist())).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def build_bm25(ds, out: str | os.PathLike) -> None:
    """``build_index`` (BM25) of the audit's collection into ``out`` by a child process
    (``python -c``: no module of the caller's is imported again) that reads the collection of
    ``ds`` (an ``AuditDataset``) itself, checked against the audit's fingerprint, within
    ``BM25_MEMORY_GB``. Its ``LimelightError`` is the audit's; interrupted, the child is stopped
    (it removes its unfinished folder) before the interruption goes on. A collection of at most
    ``IN_PROCESS_MAX_DOCS`` documents is read again and indexed here instead (the same files,
    the same checks and errors; the collection is not held)."""
    if ds.n_docs <= IN_PROCESS_MAX_DOCS:
        from limelight.retrieval.index_dir import build_index

        build_index(reload_collection(ds.source, ds.rename, ds.fingerprint), out,
                    memory_gb=BM25_MEMORY_GB)
        return
    args = json.dumps({"source": ds.source, "rename": ds.rename, "fingerprint": ds.fingerprint,
                       "out": str(out), "memory_gb": BM25_MEMORY_GB})
    # the limelight the audit runs (its folder put first when the child's path lacks it, as a
    # script that adds it at run time has it)
    root = str(Path(__file__).resolve().parents[2])
    code = ("import sys; sys.argv[2] in sys.path or sys.path.insert(0, sys.argv[2]); "
            "from limelight.audit.collection import _child; sys.exit(_child(sys.argv[1]))")
    p = subprocess.Popen([sys.executable, "-c", code, args, root], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = p.communicate()
    except BaseException:  # Ctrl-C (the child, in the same process group, usually has it too)
        _stop(p)
        raise
    if p.returncode == 2 and err.strip():  # the child's LimelightError, its last line
        raise LimelightError(json.loads(err.strip().splitlines()[-1])["error"])
    if p.returncode != 0:
        raise RuntimeError(f"the BM25 index build of {ds.source} failed (exit status "
                           f"{p.returncode}):\n{err[-4000:]}")


def _stop(p: subprocess.Popen) -> None:
    """Let an interrupted build end (SIGINT reached it too), else stop it (SIGTERM: it removes
    its unfinished folder), else kill it."""
    for signal_it in (None, p.terminate, p.kill):
        if signal_it is not None:
            signal_it()
        try:
            p.wait(timeout=1.0 if signal_it is None else _STOP_SECONDS)
            return
        except subprocess.TimeoutExpired:
            continue


def _child(args_json: str) -> int:
    """The build of :func:`build_bm25`, in the child: exit status 0, 2 with the error's message
    as the last line of stderr (JSON), 130 when interrupted (SIGINT or SIGTERM)."""
    import signal

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)
    a = json.loads(args_json)
    try:
        from limelight.retrieval.index_dir import build_index

        coll = reload_collection(a["source"], a["rename"], a["fingerprint"])
        build_index(coll, a["out"], memory_gb=a["memory_gb"])
    except LimelightError as e:
        print(json.dumps({"error": str(e)}), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
