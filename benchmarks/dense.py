"""Dense encoding on CPU: torch float32 against the faster encoder variants, in one process.

Prints, in one run (issue 12):

1. throughput (texts/s) on web queries from the query log and on Debian catalog entries (all
   fields, with descriptions) for ``torch-fp32`` (the anchor) and each variant / setting, with
   the ratio to the anchor and the mean cosine between the variant's vectors and torch float32's;
   configurations run in rotation (``--rounds``), the median rate of the rounds is reported;
2. quality: nDCG@10 on scifact and npl (all documents and queries, flat FAISS, top 1000) for each
   variant, the loss against torch float32 and the mean cosine of the document vectors, against
   the bound (loss < 0.005 on both);
3. which variant ``Encoder()`` picks by default (``variant="auto"``) and whether it is the fastest
   variant meeting the bound;
4. batch invariance (issue 27): the max abs difference between a text's vector encoded in one
   call and in calls of 1, 7 and 32 texts or in reversed order, per configuration (the
   batched int8 encoding of before, ``BatchedOnnx``, is kept here as the comparison).

Collection embeddings go through the cache in ``.cache/embeddings`` (keyed by variant), so the
quality part resumes where an interrupted run stopped.

    .venv/bin/python benchmarks/dense.py                     # everything
    .venv/bin/python benchmarks/dense.py --no-quality        # throughput only
    .venv/bin/python benchmarks/dense.py --faiss             # also the FAISS flat/HNSW/fp16 tables
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ir_measures  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from ir_measures import nDCG  # noqa: E402

from limelight.data import load_catalog, load_dataset, load_query_log  # noqa: E402
from limelight.retrieval import encoders  # noqa: E402
from limelight.retrieval.base import run_from_topk  # noqa: E402
from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder  # noqa: E402

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "embeddings"
BOUND = 0.005

# name -> Encoder keyword arguments; the first is the anchor
CONFIGS: dict[str, dict] = {
    "torch-fp32": {"variant": "torch-fp32"},
    "onnx": {"variant": "onnx"},
    "onnx-int8": {"variant": "onnx-int8"},  # the default: every text run alone, 2 sessions
    "onnx-int8, 1 session": {"variant": "onnx-int8", "threads": 1},
    "onnx-int8, batched 32 (before issue 27)": {"variant": "onnx-int8", "batched": 32},
    "onnx-int8, max_seq_length 128": {"variant": "onnx-int8", "max_seq_length": 128},
}
QUALITY = ("torch-fp32", "onnx-int8", "onnx")


class BatchedOnnx:
    """The ONNX encoding of before issue 27, kept here as the comparison: padded batches of
    length-sorted texts through one two-thread session (int8 activation scales per batch)."""

    def __init__(self, batch_size: int, **kwargs):
        self.enc = Encoder(**kwargs)
        self.variant = self.enc.variant
        self.max_seq_length = self.enc.max_seq_length
        self.batch_size = batch_size
        self.backend = encoders.OnnxBackend(self.enc._backend.path, self.enc._backend.input_names)
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        # no spin-waiting after a run: idle spinning threads would take the CPU from the
        # configuration timed next
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        self.backend.session = ort.InferenceSession(str(self.backend.path), so,
                                                    providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str]) -> np.ndarray:
        n = len(texts)
        order = np.argsort(-np.fromiter(map(len, texts), np.int64, n), kind="stable")
        out = np.zeros((n, self.enc.dim), np.float32)
        feats = self.enc.model.preprocess([texts[i] for i in order.tolist()])
        arrs = {k: feats[k].numpy() for k in self.backend.input_names}
        lengths = arrs["attention_mask"].sum(1)
        for b in range(0, n, self.batch_size):
            sl = slice(b, b + self.batch_size)
            width = max(int(lengths[sl].max()), 1)
            out[order[sl]] = self.backend.run({k: v[sl, :width] for k, v in arrs.items()})
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def make(config: dict):
    config = dict(config)
    if "batched" in config:
        return BatchedOnnx(config.pop("batched"), **config)
    return Encoder(**config)


def invariance(encs: dict, texts: list[str]) -> dict[str, float]:
    """Max abs difference between a text's vector encoded in one call and in calls of 1, 7 and
    32 texts, and in reversed order (issue 27: <= 1e-6 for the default); returns the largest of
    the four per configuration."""
    print("\n### Batch invariance (Debian catalog entries): max abs difference vs one call")
    print("| configuration | batches of 1 | batches of 7 | batches of 32 | reversed order |")
    print("|---|---|---|---|---|")
    worst = {}
    for n, e in encs.items():
        whole = e.encode(texts)
        cells = []
        for bs in (1, 7, 32):
            parts = np.vstack([e.encode(texts[s:s + bs]) for s in range(0, len(texts), bs)])
            cells.append(float(np.abs(parts - whole).max()))
        cells.append(float(np.abs(e.encode(texts[::-1])[::-1] - whole).max()))
        print(f"| {n} | " + " | ".join(f"{c:.1e}" for c in cells) + " |", flush=True)
        worst[n] = max(cells)
    return worst


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.1f} / {b:.1f} / {c:.1f}"


def sample(texts: np.ndarray, n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(texts), size=min(n, len(texts)), replace=False))
    return [str(t) for t in texts[idx].tolist()]


def throughput(encs: dict[str, Encoder], sets: dict[str, list[str]], rounds: int) -> dict:
    names = list(encs)
    rates = {(n, s): [] for n in names for s in sets}
    cpu_rates = {(n, s): [] for n in names for s in sets}
    vecs: dict[tuple[str, str], np.ndarray] = {}
    for e in encs.values():
        e.encode(["warm up", "a second warm-up text of a few more words"])
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who runs first
        for s, texts in sets.items():
            for n in order:
                t, c = time.perf_counter(), time.process_time()
                v = encs[n].encode(texts)
                rates[(n, s)].append(len(texts) / (time.perf_counter() - t))
                cpu_rates[(n, s)].append(len(texts) / (time.process_time() - c))
                vecs[(n, s)] = v
        print(f"  round {r + 1}/{rounds} done ({load()})", file=sys.stderr, flush=True)
    anchor = names[0]
    print("\n### Encoding throughput (CPU; median of rounds; ratio = variant / torch-fp32; "
          "texts/s is wall-clock, texts/CPU-s divides by the process's CPU time, all threads)")
    cols = " | ".join(f"{s}: texts/s | ratio | texts/CPU-s | ratio | mean cos vs fp32" for s in sets)
    print(f"| configuration | {cols} |")
    print("|---|" + "---|---|---|---|---|" * len(sets))
    out = {}
    for n in names:
        cells = []
        for s in sets:
            rate = float(np.median(rates[(n, s)]))
            base = float(np.median(rates[(anchor, s)]))
            crate = float(np.median(cpu_rates[(n, s)]))
            cbase = float(np.median(cpu_rates[(anchor, s)]))
            cos = float(np.einsum("ij,ij->i", vecs[(n, s)], vecs[(anchor, s)]).mean())
            out[(n, s)] = (rate, rate / base, cos, crate / cbase)
            cells.append(f"{rate:.1f} | {rate / base:.2f}x | {crate:.1f} | {crate / cbase:.2f}x | "
                         f"{cos:.4f}")
        print(f"| {n} | {' | '.join(cells)} |", flush=True)
    return out


def ndcg(name: str, enc: Encoder) -> tuple[float, np.ndarray]:
    ds = load_dataset(name)
    t = time.perf_counter()
    idx = DenseIndex.build(ds.collection, enc, cache_dir=CACHE, show_progress=sys.stderr.isatty())
    secs = time.perf_counter() - t
    retr = DenseRetriever(idx, enc)
    docs, scores = retr.search_batch(ds.queries.texts.tolist(), 1000)
    run = run_from_topk(ds.queries.ids, idx.doc_ids, docs, scores, "dense")
    res = ir_measures.calc_aggregate([nDCG @ 10], ds.qrels.to_ir_measures(), run.to_ir_measures())
    print(f"  {name} with {enc.variant} (max_seq_length {enc.max_seq_length}): {secs:.0f} s "
          f"({load()})", file=sys.stderr, flush=True)
    return float(res[nDCG @ 10]), idx.embeddings


def quality(encs: dict[str, Encoder], names: list[str],
            scores: dict | None = None) -> dict[str, bool]:
    """nDCG@10 of each configuration on scifact and npl against torch-fp32; ``scores`` (if
    given) receives ``{(configuration, collection): (nDCG@10, torch-fp32's nDCG@10)}``."""
    print("\n### Quality: nDCG@10 (all queries, flat index, top 1000), loss vs torch-fp32, "
          "mean cosine of the document vectors vs torch-fp32")
    print("| configuration | scifact nDCG@10 | loss | mean cos | npl nDCG@10 | loss | mean cos | "
          f"loss < {BOUND} on both |")
    print("|---|---|---|---|---|---|---|---|")
    ref: dict[str, tuple[float, np.ndarray]] = {}
    ok = {}
    for n in names:
        cells = []
        good = True
        for coll in ("scifact", "npl"):
            score, emb = ndcg(coll, encs[n])
            if n == "torch-fp32":
                ref[coll] = (score, emb)
            base, bemb = ref[coll]
            cos = float(np.einsum("ij,ij->i", emb.astype(np.float32), bemb.astype(np.float32)).mean())
            loss = base - score
            if scores is not None:
                scores[(n, coll)] = (score, base)
            good &= loss < BOUND
            cells.append(f"{score:.4f} | {loss:+.4f} | {cos:.4f}")
        ok[n] = good
        print(f"| {n} | {' | '.join(cells)} | {'yes' if good else 'NO'} |", flush=True)
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2000, help="query-log queries to encode")
    ap.add_argument("--catalog", type=int, default=300, help="Debian catalog entries to encode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--no-throughput", action="store_true")
    ap.add_argument("--no-invariance", action="store_true")
    ap.add_argument("--quality-configs", default=";".join(QUALITY),
                    help="';'-separated configurations whose nDCG@10 is measured (torch-fp32 always)")
    ap.add_argument("--only", default="", help="semicolon-separated configuration names (default all)")
    ap.add_argument("--faiss", action="store_true", help="also the FAISS search tables")
    args = ap.parse_args()
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), onnxruntime "
          f"{__import__('onnxruntime').__version__}, cores {os.cpu_count()}; start: {load()}")
    names = [n for n in CONFIGS if not args.only or n in args.only.split(";") or n == "torch-fp32"]
    encs = {}
    for n in names:
        t = time.perf_counter()
        encs[n] = make(CONFIGS[n])
        print(f"  loaded {n} in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)

    log = load_query_log()
    deb = load_catalog("debian")
    sets = {"web queries": sample(log.texts, args.queries),
            "Debian catalog entries": sample(deb.texts, args.catalog)}
    means = ", ".join(f"{s}: n={len(t)}, mean {np.mean([len(x) for x in t]):.0f} chars"
                      for s, t in sets.items())
    print(f"texts: {means}")
    thr = {} if args.no_throughput else throughput(encs, sets, args.rounds)
    if thr:
        print(f"(end of throughput: {load()})")
    inv: dict[str, float] = {}
    if not args.no_invariance:
        inv = invariance(encs, sets["Debian catalog entries"][:96])

    ok: dict[str, bool] = {}
    scores: dict[tuple[str, str], tuple[float, float]] = {}
    if not args.no_quality:
        wanted = set(args.quality_configs.split(";")) | {"torch-fp32"}
        ok = quality(encs, [n for n in QUALITY if n in encs and n in wanted], scores)
        print(f"(end of quality: {load()})")
    auto = Encoder(variant="auto")
    print(f"\n`Encoder()` on CPU picks variant {auto.variant!r} "
          f"(preference order {', '.join(encoders.CPU_PREFERENCE)}).")
    best = None
    if ok and thr:
        cat = "Debian catalog entries"
        meeting = [n for n in ok if ok[n] and CONFIGS[n].get("max_seq_length") is None
                   and "batched" not in CONFIGS[n]]
        best = max(meeting, key=lambda n: thr[(n, cat)][0])
        r = thr[(auto.variant, cat)][1]
        print(f"fastest variant meeting the bound on catalog entries (default settings): {best!r}; "
              f"default {auto.variant!r}: {r:.2f}x torch-fp32 on catalog entries "
              f"(target >= 3x: {'met' if r >= 3 else 'NOT met'}).")
    summarize(auto.variant, thr, inv, scores, best)
    if args.faiss:
        faiss_tables(encs["torch-fp32"], sets["web queries"])


def summarize(default: str, thr: dict, inv: dict[str, float], scores: dict,
              best: str | None) -> None:
    """``make bench`` rows for the default encoder (issues 12 and 27): ≥ 3× torch-fp32 on catalog
    entries, nDCG@10 loss < 0.005 on scifact and npl, batch-invariant vectors (≤ 1e-6), and the
    default being the fastest variant that meets the quality bound; web queries without target."""
    from _summary import record

    cat, web, anchor = "Debian catalog entries", "web queries", "torch-fp32"
    if (default, cat) in thr:
        rate, ratio = thr[(default, cat)][:2]
        record(f"encoding Debian catalog entries, default {default}", rate, unit="texts/s",
               anchor=f"{anchor} {thr[(anchor, cat)][0]:.1f} texts/s", ratio=ratio,
               target="≥ 3× torch-fp32", met=ratio >= 3)
        rate, ratio = thr[(default, web)][:2]
        record(f"encoding web queries, default {default}", rate, unit="texts/s",
               anchor=f"{anchor} {thr[(anchor, web)][0]:.1f} texts/s", ratio=ratio)
    for coll in ("scifact", "npl"):
        if (default, coll) in scores:
            score, base = scores[(default, coll)]
            record(f"nDCG@10 loss, {coll}, default {default}", base - score,
                   anchor=f"{anchor} nDCG@10 {base:.4f} ({default}: {score:.4f})",
                   target=f"< {BOUND}", met=base - score < BOUND)
    if default in inv:
        record(f"batch invariance, default {default}: max abs difference (batches of 1/7/32, "
               "reversed order)", inv[default], anchor="the same texts encoded in one call",
               target="≤ 1e-6", met=inv[default] <= 1e-6)
    if best is not None and (default, cat) in thr:
        rate, best_rate = thr[(default, cat)][0], thr[(best, cat)][0]
        record(f"default {default} vs the fastest variant meeting the quality bound",
               rate, unit="texts/s", anchor=f"{best} {best_rate:.1f} texts/s", ratio=rate / best_rate,
               target="the default is the fastest variant meeting the bound", met=best == default)


def faiss_tables(enc: Encoder, queries: list[str], k: int = 100) -> None:
    """FAISS flat / HNSW, float32 / float16 search on scifact (from the embedding cache)."""
    sci = load_dataset("scifact")
    index = DenseIndex.build(sci.collection, enc, cache_dir=CACHE)
    qv = enc.encode(queries)
    print(f"\n### FAISS search, scifact: {len(index)} docs, {len(qv)} query vectors, top-{k}")
    print("| index | build (s) | queries/s | memory (MB) | recall@10 vs flat |\n|---|---|---|---|---|")
    flat_docs = None
    for hnsw in (False, True):
        for dtype in ("float32", "float16"):
            t = time.perf_counter()
            idx = DenseIndex.from_embeddings(index.doc_ids, index.embeddings,
                                             {**index.meta, "hnsw": hnsw, "dtype": dtype})
            build = time.perf_counter() - t
            idx.search(qv[:10], k)
            t = time.perf_counter()
            docs, _ = idx.search(qv, k)
            secs = time.perf_counter() - t
            flat_docs = docs if flat_docs is None else flat_docs
            rec = np.mean([len(set(a[:10]) & set(b[:10])) / 10
                           for a, b in zip(flat_docs, docs, strict=True)])
            label = f"{'HNSW M=32 ef=128' if hnsw else 'flat IP'} {dtype}"
            print(f"| {label} | {build:.2f} | {len(qv) / secs:.0f} | "
                  f"{idx.memory_bytes() / 2**20:.2f} | {rec:.4f} |", flush=True)


if __name__ == "__main__":
    main()
