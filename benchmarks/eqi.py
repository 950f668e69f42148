"""EQI benchmark: exposure lists of 1,000 new documents — brute-force recomputation vs exact
reverse search (the batch at once, and one document at a time) vs the approximate EQI methods,
plus the exactness checks.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/eqi.py [--dataset debian] [--new 1000]
        [--repeats 3] [--dense [--from-audit demo-out]]

Setup: ``--dataset`` minus ``--new`` held-out documents is the collection; its exposure store
holds the top 100 of every query of the shared query log (114,926 distinct queries). The
held-out documents then arrive as new documents.

- brute force (anchor): index the collection plus the new documents, re-run every query, read
  the new documents' lists (``recompute_new_exposure``; the index is merged incrementally and
  query embeddings are reused, so this anchor is a fast brute force);
- exact reverse: ``ExactReverse.add_documents`` with the whole batch, and with one document at a
  time (median over ``--per-doc`` documents; a re-run per document costs one brute force);
- BM25-reverse / dense-reverse / residual: their top-100 for the same documents (approximate).

Brute force, the batch and the single documents are timed in turn, ``--repeats`` times
(interleaved), and the ratios are those of the medians; the load average is printed with every
repeat. Checks: exact == brute force in every repeat (BM25 with frozen statistics; dense), lists,
ranks and float32 scores; RELQ of the exact lists against a brute force with recomputed BM25
statistics. Dense: ``--from-audit`` takes the query vectors and the catalog's embeddings of an
audit (``make demo``: ``demo-out``) instead of encoding them (the MiniLM cache otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments" / "eqi"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BATCH_TARGET = 30.0    # issue 20: 1,000 new documents at once ≥ 30× brute force
PER_DOC_TARGET = 100.0  # one document ≥ 100× one re-run


def _t(fn, *a, **kw):
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t0


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _same(a, b) -> dict:
    """Positional equality of two ``NewExposure`` results (lists, ranks, float32 scores), and,
    as sets of (document, query) pairs, how many pairs only one has, how many common pairs get
    another rank, and the largest score difference on common pairs."""
    n = {f: bool(np.array_equal(getattr(a, f), getattr(b, f))) for f in ("ptr", "q", "rank", "score")}
    n["identical_lists"] = n["ptr"] and n["q"] and n["rank"]
    n["identical"] = n["identical_lists"] and n["score"]

    def keyed(x):
        doc = np.repeat(np.arange(len(x.ptr) - 1, dtype=np.int64), np.diff(x.ptr))
        key = doc * (int(max(a.q.max(initial=0), b.q.max(initial=0))) + 1) + x.q
        order = np.argsort(key, kind="stable")
        return key[order], np.asarray(x.rank)[order], np.asarray(x.score, np.float64)[order]

    ka, ra, sa = keyed(a)
    kb, rb, sb = keyed(b)
    common, ia, ib = np.intersect1d(ka, kb, return_indices=True)
    n["pairs"] = [len(ka), len(kb)]
    n["pairs_only_in_one"] = int(len(ka) + len(kb) - 2 * len(common))
    n["common_pairs_other_rank"] = int((ra[ia] != rb[ib]).sum())
    n["scores_max_abs_diff"] = float(np.abs(sa[ia] - sb[ib]).max()) if len(common) else None
    return n


def timed_repeats(name: str, repeats: int, brute, batch, one, n_one: int) -> dict:
    """Brute force, the batch and ``n_one`` single documents in turn, ``repeats`` times; medians,
    ratios, the load average of each repeat, and whether every batch equalled its brute force."""
    tb, te, t1, loads, checks = [], [], [], [], []
    for r in range(repeats):
        want, s_b = _t(brute)
        got, s_e = _t(batch)
        s_1 = [_t(one, i)[1] for i in range(n_one)]
        tb.append(s_b)
        te.append(s_e)
        t1.append(float(np.median(s_1)))
        loads.append(_load())
        checks.append(_same(got, want))
        print(f"{name} repeat {r + 1}/{repeats}: brute force {s_b:.3f} s, exact batch {s_e:.4f} s, "
              f"one document {1000 * t1[-1]:.2f} ms (median of {n_one}); identical "
              f"{checks[-1]['identical']}; load {loads[-1]}", flush=True)
    mb, me, m1 = float(np.median(tb)), float(np.median(te)), float(np.median(t1))
    return {"repeats": repeats, "brute_force_s": tb, "exact_batch_s": te, "exact_per_doc_s": t1,
            "brute_force_median_s": mb, "exact_batch_median_s": me, "exact_per_doc_median_ms": 1000 * m1,
            "speedup_batch": mb / me, "speedup_per_doc (one re-run per document vs one exact query)": mb / m1,
            "identical_every_repeat": all(c["identical"] for c in checks),
            "exact_vs_brute": checks[-1], "exposing_pairs": checks[-1]["pairs"][0], "load": loads,
            "last_batch": got, "brute": want}


def report(name: str, res: dict) -> None:
    """The ratio lines (and the ``make bench`` summary rows) of one retriever."""
    from _summary import record

    b, p = res["speedup_batch"], res["speedup_per_doc (one re-run per document vs one exact query)"]
    ok = res["identical_every_repeat"]
    print(f"{name}: batch of {res['new_docs']} ×{b:.1f} brute force (target ≥ {BATCH_TARGET:g}×), "
          f"one document ×{p:.0f} (target ≥ {PER_DOC_TARGET:g}×), identical to brute force: {ok}; "
          f"medians of {res['repeats']} interleaved repeats; load {res['load']}", flush=True)
    record(f"exact reverse {name}, {res['new_docs']} new {res['dataset']} documents at once / brute force",
           res["exact_batch_median_s"], unit="s", anchor=f"brute force {res['brute_force_median_s']:.2f} s",
           ratio=b, target=f"≥ {BATCH_TARGET:g}× and identical", met=b >= BATCH_TARGET and ok)
    record(f"exact reverse {name}, one new {res['dataset']} document / one re-run",
           res["exact_per_doc_median_ms"], unit="ms", anchor=f"brute force {res['brute_force_median_s']:.2f} s",
           ratio=p, target=f"≥ {PER_DOC_TARGET:g}×", met=p >= PER_DOC_TARGET)


def bm25_part(args, qs, base, texts, ids) -> dict:
    from common import bm25_store

    from limelight.exposure.eqi import BM25Reverse, ExactReverse
    from limelight.exposure.eqi.exact import recompute_new_exposure
    from limelight.exposure.relq import TABLE2, relq_many

    ret, st = bm25_store(args.dataset, base, qs, tag=f"-minus{args.new}")
    ex, t_build = _t(ExactReverse.build, st, ret)
    ex.add_documents(texts, ids)  # warm-up: numba kernels compiled or loaded from their cache
    recompute_new_exposure(ret, qs.head(50), 100, texts[:2], ids[:2])
    res = timed_repeats("bm25", args.repeats,
                        lambda: recompute_new_exposure(ret, qs, 100, texts, ids, frozen=True),
                        lambda: ex.add_documents(texts, ids),
                        lambda i: ex.add_documents(texts[i:i + 1], ids[i:i + 1]),
                        min(args.per_doc, args.new))
    exact = res.pop("last_batch")
    res.pop("brute")
    fresh, t_fresh = _t(recompute_new_exposure, ret, qs, 100, texts, ids, frozen=False)
    rows = np.repeat(np.arange(args.new), np.diff(fresh.ptr))
    truth = sp.csr_matrix((fresh.rank, (rows, fresh.q)), shape=(args.new, len(qs)))
    drift = relq_many(exact.ranked_codes(100), truth, TABLE2)
    rev = BM25Reverse(qs, ret.index.analyzer)
    _, t_rev = _t(rev.search, texts=texts, k=100)
    res.update({"build_exact_s": t_build, "bm25_reverse_batch_s": t_rev,
                "speedup_bm25_reverse": res["brute_force_median_s"] / t_rev,
                "relq_exact_vs_recomputed_stats": {k: float(np.nanmean(v)) for k, v in drift.items()},
                "recomputed_stats_identical_lists": _same(exact, fresh)["identical_lists"]})
    return res


def _dense_vectors(args, coll, qs):
    """(query vectors, collection embeddings, encoder) from ``--from-audit`` or the MiniLM cache."""
    from common import EMB

    from limelight.exposure.eqi import encode_queries_cached
    from limelight.retrieval.dense import Encoder

    enc = Encoder()
    if args.from_audit is None:
        return encode_queries_cached(qs, enc, EMB), enc.encode_collection(coll, cache_dir=EMB), enc
    a = Path(args.from_audit)
    qemb = np.load(a / "systems" / "query_vectors.npy")
    demb = np.load(a / "index" / "dense" / "embeddings.npy")
    doc_ids = json.loads((a / "index" / "dense" / "doc_ids.json").read_text())
    meta = json.loads((a / "index" / "dense" / "meta.json").read_text())
    if (len(qemb) != len(qs) or doc_ids != coll.ids.strings.tolist()
            or not enc.compatible_with(meta["encoder"])):
        raise SystemExit(f"{a}: its vectors are not those of {args.dataset} and the query log "
                         "with the default encoder")
    return qemb, demb, enc


def dense_part(args, coll, qs, keep, new, ids) -> dict:
    from common import dense_store

    from limelight.data.ids import IdMap
    from limelight.exposure.eqi import DenseReverse, ExactReverse
    from limelight.exposure.eqi.exact import recompute_new_exposure
    from limelight.retrieval.dense import DenseIndex, DenseRetriever

    qemb, demb_all, enc = _dense_vectors(args, coll, qs)
    ix = DenseIndex.from_embeddings(IdMap(coll.ids.strings[keep], kind="document"), demb_all[keep],
                                    {"encoder": enc.identity()})
    dret = DenseRetriever(ix, enc)
    dst, t_store = _t(dense_store, args.dataset, dret, qemb, qs, tag=f"-minus{args.new}")
    dex = ExactReverse.build(dst, dret, query_embeddings=qemb)
    demb = np.ascontiguousarray(demb_all[new])
    dex.add_documents(None, ids, embeddings=demb)  # warm-up (numba kernels, FAISS threads)
    res = timed_repeats("dense", args.repeats,
                        lambda: recompute_new_exposure(dret, qs, 100, None, ids, query_embeddings=qemb,
                                                       doc_embeddings=demb),
                        lambda: dex.add_documents(None, ids, embeddings=demb),
                        lambda i: dex.add_documents(None, ids[i:i + 1], embeddings=demb[i:i + 1]),
                        min(args.per_doc, args.new))
    res.pop("last_batch")
    res.pop("brute")
    drev = DenseReverse(qs, qemb, enc)
    _, td_rev = _t(drev.search, embeddings=demb, k=100)
    res.update({"dense_store_s (cached after the first run)": t_store, "dense_reverse_batch_s": td_rev,
                "speedup_dense_reverse": res["brute_force_median_s"] / td_rev})
    model_dir = ROOT / ".cache" / "eqi" / f"{args.dataset}-residual"
    if (model_dir / "model.json").exists():
        from limelight.exposure.eqi import EQIModel

        m = EQIModel.load(model_dir).index_queries(qs, qemb, enc)
        _, tm = _t(m.search, embeddings=demb, k=100)
        res["residual_batch_s"] = tm
        res["speedup_residual"] = res["brute_force_median_s"] / tm
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="debian")
    ap.add_argument("--new", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats (medians reported)")
    ap.add_argument("--dense", action="store_true", help="also the dense retriever")
    ap.add_argument("--from-audit", default=None,
                    help="dense: the query vectors and catalog embeddings of this audit (demo-out)")
    ap.add_argument("--per-doc", type=int, default=20, help="documents timed one at a time")
    args = ap.parse_args()
    if args.from_audit:
        args.dense = True

    from common import collection, log_queries, save

    from limelight.data.collection import Collection
    from limelight.data.ids import IdMap

    coll = collection(args.dataset)
    qs = log_queries()
    rng = np.random.default_rng(0)
    new = np.sort(rng.choice(len(coll), args.new, replace=False))
    keep = np.setdiff1d(np.arange(len(coll)), new)
    base = Collection(IdMap(coll.ids.strings[keep], kind="document"), coll.texts[keep], name=args.dataset)
    texts, ids = coll.texts[new].tolist(), coll.ids.strings[new].tolist()
    out: dict = {"dataset": args.dataset, "queries": len(qs), "collection": len(base), "new_docs": args.new}
    print(f"{args.dataset}: {len(base)} documents + {args.new} new, {len(qs)} queries; load {_load()}",
          flush=True)
    parts = {"bm25": lambda: bm25_part(args, qs, base, texts, ids)}
    if args.dense:
        parts["dense"] = lambda: dense_part(args, coll, qs, keep, new, ids)
    for name, fn in parts.items():
        res = fn()
        res.update(dataset=args.dataset, new_docs=args.new)
        out[name] = res
        print(json.dumps(res, indent=1, default=float), flush=True)
    for name in parts:
        report(name, out[name])
    save(f"bench_{args.dataset}", out)


if __name__ == "__main__":
    main()
