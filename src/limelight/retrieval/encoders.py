"""Encoder variants: the same sentence-transformers model computed by different CPU back-ends.

``Encoder(variant=...)`` (``limelight.retrieval.dense``) picks one of:

- ``"torch-fp32"``: the model's own PyTorch forward in float32 (the reference);
- ``"onnx"``: the model exported to ONNX from the local weights, its graph fused by ONNX Runtime's
  transformer optimizer (attention, embedding/skip layer norm, bias+GELU), run in float32 by
  ONNX Runtime;
- ``"onnx-int8"``: the fused graph with dynamic int8 quantization of its weights (per output
  channel, signed weights; activations quantized at run time with one scale per input tensor);
- ``"auto"``: the fastest variant that meets the quality bound on CPU (``CPU_PREFERENCE``, first
  available; measured in ``docs/results-dense.md``), ``"torch-fp32"`` on other devices.

Both ONNX variants run **every text alone** (a batch of one, no padding; ``ONNX_RUN``), on
``workers`` single-threaded ONNX Runtime sessions in parallel threads. Dynamic int8 quantization
derives its activation scales from the whole input tensor, so in a padded batch a text's vector
depended on the other texts of the batch (cosine 0.993-0.995 against the same text alone): run
alone, the tensor is the text, the scales are the text's own, and a text's vector is the same
bit for bit whatever else is encoded with it, in whatever batch size or order (exact reverse
search, resumed or re-batched exposure jobs and pasted documents depend on that). It is also the
faster way on CPU: no padding, and two one-thread sessions use both cores better than one
two-thread session on small matrices (docs/results-dense.md).

The export is done once per (model weights, variant, library versions) from the weights on disk,
offline, into ``<cache>/models/`` (``cache`` is ``$LIMELIGHT_CACHE`` or ``./.cache``), written
atomically, and checked before use: the exported graph must reproduce the float32 torch vectors
of a few probe texts (cosine >= ``PROBE_MIN_COSINE[variant]``), otherwise it is rejected with
a one-line error. Vectors from different variants never share an index or a cache file: the
variant is part of ``Encoder.identity()`` and of the embedding cache key.

Once the graph is exported, an ``Encoder`` of an ONNX variant opens without importing
sentence-transformers, transformers or torch (about 5-7 CPU s a process): ``cached_export``
finds the folder from the installed packages' versions and ``LightTokenizer`` gives the same
token ids from the model's ``tokenizer.json`` (vectors equal bit for bit; tests/test_encoder_light.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from limelight._io import atomic_dir, cache_root
from limelight.errors import LimelightError
from limelight.progress import check_interrupt, interrupt_requested

VARIANTS = ("torch-fp32", "onnx", "onnx-int8")
ONNX_VARIANTS = ("onnx", "onnx-int8")
#: What ``variant="auto"`` picks on CPU: the first available, fastest first. Every entry met the
#: quality bound (nDCG@10 loss < 0.005 on scifact and npl vs torch-fp32; docs/results-dense.md).
CPU_PREFERENCE = ("onnx-int8", "onnx", "torch-fp32")
#: The variant that vectors with no recorded variant (indexes and caches of earlier versions) have.
LEGACY_VARIANT = "torch-fp32"
#: Minimum cosine between an exported graph's vectors and torch float32 on the probe texts.
PROBE_MIN_COSINE = {"onnx": 0.9999, "onnx-int8": 0.97}
RECIPE = 1  # bump when the export recipe changes (invalidates exported models)
#: How the ONNX variants are run (part of their ``Encoder.identity()``): every text alone.
ONNX_RUN = "per-text"
_PROBES = (
    "information retrieval",
    "vitamin d and bone density in older adults",
    "a text editor for the terminal with syntax highlighting and a plugin system " * 6,
    "x",
    "",
)


def onnx_available() -> bool:
    """True when ONNX Runtime and the ``onnx`` package can be imported."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_variant(variant: str | None, device: str = "cpu") -> str:
    """The concrete variant for ``variant`` (``None``/``"auto"`` resolved for ``device``)."""
    v = "auto" if variant is None else str(variant).lower()
    if v == "auto":
        if not str(device).startswith("cpu"):
            return "torch-fp32"
        for cand in CPU_PREFERENCE:
            if cand == "torch-fp32" or onnx_available():
                return cand
        return "torch-fp32"  # pragma: no cover
    if v not in VARIANTS:
        raise LimelightError(f"unknown encoder variant {variant!r} (one of auto, {', '.join(VARIANTS)})")
    if v in ONNX_VARIANTS and not str(device).startswith("cpu"):
        raise LimelightError(f"encoder variant {v!r} runs on CPU only (device {device!r}); "
                             f"use variant='torch-fp32'")
    if v in ONNX_VARIANTS and not onnx_available():
        raise LimelightError(f"encoder variant {v!r} needs onnxruntime and onnx "
                             f"of limelight's 'dense' extra: pip install 'limelight[dense]'")
    return v


