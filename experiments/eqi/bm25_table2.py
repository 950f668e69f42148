"""Table 2(a) analog: BM25-reverse and BM25-tuned against brute force, on npl and the Debian
catalog with the shared query log (120,644 distinct queries), n_{q→d} = n_{d→q} = 100.

    .venv/bin/python experiments/eqi/bm25_table2.py [npl] [debian]

Test documents: 1,000 documents with an exposing query; BM25-tuned picks (k1, b) of the reverse
index on 300 other validation documents (RELQ(0.5,0.9)). One-tailed paired t-test tuned > reverse.
"""

from __future__ import annotations

import os
import sys

from common import Timer, bm25_store, collection, log_queries, sample_docs, save

from limelight.exposure.eqi import (
    BM25Reverse,
    BruteForce,
    evaluate_lists,
    method_lists,
    one_tailed_t,
    summarize,
    tune_bm25_reverse,
)


def main(name: str) -> dict:
    coll = collection(name)
    qs = log_queries()
    with Timer() as t:
        ret, st = bm25_store(name, coll, qs)
    print(f"{name}: store {t.s:.1f}s, {len(st.pair_arrays()[0])} pairs", flush=True)
    test = sample_docs(st, 1000, seed=0)
    val = sample_docs(st, 300, seed=1, exclude=test)
    texts = lambda d: coll.texts[coll.ids.encode(st.doc_ids.strings[d])].tolist()  # noqa: E731
    rev = BM25Reverse(qs, ret.index.analyzer)
    with Timer() as t:
        tuned, grid = tune_bm25_reverse(rev, st, val, texts(val))
    print(f"tuning {t.s:.1f}s best k1={tuned.k1} b={tuned.b}", flush=True)
    lists = {m.name: method_lists(m, test, texts(test)) for m in (rev, tuned)}
    lists["brute-force"] = method_lists(BruteForce(st), test)
    per = evaluate_lists(st, test, lists)
    res = summarize(per)
    res["p_one_tailed(tuned>reverse)"] = {k: one_tailed_t(per["bm25-tuned"][k], per["bm25-reverse"][k])
                                          for k in per["bm25-reverse"]}
    res["tuned_params"] = {"k1": tuned.k1, "b": tuned.b}
    res["grid"] = grid
    res["load"] = os.getloadavg()
    save(f"table2_bm25_{name}", res)


    for k, v in res.items():
        print(k, v if k != "grid" else "...")
    return res


if __name__ == "__main__":
    for n in sys.argv[1:] or ["npl", "debian"]:
        main(n)
