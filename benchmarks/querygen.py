"""CtrlQGen costs on CPU, each beside an anchor measured in the same run, as a ratio.

1. generation: queries/s of ``QueryGenerator.generate`` (SmolLM2-135M-Instruct, batch, top_k=10
   sampling, 8 new tokens) vs plain ``transformers`` ``model.generate`` on the same prompts;
2. generator fine-tuning: seconds per 100 steps of ``QueryGenerator.fit`` (batch 8, top 4 blocks)
   vs a plain full-model transformers training step on the same batches (the anchor of
   shared/notes/measurements.md: 6-8 s per step, batch 8 × 51 tokens, 1 thread);
3. bi-encoder fine-tuning: seconds per 1,000 (query, entity) pairs of ``finetune_biencoder``
   (MiniLM, MultipleNegativesRankingLoss, max_seq_length 64) vs encoding the same pairs with the
   same model (forward only).

    .venv/bin/python benchmarks/querygen.py [--prompts 64] [--steps 5] [--bi-steps 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    """The three timings in the order they run, each beside its anchor (one straight sequence:
    split into functions it would only pass the shared catalog, labels and models around)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--bi-steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from limelight.data import load_catalog
    from limelight.querygen.generator import ANSWER, QueryGenerator, training_pairs
    from limelight.querygen.serialize import load_schema
    from limelight.querygen.weaklabel import WeakLabelingUn
    from limelight.retrieval.dense import Encoder
    from limelight.retrieval.finetune import finetune_biencoder

    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    cat = load_catalog("debian")
    schema = load_schema("debian")
    rng = np.random.default_rng(0)
    idx = rng.choice(len(cat), max(args.prompts, 8 * args.steps, 16 * args.bi_steps), replace=False)
    lab = WeakLabelingUn(schema).fit(cat)
    ei, it, qs = lab.generate(idx, np.where(np.arange(len(idx)) % 2 == 0, "narrow", "broad"), seed=1)

    g = QueryGenerator(None, kind="ctrlqgen", schema=schema, max_input_tokens=48, max_new_tokens=8)
    prompts, targets = training_pairs(g, cat, ei, qs.tolist(), it.tolist())
    rows = []

    # 1. generation: one warm-up batch, then ours and the anchor interleaved, medians of 3
    p = prompts[:args.prompts]
    tok, model = g.tokenizer, g.model

    def plain() -> None:
        tok.padding_side = "left"
        torch.manual_seed(0)
        with torch.inference_mode():
            for s in range(0, len(p), args.batch):
                enc = tok([x + ANSWER for x in p[s:s + args.batch]], return_tensors="pt", padding=True)
                model.generate(**enc, do_sample=True, top_k=10, max_new_tokens=8,
                               pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)

    g.generate_from_prompts(p[:args.batch], n=1, batch_size=args.batch, seed=0)
    ours_t, anchor_t = [], []
    for _ in range(3):
        t = time.perf_counter()
        g.generate_from_prompts(p, n=1, batch_size=args.batch, seed=0)
        ours_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        plain()
        anchor_t.append(time.perf_counter() - t)
    ours, anchor = len(p) / float(np.median(ours_t)), len(p) / float(np.median(anchor_t))
    rows.append(("generation (queries/s, higher is better)", ours, anchor, ours / anchor))

    # 2. generator fine-tuning
    st = g.fit(prompts, targets, steps=args.steps, batch_size=8, train_layers=4)
    ours = st.seconds / args.steps * 100
    g2 = QueryGenerator(None, kind="ctrlqgen", schema=schema, max_input_tokens=48)
    opt = torch.optim.AdamW(g2.model.parameters(), lr=5e-5)
    g2.model.train()
    t = time.perf_counter()
    for s in range(args.steps):
        batch = g2._batch(prompts[s * 8:(s + 1) * 8], targets[s * 8:(s + 1) * 8])
        g2.model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    anchor = (time.perf_counter() - t) / args.steps * 100
    rows.append(("generator fine-tuning (s per 100 steps, lower is better)", ours, anchor, anchor / ours))
    del g, g2

    # 3. bi-encoder fine-tuning
    n = 16 * args.bi_steps
    docs = [cat.texts[i] for i in ei[:n].tolist()]
    with tempfile.TemporaryDirectory() as d:
        st = finetune_biencoder(qs[:n].tolist(), docs, os.path.join(d, "bi"), steps=args.bi_steps,
                                batch_size=16, max_seq_length=64, doc_keys=ei[:n].tolist())
    ours = st.seconds / st.pairs * 1000
    enc = Encoder(max_seq_length=64)
    t = time.perf_counter()
    enc.encode(qs[:n].tolist())
    enc.encode(docs)
    anchor = (time.perf_counter() - t) / n * 1000
    rows.append(("bi-encoder fine-tuning (s per 1,000 pairs) vs encoding them", ours, anchor, anchor / ours))

    print(f"{'figure':62s} {'limelight':>10s} {'anchor':>10s} {'speed ratio':>11s}")
    for name, a, b, r in rows:
        print(f"{name:62s} {a:10.2f} {b:10.2f} {r:11.2f}")
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    summarize(rows, args.batch)


def summarize(rows: list[tuple[str, float, float, float]], batch: int) -> None:
    """``make bench`` rows for the three figures issue 6 asks for (it sets no target for them);
    ratio = limelight / anchor in the figure's own unit."""
    from _summary import record

    what = [(f"CtrlQGen generation (SmolLM2, batch {batch}, 8 new tokens)", "queries/s",
             "plain `model.generate`"),
            ("generator fine-tuning (batch 8, top 4 blocks)", "s per 100 steps",
             "plain full-model step"),
            ("bi-encoder fine-tuning (MNRL, MiniLM, 64 tokens)", "s per 1,000 pairs",
             "encoding the same pairs")]
    for (figure, unit, label), (_, ours, anchor, _) in zip(what, rows, strict=True):
        record(figure, ours, unit=unit, anchor=f"{label} {anchor:.3g} {unit}", ratio=ours / anchor)


if __name__ == "__main__":
    main()
