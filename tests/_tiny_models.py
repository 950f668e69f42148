"""Tiny real models for tests that train or load a generator (not a mock: a randomly
initialised T5 with SmolLM2's real tokenizer, saved as a Hugging Face model folder)."""

from __future__ import annotations

from pathlib import Path

import torch


def tiny_t5(path: Path, d_model: int = 32) -> Path:
    """A randomly initialised one-layer T5 with SmolLM2's tokenizer, saved at ``path``
    (``d_model`` tells two such models apart: another base model)."""
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    from limelight.querygen.generator import default_backbone

    tok = AutoTokenizer.from_pretrained(str(default_backbone()))
    tok.pad_token = tok.pad_token or tok.eos_token
    cfg = T5Config(vocab_size=len(tok), d_model=d_model, d_ff=64, d_kv=16, num_layers=1,
                   num_decoder_layers=1, num_heads=2, pad_token_id=tok.pad_token_id,
                   eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    T5ForConditionalGeneration(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def tiny_tk(path: Path, seed: int = 0) -> Path:
    """A 1-layer TK trained for a few steps on adi's judged queries (seconds), saved to ``path``."""
    import torch

    from limelight.data.loaders import load_dataset
    from limelight.rerank import (
        NeuralRanker,
        QrelsTriples,
        TKConfig,
        TrainConfig,
        Vocabulary,
        train,
    )
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds = load_dataset("adi")
    run = BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, 20).rename("bm25")
    vocab = Vocabulary.build(ds.collection.texts.tolist(), min_cf=1)
    ranker = NeuralRanker.create(TKConfig(n_layers=1), vocab, seed=seed)
    triples = QrelsTriples.build(ds.queries, ds.qrels, run, ds.collection, list(ds.queries.ids)[:25], depth=20)
    n = torch.get_num_threads()
    try:
        train(ranker, ds.collection, ds.queries, triples,
              TrainConfig(epochs=1, batch_size=16, max_steps_per_epoch=3, seed=seed))
    finally:
        torch.set_num_threads(n)
    path.parent.mkdir(parents=True, exist_ok=True)
    return ranker.save(path)
