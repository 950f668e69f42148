"""Unit costs of the issue-26 CtrlQGen study on this machine (run under the heavy-job lock).

    flock /tmp/heavy.lock .venv/bin/python experiments/ctrlqgen/measure_costs.py \
        --out experiments/ctrlqgen/results/unit_costs.json

Times, with the public ``limelight`` API and real models, a few steps of each thing the study
repeats: a generator step (SmolLM2-135M, batch 8, top 4 blocks) at two prompt lengths, generation
(n = 1 and n = 3 samples per prompt, InPars few-shot prompts), a bi-encoder MNRL step (MiniLM,
batch 16 and 8, 64 tokens), and encoding serialized Debian entries with each encoder variant and
length (plus the ONNX export of a fine-tuned model). The load average is recorded before and
after every block.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="experiments/ctrlqgen/results/unit_costs.json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-encode", type=int, default=1000)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from limelight.data import load_catalog
    from limelight.querygen.generator import QueryGenerator, entity_dicts, training_pairs
    from limelight.querygen.serialize import load_schema, serialize_collection
    from limelight.querygen.weaklabel import WeakLabelingUn
    from limelight.retrieval.dense import Encoder
    from limelight.retrieval.finetune import finetune_biencoder

    out: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_start": load(),
                 "threads": args.threads}
    cat = load_catalog("debian")
    schema = load_schema("debian")
    idx = np.sort(np.random.default_rng(0).choice(len(cat), 2000, replace=False))
    texts = serialize_collection(cat, schema, idx).tolist()
    lab = WeakLabelingUn(schema).fit(cat)
    t = time.perf_counter()
    ei, it, qs = lab.generate(idx[:400], np.where(np.arange(400) % 2 == 0, "narrow", "broad"), seed=0)
    out["weaklabel_un_q_per_s"] = len(qs) / (time.perf_counter() - t)

    # ---- generator: fit step and generation at two prompt lengths ----------------------------
    for mit in (64, 96):
        g = QueryGenerator(None, kind="ctrlqgen", schema=schema, max_input_tokens=mit,
                           max_new_tokens=8, threads=args.threads)
        prompts, targets = training_pairs(g, cat, ei, qs.tolist(), it.tolist())
        g.fit(prompts[:8], targets[:8], steps=1, batch_size=8, lr=5e-4)  # warm-up
        t = time.perf_counter()
        g.fit(prompts, targets, steps=4, batch_size=8, lr=5e-4, seed=1)
        out[f"gen_fit_s_per_step_in{mit}"] = (time.perf_counter() - t) / 4
        out[f"load_after_fit_in{mit}"] = load()
        ents = entity_dicts(cat, schema, idx[:32])
        t = time.perf_counter()
        r = g.generate(ents, "narrow", n=1, batch_size=32, seed=0)
        out[f"gen_q_per_s_n1_in{mit}"] = sum(map(len, r)) / (time.perf_counter() - t)
        t = time.perf_counter()
        r = g.generate(ents[:16], "broad", n=3, batch_size=16, seed=0)
        out[f"gen_q_per_s_n3_in{mit}"] = sum(map(len, r)) / (time.perf_counter() - t)
        out[f"load_after_gen_in{mit}"] = load()
        print(json.dumps(out), flush=True)
    inp = QueryGenerator(g.path, kind="inpars", schema=schema, max_input_tokens=64,
                         max_new_tokens=8, threads=args.threads)
    inp.examples = [(inp.entity_text(e), q) for e, q in
                    zip(entity_dicts(cat, schema, ei[:50]), qs[:50].tolist(), strict=True)]
    t = time.perf_counter()
    r = inp.generate(entity_dicts(cat, schema, idx[32:64]), None, n=1, batch_size=32, seed=0)
    out["inpars_q_per_s_n1_in64"] = sum(map(len, r)) / (time.perf_counter() - t)
    del g, inp

    # ---- bi-encoder fine-tuning -------------------------------------------------------------
    tmp = Path(tempfile.mkdtemp(prefix="ctrlqgen-costs-"))
    docs = [texts[int(np.searchsorted(idx, e))] for e in ei.tolist()]
    for bs in (16, 8):
        st = finetune_biencoder(qs.tolist(), docs, tmp / f"bi{bs}", steps=6, batch_size=bs,
                                max_seq_length=64, seed=0, doc_keys=ei.tolist())
        out[f"bi_s_per_step_b{bs}_len64"] = st.seconds / st.steps
        out[f"bi_s_per_1000_pairs_b{bs}_len64"] = st.seconds / st.pairs * 1000
    out["load_after_bi"] = load()
    print(json.dumps(out), flush=True)

    # ---- encoding the catalog ---------------------------------------------------------------
    sample = texts[:args.n_encode]
    for variant, msl in (("torch-fp32", 64), ("onnx", 64), ("onnx", 128), ("onnx-int8", 64),
                         ("onnx", 32)):
        enc = Encoder(tmp / "bi16", max_seq_length=msl, variant=variant, threads=args.threads,
                      model_cache=tmp / "onnx") if variant != "torch-fp32" else \
            Encoder(tmp / "bi16", max_seq_length=msl, variant=variant)
        if variant == "onnx" and msl == 64:
            out["onnx_export_s"] = None  # export happened in the constructor; timed below
        t = time.perf_counter()
        enc.encode(sample)
        out[f"encode_docs_per_s_{variant}_len{msl}"] = len(sample) / (time.perf_counter() - t)
        out[f"load_after_encode_{variant}_len{msl}"] = load()
        print(json.dumps(out), flush=True)
    t = time.perf_counter()
    Encoder(tmp / "bi8", max_seq_length=64, variant="onnx", threads=args.threads,
            model_cache=tmp / "onnx")
    out["onnx_export_s"] = time.perf_counter() - t
    qlog_texts = [q for q in qs.tolist()][:400]
    enc = Encoder(tmp / "bi8", max_seq_length=64, variant="onnx", threads=args.threads,
                  model_cache=tmp / "onnx")
    t = time.perf_counter()
    enc.encode(qlog_texts)
    out["encode_queries_per_s_onnx_len64"] = len(qlog_texts) / (time.perf_counter() - t)
    out["load_end"] = load()
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
