"""Training of the kernel re-rankers: pairwise hinge loss on (query, relevant, non-relevant)
triples, Adam with the paper's learning rates, early stopping on validation MRR@10.

Triples come from a :class:`TripleSource`. :class:`QrelsTriples` draws the relevant document
from the qrels of the training queries and the non-relevant one from the first-stage (BM25) top
100 of the same query (any retrieved document not judged relevant). Where no qrels exist, build
a ``QrelsTriples`` from synthetic queries and the documents they were generated from
(:meth:`QrelsTriples.from_pseudo_qrels`) — the hook for query generation.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from limelight._io import check_format
from limelight.data.collection import Collection
from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.evaluation.evaluate import Evaluator
from limelight.evaluation.measures import Measure
from limelight.rerank.models import param_groups
from limelight.rerank.ranker import KernelReranker, NeuralRanker
from limelight.rerank.vocab import EncodedTexts


class TripleSource(Protocol):
    """Anything that yields training triples as query rows and document rows."""

    def epoch(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(query_row, positive_doc_row, negative_doc_row)`` arrays for one epoch, shuffled."""
        ...


@dataclass
class QrelsTriples:
    """Triples from relevance judgments (or pseudo-judgments) and a first-stage run.

    ``positives[q]`` are the relevant document rows of query row ``q``; ``negatives[q]`` the
    candidate non-relevant rows (the first stage's top ``depth``, relevant ones removed).
    Each epoch pairs every positive with ``negatives_per_positive`` random negatives.
    """

    positives: dict[int, np.ndarray]
    negatives: dict[int, np.ndarray]
    negatives_per_positive: int = 1

    @classmethod
    def build(cls, queries: Queries, qrels: Qrels, candidates: Run, collection: Collection,
              qids: Sequence[str] | None = None, depth: int = 100, threshold: int = 1,
              negatives_per_positive: int = 1) -> QrelsTriples:
        """Positives: documents with grade ≥ ``threshold``; negatives: the rest of the first
        stage's top ``depth``. ``qids`` restricts to a training split."""
        allowed = set(qids) if qids is not None else None
        coll = collection.ids
        rel = qrels.rel >= threshold
        pos: dict[int, list[int]] = {}
        qstr = qrels.qids.decode(qrels.q[rel])
        dstr = qrels.docids.decode(qrels.d[rel])
        for q, d in zip(qstr.tolist(), dstr.tolist(), strict=True):
            if (allowed is None or q in allowed) and q in queries.ids and d in coll:
                pos.setdefault(queries.ids.lookup(q), []).append(coll.lookup(d))
        cand = candidates.topk(depth)
        crow = coll.encode(cand.docids.strings, missing=-1)[cand.d]
        qrow = queries.ids.encode(cand.qids.strings, missing=-1)[cand.q]
        neg: dict[int, np.ndarray] = {}
        for q, docs in pos.items():
            sel = crow[(qrow == q) & (crow >= 0)]
            sel = np.setdiff1d(sel, np.asarray(docs))
            if len(sel):
                neg[q] = sel
        positives = {q: np.unique(np.asarray(v, dtype=np.int64)) for q, v in pos.items() if q in neg}
        if not positives:
            raise LimelightError("no training triple: no training query has both a relevant document "
                                 "and a non-relevant first-stage candidate")
        return cls(positives, neg, negatives_per_positive)

    @classmethod
    def from_pseudo_qrels(cls, queries: Queries, pairs: dict[str, Sequence[str]], candidates: Run,
                          collection: Collection, depth: int = 100,
                          negatives_per_positive: int = 1) -> QrelsTriples:
        """Triples from synthetic queries: ``pairs[qid]`` are the documents query ``qid`` was
        generated from (treated as relevant)."""
        qs, ds = [], []
        for q, docs in pairs.items():
            qs.extend([q] * len(docs))
            ds.extend(docs)
        qrels = Qrels.from_arrays(qs, ds, np.ones(len(qs), dtype=np.int32))
        return cls.build(queries, qrels, candidates, collection, None, depth, 1, negatives_per_positive)

    @property
    def n_positives(self) -> int:
        return int(sum(len(v) for v in self.positives.values()))

    def epoch(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        qs, ps, ns = [], [], []
        k = self.negatives_per_positive
        for q in sorted(self.positives):
            p = np.repeat(self.positives[q], k)
            n = rng.choice(self.negatives[q], size=len(p), replace=True)
            qs.append(np.full(len(p), q, dtype=np.int64))
            ps.append(p)
            ns.append(n)
        q, p, n = np.concatenate(qs), np.concatenate(ps), np.concatenate(ns)
        perm = rng.permutation(len(q))
        return q[perm], p[perm], n[perm]


@dataclass
class TrainConfig:
    """Training settings (defaults: the paper's where it states them)."""

    epochs: int = 10
    batch_size: int = 64
    lr_embed: float = 1e-4
    lr_context: float = 1e-4
    lr_other: float = 1e-3
    margin: float = 1.0
    patience: int = 3
    max_steps_per_epoch: int | None = None
    validate_every: int | None = None  # steps; None: once per epoch
    val_depth: int = 100
    seed: int = 0
    threads: int | None = 1
    max_seconds: float | None = None


@dataclass
class TrainResult:
    """History of a training run: per validation ``(step, loss, val MRR@10)``."""

    history: list[tuple[int, float, float]] = field(default_factory=list)
    best_mrr: float = float("-inf")
    best_step: int = 0
    steps: int = 0
    seconds: float = 0.0
    stopped: str = "epochs"


def mrr_at_10(run: Run, qrels: Qrels, qids: Sequence[str], threshold: int = 1) -> float:
    """Mean RR@10 (``limelight.evaluation``'s ``RR(rel=threshold)@10``) over ``qids``: queries
    without a relevant document are skipped, absent ones score 0; the mean is taken in the order
    of ``qids``."""
    has = set(qrels.qids.decode(np.unique(qrels.q[qrels.rel >= threshold])).tolist())
    keep = [q for q in qids if q in has]
    if not keep:
        return 0.0
    res = Evaluator(qrels, [Measure("RR", cutoff=10, rel=threshold)]).evaluate(run, warn=False)
    vals = next(iter(res.per_query.values()))
    return float(np.mean(vals[res.qids.encode(keep)]))


def _hinge_step(model, opt, qenc, docs, q, p, n, margin: float, device) -> float:
    """One pairwise optimizer step on triples (query, relevant, non-relevant) given as rows of the
    padded token arrays ``qenc``/``docs``: the hinge loss max(0, margin − s⁺ + s⁻); its value."""
    qr, qm = model.encode(torch.from_numpy(qenc.take(q)).to(device))
    pr, pm = model.encode(torch.from_numpy(docs.take(p)).to(device))
    nr, nm = model.encode(torch.from_numpy(docs.take(n)).to(device))
    loss = torch.clamp(margin - model.score_encoded(qr, qm, pr, pm)
                       + model.score_encoded(qr, qm, nr, nm), min=0).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


class _Validation:
    """``train``'s validation, called after every epoch (or every ``validate_every`` steps): the
    MRR@10 of ``val_run``'s top ``val_depth`` re-ranked for ``val_qids``, the best weights kept
    (and saved to ``checkpoint``); true when ``patience`` validations brought no improvement.
    Without a validation set it records the mean training loss only."""

    def __init__(self, ranker: NeuralRanker, collection: Collection, queries: Queries,
                 docs: EncodedTexts, cfg: TrainConfig, result: TrainResult, val_run: Run | None,
                 val_qrels: Qrels | None, val_qids: Sequence[str] | None,
                 checkpoint: str | os.PathLike | None, progress: Callable[[str], None] | None):
        self.ranker, self.queries, self.cfg, self.result = ranker, queries, cfg, result
        self.qrels, self.checkpoint, self.progress = val_qrels, checkpoint, progress
        self.losses: list[float] = []  # training losses since the last validation
        self.best_state: dict | None = None
        self.bad = 0
        self.active = val_run is not None and val_qrels is not None
        if self.active:
            self.qids = list(val_qids) if val_qids is not None else list(val_run.qids)
            self.run = val_run.subset(self.qids).topk(cfg.val_depth)
            if len(self.run) == 0:
                raise LimelightError("the validation run has no candidates for the validation queries")
            self.stage = KernelReranker(ranker, collection, batch_size=256)
            self.stage._docs = docs

    def __call__(self) -> bool:
        result, model = self.result, self.ranker.model
        losses_seen = bool(self.losses)
        loss = float(np.mean(self.losses)) if self.losses else float("nan")
        self.losses.clear()
        if not self.active:
            result.history.append((result.steps, loss, float("nan")))
            return False
        mrr = mrr_at_10(self.stage.transform(self.queries, self.run), self.qrels, self.qids)
        model.train()
        result.history.append((result.steps, loss, mrr))
        if self.progress:  # no loss before the first training step (the untrained model)
            self.progress(f"step {result.steps}: "
                          + (f"loss {loss:.4f}, " if losses_seen else "untrained, ")
                          + f"val MRR@10 {mrr:.4f}")
        if mrr > result.best_mrr:
            result.best_mrr, result.best_step, self.bad = mrr, result.steps, 0
            self.best_state = copy.deepcopy(model.state_dict())
            if self.checkpoint is not None:
                self.ranker.meta.update({"best_val_mrr10": mrr, "best_step": result.steps})
                self.ranker.save(self.checkpoint)
            return False
        self.bad += 1
        return self.bad >= self.cfg.patience


def train(ranker: NeuralRanker, collection: Collection, queries: Queries, triples: TripleSource,
          config: TrainConfig | None = None, val_run: Run | None = None, val_qrels: Qrels | None = None,
          val_qids: Sequence[str] | None = None, checkpoint: str | os.PathLike | None = None,
          progress: Callable[[str], None] | None = None) -> TrainResult:
    """Train ``ranker`` in place; at the end it holds the weights of the best validation
    MRR@10 (or the last ones when no validation set is given).

    Validation re-ranks ``val_run``'s top ``val_depth`` for ``val_qids`` after every epoch (or
    every ``validate_every`` steps); training stops after ``patience`` validations without
    improvement. ``checkpoint``: where the best model is saved (atomically) whenever it improves.
    """
    cfg = config or TrainConfig()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = ranker.model
    device = next(model.parameters()).device
    opt = torch.optim.Adam(param_groups(model, cfg.lr_embed, cfg.lr_context, cfg.lr_other))
    docs = ranker.encode_docs(collection.texts.tolist())
    qenc = ranker.encode_queries(queries.texts.tolist())
    result = TrainResult()
    validate = _Validation(ranker, collection, queries, docs, cfg, result, val_run, val_qrels,
                           val_qids, checkpoint, progress)
    t_start = time.perf_counter()

    if validate.active:  # the untrained model is a candidate too
        validate()
    stop = False
    model.train()
    for _epoch in range(cfg.epochs):
        q, p, n = triples.epoch(rng)
        n_steps = (len(q) + cfg.batch_size - 1) // cfg.batch_size
        if cfg.max_steps_per_epoch:
            n_steps = min(n_steps, cfg.max_steps_per_epoch)
        for s in range(n_steps):
            sl = slice(s * cfg.batch_size, (s + 1) * cfg.batch_size)
            validate.losses.append(_hinge_step(model, opt, qenc, docs, q[sl], p[sl], n[sl],
                                               cfg.margin, device))
            result.steps += 1
            if cfg.validate_every and result.steps % cfg.validate_every == 0 and validate():
                stop, result.stopped = True, "early"
                break
            if cfg.max_seconds and time.perf_counter() - t_start > cfg.max_seconds:
                stop, result.stopped = True, "time"
                break
        if stop:
            break
        if not cfg.validate_every and validate():
            result.stopped = "early"
            break
    if validate.losses:
        validate()
    if validate.best_state is not None:
        model.load_state_dict(validate.best_state)
    elif checkpoint is not None:
        ranker.save(checkpoint)
    model.eval()
    result.seconds = time.perf_counter() - t_start
    if checkpoint is not None and Path(checkpoint).exists():
        ranker.meta.update({"train_steps": result.steps})
    return result


# ---- resumable training (issue 25) ----------------------------------------------------------
#
# ``fit`` is the first-class training loop: a step budget (``max_steps``), validation every
# ``eval_every`` steps on validation queries only (RR@10 and nDCG@10 from
# ``limelight.evaluation``), early stopping after ``patience`` validations without improvement,
# and a full training state written atomically every ``checkpoint_every`` steps (model,
# optimizer, step, data cursor, torch/numpy RNG states, config, fingerprints). ``resume=True``
# continues from that state bit-identically: the data order of epoch ``e`` is a pure function
# of ``(seed, e)``, so the cursor is just the step number.

STATE_FORMAT = "limelight-rerank-train/1"


@dataclass
class TripleSet:
    """Training triples over their own texts: ``positives[q]`` / ``negatives[q]`` are rows of
    ``doc_texts`` for query row ``q`` of ``query_texts``. Judged qrels, BM25 pseudo-labels and
    title→body pairs all become a ``TripleSet`` (see :mod:`limelight.rerank.weak`)."""

    query_texts: np.ndarray
    doc_texts: np.ndarray
    positives: dict[int, np.ndarray]
    negatives: dict[int, np.ndarray]
    name: str = "triples"
    negatives_per_positive: int = 1

    def __post_init__(self) -> None:
        self.query_texts = np.asarray(self.query_texts, dtype=object)
        self.doc_texts = np.asarray(self.doc_texts, dtype=object)
        self.positives = {int(q): np.asarray(v, dtype=np.int64) for q, v in self.positives.items()
                          if len(v) and len(self.negatives.get(q, ()))}
        if not self.positives:
            raise LimelightError(f"{self.name}: empty training set (no query has both a positive "
                                 "and a negative document)")

    @classmethod
    def from_qrels(cls, queries: Queries, qrels: Qrels, candidates: Run, collection: Collection,
                   qids: Sequence[str], depth: int = 100, threshold: int = 1,
                   name: str = "qrels") -> TripleSet:
        """Judged triples of the training queries ``qids`` only (:meth:`QrelsTriples.build`)."""
        if not len(qids):
            raise LimelightError("empty training set: no training query")
        qt = QrelsTriples.build(queries, qrels, candidates, collection, qids, depth, threshold)
        return cls(queries.texts, collection.texts, qt.positives, qt.negatives, name)

    @property
    def n_queries(self) -> int:
        return len(self.positives)

    @property
    def n_positives(self) -> int:
        return int(sum(len(v) for v in self.positives.values()))

    def fingerprint(self) -> str:
        """Content hash of the texts and the pairs (what a resumed training must see again)."""
        import hashlib

        h = hashlib.sha256()
        rows = sorted(self.positives)
        for q in rows:
            h.update(self.query_texts[q].encode("utf-8") + b"\x1f")
            h.update(self.positives[q].tobytes() + b"\x1e" + self.negatives[q].tobytes())
        h.update(str(len(self.doc_texts)).encode())
        for t in self.doc_texts[np.unique(np.concatenate([self.positives[q] for q in rows]
                                                            + [self.negatives[q] for q in rows]))]:
            h.update(t.encode("utf-8") + b"\x1f")
        return h.hexdigest()[:32]

    def epoch(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(query_row, positive_row, negative_row)`` of one epoch, shuffled by ``rng``."""
        return QrelsTriples(self.positives, self.negatives, self.negatives_per_positive).epoch(rng)


@dataclass
class Validation:
    """Validation queries (never test queries): their first-stage run is re-ranked to
    ``depth`` and evaluated with ``limelight.evaluation`` (RR@10, nDCG@10)."""

    collection: Collection
    queries: Queries
    run: Run
    qrels: Qrels
    qids: Sequence[str]
    depth: int = 100

    def __post_init__(self) -> None:
        self.qids = list(self.qids)
        if not self.qids:
            raise LimelightError("empty validation set")
        keep = np.isin(self.qrels.qids.decode(self.qrels.q), np.asarray(self.qids, dtype=object))
        self.qrels = Qrels.from_arrays(self.qrels.qids.decode(self.qrels.q[keep]),
                                       self.qrels.docids.decode(self.qrels.d[keep]),
                                       self.qrels.rel[keep], "validation")
        self.run = self.run.subset(self.qids).topk(self.depth)
        if len(self.run) == 0:
            raise LimelightError("the validation run has no candidates for the validation queries")

    def evaluate(self, ranker: NeuralRanker, stage: KernelReranker | None = None) -> dict[str, float]:
        """``{"RR@10": .., "nDCG@10": ..}`` of ``ranker`` re-ranking the validation run."""
        stage = stage or KernelReranker(ranker, self.collection, batch_size=256)
        res = Evaluator(self.qrels, "RR@10 nDCG@10").evaluate(stage.transform(self.queries, self.run), warn=False)
        return {"RR@10": res["RR@10"], "nDCG@10": res["nDCG@10"]}


@dataclass
class FitConfig:
    """Settings of :func:`fit`. Budgets are in optimizer steps; ``max_seconds`` is only a
    safety stop (it checkpoints and stops, resumable)."""

    max_steps: int = 1000
    batch_size: int = 32
    eval_every: int = 50
    checkpoint_every: int = 50
    patience: int = 5  # validations without improvement; 0 = never stop early
    metric: str = "nDCG@10"  # selection measure on the validation queries
    lr_embed: float = 1e-4
    lr_context: float = 1e-4
    lr_other: float = 1e-3
    margin: float = 1.0
    seed: int = 0
    threads: int | None = 1
    max_seconds: float | None = None
    throttle: float = 0.0  # seconds slept per step (tests of interruption only)

    # settings that may change between a training and its resumption
    RESUMABLE = ("max_steps", "max_seconds", "throttle", "threads", "patience")

    def check(self) -> None:
        for name in ("max_steps", "batch_size", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise LimelightError(f"{name.replace('_', '-')} must be ≥ 1, got {getattr(self, name)}")
        if self.patience < 0:
            raise LimelightError(f"patience must be ≥ 0, got {self.patience}")
        if self.metric not in ("RR@10", "nDCG@10"):
            raise LimelightError(f"unknown validation metric {self.metric!r} (RR@10 or nDCG@10)")

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class FitResult:
    """Outcome of :func:`fit`. ``history``: one record per validation (the JSONL log)."""

    steps: int = 0
    best_step: int = 0
    best: dict[str, float] = field(default_factory=dict)
    stopped: str = "steps"  # steps | early | time | interrupted
    seconds: float = 0.0
    history: list[dict] = field(default_factory=list)
    resumed_from: int | None = None


@dataclass
class TrainPaths:
    """Files of one training: ``out`` (best model, a ranker checkpoint) and beside it
    ``<stem>.state.pt`` (resumable state), ``<stem>.log.jsonl`` and ``<stem>.curve.png``."""

    out: Path

    @classmethod
    def of(cls, out: str | os.PathLike) -> TrainPaths:
        return cls(Path(out))

    def _side(self, suffix: str) -> Path:
        stem = self.out.name[:-3] if self.out.name.endswith(".pt") else self.out.name
        return self.out.with_name(stem + suffix)

    @property
    def state(self) -> Path:
        return self._side(".state.pt")

    @property
    def log(self) -> Path:
        return self._side(".log.jsonl")

    @property
    def curve(self) -> Path:
        return self._side(".curve.png")


def collection_fingerprint(collection: Collection) -> str:
    """A hash of a collection's document ids and texts."""
    import hashlib

    h = hashlib.sha256(collection.name.encode("utf-8") + b"\x1e")
    for d, t in zip(collection.ids.strings.tolist(), collection.texts.tolist(), strict=True):
        h.update(f"{d}\x1f{t}\x1e".encode())
    return h.hexdigest()[:32]


def load_state(path: str | os.PathLike) -> dict:
    """Read a training state; a corrupt or foreign file → one-line :class:`LimelightError`."""
    path = Path(path)
    if not path.is_file():
        raise LimelightError(f"{path}: no such training state")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a user error here
        raise LimelightError(f"{path}: corrupt or not a limelight training state ({type(e).__name__})") from None
    return check_format(blob, STATE_FORMAT, path, "limelight training state", error=LimelightError)


def _write_log(path: Path, history: list[dict]) -> None:
    import json

    from limelight._io import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in history), encoding="utf-8")


