"""Exposure in context (issue 56 item 4): does the order of BM25, MiniLM and hybrid by the
global Gini survive topic-aware retrievability (T-Retrievability, Chang, Meng & Ganguly, CIKM
2025)? Is group unfairness below individual unfairness everywhere (the DistFaiR bound,
Balagopalan et al. 2025)? Where does query-agnostic measurement make a system look fairer?

    flock /tmp/heavy.lock .venv/bin/python experiments/topics/run.py [--work /tmp/limelight-topics]
        [--settings debian-log,movies-log,debian-click,movies-click,adi,med,cacm,cranfield,npl,scifact]
        [--boot 200] [--boot-log 100] [--seed 0]

Settings (each with the three systems BM25 k1 0.9 b 0.4, all-MiniLM-L6-v2, RRF k = 60 of both,
top 100, by ``limelight exposure compute``; stores cached under ``--work``):

- ``debian-log``, ``movies-log``: every distinct query of the shared log (o_q = occurrences), K = 20
  topics. Debian's stores are the demo audit's (``demo-out/systems/<system>/exposure``, read only);
  movies' are computed over ``limelight index --collection movies --dense``. No judgments:
  DistFaiR with each other system's scores as merit (``Merit.from_reference``, an assumption,
  stated in the results), 100 resamples, in the log's order (first entry).
- ``debian-click``, ``movies-click``: the CtrlQGen Click test set committed under
  ``experiments/ctrlqgen/results/<catalog>/weaklabels/click_test.parquet`` (each query judged
  relevant to the entity it was written for; o_q = 1), K = 20. DistFaiR with those judgments as
  merit, groups: the topics, and the catalog's field (Debian ``section``, movies ``Major Genre``).
- the six judged collections (adi, med, cacm, cranfield, npl, scifact) with their own queries
  (o_q = 1) and qrels, K = 5 (30 to 300 queries). DistFaiR with the qrels as merit, topic groups.

Per setting, the topics are K-means over the queries' TF-IDF (LSA 50, seed ``--seed``:
``limelight.exposure.topics.topics_from_texts``), the same for the three systems. Per system:
the global Gini at c (limelight's r(d), 1[k ≤ c], over every document; c = 100 on the catalogs,
c = 10 on the judged collections, whose 82 to 11,429 documents a top 100 covers largely: adi's
82 are all in every dense top 100, Gini 0), the Gini of the paper's rank-weighted
r(d) = Σ o_q / ln(1 + k) (k ≤ c) over the retrieved documents (the K = 1 value of
the per-topic measure), and the per-topic Ginis' min / mean / max / traffic-weighted mean. One
bootstrap over the queries (``--boot``; ``--boot-log`` for the log settings; resampled with
replacement, o_q kept, the same resamples for the three systems): bias-corrected percentile
intervals of every value (as ``limelight.exposure.retrievability.bootstrap_gini``) and paired
differences between systems with their percentile intervals and two-sided bootstrap p-values.
Topic groups for DistFaiR: the BM25 store's topic assignment (``TopicRetrievability.groups``,
``share``: a document split over the topics whose queries retrieve it), used for all three
systems (compare systems under one assignment). DistFaiR: ``limelight.exposure.distfair.distfair``,
dcg browsing, 200 resamples.

Each setting's result is written to ``results/<setting>.json`` (small); ``report.py`` turns them
into the section of ``docs/results-exposure.md`` and the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from limelight._io import atomic_path
from limelight.data.formats import read_trec_qrels
from limelight.exposure.distfair import VALUES, distfair
from limelight.exposure.fairness import Groups, Merit
from limelight.exposure.retrievability import analyse_pairs
from limelight.exposure.store import ExposureStore
from limelight.exposure.topics import topic_retrievability, topics_from_texts, topics_from_vectors

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from _shared import click_files, index_for, limelight  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
LOG = DATA / "querylogs" / "queries.tsv.gz"
SYSTEMS = ("bm25", "dense", "hybrid")
JUDGED = ("adi", "med", "cacm", "cranfield", "npl", "scifact")
FIELDS = {"debian": "section", "movies": "Major Genre"}
DEPTH = 100  # the stores' depth n
MEASURES = ("gini_global", "gini_rank", "topic_min", "topic_mean", "topic_max", "topic_weighted")


def setting_inputs(setting: str, work: Path) -> tuple[str, Path, Path | None, int, int]:
    """(collection, queries file, qrels file or None, K, c) of a setting."""
    if setting.endswith("-log"):
        return setting[:-4], LOG, None, 20, 100
    if setting.endswith("-click"):
        cat = setting[:-6]
        q, r = click_files(cat, work)
        return cat, q, r, 20, 100
    d = DATA / "collections" / setting
    return setting, d / "queries.tsv", d / "qrels.txt", 5, 10


def store_for(setting: str, system: str, work: Path, idx: Path, qfile: Path) -> Path:
    if setting == "debian-log":
        return ROOT / "demo-out" / "systems" / system / "exposure"
    out = work / setting / system
    man = out / "manifest.json"
    if not man.exists() or not json.loads(man.read_text()).get("complete"):
        limelight("exposure", "compute", "--index", str(idx), "--queries", str(qfile), "--model", system,
                  "--depth", str(DEPTH), "--out", str(out))
    return out


def interval(value: float, samples: np.ndarray, alpha: float = 0.05) -> dict:
    """The estimate and its bias-corrected percentile interval (``bootstrap_gini``'s)."""
    s = samples[np.isfinite(samples)]
    if not len(s):
        return {"value": value}
    lo, hi = np.quantile(s, [alpha / 2, 1 - alpha / 2])
    bias = float(s.mean() - value)
    return {"value": float(value), "lo": float(lo - bias), "hi": float(hi - bias), "bias": bias}


def measures(q, d, rank, ids, w, topics, c: int) -> dict[str, float]:
    s = topic_retrievability(q, d, rank, ids, w, topics, c=c).summary
    return {"gini_global": analyse_pairs(q, d, rank, ids, w, c).gini, "gini_rank": s["gini_same_weighting"],
            "topic_min": s["topic_gini_min"], "topic_mean": s["topic_gini_mean"],
            "topic_max": s["topic_gini_max"], "topic_weighted": s["topic_gini_mean_weighted"]}


def run_setting(setting: str, work: Path, n_boot: int, seed: int) -> dict:
    name, qfile, rfile, k, c = setting_inputs(setting, work)
    idx = ROOT / "demo-out" / "index" if setting == "debian-log" else index_for(name, work)
    stores = {s: ExposureStore.open(store_for(setting, s, work, idx, qfile)) for s in SYSTEMS}
    first = stores["bm25"]
    for s, st in stores.items():
        if not np.array_equal(st.queries.ids.strings, first.queries.ids.strings):
            raise SystemExit(f"{setting}: {s}'s store has other queries than bm25's")
    t0 = time.perf_counter()
    topics = topics_from_texts(first.queries.texts.tolist(), k, seed)
    pairs = {s: st.pair_arrays()[:3] for s, st in stores.items()}
    w = np.asarray(first.query_weights, dtype=np.float64)
    point = {s: measures(*pairs[s], stores[s].doc_ids, w, topics, c) for s in SYSTEMS}
    rng = np.random.default_rng(seed)
    nq = len(w)
    boot = {s: {m: np.empty(n_boot) for m in MEASURES} for s in SYSTEMS}
    for b in range(n_boot):  # resamples of the queries, the same for the three systems
        counts = np.bincount(rng.integers(0, nq, nq), minlength=nq)
        for s in SYSTEMS:
            for m, v in measures(*pairs[s], stores[s].doc_ids, w * counts, topics, c).items():
                boot[s][m][b] = v
        if (b + 1) % 20 == 0:
            print(f"  {setting}: {b + 1}/{n_boot} resamples", flush=True)
    out: dict = {"setting": setting, "collection": name, "queries": str(qfile.name), "k": k, "c": c,
                 "n_queries": int(nq), "total_weight": float(w.sum()), "n_docs": int(len(first.doc_ids)),
                 "topic_method": topics.method, "seed": seed, "n_boot": n_boot,
                 "topic_sizes": np.bincount(topics.labels, minlength=k).tolist(),
                 "topic_names": topics.names, "systems": {}, "pairs": {}, "order": {}}
    for s in SYSTEMS:
        out["systems"][s] = {m: interval(point[s][m], boot[s][m]) for m in MEASURES}
        tr = topic_retrievability(*pairs[s], stores[s].doc_ids, w, topics, c=c)
        out["systems"][s]["most_unequal"] = tr.to_dict(top=3)["most_unequal"]
    for i, a in enumerate(SYSTEMS):
        for bsys in SYSTEMS[i + 1:]:
            cell = {}
            for m in MEASURES:
                diff = boot[a][m] - boot[bsys][m]
                diff = diff[np.isfinite(diff)]
                lo, hi = np.quantile(diff, [0.025, 0.975])
                p = min(1.0, 2 * min(float((diff <= 0).mean()), float((diff >= 0).mean())))
                cell[m] = {"value": point[a][m] - point[bsys][m], "lo": float(lo), "hi": float(hi), "p": p}
            out["pairs"][f"{a}-{bsys}"] = cell
    for m in MEASURES:
        out["order"][m] = sorted(SYSTEMS, key=lambda s: point[s][m])  # fairest (lowest Gini) first
    out["sweep"] = sweep(setting, pairs, stores, w, first, c, seed)
    out["seconds_retrievability"] = time.perf_counter() - t0
    if rfile is not None:
        out["distfair"] = run_distfair(setting, name, stores, rfile, topics, idx, seed, c)
    else:
        out["distfair_reference"] = run_distfair_reference(setting, name, stores, topics, idx, seed, c)
    out["load"] = list(os.getloadavg())
    return out


def sweep(setting: str, pairs: dict, stores: dict, w: np.ndarray, first, c: int, seed: int) -> list[dict]:
    """Point estimates of the per-topic aggregates and the systems' order for other K (TF-IDF
    topics) and, where the log's query vectors exist (the demo audit's, for ``debian-log``), for
    K-means over those vectors (all-MiniLM-L6-v2): does the order depend on the topic model?"""
    texts = first.queries.texts.tolist()
    nq = len(w)
    models = [("tfidf", k) for k in (5, 10, 20, 50) if k <= max(1, nq // 5)]
    vec = ROOT / "demo-out" / "systems" / "query_vectors.npy" if setting == "debian-log" else None
    if vec is not None and vec.exists():
        models += [("vectors", k) for k in (10, 20, 50)]
        x = np.load(vec)
        if x.shape[0] != nq:
            raise SystemExit(f"{vec}: {x.shape[0]} rows for {nq} queries")
    rows = []
    for model, k in models:  # a handful of topic models
        topics = topics_from_texts(texts, k, seed) if model == "tfidf" else topics_from_vectors(x, k, seed)
        row = {"model": topics.method, "k": k}
        for s in SYSTEMS:
            summ = topic_retrievability(*pairs[s], stores[s].doc_ids, w, topics, c=c).summary
            row[s] = {m: summ[m] for m in ("topic_gini_min", "topic_gini_mean", "topic_gini_max",
                                           "topic_gini_mean_weighted")}
        row["order_mean"] = sorted(SYSTEMS, key=lambda s: row[s]["topic_gini_mean"])
        row["order_weighted"] = sorted(SYSTEMS, key=lambda s: row[s]["topic_gini_mean_weighted"])
        rows.append(row)
        print(f"  {setting} {topics.method} K={k}: order {row['order_mean']}", flush=True)
    return rows


def _short(summary: dict) -> dict:
    keep = {k: summary[k] for k in VALUES}
    return {**keep, "fairwashing": summary["fairwashing"], "bound": summary["bound"],
            "n_queries_used": summary["n_queries_used"], "n_groups": summary["n_groups"],
            "groups_source": summary["groups_source"], "merit": summary["merit"]}


def run_distfair(setting: str, name: str, stores: dict, rfile: Path, topics, idx: Path, seed: int,
                 c: int) -> dict:
    """DistFaiR per system: topic groups (BM25's assignment) and, for a catalog, its field."""
    first = stores["bm25"]
    q, d, rank, _ = first.pair_arrays()
    tgroups = topic_retrievability(q, d, rank, first.doc_ids, first.query_weights, topics, c=c).groups("share")
    groupings = {"topics": tgroups}
    if name in FIELDS:
        groupings["field"] = Groups.from_field(first, FIELDS[name], idx)
    qrels = read_trec_qrels(rfile)
    out: dict = {}
    for s, st in stores.items():
        merit = Merit.from_qrels(qrels, st, f"{setting} judgments")
        out[s] = {}
        for g, groups in groupings.items():
            t = time.perf_counter()
            res = distfair(st, merit, groups, n_boot=200, seed=seed)
            out[s][g] = {**_short(res.summary), "seconds": time.perf_counter() - t,
                         "sequence": res.sequence.to_dict("records")}
            print(f"  {setting} {s} {g}: aware {res.summary['individual_aware']['value']:.4f}, "
                  f"agnostic {res.summary['individual_agnostic']['value']:.4f}", flush=True)
    return out


def run_distfair_reference(setting: str, name: str, stores: dict, topics, idx: Path, seed: int, c: int,
                           n_boot: int = 100) -> dict:
    """DistFaiR over a log without judgments: each system's attention against the merit of each
    other system's scores (``Merit.from_reference``: an assumption, stated), in the log's order;
    groups as ``run_distfair``'s."""
    first = stores["bm25"]
    q, d, rank, _ = first.pair_arrays()
    groupings = {"topics": topic_retrievability(q, d, rank, first.doc_ids, first.query_weights, topics,
                                                c=c).groups("share")}
    if name in FIELDS:
        groupings["field"] = Groups.from_field(first, FIELDS[name], idx)
    out: dict = {}
    for s, st in stores.items():
        for ref, rst in stores.items():
            if ref == s:
                continue
            merit = Merit.from_reference(rst, st, ref)
            out[f"{s}|{ref}"] = {}
            for g, groups in groupings.items():
                t = time.perf_counter()
                res = distfair(st, merit, groups, n_boot=n_boot, seed=seed)
                out[f"{s}|{ref}"][g] = {**_short(res.summary), "seconds": time.perf_counter() - t,
                                        "sequence": res.sequence.to_dict("records")}
                print(f"  {setting} {s} (merit: {ref}) {g}: aware {res.summary['individual_aware']['value']:.4f}, "
                      f"agnostic {res.summary['individual_agnostic']['value']:.4f} "
                      f"({time.perf_counter() - t:.0f} s)", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-topics"))
    ap.add_argument("--settings", default="debian-log,adi,med,cacm,cranfield,movies-click,debian-click,npl,"
                                          "scifact,movies-log")
    ap.add_argument("--boot", type=int, default=200)
    ap.add_argument("--boot-log", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    (HERE / "results").mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    for setting in a.settings.split(","):
        t = time.perf_counter()
        try:
            res = run_setting(setting, a.work, a.boot_log if setting.endswith("-log") else a.boot, a.seed)
        except Exception as e:  # noqa: BLE001 - one setting's failure is reported, the others run
            import traceback

            traceback.print_exc()
            print(f"{setting}: FAILED ({e})", flush=True)
            continue
        res["seconds"] = time.perf_counter() - t
        with atomic_path(HERE / "results" / f"{setting}.json") as tmp:
            tmp.write_text(json.dumps(res, indent=1, ensure_ascii=False))
        g = res["systems"]
        print(f"{setting}: order by global Gini {res['order']['gini_global']}, by mean topic Gini "
              f"{res['order']['topic_mean']}; " + ", ".join(f"{s} {g[s]['gini_global']['value']:.3f}/"
                                                             f"{g[s]['topic_mean']['value']:.3f}" for s in SYSTEMS)
              + f" ({res['seconds']:.0f} s)", flush=True)
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
