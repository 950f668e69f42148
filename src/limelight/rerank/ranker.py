"""A trained neural ranker (model + vocabulary), its checkpoints, and the re-ranking stage."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from limelight._io import atomic_path, check_format, file_sha256
from limelight.data.collection import Collection
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.rerank.models import (
    KernelRanker,
    KNRMConfig,
    TKConfig,
    build_model,
    config_from_dict,
    config_to_dict,
)
from limelight.rerank.vocab import EncodedTexts, Vocabulary, VocabularyMismatchError, glove_matrix
from limelight.retrieval.base import Retriever, Stage
from limelight.retrieval.spec import System

FORMAT = "limelight-rerank/1"


@dataclass
class NeuralRanker:
    """A kernel model with the vocabulary its embedding rows belong to."""

    model: KernelRanker
    vocab: Vocabulary
    meta: dict = field(default_factory=dict)

    @classmethod
    def create(cls, config: TKConfig | KNRMConfig, vocab: Vocabulary, seed: int = 0) -> NeuralRanker:
        """A fresh model with GloVe 6B 50d initial embeddings (seeded)."""
        torch.manual_seed(seed)
        emb, coverage = glove_matrix(vocab, seed)
        model = build_model(config, torch.from_numpy(emb))
        return cls(model, vocab, {"glove_coverage": coverage, "seed": seed})

    @property
    def config(self) -> TKConfig | KNRMConfig:
        return self.model.config

    @property
    def name(self) -> str:
        c = self.config
        return f"tk{c.n_layers}" if isinstance(c, TKConfig) else "knrm"

    def encode_queries(self, texts) -> EncodedTexts:
        return self.vocab.encode(list(texts), self.config.max_query_len)

    def encode_docs(self, texts) -> EncodedTexts:
        return self.vocab.encode(list(texts), self.config.max_doc_len)

    # ---- checkpoints -------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write model weights, config and vocabulary to ``path`` atomically."""
        path = Path(path)
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        blob = {"format": FORMAT, "config": config_to_dict(self.config),
                "vocab": self.vocab.to_dict(), "fingerprint": self.vocab.fingerprint,
                "state_dict": state, "meta": self.meta}
        with atomic_path(path) as tmp:
            torch.save(blob, tmp)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, vocab: Vocabulary | None = None,
             map_location: str | torch.device = "cpu") -> NeuralRanker:
        """Read a checkpoint. If ``vocab`` is given it must be the checkpoint's vocabulary
        (else :class:`VocabularyMismatchError`)."""
        path = Path(path)
        if not path.is_file():
            raise LimelightError(f"{path}: no such checkpoint")
        try:
            blob = torch.load(path, map_location=map_location, weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling failure is a user error here
            raise LimelightError(f"{path}: not a limelight re-ranker checkpoint ({type(e).__name__})") from None
        check_format(blob, FORMAT, path, "limelight re-ranker checkpoint",
                     rebuild="train one with `limelight rerank train`", error=LimelightError)
        own = Vocabulary.from_dict(blob["vocab"])
        if vocab is not None:
            vocab.check_same(own, where=str(path))
        config = config_from_dict(blob["config"])
        emb = blob["state_dict"]["embedding.weight"]
        if emb.shape[0] != len(own):
            raise VocabularyMismatchError(
                f"{path}: embedding has {emb.shape[0]} rows but its vocabulary {len(own)}")
        model = build_model(config, torch.zeros_like(emb))
        model.load_state_dict(blob["state_dict"])
        model.eval()
        return cls(model, own, dict(blob.get("meta", {})))

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load a checkpoint's weights into this ranker (vocabularies must match)."""
        other = NeuralRanker.load(path, vocab=self.vocab)
        self.model.load_state_dict(other.model.state_dict())


class PairScorer:
    """Batched inference of a ranker over (query row, document row) pairs of encoded texts."""

    def __init__(self, ranker: NeuralRanker, batch_size: int = 256,
                 device: str | torch.device | None = None):
        if batch_size < 1:
            raise LimelightError(f"batch_size must be ≥ 1, got {batch_size}")
        self.ranker = ranker
        self.batch_size = batch_size
        self.device = torch.device(device) if device else next(ranker.model.parameters()).device
        self.last_model_seconds = 0.0

    def _check(self, q_enc: EncodedTexts, d_enc: EncodedTexts) -> None:
        fp = self.ranker.vocab.fingerprint
        if q_enc.fingerprint != fp or d_enc.fingerprint != fp:
            raise VocabularyMismatchError("texts were encoded with another vocabulary than the model's")

    @contextlib.contextmanager
    def _eval_model(self) -> Iterator[torch.nn.Module]:
        """The model on ``device`` in eval mode; its training flag is restored afterwards."""
        model = self.ranker.model.to(self.device)
        was_training = model.training
        model.eval()
        try:
            yield model
        finally:
            model.train(was_training)

    def _encode_queries(self, model, q_enc: EncodedTexts, q_rows: np.ndarray):
        """``(q_inv, q_rep, q_msk)``: each distinct query row encoded once; ``q_inv`` maps pair
        ``i`` to its row in ``q_rep``/``q_msk``."""
        uq, q_inv = np.unique(q_rows, return_inverse=True)
        q_ids = torch.from_numpy(q_enc.take(uq)).to(self.device)
        enc = [model.encode(q_ids[s:s + 1024]) for s in range(0, len(uq), 1024)]
        return q_inv, torch.cat([e[0] for e in enc]), torch.cat([e[1] for e in enc])

    @torch.no_grad()
    def score(self, q_enc: EncodedTexts, d_enc: EncodedTexts, q_rows: np.ndarray,
              d_rows: np.ndarray) -> np.ndarray:
        """Scores (float64) of pairs ``(q_rows[i], d_rows[i])``; ``last_model_seconds`` keeps
        the time spent in the model (tensor work only, no tokenization)."""
        self._check(q_enc, d_enc)
        if len(d_rows) == 0:
            self.last_model_seconds = 0.0
            return np.zeros(0, dtype=np.float64)
        out = np.empty(len(d_rows), dtype=np.float64)
        with self._eval_model() as model:
            t0 = time.perf_counter()
            q_inv, q_rep, q_msk = self._encode_queries(model, q_enc, q_rows)
            t_model = time.perf_counter() - t0
            order = np.argsort(d_enc.lengths[d_rows], kind="stable")  # similar lengths together
            for s in range(0, len(order), self.batch_size):
                sel = order[s:s + self.batch_size]
                d_ids = torch.from_numpy(d_enc.take(d_rows[sel])).to(self.device)
                qi = torch.from_numpy(q_inv[sel]).to(self.device)
                t0 = time.perf_counter()
                d, dm = model.encode(d_ids)
                sc = model.score_encoded(q_rep[qi], q_msk[qi], d, dm)
                out[sel] = sc.double().cpu().numpy()
                t_model += time.perf_counter() - t0
        self.last_model_seconds = t_model
        return out

    @torch.no_grad()
    def score_by_document(self, q_enc: EncodedTexts, d_enc: EncodedTexts, q_rows: np.ndarray,
                          d_rows: np.ndarray, doc_chunk: int = 1024) -> np.ndarray:
        """The scores of :meth:`score` (equal up to float rounding), with every distinct query
        and document encoded by the model once: documents, ordered by length, go through the
        encoder in chunks of ``doc_chunk`` and each chunk's pairs are scored against the cached
        representations in batches of ``batch_size``. Much faster when the pairs repeat
        documents (the candidates of many queries over one collection)."""
        self._check(q_enc, d_enc)
        q_rows, d_rows = np.asarray(q_rows), np.asarray(d_rows)
        if len(d_rows) == 0:
            self.last_model_seconds = 0.0
            return np.zeros(0, dtype=np.float64)
        out = np.empty(len(d_rows), dtype=np.float64)
        bs = self.batch_size
        t0 = time.perf_counter()
        with self._eval_model() as model:
            q_inv, q_rep, q_msk = self._encode_queries(model, q_enc, q_rows)
            ud, d_inv = np.unique(d_rows, return_inverse=True)
            by_len = np.argsort(d_enc.lengths[ud], kind="stable")  # similar lengths together
            slot = np.empty(len(ud), dtype=np.int64)
            slot[by_len] = np.arange(len(ud))
            pair_slot = slot[d_inv]
            pairs = np.argsort(pair_slot, kind="stable")
            bounds = np.searchsorted(pair_slot[pairs], np.arange(0, len(ud) + doc_chunk, doc_chunk))
            for c, c0 in enumerate(range(0, len(ud), doc_chunk)):
                docs = ud[by_len[c0:c0 + doc_chunk]]
                d_ids = torch.from_numpy(d_enc.take(docs)).to(self.device)
                enc = [model.encode(d_ids[s:s + bs]) for s in range(0, len(docs), bs)]
                width = max(e[0].shape[1] for e in enc)
                d_rep = torch.cat([torch.nn.functional.pad(e[0], (0, 0, 0, width - e[0].shape[1]))
                                   for e in enc])
                d_msk = torch.cat([torch.nn.functional.pad(e[1], (0, width - e[1].shape[1]))
                                   for e in enc])
                chunk = pairs[bounds[c]:bounds[c + 1]]
                for s in range(0, len(chunk), bs):
                    sel = chunk[s:s + bs]
                    qi = torch.from_numpy(q_inv[sel]).to(self.device)
                    di = torch.from_numpy(pair_slot[sel] - c0).to(self.device)
                    sc = model.score_encoded(q_rep[qi], q_msk[qi], d_rep[di], d_msk[di])
                    out[sel] = sc.double().cpu().numpy()
        self.last_model_seconds = time.perf_counter() - t0
        return out


class KernelReranker(Stage):
    """Re-ranks any first-stage run with a neural ranker: ``bm25 % 100 >> KernelReranker(...)``.

    The top ``depth`` documents of each query (all when ``depth`` is None) get the model's score;
    documents below ``depth`` keep their first-stage order below all re-ranked ones.
    """

    def __init__(self, ranker: NeuralRanker, collection: Collection, depth: int | None = None,
                 batch_size: int = 256, device: str | torch.device | None = None):
        if depth is not None and depth < 1:
            raise LimelightError(f"depth must be ≥ 1, got {depth}")
        self.ranker = ranker
        self.collection = collection
        self.depth = depth
        self.scorer = PairScorer(ranker, batch_size, device)
        self.name = ranker.name
        self._docs: EncodedTexts | None = None
        self.last_model_seconds = 0.0

    @property
    def encoded_docs(self) -> EncodedTexts:
        """The collection's token ids (computed once)."""
        if self._docs is None:
            self._docs = self.ranker.encode_docs(self.collection.texts.tolist())
        return self._docs

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        if run is None:
            raise LimelightError(f"{self.name}: a re-ranker needs an input run (e.g. bm25 % 100 >> {self.name})")
        if len(run) == 0:
            raise LimelightError(f"{self.name}: empty candidate list: the input run {run.name!r} has no documents")
        d_rows = self.collection.ids.encode(run.docids.strings, missing=-1)[run.d]
        if (d_rows < 0).any():
            bad = run.docids.decode(run.d[d_rows < 0])
            raise LimelightError(
                f"{self.name}: run {run.name!r} references {len(set(bad.tolist()))} document(s) missing "
                f"from collection {self.collection.name!r} (e.g. {bad[0]!r})")
        q_rows_all = queries.ids.encode(run.qids.strings, missing=-1)
        q_rows = q_rows_all[run.q]
        if (q_rows < 0).any():
            bad = run.qids.decode(run.q[q_rows < 0])
            raise LimelightError(f"{self.name}: run {run.name!r} has query {bad[0]!r} that is not in the queries")
        ranks = run.ranks()
        top = ranks <= self.depth if self.depth is not None else np.ones(len(run), dtype=bool)
        q_enc = self.ranker.encode_queries(queries.texts.tolist())
        scores = np.empty(len(run), dtype=np.float64)
        scores[top] = self.scorer.score(q_enc, self.encoded_docs, q_rows[top], d_rows[top])
        self.last_model_seconds = self.scorer.last_model_seconds
        if not top.all():
            # below-depth documents: below every re-ranked score of their query, in input order
            lo = np.full(run.n_queries, np.inf)
            np.minimum.at(lo, run.q[top], scores[top])
            lo[~np.isfinite(lo)] = 0.0
            rest = ~top
            scores[rest] = lo[run.q[rest]] - 1.0 - (ranks[rest] - self.depth) * 1e-3
        out = Run.from_codes(run.qids, run.docids, run.q, run.d, scores, self.name)
        out.meta["model_seconds"] = self.last_model_seconds
        return out


def ranker_fingerprint(ranker: NeuralRanker) -> str:
    """A content hash of a ranker: its config, vocabulary and every weight."""
    import hashlib
    import json

    h = hashlib.sha256()
    h.update(json.dumps(config_to_dict(ranker.config), sort_keys=True, default=str).encode("utf-8"))
    h.update(ranker.vocab.fingerprint.encode("utf-8"))
    for k, v in sorted(ranker.model.state_dict().items()):
        h.update(k.encode("utf-8"))
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:32]


