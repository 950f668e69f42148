"""EQI benchmark: exposure lists of 1,000 new documents — brute-force recomputation vs exact
reverse search vs the approximate EQI methods (speedups), plus the exactness checks.

    .venv/bin/python benchmarks/eqi.py [--dataset npl] [--new 1000] [--dense]

Setup: ``--dataset`` minus ``--new`` held-out documents is the collection; its exposure store
holds the top 100 of every query of the shared query log (120,644 distinct queries). The
held-out documents then arrive as new documents.

- brute force (anchor): index the collection plus the new documents, re-run every query, read
  the new documents' lists (``recompute_new_exposure``; the index is merged incrementally and
  query embeddings are reused, so this anchor is a fast brute force);
- exact reverse: ``ExactReverse.add_documents`` (all at once), and one document at a time;
- BM25-reverse / dense-reverse / residual: their top-100 for the same documents (approximate).

Checks: exact == brute force (BM25 with frozen statistics; dense), and RELQ of the exact lists
against a brute force with recomputed BM25 statistics. Times are wall-clock on a shared 2-core
machine; the load average is printed next to them.
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


def _t(fn, *a, **kw):
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t0


def _same(a, b) -> dict:
    """Positional equality of two ``NewExposure`` results, and, as sets of (document, query)
    pairs, how many pairs only one has, how many common pairs get another rank, and the largest
    score difference on common pairs."""
    n = {f: bool(np.array_equal(getattr(a, f), getattr(b, f))) for f in ("ptr", "q", "rank")}
    n["identical_lists"] = n["ptr"] and n["q"] and n["rank"]

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="npl")
    ap.add_argument("--new", type=int, default=1000)
    ap.add_argument("--dense", action="store_true", help="also the dense retriever (needs cached embeddings)")
    ap.add_argument("--per-doc", type=int, default=20, help="documents timed one at a time")
    args = ap.parse_args()

    from common import EMB, bm25_store, collection, dense_store, log_queries, save

    from limelight.data.collection import Collection
    from limelight.data.ids import IdMap
    from limelight.exposure.eqi import BM25Reverse, ExactReverse
    from limelight.exposure.eqi.exact import recompute_new_exposure
    from limelight.exposure.relq import TABLE2, relq_many

    coll = collection(args.dataset)
    qs = log_queries()
    rng = np.random.default_rng(0)
    new = np.sort(rng.choice(len(coll), args.new, replace=False))
    keep = np.setdiff1d(np.arange(len(coll)), new)
    base = Collection(IdMap(coll.ids.strings[keep], kind="document"), coll.texts[keep], name=args.dataset)
    texts, ids = coll.texts[new].tolist(), coll.ids.strings[new].tolist()
    out: dict = {"dataset": args.dataset, "queries": len(qs), "collection": len(base), "new_docs": args.new}
    print(f"{args.dataset}: {len(base)} documents + {args.new} new, {len(qs)} queries; load {os.getloadavg()}", flush=True)

    ret, st = bm25_store(args.dataset, base, qs, tag=f"-minus{args.new}")
    ex, t_build = _t(ExactReverse.build, st, ret)
    ex.add_documents(texts[:2], ids[:2])  # JIT warm-up (numba cache)
    recompute_new_exposure(ret, qs.head(50), 100, texts[:2], ids[:2])
    brute, t_brute = _t(recompute_new_exposure, ret, qs, 100, texts, ids, frozen=True)
    exact, t_exact = _t(ex.add_documents, texts, ids)
    t_one = []
    for i in range(min(args.per_doc, args.new)):
        _, s = _t(ex.add_documents, texts[i:i + 1], ids[i:i + 1])
        t_one.append(s)
    fresh, t_fresh = _t(recompute_new_exposure, ret, qs, 100, texts, ids, frozen=False)
    rows = np.repeat(np.arange(args.new), np.diff(fresh.ptr))
    truth = sp.csr_matrix((fresh.rank, (rows, fresh.q)), shape=(args.new, len(qs)))
    drift = relq_many(exact.ranked_codes(100), truth, TABLE2)
    rev = BM25Reverse(qs, ret.index.analyzer)
    _, t_rev = _t(rev.search, texts=texts, k=100)
    load = os.getloadavg()
    bm = {
        "build_exact_s": t_build, "brute_force_s": t_brute, "exact_batch_s": t_exact,
        "exact_per_doc_ms": 1000 * float(np.median(t_one)),
        "speedup_batch": t_brute / t_exact,
        "speedup_per_doc (one re-run per document vs one exact query)": t_brute / float(np.median(t_one)),
        "bm25_reverse_batch_s": t_rev, "speedup_bm25_reverse": t_brute / t_rev,
        "exact_vs_brute_frozen": _same(exact, brute),
        "exposing_pairs": int(len(exact.q)),
        "relq_exact_vs_recomputed_stats": {k: float(np.nanmean(v)) for k, v in drift.items()},
        "recomputed_stats_identical_lists": _same(exact, fresh)["identical_lists"],
        "load_after": load,
    }
    out["bm25"] = bm
    print(json.dumps(bm, indent=1), flush=True)

    if args.dense:
        from limelight.exposure.eqi import DenseReverse, encode_queries_cached
        from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

        enc = Encoder()
        demb_all = enc.encode_collection(coll, cache_dir=EMB)
        qemb = encode_queries_cached(qs, enc, EMB)
        ix = DenseIndex.from_embeddings(base.ids, demb_all[keep], {"encoder": enc.identity()})
        dret = DenseRetriever(ix, enc)
        dst = dense_store(args.dataset, dret, qemb, qs, tag=f"-minus{args.new}")
        dex = ExactReverse.build(dst, dret, query_embeddings=qemb)
        demb = demb_all[new]
        dbrute, td_brute = _t(recompute_new_exposure, dret, qs, 100, None, ids, query_embeddings=qemb,
                              doc_embeddings=demb)
        dexact, td_exact = _t(dex.add_documents, None, ids, embeddings=demb)
        t1 = [_t(dex.add_documents, None, ids[i:i + 1], embeddings=demb[i:i + 1])[1]
              for i in range(min(args.per_doc, args.new))]
        drev = DenseReverse(qs, qemb, enc)
        _, td_rev = _t(drev.search, embeddings=demb, k=100)
        _, t_enc = _t(enc.encode, texts[:100])
        dn = {"brute_force_s": td_brute, "exact_batch_s": td_exact,
              "exact_per_doc_ms": 1000 * float(np.median(t1)),
              "speedup_batch": td_brute / td_exact,
              "speedup_per_doc (one re-run per document vs one exact query)": td_brute / float(np.median(t1)),
              "dense_reverse_batch_s": td_rev, "speedup_dense_reverse": td_brute / td_rev,
              "encode_new_docs_s (shared by every method, excluded above)": t_enc * args.new / 100,
              "exact_vs_brute": _same(dexact, dbrute), "load_after": os.getloadavg()}
        model_dir = ROOT / ".cache" / "eqi" / f"{args.dataset}-residual"
        if (model_dir / "model.json").exists():
            from limelight.exposure.eqi import EQIModel

            m = EQIModel.load(model_dir).index_queries(qs, qemb, enc)
            _, tm = _t(m.search, embeddings=demb, k=100)
            dn["residual_batch_s"] = tm
            dn["speedup_residual"] = td_brute / tm
            dn["residual_per_doc_ms"] = 1000 * float(np.median(
                [_t(m.search, embeddings=demb[i:i + 1], k=100)[1] for i in range(args.per_doc)]))
        out["dense"] = dn
        print(json.dumps(dn, indent=1), flush=True)
    save(f"bench_{args.dataset}", out)


if __name__ == "__main__":
    main()
