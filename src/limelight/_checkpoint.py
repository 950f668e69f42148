"""Resumable training state shared by the training loops (CtrlQGen generator, bi-encoder
fine-tuning): an atomic ``torch.save`` of one dictionary, the RNG states it must carry, and the
check that a checkpoint belongs to the run that resumes it.

A checkpoint holds what an exact resume needs: the trained weights, the optimizer and scheduler
states, the torch and numpy RNG states, the step and the per-step losses, plus ``meta`` (the
settings, a fingerprint of the training data and the identity of the base model). ``check_meta``
refuses a checkpoint whose ``meta`` differs from the resuming run's, naming the first difference.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from limelight._io import atomic_path
from limelight.errors import LimelightError

STATE_FILE = "train_state.pt"


@dataclass
class TrainingStats:
    """Steps, examples seen, seconds and per-step losses of one training run. With checkpoints
    they cover the whole run (resumed parts included); ``resumed_from`` is the step the run
    continued from (0 for a fresh run) and ``completed`` is False when ``stop`` ended the run
    early (a checkpoint holds its state)."""

    steps: int
    examples: int
    seconds: float
    losses: list[float] = field(default_factory=list)
    completed: bool = True
    resumed_from: int = 0


def fingerprint_texts(*columns: Iterable) -> str:
    """A short sha256 over parallel columns of strings (the training data of a run)."""
    h = hashlib.sha256()
    for col in columns:
        h.update(b"\x02")
        for x in col:
            h.update(str(x).encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()[:20]


def optimizer_step(loss, params, opt, sched, run: dict) -> None:
    """One step of the training loops that resume from here: backpropagate ``loss``, clip the
    gradients of ``params`` to norm 1, step the optimizer and the scheduler, clear the gradients,
    and record the step in ``run`` (its ``losses`` and ``step``)."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    run["losses"].append(float(loss.detach()))
    run["step"] += 1


def save_state(checkpoint_dir: str | os.PathLike, state: dict) -> Path:
    """Write ``state`` to ``checkpoint_dir/train_state.pt`` atomically (never half-written)."""
    import torch

    path = Path(checkpoint_dir) / STATE_FILE
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
    return path


def load_state(checkpoint_dir: str | os.PathLike | None) -> dict | None:
    """The state saved in ``checkpoint_dir`` (None when there is none)."""
    if checkpoint_dir is None:
        return None
    path = Path(checkpoint_dir) / STATE_FILE
    if not path.exists():
        return None
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a truncated or foreign file
        raise LimelightError(f"{path}: not a readable training checkpoint ({type(e).__name__})") from None


def rng_states(rng: np.random.Generator) -> dict:
    """The torch (CPU) and numpy RNG states, to restore with ``restore_rngs``."""
    import torch

    return {"torch_rng": torch.get_rng_state(), "np_rng": json.dumps(rng.bit_generator.state)}


def restore_rngs(state: dict, rng: np.random.Generator) -> None:
    """Put back the RNG states saved by ``rng_states``."""
    import torch

    torch.set_rng_state(state["torch_rng"])
    rng.bit_generator.state = json.loads(state["np_rng"])


def describe_base(base: dict) -> str:
    """A generator's base model (``name``, ``model_type``, ``num_layers``, ``vocab_size``) in
    words: ``name (model type, N layers, vocabulary V)``."""
    return (f"{base.get('name')} ({base.get('model_type')}, {base.get('num_layers')} layers, "
            f"vocabulary {base.get('vocab_size')})")


def check_meta(path: str | os.PathLike, saved: dict, current: dict) -> None:
    """Raise a one-line error when a checkpoint's settings differ from the resuming run's (a base
    model with an architecture is named in words: ``describe_base``)."""
    for key in current:
        if saved.get(key) != current[key]:
            what = "base model" if key == "base_model" else key
            old, new = saved.get(key), current[key]
            if key == "base_model" and all(isinstance(b, dict) and "model_type" in b for b in (old, new)):
                old_s, new_s = describe_base(old), describe_base(new)
            else:
                old_s, new_s = repr(old), repr(new)
            raise LimelightError(
                f"{Path(path) / STATE_FILE}: checkpoint written for {what} {old_s}, "
                f"this run has {new_s} (use another checkpoint folder or delete it)")