def plot_curve(history: list[dict], path: str | os.PathLike, title: str = "") -> Path | None:
    """Training curve PNG: training loss and validation RR@10 / nDCG@10 against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from limelight._io import atomic_path

    if not history:
        return None
    steps = [r["step"] for r in history]
    fig, ax = plt.subplots(figsize=(7, 4))
    loss = [(r["step"], r["loss"]) for r in history if r.get("loss") is not None]
    if loss:
        ax.plot(*zip(*loss, strict=True), color="tab:gray", label="training loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax2 = ax.twinx()
    for m, c in (("val_RR@10", "tab:blue"), ("val_nDCG@10", "tab:orange")):
        vals = [r.get(m) for r in history]
        if any(v is not None for v in vals):
            ax2.plot(steps, [np.nan if v is None else v for v in vals], color=c, marker=".", label=m)
    ax2.set_ylabel("validation")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="best", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    return path


class _StopFlag:
    """SIGINT (deferred as every long job defers it: ``progress.deferred_interrupt``; a second
    Ctrl-C stops at once) and SIGTERM set a flag checked between optimizer steps (never
    mid-update): ``signal``, the one that arrived."""

    def __init__(self) -> None:
        self._term: int | None = None
        self._old: dict[int, object] = {}
        self._defer = None

    @property
    def signal(self) -> int | None:
        import signal

        from limelight.progress import interrupt_requested

        return self._term if self._term is not None else (
            signal.SIGINT if interrupt_requested() else None)

    def __enter__(self) -> _StopFlag:
        import signal
        import threading

        from limelight.progress import deferred_interrupt

        self._defer = deferred_interrupt()
        self._defer.__enter__()
        if threading.current_thread() is threading.main_thread():
            self._old[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:  # noqa: ANN001
        self._term = signum

    def __exit__(self, *exc) -> None:
        import signal

        for s, h in self._old.items():
            signal.signal(s, h)
        self._defer.__exit__(*exc)


class _Fit:
    """One ``fit``: the ranker, its optimizer and data, and what the training state holds beside
    the weights (step and history in ``result``, best metric, patience count, wall seconds, the
    losses since the last validation)."""

    def __init__(self, ranker: NeuralRanker, data: TripleSet, config: FitConfig, paths: TrainPaths,
                 validation: Validation | None, fps: dict[str, str],
                 progress: Callable[[str], None] | None):
        self.ranker, self.data, self.config, self.paths = ranker, data, config, paths
        self.validation, self.fps, self.progress = validation, fps, progress
        self.model = ranker.model
        self.opt = torch.optim.Adam(param_groups(self.model, config.lr_embed, config.lr_context,
                                                 config.lr_other))
        self.result = FitResult()
        self.best_metric, self.bad, self.wall = float("-inf"), 0, 0.0
        self.losses: list[float] = []
        self.per_epoch = ((data.n_positives * data.negatives_per_positive + config.batch_size - 1)
                          // config.batch_size)
        self._epoch: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def resume(self) -> None:
        """Load the state file, after checking its fingerprints and settings against this fit."""
        paths, config, result = self.paths, self.config, self.result
        st = load_state(paths.state)
        for k, v in self.fps.items():
            if st["fingerprints"].get(k) != v:
                what = {"vocabulary": "another vocabulary", "collection": "another collection",
                        "data": "other training data", "model": "another model configuration",
                        "validation": "other validation queries"}.get(k, f"another {k}")
                raise LimelightError(f"{paths.state}: cannot resume, it was trained with {what} "
                                     f"({k} fingerprint differs)")
        old = dict(st["config"])
        for k in FitConfig.RESUMABLE:
            old.pop(k, None)
        new = {k: v for k, v in config.to_dict().items() if k not in FitConfig.RESUMABLE}
        if old != new:
            diff = sorted(k for k in new if old.get(k) != new[k])
            raise LimelightError(f"{paths.state}: cannot resume with other settings ({', '.join(diff)})")
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["optimizer"])
        torch.set_rng_state(st["torch_rng"])
        np.random.set_state(st["numpy_rng"])
        result.steps = result.resumed_from = int(st["step"])
        result.history = list(st["history"])
        result.best_step, result.best = int(st["best_step"]), dict(st["best"])
        self.best_metric, self.bad, self.wall = float(st["best_metric"]), int(st["bad"]), float(st["wall"])
        self.losses = list(st.get("losses", []))
        if self.progress:
            self.progress(f"resumed at step {result.steps} from {paths.state}")

    def prepare(self) -> None:
        """Encode the training texts, build the validation stage and start the clock."""
        self.device = next(self.model.parameters()).device
        self.docs = self.ranker.encode_docs(self.data.doc_texts.tolist())
        self.qenc = self.ranker.encode_queries(self.data.query_texts.tolist())
        self.stage = (KernelReranker(self.ranker, self.validation.collection, batch_size=256)
                      if self.validation else None)
        self.t0 = time.perf_counter()

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The triples of optimizer step ``step``: epoch ``e``'s order is a function of
        ``(seed, e)``, so the step number is the whole data cursor."""
        e, i = divmod(step, self.per_epoch)
        if e not in self._epoch:
            self._epoch.clear()
            self._epoch[e] = self.data.epoch(np.random.default_rng([self.config.seed, e]))
        sl = slice(i * self.config.batch_size, (i + 1) * self.config.batch_size)
        return tuple(a[sl] for a in self._epoch[e])  # type: ignore[return-value]

    def step(self) -> None:
        """One optimizer step on the next batch."""
        q, p, n = self.batch(self.result.steps)
        self.losses.append(_hinge_step(self.model, self.opt, self.qenc, self.docs, q, p, n,
                                       self.config.margin, self.device))
        self.result.steps += 1

    def elapsed(self) -> float:
        return self.wall + time.perf_counter() - self.t0

    def save_state(self) -> None:
        from limelight._io import atomic_path

        result, config = self.result, self.config
        blob = {"format": STATE_FORMAT, "step": result.steps, "epoch": divmod(result.steps, self.per_epoch),
                "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
                "optimizer": copy.deepcopy(self.opt.state_dict()), "torch_rng": torch.get_rng_state(),
                "numpy_rng": np.random.get_state(), "config": config.to_dict(),
                "fingerprints": self.fps, "history": result.history, "best_step": result.best_step,
                "best": result.best, "best_metric": self.best_metric, "bad": self.bad,
                "wall": self.elapsed(), "losses": list(self.losses),
                "finished": result.stopped == "early" or result.steps >= config.max_steps}
        with atomic_path(self.paths.state) as tmp:
            torch.save(blob, tmp)
        _write_log(self.paths.log, result.history)

    def validate(self, loss: float | None) -> bool:
        """Record one validation; True when patience is exhausted."""
        result, progress = self.result, self.progress
        rec: dict = {"step": result.steps, "loss": loss, "wall_s": round(self.elapsed(), 3)}
        if self.validation is None:
            result.history.append(rec)
            if progress and loss is not None:
                progress(f"step {result.steps}: loss {loss:.4f} (no validation)")
            return False
        vals = self.validation.evaluate(self.ranker, self.stage)
        self.model.train()
        rec.update({f"val_{k}": v for k, v in vals.items()})
        result.history.append(rec)
        if progress:
            progress(f"step {result.steps}: " + (f"loss {loss:.4f}, " if loss is not None else "untrained, ")
                     + f"val MRR@10 {vals['RR@10']:.4f}, nDCG@10 {vals['nDCG@10']:.4f}")
        if vals[self.config.metric] > self.best_metric:
            self.best_metric, self.bad = vals[self.config.metric], 0
            result.best_step, result.best = result.steps, vals
            self.ranker.meta.update({"best_step": result.steps, "best_val": vals,
                                     "best_val_mrr10": vals["RR@10"]})
            self.ranker.save(self.paths.out)
            return False
        self.bad += 1
        return bool(self.config.patience) and self.bad >= self.config.patience

    def validate_now(self) -> bool:
        """A validation on the losses since the previous one; True when patience is exhausted."""
        mean = float(np.mean(self.losses)) if self.losses else None
        self.losses.clear()
        return self.validate(mean)