# ---- export -----------------------------------------------------------------------------------
def _versions() -> dict[str, str] | None:
    """The library versions an export is made with and found by (with the recipe): read from
    the installed packages' metadata, so without importing torch or transformers (``None``
    when one is not installed). They are the versions the packages report when imported
    (``__version__``), which named the export folders of earlier releases: those stay valid
    (tests/test_encoder_light.py)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {"torch": version("torch"), "transformers": version("transformers"),
                "onnxruntime": version("onnxruntime"), "recipe": str(RECIPE)}
    except PackageNotFoundError:
        return None


def _input_names(st_model) -> list[str]:
    feats = st_model.preprocess(["probe"])
    return [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in feats]


@contextlib.contextmanager
def _eager_attention(st_model) -> Iterator[None]:
    """Export with the explicit (eager) attention graph, which ONNX Runtime's optimizer fuses
    into its ``Attention`` kernel; the SDPA graph of transformers 5 is left unfused."""
    auto = getattr(st_model[0], "auto_model", None)
    old = getattr(getattr(auto, "config", None), "_attn_implementation", None)
    switched = False
    if auto is not None and old not in (None, "eager") and hasattr(auto, "set_attn_implementation"):
        try:
            auto.set_attn_implementation("eager")
            switched = True
        except Exception:  # noqa: BLE001 - an architecture without eager attention: export as is
            switched = False
    try:
        yield
    finally:
        if switched:
            auto.set_attn_implementation(old)


def _export_fp32(st_model, names: list[str], path: Path) -> None:
    import torch

    class _Wrapper(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            feats = dict(zip(names, inputs, strict=True))
            feats["modality"] = "text"
            return self.model(feats)["sentence_embedding"]

    feats = st_model.preprocess(["hello world", "a slightly longer example sentence"])
    args = tuple(feats[k] for k in names)
    dyn = {k: {0: "batch", 1: "sequence"} for k in names}
    dyn["embedding"] = {0: "batch"}
    import warnings

    with torch.no_grad(), warnings.catch_warnings(), _eager_attention(st_model):
        warnings.simplefilter("ignore")
        torch.onnx.export(_Wrapper(st_model).eval(), args, str(path), input_names=names,
                          output_names=["embedding"], dynamic_axes=dyn, opset_version=17,
                          dynamo=False, do_constant_folding=True)


def _fuse(src: Path, dst: Path, config) -> bool:
    """ONNX Runtime's transformer fusions for BERT-type models; False when not applicable."""
    if getattr(config, "model_type", None) != "bert":
        return False
    import logging

    from onnxruntime.transformers.optimizer import optimize_model

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    opt = optimize_model(str(src), model_type="bert", num_heads=int(config.num_attention_heads),
                         hidden_size=int(config.hidden_size), opt_level=1)
    opt.save_model_to_file(str(dst))
    return True


def _quantize(src: Path, dst: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))
    # per-channel signed weights: per-tensor weights lose up to 5 % cosine on MiniLM (measured)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": 1})  # FLOAT, for fused-op outputs


def export_dir(fingerprint: str, variant: str, root: Path | None = None,
               versions: dict[str, str] | None = None) -> Path:
    """Where the exported graph of a model (by weight fingerprint) and variant is kept
    (``versions``: ``_versions()`` unless given)."""
    versions = versions or _versions()
    if versions is None:
        raise LimelightError("an ONNX export needs torch, transformers and onnxruntime "
                             "of limelight's 'dense' extra: pip install 'limelight[dense]'")
    key = hashlib.sha256(json.dumps({"fp": fingerprint, "variant": variant, **versions},
                                    sort_keys=True).encode()).hexdigest()[:16]
    return (root or cache_root()) / "models" / f"{fingerprint}-{variant}-{key}"


