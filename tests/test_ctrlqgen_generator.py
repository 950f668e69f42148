"""CtrlQGen generator (real SmolLM2-135M-Instruct; a tiny locally created T5 for the seq2seq path)
and bi-encoder fine-tuning with MultipleNegativesRankingLoss (real MiniLM). These check the loops,
persistence and errors, not quality (which experiments/ctrlqgen measures)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from limelight.errors import LimelightError
from limelight.querygen.generator import (
    QueryGenerator,
    entity_dicts,
    generate_queries,
    training_pairs,
)
from limelight.querygen.serialize import load_schema
from limelight.retrieval.finetune import finetune_biencoder, no_duplicate_batches


@pytest.fixture(scope="module")
def smol():
    return QueryGenerator(None, kind="ctrlqgen", schema="movies", max_input_tokens=24,
                          max_new_tokens=4)


def _ents(movies, n=4):
    s = load_schema("movies")
    idx = [i for i in range(200) if movies.fields["Major Genre"][i] and movies.fields["Director"][i]][:n]
    return np.asarray(idx), entity_dicts(movies, s, idx)


def test_smollm_fit_trains_only_the_top_blocks_and_generates(smol, movies, tmp_path):
    idx, ents = _ents(movies)
    prompts, targets = training_pairs(smol, movies, idx, [str(e["Title"]).lower() for e in ents],
                                      ["narrow"] * len(ents))
    assert prompts[0].startswith("Generate a query with narrow intent from: Title: ")
    layers = smol.model.model.layers
    top0 = layers[-1].self_attn.q_proj.weight.detach().clone()
    low0 = layers[0].self_attn.q_proj.weight.detach().clone()
    st = smol.fit(prompts, targets, steps=1, batch_size=2, train_layers=1, lr=1e-3)
    assert st.steps == 1 and np.isfinite(st.losses).all()
    assert not torch.equal(top0, layers[-1].self_attn.q_proj.weight)
    assert torch.equal(low0, layers[0].self_attn.q_proj.weight)
    out = smol.generate(ents[:2], "broad", n=2, batch_size=2, seed=3)
    assert len(out) == 2 and all(len(x) == 2 and all(isinstance(q, str) for q in x) for x in out)
    with pytest.raises(LimelightError, match="unknown intent"):
        smol.generate(ents[:1], "wide")
    path = smol.save(tmp_path / "g")
    back = QueryGenerator.load(path)
    assert back.kind == "ctrlqgen" and back.schema.narrow == smol.schema.narrow
    assert back.generate(ents[:2], "broad", n=2, batch_size=2, seed=3) == out


def test_inpars_prompt_and_errors(smol, movies):
    inp = QueryGenerator(smol.path, kind="inpars", schema="movies", max_input_tokens=24)
    idx, ents = _ents(movies, 3)
    with pytest.raises(LimelightError, match="few-shot examples"):
        inp.prompt("Title: Alien")
    inp.examples = [(inp.entity_text(e), str(e["Title"]).lower()) for e in ents]
    p = inp.prompt("Title: Alien", rng=np.random.default_rng(0))
    assert p.count("Document:") == 3 and p.endswith("Document: Title: Alien")
    with pytest.raises(LimelightError, match="not fine-tuned"):
        inp.fit(["a"], ["b"])
    with pytest.raises(LimelightError, match="unknown generator kind"):
        QueryGenerator(smol.path, kind="t5")


def test_serialization_ablation_switch(smol, movies, tmp_path):
    """Table 4's component (1): QGen over s(e), CtrlQGen over the plain values; kept by save."""
    _, ents = _ents(movies, 1)
    q_ser = QueryGenerator(smol.path, kind="qgen", schema="movies", serialize=True)
    c_plain = QueryGenerator(smol.path, kind="ctrlqgen", schema="movies", serialize=False)
    assert q_ser.prompt(q_ser.entity_text(ents[0])).startswith("Generate a query from: Title: ")
    p = c_plain.prompt(c_plain.entity_text(ents[0]), "narrow")
    assert p.startswith("Generate a query with narrow intent from: ") and "Title:" not in p
    assert QueryGenerator(smol.path, kind="qgen", schema="movies").serialize is False
    back = QueryGenerator.load(c_plain.save(tmp_path / "plain"))
    assert back.kind == "ctrlqgen" and back.serialize is False


def test_generator_path_errors(tmp_path):
    with pytest.raises(LimelightError, match="no config.json"):
        QueryGenerator(tmp_path)
    with pytest.raises(LimelightError, match="not a saved limelight generator"):
        QueryGenerator.load(tmp_path)


def test_seq2seq_checkpoint_path(smol, movies, tmp_path):
    """A tiny T5 made here (users with a real T5 pass its folder the same way)."""
    from transformers import T5Config, T5ForConditionalGeneration

    tok = smol.tokenizer
    cfg = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=16, num_layers=1,
                   num_decoder_layers=1, num_heads=2, pad_token_id=tok.pad_token_id,
                   eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    T5ForConditionalGeneration(cfg).save_pretrained(tmp_path / "t5")
    tok.save_pretrained(tmp_path / "t5")
    g = QueryGenerator(tmp_path / "t5", kind="ctrlqgen", schema="movies", max_new_tokens=4)
    assert g.seq2seq
    idx, ents = _ents(movies)
    prompts, targets = training_pairs(g, movies, idx, [str(e["Title"]).lower() for e in ents],
                                      ["narrow"] * len(ents))
    st = g.fit(prompts, targets, steps=2, batch_size=2, train_layers=None, lr=1e-3)
    assert np.isfinite(st.losses).all()
    g.save(tmp_path / "saved")
    qs = generate_queries(movies, "movies", "broad", n=2, generator=tmp_path / "saved",
                          entity_ids=[movies.ids.strings[i] for i in idx[:2]])
    assert set(qs.intents) == {"broad"} and len(qs) <= 4
    assert set(qs.fields["entity_id"]) <= {movies.ids.strings[i] for i in idx[:2]}


def test_no_duplicate_batches():
    keys = np.asarray([0, 0, 0, 1, 2, 3, 4, 5])
    bs = no_duplicate_batches(keys, 4, 6, np.random.default_rng(0))
    assert len(bs) == 6
    assert all(len(b) == 4 and len(set(keys[b].tolist())) == 4 for b in bs)
    with pytest.raises(LimelightError, match="distinct documents"):
        no_duplicate_batches(np.asarray([1, 1, 2]), 4, 1, np.random.default_rng(0))


def test_finetune_biencoder_mnrl(movies, tmp_path):
    from limelight.retrieval.dense import Encoder

    idx, ents = _ents(movies, 8)
    docs = [f"{e['Title']} {e['Major Genre']} {e['Director']}" for e in ents]
    queries = [str(e["Title"]).lower() for e in ents]
    st = finetune_biencoder(queries, docs, tmp_path / "bi", steps=2, batch_size=4,
                            max_seq_length=32, lr=1e-4, doc_keys=idx.tolist())
    assert st.steps == 2 and st.pairs == 8 and np.isfinite(st.losses).all()
    base = Encoder(max_seq_length=32).encode(docs[:2])
    tuned = Encoder(tmp_path / "bi").encode(docs[:2])
    assert tuned.shape == base.shape and not np.allclose(tuned, base)
    with pytest.raises(LimelightError, match="equal, non-empty"):
        finetune_biencoder(queries, docs[:3], tmp_path / "x")