def fit(ranker: NeuralRanker, data: TripleSet, config: FitConfig, out: str | os.PathLike,
        validation: Validation | None = None, resume: bool = False,
        fingerprints: dict[str, str] | None = None,
        progress: Callable[[str], None] | None = None) -> FitResult:
    """Train ``ranker`` on ``data`` for at most ``config.max_steps`` optimizer steps; resumable.

    Files (:class:`TrainPaths` of ``out``): ``out`` holds the best model on ``validation``
    (the last one without validation), ``<stem>.state.pt`` the full state every
    ``checkpoint_every`` steps and at every stop, ``<stem>.log.jsonl`` one record per
    validation (step, mean training loss since the previous one, val RR@10 / nDCG@10, wall
    seconds), ``<stem>.curve.png`` the curve. ``resume=True`` continues from the state file
    (starts afresh when there is none) after checking the config and the ``fingerprints``
    (vocabulary, collection, training data; a mismatch → :class:`LimelightError`). A
    SIGINT/SIGTERM stops after the current step with a checkpoint; a kill loses only the steps
    since the last checkpoint. At the end ``ranker`` holds the weights written to ``out``.
    """
    import json

    config.check()
    paths = TrainPaths.of(out)
    fps = {"vocabulary": ranker.vocab.fingerprint, "data": data.fingerprint(),
           "model": json.dumps(config_dict_of(ranker), sort_keys=True)}
    fps.update(fingerprints or {})
    if validation is not None:
        fps["validation"] = ",".join(sorted(validation.qids)) + f"@{validation.depth}"
    if config.threads:
        torch.set_num_threads(config.threads)
    run = _Fit(ranker, data, config, paths, validation, fps, progress)
    result = run.result
    if paths.state.exists() and not resume:
        raise LimelightError(f"{paths.state} exists: pass --resume to continue it, or choose another --out")
    if resume and paths.state.exists():
        run.resume()
    else:
        torch.manual_seed(config.seed)
        np.random.seed(config.seed % 2**32)
    run.prepare()

    ranker.model.train()
    with _StopFlag() as flag:
        if result.resumed_from is None:
            if run.validate(None):  # the untrained (or initial) model is a candidate too
                result.stopped = "early"
        if result.stopped != "early" and config.patience and run.bad >= config.patience:
            result.stopped = "early"  # resumed from a state that had already stopped early
        while result.stopped != "early" and result.steps < config.max_steps:
            run.step()
            if config.throttle:
                time.sleep(config.throttle)
            if result.steps % config.eval_every == 0 and run.validate_now():
                result.stopped = "early"
            if result.steps % config.checkpoint_every == 0 or result.stopped == "early":
                run.save_state()
            if flag.signal is not None:
                result.stopped = "interrupted"
                break
            if config.max_seconds and run.elapsed() > config.max_seconds:
                result.stopped = "time"
                break
        run.save_state()
    if result.stopped in ("interrupted", "time"):
        if progress:
            progress(f"stopped ({result.stopped}) at step {result.steps}; state saved to {paths.state}")
    elif validation is None:
        ranker.meta.update({"best_step": result.steps})
        ranker.save(paths.out)
    result.seconds = run.elapsed()
    plot_curve(result.history, paths.curve, f"{ranker.name} ({data.name}), best step {result.best_step}")
    if paths.out.exists() and result.stopped not in ("interrupted", "time"):
        ranker.model.load_state_dict(NeuralRanker.load(paths.out).model.state_dict())
    ranker.model.eval()
    return result