class RerankedRetriever(Retriever):
    """A first-stage retriever and a neural re-ranker as one retriever, so that anything that
    takes a retriever (``compute_exposure``, ``limelight exposure compute``, evaluation,
    pipelines) can use the re-ranked system.

    ``search_batch(texts, k)`` takes the first stage's top ``max(k, depth)`` of every query,
    scores its top ``depth`` with the ranker (:meth:`PairScorer.score_by_document`: each
    distinct query and candidate document of the call goes through the model's encoder once,
    pairs are scored in batches; the collection's token ids are computed once, by the
    :class:`KernelReranker`, and reused across calls) and returns the top ``k``, ordered as a
    ``Run`` orders them (score descending, then doc id descending). Documents below ``depth`` (only when ``k > depth``) keep their
    first-stage order below every re-ranked one, exactly as ``KernelReranker(depth=depth)``
    places them: the result equals ``KernelReranker(ranker, collection, depth).transform(
    queries, first.retrieve(queries, max(k, depth))).topk(k)``. The candidates are the first
    stage's own ``search_batch`` top ``max(k, depth)`` (as in its exposure store), so where
    first-stage scores tie at that boundary the first stage decides which document is in.
    """

    def __init__(self, first: Retriever, ranker: NeuralRanker | KernelReranker,
                 collection: Collection | None = None, depth: int = 100, batch_size: int = 256,
                 device: str | torch.device | None = None, name: str | None = None):
        from limelight.errors import IndexMismatchError

        if depth < 1:
            raise LimelightError(f"depth must be ≥ 1, got {depth}")
        if isinstance(ranker, KernelReranker):
            self.reranker = ranker
        else:
            if collection is None:
                raise LimelightError("RerankedRetriever needs the collection the first stage indexes")
            self.reranker = KernelReranker(ranker, collection, None, batch_size, device)
        self.first = first
        self.doc_ids = first.doc_ids
        self.depth = int(depth)
        self.name = name or f"{first.name}>>{self.reranker.name}"
        coll_ids = self.reranker.collection.ids
        self._rows: np.ndarray | None = None  # retriever doc code -> collection row
        if not (coll_ids is self.doc_ids or coll_ids == self.doc_ids):
            rows = coll_ids.encode(self.doc_ids.strings, missing=-1)
            if (rows < 0).any():
                bad = self.doc_ids.strings[int(np.flatnonzero(rows < 0)[0])]
                raise IndexMismatchError(f"{self.name}: the first stage {first.name!r} indexes documents "
                                         f"missing from collection {self.reranker.collection.name!r} "
                                         f"(e.g. {bad!r})")
            self._rows = rows
        self.last_model_seconds = 0.0

    @property
    def ranker(self) -> NeuralRanker:
        return self.reranker.ranker

    def fingerprint(self) -> str:
        """What an exposure store computed with this retriever depends on: the first stage's
        fingerprint, the ranker's weights and the re-ranking depth."""
        import hashlib

        from limelight.exposure.fingerprints import retriever_fingerprint

        parts = [retriever_fingerprint(self.first, self.doc_ids), ranker_fingerprint(self.ranker),
                 str(self.depth)]
        return hashlib.sha256("\x1e".join(parts).encode("utf-8")).hexdigest()[:32]

    def search_batch(self, texts, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of the re-ranked first stage: ``(docs int32, scores float32)``, ``(n, k)``,
        ``-1`` padding."""
        k = int(k)
        texts = ["" if t is None else str(t) for t in texts]
        n = len(texts)
        lex = self.doc_ids.lexical_rank()
        docs, scores = self.first.search_batch(texts, max(k, self.depth))
        docs = np.asarray(docs)
        if docs.ndim != 2 or docs.shape[0] != n:
            raise LimelightError(f"{self.first.name}: search_batch returned {docs.shape} for {n} queries")
        # the first stage's ranks as a Run derives them (score desc, doc id desc; padding last)
        from limelight.retrieval.runfusion import trec_order

        docs = trec_order(docs, np.asarray(scores), lex)
        width = docs.shape[1]
        valid = docs >= 0
        top = valid & (np.arange(width)[None, :] < self.depth)
        new = np.full(docs.shape, -np.inf, dtype=np.float64)
        q_rows, cols = np.nonzero(top)
        d_codes = docs[q_rows, cols]
        d_rows = d_codes if self._rows is None else self._rows[d_codes]
        if len(d_rows):
            q_enc = self.ranker.encode_queries(texts)
            new[q_rows, cols] = self.reranker.scorer.score_by_document(
                q_enc, self.reranker.encoded_docs, q_rows, d_rows)
            self.last_model_seconds = self.reranker.scorer.last_model_seconds
        rest = valid & ~top
        if rest.any():  # below depth: under every re-ranked score, in first-stage order
            lo = np.where(top, new, np.inf).min(axis=1)
            lo[~np.isfinite(lo)] = 0.0
            rank = np.arange(1, width + 1, dtype=np.float64)[None, :]
            below = lo[:, None] - 1.0 - (rank - self.depth) * 1e-3
            new[rest] = np.broadcast_to(below, docs.shape)[rest]
        # order as a Run: score descending, ties by doc id descending, padding last
        tie = np.where(valid, lex[np.where(valid, docs, 0)], -1).astype(np.float64)
        tie[~valid] = np.inf
        order = np.lexsort((-tie, -new), axis=1)[:, :k]
        out_d = np.take_along_axis(docs, order, axis=1).astype(np.int32)
        out_s = np.take_along_axis(new, order, axis=1).astype(np.float32)
        if out_d.shape[1] < k:  # the first stage returned fewer columns than asked
            pad = k - out_d.shape[1]
            out_d = np.pad(out_d, ((0, 0), (0, pad)), constant_values=-1)
            out_s = np.pad(out_s, ((0, 0), (0, pad)), constant_values=-np.inf)
        return out_d, out_s


def open_reranked(spec: System, first: Retriever, *, index_dir: str | os.PathLike,
                  name: str | None = None, collection: Collection | None = None,
                  reranker: KernelReranker | None = None) -> RerankedRetriever:
    """Open a ``reranked`` :class:`~limelight.retrieval.spec.System` (the kind's opener,
    :mod:`limelight.rerank.kind`, calls it): ``first``, the opened first stage, followed by the
    ranker of ``spec.checkpoint`` over its top ``depth``.

    The checkpoint must still hash to ``spec.checkpoint_sha256`` when that is recorded.
    ``collection``: the documents the ranker reads (default: those stored with the index);
    ``reranker``: an already loaded ``KernelReranker`` (the checkpoint is then not read again).
    """
    if reranker is None:
        if spec.checkpoint is None:
            raise LimelightError("a reranked retriever needs its checkpoint (System.checkpoint)")
        ranker = NeuralRanker.load(spec.checkpoint)
        if spec.checkpoint_sha256 is not None and file_sha256(spec.checkpoint) != spec.checkpoint_sha256:
            if name is None:
                raise LimelightError(f"{spec.checkpoint}: the checkpoint changed after its "
                                     "checkpoint_sha256 was recorded")
            raise LimelightError(f"{spec.checkpoint}: the checkpoint of system {name!r} "
                                 "changed after the configuration was read; run the audit again")
        if collection is None:
            from limelight.retrieval.index_dir import load_docs

            collection = load_docs(index_dir)
        reranker = KernelReranker(ranker, collection)
    return RerankedRetriever(first, reranker, depth=spec.param("depth"), name=name)