def cached_export(fingerprint: str, variant: str, root: Path | None = None) -> Path | None:
    """The ``.onnx`` file already exported for this model and variant, found without importing
    torch or transformers: the folder ``export_dir`` names with the installed versions, whose
    ``export.json`` records the same versions (else ``None``: export it the usual way)."""
    versions = _versions()
    if versions is None or variant not in ONNX_VARIANTS:
        return None
    out = export_dir(fingerprint, variant, root, versions)
    onnx_path = out / "model.onnx"
    try:
        meta = json.loads((out / "export.json").read_text())
    except (OSError, ValueError):
        return None
    if not onnx_path.exists() or any(meta.get(k) != v for k, v in versions.items()):
        return None
    if meta.get("variant") != variant or meta.get("fingerprint") != fingerprint:
        return None
    return onnx_path


# ---- the light tokenizer ----------------------------------------------------------------------
_LIGHT_MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                  "sentence_transformers.models.Normalize")


class LightTokenizer:
    """The token ids ``SentenceTransformer.preprocess`` gives a BERT sentence-transformers model
    (Transformer → mean Pooling → Normalize), computed by the ``tokenizers`` library alone from
    the model's ``tokenizer.json``: the same normalizer, pre-tokenizer, special tokens and
    truncation to ``max_seq_length`` tokens (``sentence_bert_config.json``, longest first), with
    no torch or transformers import. Texts are run alone (``encode_onnx``), so the padding of the
    returned arrays (pad id 0, mask 0) is never seen by the graph.

    ``open`` returns ``None`` for a model it does not reproduce (another architecture, tokenizer
    class or pooling, lower-casing done by sentence-transformers, a normalizer that transformers
    would rewrite from ``tokenizer_config.json``): such a model loads the full path."""

    def __init__(self, tokenizer, max_seq_length: int, dim: int, names: list[str]):
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.dim = int(dim)
        self.input_names = list(names)
        tokenizer.no_padding()  # padded here: the library's padding costs more (see preprocess)
        tokenizer.enable_truncation(max_length=self.max_seq_length, strategy="longest_first")

    @classmethod
    def open(cls, path: Path, names: list[str], max_seq_length: int | None = None
             ) -> LightTokenizer | None:
        try:
            modules = json.loads((path / "modules.json").read_text())
            sbert = json.loads((path / "sentence_bert_config.json").read_text())
            config = json.loads((path / "config.json").read_text())
            tok_config = json.loads((path / "tokenizer_config.json").read_text())
            spec = json.loads((path / "tokenizer.json").read_text())
            types = [m.get("type") for m in modules]
            if tuple(types) not in (_LIGHT_MODULES, _LIGHT_MODULES[:2]):
                return None
            if [m.get("path") for m in modules][:1] != [""]:
                return None
            pooling = json.loads((path / modules[1]["path"] / "config.json").read_text())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode")}
        if modes.get("pooling_mode_mean_tokens") is not True or sum(bool(v) for v in modes.values()) != 1:
            return None
        if set(pooling) - {"word_embedding_dimension", "include_prompt", *modes}:
            return None
        if config.get("model_type") != "bert" or sbert.get("do_lower_case") or \
                set(sbert) - {"max_seq_length", "do_lower_case"}:
            return None
        if tok_config.get("tokenizer_class") not in ("BertTokenizer", "BertTokenizerFast"):
            return None
        norm = spec.get("normalizer") or {}
        if norm.get("type") != "BertNormalizer" or \
                norm.get("lowercase") != tok_config.get("do_lower_case", True) or \
                norm.get("strip_accents") != tok_config.get("strip_accents") or \
                norm.get("handle_chinese_chars") != tok_config.get("tokenize_chinese_chars", True):
            return None
        length = max_seq_length if max_seq_length is not None else sbert.get("max_seq_length")
        if not isinstance(length, int) or length < 2:
            return None
        if length > int(tok_config.get("model_max_length", length)) or \
                length > int(config.get("max_position_embeddings", length)):
            return None
        if not set(names) <= {"input_ids", "attention_mask", "token_type_ids"}:
            return None
        try:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception:  # noqa: BLE001 - not installed or unreadable: the full path decides
            return None
        return cls(tok, length, int(pooling["word_embedding_dimension"]), names)

    def preprocess(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Padded ``input_ids``/``attention_mask``/``token_type_ids`` (int64) of ``texts``.

        The ``encode_batch`` outputs (truncated by the library) are laid into the arrays at
        once, row-major through a mask of each row's tokens, not a row at a time. Not padded by
        the library (``enable_padding``): on 2,048 log queries (7 tokens on average, the
        longest 29) its padding made ``encode_batch`` 45-49 CPU ms instead of 39-40 and its
        padded lists cost more to read (6-7 ms) than this fill (4 ms; the row loop: 6 ms)."""
        encs = self.tokenizer.encode_batch([str(t) for t in texts])
        lengths = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
        width = int(lengths.max()) if len(encs) else 0
        real = np.arange(width) < lengths[:, None]  # each row's own tokens, then padding
        out = {}
        for key, attr in (("input_ids", "ids"), ("attention_mask", "attention_mask"),
                          ("token_type_ids", "type_ids")):
            arr = np.zeros((len(encs), width), dtype=np.int64)
            arr[real] = np.fromiter(itertools.chain.from_iterable(getattr(e, attr) for e in encs),
                                    dtype=np.int64, count=int(lengths.sum()))
            out[key] = arr
        return out


def export_model(st_model, variant: str, fingerprint: str, root: Path | None = None,
                 threads: int | None = None) -> Path:
    """The ONNX graph of ``st_model`` for ``variant``, exported on first use and then reused.

    Returns the ``.onnx`` file. The export runs offline from the loaded weights, is checked on
    probe texts against the torch float32 vectors, and is written atomically.
    """
    if variant not in ONNX_VARIANTS:
        raise LimelightError(f"no ONNX export for variant {variant!r}")
    versions = _versions()
    out = export_dir(fingerprint, variant, root, versions)
    onnx_path = out / "model.onnx"
    if onnx_path.exists() and (out / "export.json").exists():
        return onnx_path
    names = _input_names(st_model)
    t0 = time.perf_counter()
    with atomic_dir(out, "ONNX export") as tmp:
        raw = tmp / "raw.onnx"
        try:
            _export_fp32(st_model, names, raw)
            fused = tmp / "fused.onnx"
            src = fused if _fuse(raw, fused, st_model[0].auto_model.config) else raw
            if variant == "onnx-int8":
                _quantize(src, tmp / "model.onnx")
            else:
                src.replace(tmp / "model.onnx")
        except LimelightError:
            raise
        except Exception as e:  # noqa: BLE001 - any exporter failure becomes one line
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise LimelightError(f"cannot export the encoder to ONNX ({variant}): {msg}") from None
        for p in tmp.iterdir():
            if p.name != "model.onnx":
                p.unlink()
        backend = OnnxBackend(tmp / "model.onnx", names, threads=threads)
        cos = _probe_cosine(st_model, backend, names)
        if cos < PROBE_MIN_COSINE[variant]:
            raise LimelightError(f"the exported {variant} encoder disagrees with torch float32 "
                                 f"(min cosine {cos:.4f} on probe texts); not used")
        meta = {"variant": variant, "fingerprint": fingerprint, "inputs": names,
                "probe_min_cosine": round(float(cos), 6),
                "export_seconds": round(time.perf_counter() - t0, 1), **(versions or {})}
        (tmp / "export.json").write_text(json.dumps(meta, indent=1))
    return onnx_path


def _probe_cosine(st_model, backend: OnnxBackend, names: list[str]) -> float:
    import torch

    texts = [t for t in _PROBES if t]
    feats = st_model.preprocess(texts)
    with torch.no_grad():
        ref = st_model(feats)["sentence_embedding"].float().numpy()
    arrs = {k: feats[k].numpy() for k in names}
    got = backend.run_each(arrs, arrs["attention_mask"].sum(1))  # as encode_onnx runs them
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    got = got / np.linalg.norm(got, axis=1, keepdims=True)
    return float((ref * got).sum(1).min())


# ---- runtime ----------------------------------------------------------------------------------
def default_workers() -> int:
    """Parallel one-thread sessions by default: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class OnnxBackend:
    """ONNX Runtime CPU sessions over an exported encoder graph: ``workers`` sessions of one
    intra-op thread each, run side by side from Python threads (ONNX Runtime releases the GIL)."""

    def __init__(self, path: str | os.PathLike, input_names: list[str], threads: int | None = None):
        self.path = Path(path)
        self.input_names = list(input_names)
        self.workers = int(threads) if threads else default_workers()
        if self.workers < 1:
            raise LimelightError(f"threads must be >= 1, got {threads}")
        self.session = self._session()
        self._sessions = [self.session]

    def _session(self):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.inter_op_num_threads = 1
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        try:
            return ort.InferenceSession(str(self.path), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise LimelightError(f"{self.path}: cannot load the ONNX encoder ({msg}); delete the "
                                 f"folder to export it again") from None

    def run(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        """Sentence embeddings (float32, not re-normalised) for one padded batch of token arrays
        (used for the export probes; ``encode_onnx`` runs texts alone)."""
        inputs = {k: np.ascontiguousarray(feats[k], dtype=np.int64) for k in self.input_names}
        return np.asarray(self.session.run(None, inputs)[0], dtype=np.float32)

    def run_each(self, arrs: dict[str, np.ndarray], lengths: np.ndarray) -> np.ndarray:
        """Embeddings of the rows of padded token arrays, each row run alone on its own
        ``lengths[i]`` tokens (float32, not re-normalised), longest first over the sessions."""
        while len(self._sessions) < self.workers:
            self._sessions.append(self._session())
        n = len(lengths)
        arrs = {k: np.ascontiguousarray(arrs[k], dtype=np.int64) for k in self.input_names}
        order = np.argsort(-np.asarray(lengths), kind="stable").tolist()
        widths = np.maximum(np.asarray(lengths, dtype=np.int64), 1).tolist()
        todo = iter(order)  # shared by the threads: a builtin iterator's next() is atomic
        results: list[tuple[int, np.ndarray]] = []
        stop = threading.Event()  # Ctrl-C: each worker stops after its current text

        def work(session) -> None:
            got = []
            for i in todo:
                if stop.is_set() or interrupt_requested():
                    return
                w = widths[i]
                got.append((i, session.run(None, {k: v[i:i + 1, :w] for k, v in arrs.items()})[0]))
            results.extend(got)

        sessions = self._sessions[:max(1, min(self.workers, n))]
        if len(sessions) == 1:
            work(sessions[0])
        else:
            from concurrent.futures import ThreadPoolExecutor

            ex = ThreadPoolExecutor(len(sessions))
            try:
                list(ex.map(work, sessions))
            except BaseException:  # KeyboardInterrupt: the workers stop too, before it goes on
                stop.set()
                raise
            finally:
                ex.shutdown(wait=True)
        check_interrupt()  # (deferred Ctrl-C: the workers stopped early, nothing is returned)
        if not results:
            return np.zeros((0, 0), np.float32)
        out = np.empty((n, results[0][1].shape[-1]), dtype=np.float32)
        for i, e in results:
            out[i] = e[0]
        return out


def encode_onnx(st_model, backend: OnnxBackend, texts: list[str], chunk: int = 2048,
                advance=None) -> np.ndarray:
    """Embeddings of ``texts`` (input order) through ``backend``, every text run alone.

    Texts are tokenized by the model's own ``preprocess`` (same truncation as torch; ``st_model``
    is the ``SentenceTransformer`` or a ``LightTokenizer`` giving the same ids) a chunk at a
    time; each row is then cut to its own token count, so no text sees padding or another text.
    """
    n = len(texts)
    out: np.ndarray | None = None
    names = backend.input_names
    for s in range(0, n, chunk):
        part = texts[s:s + chunk]
        feats = st_model.preprocess(part)
        arrs = {k: np.asarray(feats[k]) for k in names}
        emb = backend.run_each(arrs, arrs["attention_mask"].sum(1))
        if out is None:
            out = np.zeros((n, emb.shape[1]), dtype=np.float32)
        out[s:s + len(part)] = emb
        if advance is not None:
            advance(len(part))
        check_interrupt()
    return out if out is not None else np.zeros((0, 0), np.float32)