def config_dict_of(ranker: NeuralRanker) -> dict:
    """The model configuration of ``ranker`` as a plain dict."""
    from limelight.rerank.models import config_to_dict

    return config_to_dict(ranker.config)


def fold_split(qids: Sequence[str], folds: int = 5, fold: int | None = 0, val_share: float = 0.2,
               seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """``(train, validation, test)`` query ids: the folds of ``experiments/rerank/cv.py``
    (a seeded permutation dealt round-robin); the test fold is ``fold`` (none when
    ``fold is None`` or ``folds == 1``) and ``val_share`` of the rest, seeded, validates."""
    qids = list(qids)
    if folds < 1 or (fold is not None and folds > 1 and not 0 <= fold < folds):
        raise LimelightError(f"--fold must be in [0, {folds}), got {fold}")
    if not 0 <= val_share < 1:
        raise LimelightError("--val-share must be in [0, 1)")
    perm = np.random.default_rng(seed).permutation(len(qids))
    parts = [[qids[i] for i in perm[f::folds]] for f in range(folds)]
    test = parts[fold] if (fold is not None and folds > 1) else []
    rest = [q for f, part in enumerate(parts) if not (folds > 1 and f == fold) for q in part]
    order = np.random.default_rng([seed, 1]).permutation(len(rest))
    rest = [rest[i] for i in order]
    n_val = int(len(rest) * val_share)
    return rest[n_val:], rest[:n_val], test


def held_out_queries(meta: dict, qids: Sequence[str], collection: str | None = None) -> list[str]:
    """The query ids of ``qids`` a checkpoint neither trained nor validated on: those not in its
    ``meta`` ``train_queries`` / ``val_queries`` (as ``limelight rerank train`` and the audit's
    rerank stage record them), in the order of ``qids``. A checkpoint trained on another
    collection (``meta["collection"]`` is not ``collection``) or weakly supervised (no such
    queries) has seen none of them."""
    if collection is not None and meta.get("collection") not in (None, collection):
        return list(qids)
    seen = set(meta.get("train_queries") or []) | set(meta.get("val_queries") or [])
    return [q for q in qids if q not in seen]
