"""Metric learning for EQI (Li et al. §4): Append and Residual heads over frozen embeddings.

The base encoder (all-MiniLM-L6-v2, 384 dimensions, frozen) gives x; a head transforms it:

- ``append``:   y = (x, FF(x)); FF has four linear layers 384 → 64 → 64 → 64 → 32 (the paper's
  hidden 64 / output 32 kept as is), so y has 416 dimensions (the paper: 768 + 32 = 800); its
  last layer starts at 1/100 of PyTorch's default scale, so that the appended part starts small
  next to a unit-norm x (at the default scale it outweighs x in every dot product);
- ``residual``: y = x + FF(x); FF is 384 → 192 → 384 (the paper's hidden size is half the
  embedding size: 384 for 768), its last layer initialised to zero so training starts from
  dense-reverse;
- ``residual-unit``: the residual head with y re-normalised to unit length, y = (x + FF(x)) /
  ‖x + FF(x)‖ (ours, not the paper's: the fix of the collapse described below — scores are then
  cosines, so the pairwise loss can no longer fall by growing a residual shared by all documents).

Each hidden layer is Linear → ReLU → Dropout(0.1) → LayerNorm. Queries and documents get their own
head (h_Q, h_D); u(d, q) = h_Q(q) · h_D(d). Training data follow Algorithm 1 (``training_data``):
a random query sample Q_train is "retrieved" through the exposure store, which is the retrieval
cache C (their top-n_{q→d}); training documents are drawn from the documents they retrieve
(minus held-out ones); each training document's n_{d→q} nearest queries of Q_train in the base
space, ψ_d, are looked up in C (ρ = ∞ when absent), and Ψ_train[d] is ψ_d with those ranks:
positives are the exposing queries in ψ_d, negatives the others (``positives="all"`` takes every
exposing query of d in C as a positive instead, an earlier reading of ours). Triples ⟨d, q+, q−⟩
are Case 1 (ρ+ < ρ− < n) with probability α = 0.5 and Case 2 (ρ+ < n ≤ ρ−) otherwise; loss
RankNet log(1 + e^{−(u+ − u−)}); Adam (β 0.9/0.999, ε 1e-8).

Learning rate and stopping. The paper uses lr 1e-4 on ANCE's unnormalised 768-d embeddings.
MiniLM's are unit-norm, and the heads' LayerNorm-ed hidden layers are not, so the same step moves
FF(x) far more relative to x: on npl × the query log, validation RELQ(0.5,0.9) of Residual more
than doubles within a few batches and then collapses (below 0.01 after ~20 batches at 1e-4, ~100
at 1e-5, ~700 at 1e-6) while the training loss keeps falling. Cause (docs/results-eqi.md,
experiments/eqi/collapse.py): the document residual FF(d), read from a LayerNorm-ed hidden layer,
grows a component shared by all documents that the ψ_d-only pairs reward; once ‖FF(d)‖ ≳ 0.5‖d‖
every document retrieves the same hub queries from outside ψ_d (training documents collapse
exactly like held-out ones: not overfitting). We default to lr 1e-5 and, given
``validation_docs``, keep the heads that score best on them (early stopping). The paper trains
1K × 100 batches of 1000 on a GPU; on CPU ``steps`` bounds the batches (see ``train_eqi``).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from limelight._io import atomic_dir, atomic_path, check_format, read_versioned
from limelight.data.queries import Queries
from limelight.errors import IndexMismatchError, LimelightError
from limelight.exposure.eqi.base import (
    check_k,
    check_store,
    check_texts,
    faiss_ip_index,
    faiss_search,
    store_fingerprint,
)

METHODS = ("append", "residual", "residual-unit")
APPEND_INIT_SCALE = 0.01
MODEL_FORMAT = "limelight-eqi-model/1"


# ---- training data (Algorithm 1) -------------------------------------------------------------
@dataclass
class TrainingData:
    """Ψ_train as CSR arrays per training document: positives ``(pos_q, pos_rho)`` (exposing
    queries, 0-based ρ < n) and negatives ``neg_q`` (nearest queries with ρ = ∞)."""

    docs: np.ndarray
    pos_ptr: np.ndarray
    pos_q: np.ndarray
    pos_rho: np.ndarray
    neg_ptr: np.ndarray
    neg_q: np.ndarray
    train_queries: np.ndarray

    def summary(self) -> dict:
        return {"docs": len(self.docs), "train_queries": len(self.train_queries),
                "positives": len(self.pos_q), "negatives": len(self.neg_q)}


def training_data(store, query_emb: np.ndarray, doc_emb: np.ndarray, n_queries: int,
                  n_docs: int, exclude_docs: np.ndarray | None = None, n_dq: int = 100,
                  seed: int = 0, train_queries: np.ndarray | None = None,
                  positives: str = "nearest") -> TrainingData:
    """Algorithm 1 over an exposure store. ``query_emb`` (|Q|, dim) and ``doc_emb`` (|D|, dim)
    are the frozen base embeddings; ``n_queries``/``n_docs`` size Q_train and D_train;
    ``exclude_docs`` (e.g. test documents) never enter D_train."""
    if positives not in ("nearest", "all"):
        raise LimelightError(f"positives must be 'nearest' or 'all', got {positives!r}")
    rng = np.random.default_rng(seed)
    nq = len(store.queries)
    if train_queries is None:
        train_queries = np.sort(rng.choice(nq, size=min(int(n_queries), nq), replace=False))
    train_queries = np.asarray(train_queries, dtype=np.int64)
    ranks = store.ranks()  # docs × queries, 1-based (the retrieval cache C, read for Q_train)
    cache = ranks[:, train_queries].tocsr()
    cand = np.flatnonzero(np.diff(cache.indptr) > 0)  # D_candidate
    if exclude_docs is not None and len(exclude_docs):
        cand = np.setdiff1d(cand, np.asarray(exclude_docs))
    if len(cand) == 0:
        raise LimelightError("no candidate training document (no query of Q_train exposes one)")
    docs = np.sort(rng.choice(cand, size=min(int(n_docs), len(cand)), replace=False))
    sub = cache[docs]
    pos_ptr = sub.indptr.astype(np.int64)
    pos_q = train_queries[sub.indices].astype(np.int32)
    pos_rho = (sub.data - 1).astype(np.int32)
    # nearest queries of Q_train around each training document in the base space (line 12)
    index = faiss_ip_index(query_emb[train_queries])
    nn, _ = faiss_search(index, doc_emb[docs], n_dq)
    nn_q = np.where(nn >= 0, train_queries[np.maximum(nn, 0)], -1)
    rows = np.repeat(np.arange(len(docs)), nn.shape[1])
    flat = nn_q.ravel()
    exposed = np.zeros(len(flat), dtype=bool)
    ok = flat >= 0
    exposed[ok] = np.asarray(ranks[docs[rows[ok]], flat[ok]]).ravel() > 0
    neg = ok & ~exposed
    neg_ptr = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[neg], minlength=len(docs)), out=neg_ptr[1:])
    if positives == "nearest":  # Algorithm 1 as written: Ψ_train[d] is ψ_d only
        near = ok & exposed
        pos_ptr = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows[near], minlength=len(docs)), out=pos_ptr[1:])
        pos_q = flat[near].astype(np.int32)
        pos_rho = (np.asarray(ranks[docs[rows[near]], flat[near]]).ravel() - 1).astype(np.int32)
    return TrainingData(docs, pos_ptr, pos_q, pos_rho, neg_ptr, flat[neg].astype(np.int32),
                        train_queries)


def sample_triples(td: TrainingData, batch: int, alpha: float, rng: np.random.Generator,
                   random_negatives: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One batch of ⟨d, q+, q−⟩ (document rows of ``td``, query codes): Case 1 with
    probability ``alpha``, Case 2 otherwise (vectorized; pairs with tied ρ are redrawn)."""
    npos = np.diff(td.pos_ptr)
    nneg = np.diff(td.neg_ptr)
    d1 = np.flatnonzero(npos >= 2)
    d2 = np.flatnonzero((npos >= 1) & (nneg >= 1))
    n1 = int(rng.binomial(batch, alpha)) if len(d1) else 0
    if not len(d2):
        n1 = batch
    n2 = batch - n1
    out_d, out_p, out_n = [], [], []
    if n1:
        need, tries = n1, 0
        while need > 0:
            d = d1[rng.integers(0, len(d1), size=2 * need)]
            a = td.pos_ptr[d] + (rng.random(len(d)) * npos[d]).astype(np.int64)
            b = td.pos_ptr[d] + (rng.random(len(d)) * npos[d]).astype(np.int64)
            ra, rb = td.pos_rho[a], td.pos_rho[b]
            keep = np.flatnonzero(ra != rb)[:need]
            better = ra[keep] < rb[keep]
            p = np.where(better, a[keep], b[keep])
            q = np.where(better, b[keep], a[keep])
            out_d.append(d[keep])
            out_p.append(td.pos_q[p])
            out_n.append(td.pos_q[q])
            need -= len(keep)
            tries += 1
            if tries > 50 and need > 0:
                raise LimelightError("Case 1 needs documents with two exposing queries of different ranks")
    if n2:
        d = d2[rng.integers(0, len(d2), size=n2)]
        a = td.pos_ptr[d] + (rng.random(n2) * npos[d]).astype(np.int64)
        b = td.neg_ptr[d] + (rng.random(n2) * nneg[d]).astype(np.int64)
        neg = td.neg_q[b]
        if random_negatives > 0:  # a share of Case 2 negatives drawn from all of Q_train
            r = rng.random(n2) < random_negatives
            cand = td.train_queries[rng.integers(0, len(td.train_queries), size=int(r.sum()))]
            neg = neg.copy()
            neg[r] = cand  # not checked against d's exposure: a random query rarely exposes d
        out_d.append(d)
        out_p.append(td.pos_q[a])
        out_n.append(neg)
    return np.concatenate(out_d), np.concatenate(out_p), np.concatenate(out_n)


