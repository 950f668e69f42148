"""Simulated query variants against real reformulations found in the shared query log
(issue 23 item 4; Breuer, Fuhr & Schaer, ECIR 2022, query term similarity, Fig. 2 right).

Real variants: reformulation groups of the log's web-search sources
(``limelight.querygen.reformulations``: term sets sharing ≥ 2 stemmed non-stopword terms with
Jaccard ≥ 2/3; disjoint groups of a seed and up to 9 partners). The seed plays the topic text:
the simulators read it (as the paper's TTS reads the topic), and its partners are the real
variants they should resemble. Simulators that need nothing but the text: TTS S1, S2, S2', S3,
S3' (``limelight.querygen.simulation``) and the rule-based generators of Penha et al.
(``limelight.querygen.variations``, seed 0). KIS and S4 need relevance judgments, which no log
query has. Each simulated session has as many queries as the group has real variants.

Measures per group: the Jaccard of the unique terms of the real and of the simulated session
(the paper's measure), against the baseline of repeating the seed; per variant, its terms
kept from, added to and removed from the seed; and the coverage (share of the real variants'
terms that occur in the seed: the most a simulator that only reads the seed can reach).

    .venv/bin/python experiments/variations/log_variants.py

Writes experiments/variations/results/log_variants.json and log_groups.parquet, and
log_pairs_sample.tsv (50 random pairs; its ``same_need`` column holds a manual reading: y/n).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as st

from limelight.data.queries import Queries
from limelight.querygen.reformulations import (
    WEB_SOURCES,
    ReformulationRule,
    coverage,
    describe_pairs,
    find_reformulations,
    group_frame,
    read_query_log,
    reformulation_analyzer,
    reformulation_groups,
    term_jaccard,
    variant_profile,
)
from limelight.querygen.simulation import simulate_queries
from limelight.querygen.variations import generate_variations

RESULTS = Path(__file__).resolve().parent / "results"
TTS = ("S1", "S2", "S2'", "S3", "S3'")
MAX_SIZE = 10
SAMPLE = 50
AN = reformulation_analyzer()


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def simulated_sessions(seeds: Queries, sizes: dict[str, int]) -> dict[str, dict[str, list[str]]]:
    """``{simulator: {group id: [queries]}}``, each session cut to the group's number of real
    variants."""
    out: dict[str, dict[str, list[str]]] = {}
    nmax = max(sizes.values())
    for s in TTS:
        sim = simulate_queries(seeds, s, "TTS", nmax)
        sess: dict[str, list[str]] = {}
        for t, p, text in zip(sim.fields["topic"], sim.fields["position"], sim.texts, strict=True):
            if p < sizes[t]:
                sess.setdefault(t, []).append(text)
        out[f"TTS {s}"] = sess
    var = generate_variations(seeds, "all", n=nmax, seed=0)
    for m in var.methods:
        f = var.frame[var.frame["method"] == m]
        sess = {}
        for q, text in zip(f["qid"], f["text"], strict=True):
            if len(sess.get(q, [])) < sizes[q]:
                sess.setdefault(q, []).append(text)
        out[m] = sess
    return out


def adjacency(log: pd.DataFrame, n_random: int = 100_000) -> dict:
    """Per source: the share of neighbouring rows (file order) that the rule joins, against the
    share of random pairs of the same source (seed 0). Equal shares: the order carries no
    session."""
    an, rule, rng = AN, ReformulationRule(), np.random.default_rng(0)
    out = {}
    for src, g in log.groupby("source", sort=True):
        terms = [frozenset(an.tokenize(q)) for q in g["query"]]
        n = len(terms)
        if n < 3:
            continue
        adj = np.mean([rule.holds(terms[i], terms[i + 1]) for i in range(n - 1)])
        a, b = rng.integers(0, n, n_random), rng.integers(0, n, n_random)
        keep = a != b
        rnd = np.mean([rule.holds(terms[i], terms[j]) for i, j in zip(a[keep], b[keep], strict=True)])
        out[src] = {"rows": n, "adjacent": float(adj), "random": float(rnd)}
    return out


def added_hits(seed: str, variants: list[str], real: list[str]) -> tuple[int, int]:
    """(terms the simulated variants add to the seed, how many of them occur in the real variants)."""
    s = set(AN.tokenize(seed))
    r = {t for q in real for t in AN.tokenize(q)}
    added = {t for q in variants for t in AN.tokenize(q)} - s
    return len(added), len(added & r)


def sample_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    """50 random pairs (seed 0) for a manual reading; labels already in the file are kept."""
    path = RESULTS / "log_pairs_sample.tsv"
    smp = pairs.sample(n=min(SAMPLE, len(pairs)), random_state=0)[["a", "b", "jaccard", "text_a", "text_b"]]
    smp = smp.assign(same_need="")
    if path.exists():
        old = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
        labels = dict(zip(zip(old["text_a"], old["text_b"], strict=True), old["same_need"], strict=True))
        smp["same_need"] = [labels.get((a, b), "") for a, b in zip(smp["text_a"], smp["text_b"], strict=True)]
    smp.to_csv(path, sep="\t", index=False)
    return smp


def _num(x) -> float | None:
    """A float for JSON, ``None`` for NaN (no spread: every difference is 0)."""
    x = float(x)
    return None if x != x else x


def markdown(rows: dict) -> str:
    """The comparison table of docs/results-variations.md."""
    out = ["| variants | groups | variants | terms | kept | added | removed | Jaccard with seed | "
           "added terms found in the real variants | session Jaccard with the real variants | "
           "same for the seed | difference [95 % CI] |", "|---|" + "---:|" * 11]
    for name, r in rows.items():
        if name == "real variants":
            out.append(f"| real variants | {r['groups']} | {r['variants']} | {r['terms']:.2f} | {r['kept']:.2f} | "
                       f"{r['added']:.2f} | {r['removed']:.2f} | {r['jaccard']:.3f} | – | – | – | – |")
            continue
        hit = f"{r['added_in_real']}/{r['added_unique']}" if r["added_unique"] else "–"
        ci = r["diff_ci95"]
        diff = (f"{r['diff_vs_seed']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci[0] is not None
                else f"{r['diff_vs_seed']:+.3f}")
        out.append(f"| {name} | {r['groups']} | {r['variants']} | {r['terms']:.2f} | {r['kept']:.2f} | "
                   f"{r['added']:.2f} | {r['removed']:.2f} | {r['jaccard']:.3f} | {hit} | "
                   f"{r['jaccard_real']:.3f} | {r['jaccard_seed_same_groups']:.3f} | {diff} |")
    return "\n".join(out) + "\n"


def main() -> None:
    t0, l0 = time.time(), load()
    log = read_query_log(sources=WEB_SOURCES)
    t1 = time.time()
    pairs = find_reformulations(log["query"].tolist())
    t_pairs = time.time() - t1
    groups = reformulation_groups(pairs, max_size=MAX_SIZE)
    gf = group_frame(pairs, groups, log["query"].tolist())
    RESULTS.mkdir(parents=True, exist_ok=True)
    gf.to_parquet(RESULTS / "log_groups.parquet", index=False)
    smp = sample_pairs(pairs)
    labelled = smp[smp["same_need"].isin(["y", "n"])]

    gid = [f"g{g}" for g in range(len(groups))]
    seeds = Queries.from_lists(gid, [gf.loc[(gf.group == g) & (gf.position == 0), "text"].iloc[0]
                                     for g in range(len(groups))])
    real = {f"g{g}": gf.loc[(gf.group == g) & (gf.position > 0), "text"].tolist() for g in range(len(groups))}
    sizes = {k: len(v) for k, v in real.items()}
    t2 = time.time()
    sims = simulated_sessions(seeds, sizes)
    t_sim = time.time() - t2
    seed_text = dict(zip(gid, seeds.texts.tolist(), strict=True))

    base = np.array([term_jaccard(real[g], [seed_text[g]]) for g in gid])
    cov = np.array([coverage(seed_text[g], real[g]) for g in gid])
    real_prof = pd.concat([variant_profile(seed_text[g], real[g]) for g in gid], ignore_index=True)
    real_added = sum(len({t for q in real[g] for t in AN.tokenize(q)} - set(AN.tokenize(seed_text[g])))
                     for g in gid)
    rows = {"real variants": {"groups": len(gid), "variants": len(real_prof),
                              **{k: float(v) for k, v in real_prof.mean().items()}}}
    for name, sess in sims.items():
        jac = np.array([term_jaccard(real[g], sess[g]) if g in sess else np.nan for g in gid])
        ok = ~np.isnan(jac)
        d = jac[ok] - base[ok]
        prof = pd.concat([variant_profile(seed_text[g], sess[g]) for g in gid if g in sess], ignore_index=True)
        hits = np.array([added_hits(seed_text[g], sess[g], real[g]) for g in gid if g in sess])
        ci = st.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=st.sem(d)) if len(d) > 1 else (np.nan, np.nan)
        rows[name] = {"groups": int(ok.sum()), "variants": len(prof),
                      **{k: float(v) for k, v in prof.mean().items()},
                      "added_unique": int(hits[:, 0].sum()), "added_in_real": int(hits[:, 1].sum()),
                      "jaccard_real": float(jac[ok].mean()), "jaccard_seed_same_groups": float(base[ok].mean()),
                      "diff_vs_seed": float(d.mean()), "diff_ci95": [_num(ci[0]), _num(ci[1])],
                      "p_paired_t": _num(st.ttest_rel(jac[ok], base[ok]).pvalue) if len(d) > 1 else None}
    out = {
        "command": "experiments/variations/log_variants.py",
        "sources": list(WEB_SOURCES), "log_rows": len(log), "distinct_queries": len(pairs.attrs["texts"]),
        "rule": pairs.attrs["rule"], "pairs": describe_pairs(pairs),
        "groups": {"n": len(groups), "max_size": MAX_SIZE,
                   "size_counts": {int(k): int(v) for k, v in pd.Series([len(g) for g in groups]).value_counts().sort_index().items()},
                   "real_variants": int(sum(sizes.values()))},
        "adjacency": adjacency(log),
        "real_added_unique": int(real_added),
        "seed_baseline_jaccard": float(base.mean()),
        "coverage_mean": float(cov.mean()), "coverage_full_share": float((cov >= 1.0).mean()),
        "sample": {"n": len(smp), "labelled": len(labelled),
                   "same_need": int((labelled["same_need"] == "y").sum())},
        "comparison": rows,
        "seconds": {"read": round(t1 - t0, 1), "pairs": round(t_pairs, 1), "simulate": round(t_sim, 1),
                    "total": round(time.time() - t0, 1)},
        "load_before": l0, "load_after": load(),
    }
    (RESULTS / "log_variants.md").write_text(markdown(rows), encoding="utf-8")
    path = RESULTS / "log_variants.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False), encoding="utf-8")
    print(json.dumps({k: out[k] for k in ("pairs", "groups", "seed_baseline_jaccard", "coverage_mean",
                                          "sample", "seconds")}, indent=1))
    print(json.dumps(out["adjacency"], indent=1))
    for k, v in rows.items():
        print(f"{k:16s} " + " ".join(f"{a}={b:.3f}" if isinstance(b, float) else f"{a}={b}" for a, b in v.items()))


if __name__ == "__main__":
    main()
