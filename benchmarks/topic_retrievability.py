"""Topic-aware retrievability beside plain retrievability on the demo-sized store (issue 56).

    flock /tmp/heavy.lock .venv/bin/python benchmarks/topic_retrievability.py [--store DIR]
        [--topics 20] [--repeats 5] [--out FILE]

The store: the demo audit's BM25 store (``demo-out/systems/bm25/exposure``: 114,926 distinct
log queries × 63,666 Debian packages, top 100) when it exists, else ``--store``, else one built
here with the CLI (``limelight index --collection debian`` and ``limelight exposure compute``
over the shared log at depth 100, under ``.cache/bench/topic_retrievability/``; run the script
under ``flock /tmp/heavy.lock``).

1. The issue's acceptance: ``limelight retrievability --store S --topics 20`` against
   ``limelight retrievability --store S`` end to end (a fresh ``python -m limelight.cli``
   process each: imports, opening the store, reading the pairs, r(d) and Gini; with --topics
   also TF-IDF, LSA and K-means over the log's queries, the per-topic r(d) and Ginis), the two
   interleaved, medians of ``--repeats``: target ≤ 2×.
2. In one process, warm, the parts: open + pairs + r(d) + Gini (the anchor), the topics
   (TF-IDF + LSA + K-means of the query texts), the per-topic measure from the pairs.

``uptime`` before and after; the JSON goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from limelight._io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _summary import record  # noqa: E402

DEMO = ROOT / "demo-out" / "systems" / "bm25" / "exposure"
WORK = ROOT / ".cache" / "bench" / "topic_retrievability"
LOG = ROOT.parent / "shared" / "data" / "querylogs" / "queries.tsv.gz"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cli(*args: str) -> float:
    """Seconds of one ``python -m limelight.cli ...`` (it must succeed)."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "limelight.cli", *args], capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    secs = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"limelight {' '.join(args)} failed: {p.stderr.strip()}")
    return secs


def the_store(given: Path | None) -> Path:
    """The demo store, the one given, or one built with the CLI."""
    if given is not None:
        return given
    if (DEMO / "manifest.json").exists():
        return DEMO
    store = WORK / "store_bm25"
    if not (store / "manifest.json").exists():
        idx = WORK / "debian_idx"
        if not (idx / "meta.json").exists():
            print("building the Debian BM25 index", flush=True)
            cli("index", "--collection", "debian", "--out", str(idx))
        print("computing the store over the shared log (depth 100)", flush=True)
        cli("exposure", "compute", "--index", str(idx), "--queries", str(LOG), "--out", str(store),
            "--depth", "100")
    return store


def parts(store: Path, k: int, repeats: int) -> dict:
    """In-process medians: the anchor, the topics, the per-topic measure."""
    from limelight.exposure.store import ExposureStore
    from limelight.exposure.topics import store_topic_retrievability, topics_from_texts

    times: dict[str, list[float]] = {"open + pairs + r(d) + Gini": [], f"topics (K = {k})": [],
                                     "per-topic r(d) + Ginis": []}
    out: dict = {}
    for i in range(repeats + 1):  # the first: warm-up
        t0 = time.perf_counter()
        st = ExposureStore.open(store)
        st.pair_arrays()
        g = st.retrievability(c=100).gini
        t1 = time.perf_counter()
        topics = topics_from_texts(st.queries.texts.tolist(), k, 0)
        t2 = time.perf_counter()
        res = store_topic_retrievability(st, topics, 100)
        t3 = time.perf_counter()
        if i:
            for key, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                times[key].append(dt)
    out["seconds"] = times
    out["median_s"] = {key: statistics.median(v) for key, v in times.items()}
    s = res.summary
    out["figures"] = {"collection_gini@100": g, **{x: s[x] for x in (
        "gini_same_weighting", "topic_gini_min", "topic_gini_mean", "topic_gini_max",
        "topic_gini_mean_weighted", "n_topics_with_documents")}, "topic_sizes": sorted(
        res.table["n_queries"].tolist(), reverse=True),
        "most_unequal": res.most_unequal(5)[["name", "n_queries", "n_docs", "gini"]].to_dict("records")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "topic_retrievability.json")
    a = ap.parse_args()
    store = the_store(a.store)
    res: dict = {"uptime_start": uptime(), "store": str(store), "topics": a.topics, "repeats": a.repeats}
    print(res["uptime_start"], flush=True)
    plain = ["retrievability", "--store", str(store), "--c", "100"]
    topics = plain + ["--topics", str(a.topics)]
    cli(*plain), cli(*topics)  # warm-up: page cache, numba caches
    t_plain, t_topics = [], []
    for _ in range(a.repeats):
        t_plain.append(cli(*plain))
        t_topics.append(cli(*topics))
    mp, mt = statistics.median(t_plain), statistics.median(t_topics)
    res["cli_seconds"] = {"plain": t_plain, "topics": t_topics}
    res["cli_median_s"] = {"plain": mp, "topics": mt}
    res["in_process"] = parts(store, a.topics, a.repeats)
    res["uptime_end"] = uptime()
    print(f"{'command':60s} {'median s':>9s}")
    print(f"{'limelight retrievability':60s} {mp:9.3f}")
    print(f"{'limelight retrievability --topics ' + str(a.topics):60s} {mt:9.3f}  {mt / mp:.2f}×")
    for key, v in res["in_process"]["median_s"].items():
        print(f"  in process: {key:46s} {v:9.3f}")
    print(json.dumps(res["in_process"]["figures"], indent=1, default=str))
    print(res["uptime_end"], flush=True)
    where = ("Debian × log store (the demo audit's BM25)" if store == DEMO else
             "Debian × log store (BM25, built by the benchmark)" if store == WORK / "store_bm25" else
             f"store {store}")
    res["figure_store"] = where
    record(f"retrievability --topics {a.topics}, {where} (CLI)", mt, unit="s",
           anchor=f"plain retrievability, same store ({mp:.3f} s)", ratio=mt / mp, target="≤ 2×",
           met=mt / mp <= 2, note=f"TF-IDF + LSA + K-means of {sum(res['in_process']['figures']['topic_sizes']):,} "
           "queries, per-topic Ginis")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(a.out) as tmp:
        tmp.write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
