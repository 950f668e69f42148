"""Kind ``pyterrier``: any PyTerrier transformer, made by a factory named in the configuration.

::

    [[systems]]
    name = "pisa"
    kind = "pyterrier"
    factory = "limelight.retrieval.kinds.pyterrier:pisa_bm25"   # module:callable
    args = { k1 = 0.9, b = 0.4 }                                 # its keyword arguments
    batch_size = 1000                                            # queries per PyTerrier frame

The factory is ``module:callable`` (a dotted attribute after the colon is followed), where the
module is importable, or a Python file (``factories.py:make``, or a module path that is a
file under the configuration's folder, ``base_dir``): relative paths resolve against
``base_dir``. It is called with ``args`` as keywords, plus the audit's context for each of
``collection``, ``queries``, ``base_dir`` and ``work_dir`` that it names as a parameter (those
four are never taken from ``args``). It must return a ``pyterrier.Transformer`` that maps a
topics frame (``qid``, ``query``) to a results frame (``qid``, ``docno``, ``score``).

The opened system (:class:`PyTerrierRetriever`, a limelight ``Retriever``) feeds the queries
to the transformer as frames of ``batch_size`` queries, cut to the requested depth with
PyTerrier's ``% k`` where the transformer takes it natively (``compile()`` fuses it, e.g.
into PISA's ``num_results``), otherwise by score. Result ``docno``s must be the collection's
ids: the first unknown ones are named in one line. Ranks come from the scores (ties in
trec_eval's order), as everywhere in limelight.

:func:`pisa_bm25` is the factory of the common case: PISA's BM25 (``pyterrier-pisa``, whose
wheel ships the engine; no Java) over the audited collection, with limelight's own analysis
(the same tokens, stopwords and stemming as limelight's BM25), its index built once in the
system's ``work_dir`` and reused.

PyTerrier is imported when a system of this kind is opened, never when limelight is;
without it, opening says in one line which extra to install.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from limelight._io import atomic_dir, check_output_dir, read_owner
from limelight.analysis import Analyzer
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError, with_article
from limelight.retrieval.base import Retriever
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1
from limelight.retrieval.systems import (
    DETERMINISTIC,
    NEW_QUERIES,
    Param,
    SystemKind,
    register_kind,
)

if TYPE_CHECKING:  # pandas and PyTerrier are imported where used
    import pandas as pd

    from limelight.data.collection import Collection

INSTALL_HINT = ("kind pyterrier needs PyTerrier (pyterrier, and pyterrier-pisa for pisa_bm25): "
                "pip install 'limelight[terrier]'")

#: the audit's context a factory receives when it names the parameter
CONTEXT_KEYS = ("collection", "queries", "base_dir", "work_dir")

#: the kind of output ``atomic_dir`` records in an index folder :func:`pisa_bm25` built
PISA_INDEX = "PISA index"
PISA_META = "limelight-pisa.json"
PISA_FORMAT = "limelight-pisa/1"


def _pyterrier():
    """The ``pyterrier`` module; a one-line ``LimelightError`` naming the extra without it."""
    try:
        import pyterrier as pt
    except ImportError:
        raise LimelightError(INSTALL_HINT) from None
    return pt


# ---- the factory ------------------------------------------------------------------------------
def resolve_factory(ref: str, base_dir: str | os.PathLike | None = None) -> Callable[..., Any]:
    """The callable ``ref`` names (``module:callable``, see the module docstring); a one-line
    ``LimelightError`` naming ``ref`` when it cannot be found."""
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        raise LimelightError(f"factory must be \"module:callable\" (e.g. \"limelight.retrieval."
                             f"kinds.pyterrier:pisa_bm25\"), not {ref!r}")
    mod_name, attr = ref.split(":")
    module = _import_module(mod_name, ref, Path(base_dir) if base_dir is not None else Path.cwd())
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LimelightError(f"factory {ref!r}: {mod_name} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LimelightError(f"factory {ref!r}: {attr} is {with_article(type(obj).__name__)}, not a callable")
    return obj


def _import_module(name: str, ref: str, base_dir: Path) -> Any:
    """Module ``name``: a ``.py`` file (relative to ``base_dir``), an importable module, or the
    file ``base_dir/<name as a path>.py``."""
    as_file = name.endswith(".py") or "/" in name or os.sep in name
    path = base_dir / (name if as_file else name.replace(".", "/") + ".py")
    if not as_file:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            missing = e.name or ""
            if missing.split(".")[0] in ("pyterrier", "pyterrier_pisa", "pyterrier_alpha"):
                raise LimelightError(f"factory {ref!r}: {INSTALL_HINT}") from None
            if not (name == missing or name.startswith(missing + ".")):  # a dependency of it
                raise LimelightError(f"factory {ref!r}: importing {name} failed: {e}") from None
            if not path.is_file():
                raise LimelightError(f"factory {ref!r}: no module named {name!r} (neither "
                                     f"importable nor a file {path})") from None
    if not path.is_file():
        raise LimelightError(f"factory {ref!r}: no file {path}")
    key = "limelight_factory_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        del sys.modules[key]
        raise
    return module


def make_transformer(ref: str, args: Mapping[str, Any] | None = None,
                     context: Mapping[str, Any] | None = None) -> Any:
    """Call the factory ``ref`` with ``args`` and the ``context`` values it names (see the
    module docstring); the ``pyterrier.Transformer`` it returns, checked."""
    pt = _pyterrier()
    context = dict(context or {})
    args = dict(args or {})
    factory = resolve_factory(ref, context.get("base_dir"))
    given = sorted(set(args) & set(CONTEXT_KEYS))
    if given:
        raise LimelightError(f"factory {ref!r}: args.{given[0]} is not an argument: the audit "
                             f"gives it ({', '.join(CONTEXT_KEYS)} come from the audit)")
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: no context
        sig = None
    if sig is not None:
        named = {p.name for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        args.update({k: context[k] for k in CONTEXT_KEYS
                     if k in named and context.get(k) is not None})
        try:
            sig.bind(**args)
        except TypeError as e:
            raise LimelightError(f"factory {ref!r}: {e}") from None
    out = factory(**args)
    if isinstance(out, pt.Indexer):
        raise LimelightError(f"factory {ref!r} returned an indexer ({type(out).__name__}), not a "
                             "retrieval transformer: return its retriever (e.g. index.bm25())")
    if not isinstance(out, pt.Transformer):
        raise LimelightError(f"factory {ref!r} returned a {type(out).__module__}."
                             f"{type(out).__qualname__}, not a PyTerrier transformer "
                             "(pyterrier.Transformer)")
    return out


# ---- the retriever -----------------------------------------------------------------------------
class PyTerrierRetriever(Retriever):
    """A PyTerrier transformer as a limelight ``Retriever`` over ``doc_ids`` (the collection's
    ids): queries go to it as frames of ``batch_size``; see the module docstring."""

    def __init__(self, transformer: Any, doc_ids: IdMap, *, name: str = "pyterrier",
                 batch_size: int = 1000, deterministic: bool = True):
        if batch_size < 1:
            raise LimelightError(f"batch_size must be ≥ 1, not {batch_size}")
        self.transformer = transformer
        self.doc_ids = doc_ids
        self.name = name
        self.batch_size = int(batch_size)
        self.deterministic = deterministic
        self._cut: dict[int, tuple[Any, bool]] = {}

    def __repr__(self) -> str:
        return f"PyTerrierRetriever({self.name!r}, {self.transformer!r})"

    def _pipeline(self, k: int) -> tuple[Any, bool]:
        """The transformer for depth ``k`` and whether it cuts at ``k`` itself: ``% k`` where
        ``compile()`` fuses it into the transformer (PyTerrier's own ``RankCutoff`` needs a
        ``rank`` column not every transformer writes; then the cut is by score, here)."""
        if k not in self._cut:
            pt = _pyterrier()
            fused = (self.transformer % k).compile()
            last = fused
            while isinstance(last, pt.Compose) and len(last):
                last = last[-1]
            self._cut[k] = ((fused, True) if not isinstance(last, pt.RankCutoff)
                            else (self.transformer.compile(), False))
        return self._cut[k]

    def _results(self, frame: pd.DataFrame, k: int) -> pd.DataFrame:
        """The transformer's results for the topics ``frame``, fed in batches: ``qid``,
        ``docno``, ``score`` (at most ``k`` rows a query where the transformer cuts)."""
        import pandas as pd

        from limelight.progress import check_interrupt

        pipe, _ = self._pipeline(k)
        parts = []
        for i in range(0, len(frame), self.batch_size):
            if i:
                check_interrupt()  # a deferred Ctrl-C stops between frames
            out = pipe.transform(frame.iloc[i:i + self.batch_size].reset_index(drop=True))
            if not isinstance(out, pd.DataFrame):
                raise LimelightError(f"system {self.name!r}: the transformer returned a "
                                     f"{type(out).__name__}, not a results frame")
            missing = [c for c in ("qid", "docno", "score") if c not in out.columns]
            if missing:
                raise LimelightError(f"system {self.name!r}: the transformer's results lack "
                                     f"column(s) {', '.join(missing)} (has "
                                     f"{', '.join(map(str, out.columns)) or 'none'})")
            parts.append(out[["qid", "docno", "score"]])
        if not parts:
            return pd.DataFrame({"qid": [], "docno": [], "score": []})
        return pd.concat(parts, ignore_index=True)

    def _run(self, frame: pd.DataFrame, qids: IdMap, k: int) -> Run:
        """The top ``k`` of the topics ``frame`` (qids from ``qids``) as a ``Run`` over
        ``doc_ids``; result ids the collection lacks are refused (the first ones named)."""
        from limelight.retrieval.pyterrier import run_from_frame

        where = f"the results of system {self.name!r}, whose docnos must be the collection's ids"
        run = run_from_frame(self._results(frame, k), self.name, doc_map=self.doc_ids,
                             query_map=qids, where=where)
        return run if (run.depths() <= k).all() else run.topk(k)

    def retrieve(self, queries: Queries, k: int | None = None) -> Run:
        """A ``Run`` with the top ``k`` documents of every query, over the collection."""
        from limelight.retrieval.pyterrier import queries_to_frame

        k = self.default_k if k is None else int(k)
        return self._run(queries_to_frame(queries), queries.ids, k)

    def search_batch(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` for many query texts: ``(docs, scores)`` shaped ``(n, k)``, docs as codes of
        ``doc_ids`` padded with ``-1`` (what ``compute_exposure`` reads)."""
        import pandas as pd

        n = len(texts)
        qids = [str(i) for i in range(n)]
        frame = pd.DataFrame({"qid": qids, "query": [str(t) for t in texts]})
        run = self._run(frame, IdMap(qids, kind="query"), k)
        docs = np.full((n, k), -1, dtype=np.int32)
        scores = np.zeros((n, k), dtype=np.float32)
        rank = run.ranks().astype(np.int64) - 1
        docs[run.q, rank] = run.d
        scores[run.q, rank] = run.score
        return docs, scores


