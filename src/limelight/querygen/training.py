"""Training a CtrlQGen generator from a catalog: the weak training pairs and a resumable fine-tuning
that saves the generator (what ``limelight generate train`` runs; the same calls from Python).

Usage::

    from limelight.data import load_catalog
    from limelight.querygen.training import train_generator, weak_pairs

    cat = load_catalog("movies")
    pairs = weak_pairs(cat, "movies", weak="ip+un", n_queries=2000, seed=0)
    st = train_generator(cat, "movies", "models/ctrlqgen", lambda: pairs, steps=250,
                         checkpoint_dir="models/ctrlqgen.ckpt", checkpoint_every=50)
    st.completed   # False when stop() ended it early: call again with resume=True

**Weak pairs** (``weak_pairs``):

- ``weak="un"``: WeakLabeling-Un queries for entities drawn uniformly, a fraction ``p_narrow``
  narrow (``un_pairs``);
- ``weak="ip+un"``: the paper's CtrlQGen training set, as the issue-26 study builds it
  (``ip_un_pairs``): half the pairs from a Click set with intents predicted by WeakLabeling-IP,
  half WeakLabeling-Un pairs (alternately narrow and broad). The Click set is the ``train`` split
  of a folder written by ``limelight generate dataset`` (``click=``; its held-out entities and
  queries, if any, are kept out of every pair), or, without one, a WeakLabeling-Un Click set drawn
  as ``click_dataset`` draws one (75 % narrow), large enough for the IP half.

**Resuming** (``train_generator``): with ``checkpoint_dir``, the pairs and the settings that made
them are saved there before the first step (``pairs.json``, ``settings.json``) beside
``QueryGenerator.fit``'s state; ``resume=True`` reads them back instead of drawing the pairs again
and continues from the last checkpoint, which gives the weights of one uninterrupted run. A
checkpoint folder that already holds a state is refused without ``resume`` (and ``resume`` without
one is an error); settings that differ from the saved ones are refused naming the first
difference. When the run completes, the generator is saved to ``out`` and the checkpoint files
are removed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from limelight.data.collection import Collection
from limelight.errors import LimelightError
from limelight.querygen.generator import QueryGenerator, TrainStats, training_pairs
from limelight.querygen.serialize import Schema, load_schema
from limelight.querygen.weaklabel import (
    WeakLabelingUn,
    WeakPairs,
    click_dataset,
    ip_un_pairs,
    read_click_split,
    read_heldout,
    un_pairs,
)

WEAK_MODES = ("un", "ip+un")
PAIRS_FILE = "pairs.json"
SETTINGS_FILE = "settings.json"


def weak_pairs(collection: Collection, schema: Schema | str, weak: str = "un", n_queries: int = 2000,
               p_narrow: float = 0.5, seed: int = 0, click: str | os.PathLike | None = None,
               encoder=None) -> WeakPairs:
    """``n_queries`` generator training pairs (see the module docstring for ``weak``).

    ``click`` (``ip+un`` only) is a Click set folder; its ``heldout/`` entities and queries, when
    it has them, are excluded from the WeakLabeling-Un pairs (and a Click train pair for one of
    them is an error). ``p_narrow`` is the narrow share of ``un`` pairs."""
    if weak not in WEAK_MODES:
        raise LimelightError(f"unknown weak labeling {weak!r} (expected {' or '.join(WEAK_MODES)})")
    if n_queries < 2:
        raise LimelightError(f"need at least 2 training pairs, got {n_queries}")
    if weak == "un" and click is not None:
        raise LimelightError("a Click set (--click) is only read by --weak ip+un")
    schema = load_schema(schema)
    lab = WeakLabelingUn(schema).fit(collection)
    if weak == "un":
        return un_pairs(collection, schema, n_queries, p_narrow, seed, labeler=lab)
    held, held_texts = (read_heldout(click, collection) if click is not None
                        else (np.zeros(0, dtype=np.int64), set()))
    n_ip = n_queries // 2
    if click is not None:
        texts, ents, intents = read_click_split(click, "train", collection)
        bad = np.isin(ents, held)
        if bad.any():
            who = collection.ids.strings[ents[bad][0]]
            raise LimelightError(f"{click}: train pair for held-out entity {who!r} (the Click "
                                 "set's train split and heldout/ overlap)")
    else:  # a Click set as `generate dataset` draws one; ~80 % of it is the train split
        cs = click_dataset(collection, schema, int(np.ceil(n_ip / 0.8 * 1.1)) + 10, 0.75,
                           n_broad_test=0, seed=seed, labeler=lab)
        texts, ents = cs.pairs("train")
        intents = cs.queries["train"].intents
    return ip_un_pairs(collection, schema, texts, ents, intents, n_ip=n_ip,
                       n_un=n_queries - n_ip, seed=seed, labeler=lab, encoder=encoder,
                       exclude_entities=held, exclude_texts=held_texts)


def _save_pairs(d: Path, pairs: WeakPairs, collection: Collection, settings: dict) -> None:
    from limelight._io import atomic_path

    d.mkdir(parents=True, exist_ok=True)
    body = {"entity_id": collection.ids.strings[pairs.entity_idx].tolist(),
            "query": pairs.queries.tolist(), "intent": pairs.intents.tolist(),
            "source": pairs.source.tolist()}
    for name, obj in ((PAIRS_FILE, body), (SETTINGS_FILE, settings)):
        with atomic_path(d / name) as tmp:
            tmp.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")


def _load_pairs(d: Path, collection: Collection, settings: dict) -> WeakPairs:
    try:
        saved = json.loads((d / SETTINGS_FILE).read_text(encoding="utf-8"))
        body = json.loads((d / PAIRS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise LimelightError(f"{d}: its training pairs are missing or unreadable "
                             f"({type(e).__name__}): delete the folder to start over") from None
    for k, v in settings.items():
        if saved.get(k) != v:
            raise LimelightError(f"{d}: checkpoint written for {k} {saved.get(k)!r}, this run has "
                                 f"{v!r} (use the same options to resume, or another folder)")
    idx = np.asarray([collection.ids.lookup(e) for e in body["entity_id"]], dtype=np.int64)
    obj = np.asarray
    return WeakPairs(idx, obj(body["query"], dtype=object), obj(body["intent"], dtype=object),
                     obj(body["source"], dtype=object), obj(body["intent"], dtype=object))


def _resume_state(checkpoint_dir: Path | None, resume: bool) -> bool:
    """Whether a saved state will be continued (one-line errors for the refused cases)."""
    import limelight._checkpoint as ck

    if checkpoint_dir is None:
        if resume:
            raise LimelightError("resuming needs the checkpoint folder of the stopped run")
        return False
    has = (checkpoint_dir / ck.STATE_FILE).exists()
    if has and not resume:
        raise LimelightError(f"{checkpoint_dir} holds a stopped training run: resume it "
                             "(--resume) or delete the folder to start over")
    if resume and not has:
        raise LimelightError(f"{checkpoint_dir}: no training checkpoint to resume")
    return has


def train_generator(collection: Collection, schema: Schema | str, out: str | os.PathLike,
                    make_pairs: Callable[[], WeakPairs], *, kind: str = "ctrlqgen",
                    backbone: str | os.PathLike | None = None, steps: int = 100,
                    batch_size: int = 8, lr: float = 5e-5, train_layers: int | None = 4,
                    seed: int = 0, serialize: bool | None = None,
                    checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int = 0,
                    resume: bool = False, stop: Callable[[int], bool] | None = None,
                    progress: Callable[[int, float], None] | None = None,
                    settings: dict | None = None) -> TrainStats:
    """Fine-tune a ``kind`` generator from ``backbone`` on ``make_pairs()`` and save it to
    ``out`` (see the module docstring for checkpoints and ``resume``). ``settings`` (JSON-able:
    what made the pairs) is saved with the pairs and must be equal on resume. ``stop(step)``
    returning True checkpoints and ends the run early (``completed=False``; nothing is saved to
    ``out``); ``progress(step, loss)`` is called after every step."""
    import limelight._checkpoint as ck
    from limelight._io import check_output_dir

    check_output_dir(out, "query generator")  # before training: the save must not be refused after it
    schema = load_schema(schema)
    ckd = None if checkpoint_dir is None else Path(checkpoint_dir)
    settings = dict(settings or {})
    if _resume_state(ckd, resume):
        pairs = _load_pairs(ckd, collection, settings)
    else:
        pairs = make_pairs()
        if not len(pairs):
            raise LimelightError(f"no training pair could be drawn from {collection.name}")
        if ckd is not None:
            _save_pairs(ckd, pairs, collection, settings)
    g = QueryGenerator(backbone, kind=kind, schema=schema, serialize=serialize)
    prompts, targets = training_pairs(g, collection, pairs.entity_idx, pairs.queries.tolist(),
                                      pairs.intents.tolist() if kind == "ctrlqgen" else None)
    st = g.fit(prompts, targets, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
               train_layers=train_layers, progress=progress, checkpoint_dir=ckd,
               checkpoint_every=checkpoint_every, stop=stop)
    if st.completed:
        g.save(out)
        if ckd is not None:
            for name in (ck.STATE_FILE, PAIRS_FILE, SETTINGS_FILE):
                (ckd / name).unlink(missing_ok=True)
            if not any(ckd.iterdir()):
                ckd.rmdir()
    return st