# ---- heads ---------------------------------------------------------------------------------------
def make_head(method: str, dim: int, dropout: float):
    """The head a learned EQI model puts on one side's ``dim``-d vectors (``METHODS``: append,
    residual, residual-unit), a torch module; ``experiments/eqi/collapse.py`` builds its own."""
    import torch
    from torch import nn

    def hidden(i: int, o: int) -> list:
        return [nn.Linear(i, o), nn.ReLU(), nn.Dropout(dropout), nn.LayerNorm(o)]

    if method == "append":
        last = nn.Linear(64, 32)
        with torch.no_grad():  # the appended part starts small next to a unit-norm x (see above)
            last.weight.mul_(APPEND_INIT_SCALE)
            last.bias.zero_()
        ff = nn.Sequential(*hidden(dim, 64), *hidden(64, 64), *hidden(64, 64), last)

        class Append(nn.Module):
            def __init__(self):
                super().__init__()
                self.ff = ff

            def forward(self, x):
                return torch.cat([x, self.ff(x)], dim=-1)

        return Append()
    if method in ("residual", "residual-unit"):
        unit = method == "residual-unit"
        last = nn.Linear(dim // 2, dim)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        ff = nn.Sequential(*hidden(dim, dim // 2), last)

        class Residual(nn.Module):
            def __init__(self):
                super().__init__()
                self.ff = ff

            def forward(self, x):
                y = x + self.ff(x)
                return torch.nn.functional.normalize(y, dim=-1) if unit else y

        return Residual()
    raise LimelightError(f"unknown EQI model {method!r} ({', '.join(METHODS)})")


class EQIModel:
    """A trained Append/Residual EQI model: heads h_Q, h_D over frozen base embeddings.

    ``index_queries(query_emb)`` embeds the query log through h_Q into a FAISS index (done by
    ``train_eqi`` and ``load`` when given embeddings); ``search`` returns the top-k queries of
    documents (texts through ``encoder``, or base ``embeddings``).
    """

    def __init__(self, method: str, dim: int, meta: dict, dropout: float = 0.1):
        self.method = method
        self.dim = dim
        self.meta = meta
        self.name = method
        self.h_q = make_head(method, dim, dropout)
        self.h_d = make_head(method, dim, dropout)
        self.queries: Queries | None = None
        self.encoder = None
        self._index = None

    def transform(self, emb: np.ndarray, side: str, batch: int = 65536) -> np.ndarray:
        """h_Q (``side='q'``) or h_D (``'d'``) of base embeddings, in eval mode (float32)."""
        import torch

        head = self.h_q if side == "q" else self.h_d
        emb = np.asarray(emb, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[1] != self.dim:
            raise IndexMismatchError(f"embeddings have shape {emb.shape}; the {self.method} model "
                                     f"expects {self.dim} dimensions")
        head.eval()
        out = []
        with torch.no_grad():
            for s in range(0, len(emb), batch):
                out.append(head(torch.from_numpy(emb[s:s + batch])).numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def index_queries(self, queries: Queries, query_emb: np.ndarray, encoder=None) -> EQIModel:
        """Index the query log (possibly larger than at training: no retraining needed)."""
        if len(query_emb) != len(queries):
            raise LimelightError(f"{len(query_emb)} query embeddings for {len(queries)} queries")
        self.queries = queries
        self.encoder = encoder or self.encoder
        self._index = faiss_ip_index(self.transform(query_emb, "q"))
        return self

    def search(self, texts: Sequence[str] | None = None, embeddings: np.ndarray | None = None,
               k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` queries: ``(codes (m, k) int32, scores float32)``."""
        if self._index is None:
            raise LimelightError("the EQI model has no query index (call index_queries)")
        if embeddings is None:
            if texts is None or self.encoder is None:
                raise LimelightError(f"{self.method}: give document embeddings, or texts and an encoder")
            embeddings = self.encoder.encode(check_texts(texts))
        return faiss_search(self._index, self.transform(embeddings, "d"), check_k(k))

    def check_store(self, store) -> None:
        """``IndexMismatchError`` when ``store`` is not the one this model was trained on."""
        check_store(store, self.meta.get("store", {}), f"the {self.method} model")

    # -- persistence --
    def save(self, path: str | os.PathLike) -> Path:
        """Write ``model.json`` and ``heads.pt`` into directory ``path`` atomically."""
        import torch

        path = Path(path)
        with atomic_dir(path, "EQI model") as tmp:
            torch.save({"h_q": self.h_q.state_dict(), "h_d": self.h_d.state_dict()}, tmp / "heads.pt")
            (tmp / "model.json").write_text(json.dumps(
                {"format": MODEL_FORMAT, "method": self.method, "dim": self.dim, **self.meta}, indent=1))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> EQIModel:
        """Read a model written by ``save`` (index the queries before searching)."""
        import torch

        path = Path(path)
        meta = dict(read_versioned(path / "model.json", MODEL_FORMAT, "EQI model",
                                   rebuild="train one with `limelight eqi train`"))
        meta.pop("format")
        method, dim = meta.pop("method"), int(meta.pop("dim"))
        model = cls(method, dim, meta)
        try:
            state = torch.load(path / "heads.pt", map_location="cpu", weights_only=True)
            model.h_q.load_state_dict(state["h_q"])
            model.h_d.load_state_dict(state["h_d"])
        except (OSError, RuntimeError, KeyError) as e:
            raise IndexMismatchError(f"{path / 'heads.pt'}: cannot load ({str(e).splitlines()[0]})") from None
        return model


def validation_docs(store, n: int, exclude: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """``n`` store documents with an exposing query, none of ``exclude`` (seeded), for early
    stopping (``train_eqi(validation_docs=...)`` keeps them out of training)."""
    cand = np.flatnonzero(store.n_exposing() > 0)
    if exclude is not None and len(exclude):
        cand = np.setdiff1d(cand, np.asarray(exclude))
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(cand, size=min(int(n), len(cand)), replace=False))


class _Validation:
    """Early stopping on held-out store documents: the mean RELQ of the model's lists."""

    def __init__(self, model: EQIModel, store, query_emb: np.ndarray, doc_emb: np.ndarray,
                 docs: np.ndarray, measure: str):
        from limelight.exposure.relq import parse_relq

        self.model, self.query_emb, self.measure = model, query_emb, parse_relq(measure)
        self.docs = np.asarray(docs)
        self.doc_emb = np.asarray(doc_emb[self.docs], dtype=np.float32)
        self.truth = store.ranks()[self.docs]
        self.curve: list[tuple[int, float]] = []
        self.best, self.best_step, self.best_state, self.since_best = -np.inf, 0, None, 0

    def check(self, step: int) -> float:
        from limelight.exposure.relq import relq_many

        index = faiss_ip_index(self.model.transform(self.query_emb, "q"))
        codes, _ = faiss_search(index, self.model.transform(self.doc_emb, "d"), self.measure.n_dq)
        v = float(np.nanmean(relq_many(codes, self.truth, self.measure)[str(self.measure)]))
        self.curve.append((step, round(v, 5)))
        if v > self.best:
            self.best, self.best_step, self.since_best = v, step, 0
            self.best_state = (copy.deepcopy(self.model.h_q.state_dict()),
                               copy.deepcopy(self.model.h_d.state_dict()))
        else:
            self.since_best += 1
        return v

    def restore_best(self) -> dict:
        self.model.h_q.load_state_dict(self.best_state[0])
        self.model.h_d.load_state_dict(self.best_state[1])
        return {"docs": int(len(self.docs)), "measure": str(self.measure), "best_step": self.best_step,
                "best": round(self.best, 5), "curve": self.curve}


CHECKPOINT_FORMAT = "limelight-eqi-checkpoint/1"


def _run_config(method: str, meta: dict, random_negatives: float, eval_every: int, measure: str,
                validation: np.ndarray | None) -> dict:
    """What a checkpoint must agree on to be resumed (everything that changes the trajectory)."""
    keys = ("store", "alpha", "lr", "dropout", "batch_size", "seed", "n_dq", "training")
    return {"method": method, **{k: meta[k] for k in keys}, "random_negatives": random_negatives,
            "eval_every": eval_every, "measure": measure,
            "validation_docs": None if validation is None else [int(x) for x in validation]}


def _save_checkpoint(path: Path, model: EQIModel, opt, rng: np.random.Generator, step: int,
                     losses: list[float], val: _Validation | None, config: dict) -> None:
    """Model, optimizer, both RNGs, the sampler's position (``step``), the loss history and the
    early-stopping state, written atomically to ``path``."""
    import torch

    state = {"format": CHECKPOINT_FORMAT, "config": json.dumps(config, sort_keys=True), "step": step,
             "h_q": model.h_q.state_dict(), "h_d": model.h_d.state_dict(), "opt": opt.state_dict(),
             "torch_rng": torch.get_rng_state(), "np_rng": json.dumps(rng.bit_generator.state),
             "losses": torch.tensor(losses, dtype=torch.float64)}
    if val is not None:
        state["val"] = {"curve": json.dumps(val.curve), "best": float(val.best), "best_step": val.best_step,
                        "since_best": val.since_best, "best_state": val.best_state}
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _load_checkpoint(path: Path, model: EQIModel, opt, rng: np.random.Generator,
                     val: _Validation | None, config: dict) -> tuple[int, list[float]]:
    """Restore what ``_save_checkpoint`` wrote; ``IndexMismatchError`` for another run's."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as e:
        raise IndexMismatchError(f"{path}: cannot load the checkpoint ({str(e).splitlines()[0]})") from None
    check_format(state, CHECKPOINT_FORMAT, path, "EQI training checkpoint")
    if json.loads(state["config"]) != json.loads(json.dumps(config, sort_keys=True)):
        raise IndexMismatchError(f"{path}: the checkpoint is of another training run (configuration "
                                 "differs: store, data, seed or hyperparameters); use another path")
    model.h_q.load_state_dict(state["h_q"])
    model.h_d.load_state_dict(state["h_d"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["torch_rng"])
    rng.bit_generator.state = json.loads(state["np_rng"])
    if val is not None:
        v = state["val"]
        val.curve = [tuple(x) for x in json.loads(v["curve"])]
        val.best, val.best_step, val.since_best = v["best"], int(v["best_step"]), int(v["since_best"])
        val.best_state = v["best_state"]
    return int(state["step"]), state["losses"].tolist()


def train_eqi(method: str, store, query_emb: np.ndarray, doc_emb: np.ndarray, *,
              n_queries: int = 50_000, n_docs: int = 20_000, exclude_docs: np.ndarray | None = None,
              steps: int = 2000, batch_size: int = 1000, alpha: float = 0.5, lr: float = 1e-5,
              dropout: float = 0.1, n_dq: int = 100, seed: int = 0, encoder=None,
              data: TrainingData | None = None, random_negatives: float = 0.0,
              validation_docs: np.ndarray | None = None, eval_every: int = 50,
              patience: int = 0, measure: str = "RELQ(0.5,0.9)",
              progress: Callable[[int, int, float], None] | None = None,
              checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 0,
              resume: bool = False, budget: int | None = None,
              log_path: str | os.PathLike | None = None) -> EQIModel:
    """Train an Append or Residual model on ``store`` (the paper's §4; see the module docstring).

    ``query_emb``/``doc_emb``: frozen base embeddings of the store's queries and documents.
    ``steps`` batches of ``batch_size`` triples (the paper: 100,000 batches of 1000 on a GPU).
    ``random_negatives``: the share of Case 2 negatives drawn at random from Q_train instead of ψ_d
    (0 in the paper). With ``validation_docs`` (store documents, kept out of D_train), the mean
    ``measure`` over them is computed before training and every
    ``eval_every`` steps, and the best heads are kept (early stopping; ``patience`` > 0 stops
    after that many checks without improvement); ``meta["validation"]`` records the curve.

    Resumable runs: with ``checkpoint`` (a file), the heads, the optimizer, both RNGs, the step
    reached (the sampler's position), the loss history and the early-stopping state are written
    atomically every ``checkpoint_every`` steps and when the call stops; ``resume=True`` continues
    from it when it exists (a checkpoint of another configuration is refused), so that a run cut
    into pieces gives the same weights as an uninterrupted one. ``budget`` bounds the batches this
    call trains (a step budget): ``meta["finished"]`` is False when it stopped on the budget.
    ``log_path``: a JSONL log, one line per step (loss) and per validation check (rewritten up to
    the checkpoint's step on resume).
    The returned model has the store's queries indexed and records the store's fingerprint.

    Long because this docstring documents every option of a resumable run; the code (checks,
    held-out documents and the step are functions of their own) is under 70 lines."""
    import torch

    _check_training_inputs(method, alpha, budget, store, query_emb, doc_emb)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    validation_docs, exclude_docs = _held_out(validation_docs, exclude_docs, data)
    if data is None:
        data = training_data(store, query_emb, doc_emb, n_queries, n_docs, exclude_docs, n_dq, seed)
    dim = int(query_emb.shape[1])
    meta = {"store": store_fingerprint(store), "alpha": alpha, "lr": lr, "dropout": dropout,
            "steps": steps, "batch_size": batch_size, "seed": seed, "n_dq": n_dq,
            "training": data.summary(),
            "encoder": encoder.identity() if encoder is not None else None}
    model = EQIModel(method, dim, meta, dropout)
    qe = torch.from_numpy(np.ascontiguousarray(query_emb, dtype=np.float32))
    de = torch.from_numpy(np.ascontiguousarray(doc_emb, dtype=np.float32))
    params = list(model.h_q.parameters()) + list(model.h_d.parameters())
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    t0 = time.perf_counter()
    losses: list[float] = []
    val = _Validation(model, store, query_emb, doc_emb, validation_docs, measure) \
        if validation_docs is not None else None
    config = _run_config(method, meta, random_negatives, eval_every, measure, validation_docs)
    ckpt = Path(checkpoint) if checkpoint is not None else None
    start = 0
    if resume and ckpt is not None and ckpt.is_file():
        start, losses = _load_checkpoint(ckpt, model, opt, rng, val, config)
    log = _TrainLog(log_path, start)
    if val is not None and start == 0:
        log.write({"step": 0, "validation": val.check(0)})
    end = steps if budget is None else min(steps, start + budget)
    stopped = val is not None and bool(patience) and val.since_best >= patience
    model.h_q.train()
    model.h_d.train()
    step = start
    while step < end and not stopped:
        losses.append(_train_step(model, opt, qe, de, data, batch_size, alpha, rng, random_negatives))
        step += 1
        rec: dict = {"step": step, "loss": round(losses[-1], 6)}
        if progress and (step % 100 == 1 or step == steps):
            progress(step, steps, float(np.mean(losses[-100:])))
        if val is not None and (step % eval_every == 0 or step == steps):
            rec["validation"] = val.check(step)
            model.h_q.train()
            model.h_d.train()
            stopped = bool(patience) and val.since_best >= patience
        log.write(rec)
        if ckpt is not None and checkpoint_every and step % checkpoint_every == 0 and step < end:
            _save_checkpoint(ckpt, model, opt, rng, step, losses, val, config)
    if ckpt is not None:
        _save_checkpoint(ckpt, model, opt, rng, step, losses, val, config)
    log.close()
    model.meta.update({"step": step, "finished": step >= steps or stopped})
    if val is not None:
        model.meta["validation"] = val.restore_best()
    model.meta.update({"train_seconds": round(time.perf_counter() - t0, 2),
                       "loss_first_100": float(np.mean(losses[:100])) if losses else None,
                       "loss_last_100": float(np.mean(losses[-100:])) if losses else None})
    model.index_queries(store.queries, query_emb, encoder)
    return model


def _check_training_inputs(method: str, alpha: float, budget: int | None, store,
                           query_emb: np.ndarray, doc_emb: np.ndarray) -> None:
    if method not in METHODS:
        raise LimelightError(f"unknown EQI model {method!r} ({', '.join(METHODS)})")
    if not 0.0 <= alpha <= 1.0:
        raise LimelightError(f"alpha must be in [0, 1], got {alpha}")
    if budget is not None and budget < 0:
        raise LimelightError(f"budget must be >= 0, got {budget}")
    if len(query_emb) != len(store.queries) or len(doc_emb) != len(store.doc_ids):
        raise IndexMismatchError(f"embeddings ({len(query_emb)} queries, {len(doc_emb)} documents) "
                                 f"do not match the store ({len(store.queries)}, {len(store.doc_ids)})")


def _held_out(validation_docs: np.ndarray | None, exclude_docs: np.ndarray | None,
              data: TrainingData | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(validation documents or None, documents to keep out of D_train)``: the validation
    documents are never trained on (given training data must not hold them)."""
    if validation_docs is None or not len(validation_docs):
        return None, exclude_docs
    validation_docs = np.asarray(validation_docs)
    exclude_docs = validation_docs if exclude_docs is None else np.union1d(exclude_docs, validation_docs)
    if data is not None and np.isin(data.docs, validation_docs).any():
        raise LimelightError("the training data holds validation documents; leave them out of D_train")
    return validation_docs, exclude_docs


def _train_step(model: EQIModel, opt, qe, de, data: TrainingData, batch_size: int, alpha: float,
                rng: np.random.Generator, random_negatives: float) -> float:
    """One optimizer step on a batch of sampled triples: the pairwise softplus loss; its value."""
    import torch

    d, qp, qn = sample_triples(data, batch_size, alpha, rng, random_negatives)
    hd = model.h_d(de[data.docs[d]])
    up = (hd * model.h_q(qe[qp])).sum(-1)
    un = (hd * model.h_q(qe[qn])).sum(-1)
    loss = torch.nn.functional.softplus(-(up - un)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


class _TrainLog:
    """Append-only JSONL training log; on resume, lines after the checkpoint's step are dropped
    (they were written after the checkpoint by a run that did not reach the next one)."""

    def __init__(self, path: str | os.PathLike | None, start: int):
        self.f = None
        if path is None:
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if start and path.is_file():
            kept = [ln for ln in path.read_text().splitlines()
                    if ln.strip() and json.loads(ln)["step"] <= start]
        with atomic_path(path) as tmp:
            tmp.write_text("".join(ln + "\n" for ln in kept))
        self.f = open(path, "a")  # noqa: SIM115 - closed by close()

    def write(self, rec: dict) -> None:
        if self.f is not None:
            self.f.write(json.dumps(rec) + "\n")

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
