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

from limelight.data.collection import Collection
from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.rerank.models import param_groups
from limelight.rerank.ranker import KernelReranker, NeuralRanker


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
    """Mean reciprocal rank of the first relevant document within the top 10, over ``qids``
    (queries without a relevant document are skipped; absent ones score 0)."""
    rel = {}
    m = qrels.rel >= threshold
    for q, d in zip(qrels.qids.decode(qrels.q[m]).tolist(), qrels.docids.decode(qrels.d[m]).tolist(),
                    strict=True):
        rel.setdefault(q, set()).add(d)
    vals = []
    docs = run.docids.decode(run.d)
    for q in qids:
        if q not in rel:
            continue
        rr = 0.0
        i = run.qids.get(q)
        if i >= 0:
            s = int(run.offsets[i])
            for r, d in enumerate(docs[s:min(s + 10, int(run.offsets[i + 1]))].tolist(), 1):
                if d in rel[q]:
                    rr = 1.0 / r
                    break
        vals.append(rr)
    return float(np.mean(vals)) if vals else 0.0


def _subset_run(run: Run, qids: Sequence[str]) -> Run:
    keep_q = np.zeros(run.n_queries, dtype=bool)
    codes = run.qids.encode(list(qids), missing=-1)
    keep_q[codes[codes >= 0]] = True
    keep = keep_q[run.q]
    return Run.from_codes(run.qids, run.docids, run.q[keep], run.d[keep], run.score[keep], run.name, sort=False)


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
    validating = val_run is not None and val_qrels is not None
    if validating:
        val_qids = list(val_qids) if val_qids is not None else list(val_run.qids)
        vrun = _subset_run(val_run, val_qids).topk(cfg.val_depth)
        if len(vrun) == 0:
            raise LimelightError("the validation run has no candidates for the validation queries")
        stage = KernelReranker(ranker, collection, batch_size=256)
        stage._docs = docs
    result = TrainResult()
    best_state = None
    bad = 0
    t_start = time.perf_counter()
    losses: list[float] = []

    def validate() -> bool:
        nonlocal best_state, bad
        losses_seen = bool(losses)
        loss = float(np.mean(losses)) if losses else float("nan")
        losses.clear()
        if not validating:
            result.history.append((result.steps, loss, float("nan")))
            return False
        mrr = mrr_at_10(stage.transform(queries, vrun), val_qrels, val_qids)
        model.train()
        result.history.append((result.steps, loss, mrr))
        if progress:  # no loss before the first training step (the untrained model)
            progress(f"step {result.steps}: " + (f"loss {loss:.4f}, " if losses_seen else "untrained, ")
                     + f"val MRR@10 {mrr:.4f}")
        if mrr > result.best_mrr:
            result.best_mrr, result.best_step, bad = mrr, result.steps, 0
            best_state = copy.deepcopy(model.state_dict())
            if checkpoint is not None:
                ranker.meta.update({"best_val_mrr10": mrr, "best_step": result.steps})
                ranker.save(checkpoint)
            return False
        bad += 1
        return bad >= cfg.patience

    if validating:  # the untrained model is a candidate too
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
            qi = torch.from_numpy(qenc.take(q[sl])).to(device)
            pi = torch.from_numpy(docs.take(p[sl])).to(device)
            ni = torch.from_numpy(docs.take(n[sl])).to(device)
            qr, qm = model.encode(qi)
            pr, pm = model.encode(pi)
            nr, nm = model.encode(ni)
            sp = model.score_encoded(qr, qm, pr, pm)
            sn = model.score_encoded(qr, qm, nr, nm)
            loss = torch.clamp(cfg.margin - sp + sn, min=0).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
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
    if losses:
        validate()
    if best_state is not None:
        model.load_state_dict(best_state)
    elif checkpoint is not None:
        ranker.save(checkpoint)
    model.eval()
    result.seconds = time.perf_counter() - t_start
    if checkpoint is not None and Path(checkpoint).exists():
        ranker.meta.update({"train_steps": result.steps})
    return result