# ---- the kind ----------------------------------------------------------------------------------
def resolve_pyterrier(params: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """The checks a configuration gets when it is read (one line each): ``factory`` given and
    found (its module imported: PyTerrier itself is not), ``args`` free of the audit's context
    keys, ``batch_size`` ≥ 1. The parameters are returned as they are."""
    factory = params.get("factory")
    if not factory:
        raise LimelightError("a pyterrier system needs factory = \"module:callable\" (e.g. "
                             "\"limelight.retrieval.kinds.pyterrier:pisa_bm25\")")
    resolve_factory(factory, base_dir)
    given = sorted(set(params.get("args") or {}) & set(CONTEXT_KEYS))
    if given:
        raise LimelightError(f"args.{given[0]} is not an argument: the audit gives it "
                             f"({', '.join(CONTEXT_KEYS)} come from the audit)")
    if params.get("batch_size") is not None and params["batch_size"] < 1:
        raise LimelightError(f"batch_size must be ≥ 1, not {params['batch_size']}")
    return params


def open_pyterrier(spec: Any, index_dir: str | Path | None = None, *, name: str | None = None,
                   threads: int | None = None, encoder: Any = None,
                   **context: Any) -> PyTerrierRetriever:
    """The system of ``spec`` (``factory``, ``args``, ``batch_size``, ``deterministic``) over the
    ``collection`` of ``context`` (required: result ids are checked against it)."""
    factory = spec.param("factory")
    if not factory:
        raise LimelightError("a pyterrier system needs factory = \"module:callable\" (e.g. "
                             "\"limelight.retrieval.kinds.pyterrier:pisa_bm25\")")
    collection = context.get("collection")
    if collection is None:
        raise LimelightError("a pyterrier system opens over a collection (its result ids are the "
                             "collection's): give collection=")
    transformer = make_transformer(factory, spec.param("args"),
                                   {k: context.get(k) for k in CONTEXT_KEYS})
    return PyTerrierRetriever(transformer, collection.ids, name=name or "pyterrier",
                              batch_size=spec.param("batch_size"),
                              deterministic=spec.param("deterministic"))


KIND = register_kind(SystemKind(
    "pyterrier",
    {"factory": Param(str, None, "the transformer's factory, module:callable (a module or a "
                                 ".py file; relative to the configuration's folder)"),
     "args": Param(dict, None, "keyword arguments of the factory"),
     "batch_size": Param(int, 1000, "queries per PyTerrier frame"),
     "deterministic": Param(bool, True, "whether the pipeline gives a query the same ranking "
                                        "every time")},
    frozenset({NEW_QUERIES, DETERMINISTIC}),
    open_pyterrier,
    "any PyTerrier transformer (module:factory), fed the queries as frames; e.g. PISA's BM25",
    needs_index=False,
    resolve=resolve_pyterrier,
))


# ---- PISA's BM25 with limelight's analysis -----------------------------------------------------
def pisa_bm25(collection: Collection, work_dir: str | os.PathLike | None = None, *,
              base_dir: str | os.PathLike | None = None, index: str | None = None,
              k1: float = DEFAULT_K1, b: float = DEFAULT_B, stopwords: str | list[str] = "en",
              stemmer: str | None = None, threads: int = 1,
              query_algorithm: str = "block_max_wand") -> Any:
    """PISA's BM25 (``k1``, ``b``) over ``collection``, as a PyTerrier transformer.

    Documents and queries are analysed by limelight's ``Analyzer(stopwords=, stemmer=)`` (the
    defaults are limelight BM25's), and PISA indexes those tokens as they are (its own
    tokenizer, stemmer and stopwords off); a term repeated in a query counts once per
    occurrence, as in limelight. PISA scores with its own BM25 (its idf is
    ``max(ε, ln((N - df + 0.5) / (df + 0.5)))``, not limelight's ``ln(1 + ...)``), so
    rankings are close, not equal. The index is built once into ``index`` (relative to
    ``base_dir``) or ``work_dir/pisa-index``, atomically, and reused while the collection, the
    analysis, ``k1`` and ``b`` are the same; a folder limelight did not write is refused.
    """
    pt = _pyterrier()
    try:
        import pyterrier_pisa as pp
    except ImportError:
        raise LimelightError(INSTALL_HINT) from None
    if index is not None:
        folder = Path(index) if Path(index).is_absolute() else Path(base_dir or ".") / index
    elif work_dir is not None:
        folder = Path(work_dir) / "pisa-index"
    else:
        raise LimelightError("pisa_bm25 needs a folder for its index: give index = \"FOLDER\", or "
                             "open it with a work_dir (an audit gives each system one)")
    analyzer = Analyzer(stopwords=stopwords if isinstance(stopwords, str) else tuple(stopwords),
                        stemmer=stemmer)
    ensure_pisa_index(collection, folder, analyzer, k1, b)
    retrieve = pp.PisaIndex(str(folder), stemmer="none", stops="none", threads=threads).bm25(
        k1=k1, b=b, threads=threads, query_algorithm=query_algorithm, toks_scale=1.0,
        query_weighted=True)
    return _query_tokens_class(pt)(analyzer) >> retrieve


@functools.cache
def _query_tokens_class(pt: Any) -> type:
    """``LimelightQueryTokens``: a transformer adding ``query_toks`` (limelight's tokens of
    ``query`` with their counts), defined when PyTerrier is there."""

    class LimelightQueryTokens(pt.Transformer):
        """Adds ``query_toks``: each query's tokens under ``analyzer``, with their counts."""

        def __init__(self, analyzer: Analyzer):
            super().__init__()
            self.analyzer = analyzer

        def __repr__(self) -> str:
            return f"LimelightQueryTokens({self.analyzer.config()})"

        def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
            toks = self.analyzer.tokenize_many(inp["query"].astype(str).tolist())
            return inp.assign(query_toks=[{t: float(c) for t, c in Counter(q).items()}
                                          for q in toks])

    return LimelightQueryTokens


def _pisa_key(collection: Collection, analyzer: Analyzer, k1: float, b: float) -> str:
    """What a PISA index folder was built from: the collection (ids and texts), the analysis,
    ``k1`` and ``b`` (PISA stores per-``(k1, b)`` score bounds beside the index) and the
    pyterrier-pisa version."""
    import pyterrier_pisa as pp

    h = hashlib.sha256()
    h.update(json.dumps([PISA_FORMAT, pp.__version__, analyzer.config(), float(k1), float(b),
                         len(collection)]).encode())
    h.update("\x1f".join(collection.ids.strings.tolist()).encode("utf-8", "surrogatepass"))
    h.update(b"\x1e")
    h.update("\x1f".join(map(str, collection.texts.tolist())).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def ensure_pisa_index(collection: Collection, folder: str | os.PathLike, analyzer: Analyzer,
                      k1: float = DEFAULT_K1, b: float = DEFAULT_B) -> Path:
    """The PISA index of ``collection`` in ``folder``: reused when it was built from the same
    inputs (:func:`_pisa_key`), else built into a fresh folder beside it that replaces it only
    when complete (``atomic_dir``; a folder limelight did not write is refused)."""
    folder = Path(folder)
    key = _pisa_key(collection, analyzer, k1, b)
    owner = read_owner(folder)
    if owner is not None and owner.get("kind") == PISA_INDEX:
        try:
            meta = json.loads((folder / PISA_META).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        if meta.get("key") == key:
            check_output_dir(folder, PISA_INDEX)  # nothing foreign arrived
            return folder
    with atomic_dir(folder, PISA_INDEX) as tmp:
        _build_pisa(collection, tmp, analyzer, k1, b)
        (tmp / PISA_META).write_text(json.dumps({"format": PISA_FORMAT, "key": key,
                                                 "analyzer": analyzer.config(), "k1": k1, "b": b,
                                                 "n_docs": len(collection)}), encoding="utf-8")
    return folder


def _build_pisa(collection: Collection, tmp: Path, analyzer: Analyzer, k1: float, b: float) -> None:
    """PISA's index of ``collection``'s tokens in the empty folder ``tmp``, with the score
    bounds and the compressed index of BM25 ``(k1, b)`` that retrieval would otherwise write
    into the folder on first use."""
    import pyterrier_pisa as pp

    ids = collection.ids.strings.tolist()
    bad = next((d for d in ids if not d or any(c.isspace() for c in d)), None)
    if bad is not None:
        raise LimelightError(f"pisa_bm25: document id {bad!r} is empty or holds white space, "
                             "which PISA's document list cannot keep")
    toks = analyzer.tokenize_many(collection.texts.tolist())
    docs = ({"docno": d, "toks": dict(Counter(t))} for d, t in zip(ids, toks, strict=True))
    with _quiet("building the PISA index in " + str(tmp)):
        pp.PisaIndex(str(tmp), stemmer="none", stops="none").toks_indexer(scale=1.0).index(docs)
        pp.PisaIndex(str(tmp), stemmer="none", stops="none").bm25(
            k1=k1, b=b, toks_scale=1.0, query_weighted=True)  # writes the (k1, b) files


@contextlib.contextmanager
def _quiet(what: str) -> Iterator[None]:
    """Run PISA's C++ code with the process's stdout and stderr sent to a temporary file (it
    prints progress and log lines there, past Python); on failure, a one-line error with the
    last line it printed."""
    for f in (sys.stdout, sys.stderr):
        f.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        except Exception as e:
            log.seek(0)
            said = [ln.strip() for ln in log.read().decode("utf-8", "replace").splitlines()
                    if ln.strip()]
            last = f"; PISA said: {said[-1][:200]}" if said else ""
            first = (str(e).splitlines() or [""])[0]
            raise LimelightError(f"{what} failed: {type(e).__name__}: {first}{last}") from e
        finally:
            for f in (sys.stdout, sys.stderr):
                f.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


__all__ = ["INSTALL_HINT", "KIND", "PyTerrierRetriever", "ensure_pisa_index",
           "make_transformer", "open_pyterrier", "pisa_bm25", "resolve_factory",
           "resolve_pyterrier"]
