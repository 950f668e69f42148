"""Render the issue-26 study's results as the tables and verdicts PLAN.md pre-registers.

    .venv/bin/python experiments/ctrlqgen/study_report.py --config experiments/ctrlqgen/debian.toml

Reads what the pipeline's stages wrote under the config's ``results`` folder (``exposure/*.json``,
``tests.json``, ``h2.json``, ``validity.json``, ``weaklabels/summary.json``, and
``ablation.json`` when the config has an ``[ablation]`` section), writes
``<results>/report.md`` (and ``<results>/h2.png``, the Figure 4 analog, once H2 has run)
atomically, and prints the report. A stage that has not run yet gives a "pending (stage X not
run)" section instead of an error. Nothing here computes a test: the differences, intervals and
p-values are the pipeline's (``stats.py``); the Wilson intervals of the weak-label agreement are
``stats.wilson``.

The verdicts (PLAN.md, "Verdicts (decided now)" and "H2") are pure functions of the numbers
(``h1_component``, ``h1_overall``, ``any_synthetic_count``, ``h2_verdict``, ``narrow_target``;
the ablation's findings (I) and (II) of the amendment 2026-11-25: ``finding_serialization``,
``finding_weaklabeling_un``).
The plan's cutoffs c = 100 (verdict) and c = 10 (the "partly" clause) are the largest and the
smallest of the config's ``tests.cutoffs`` (the same rule as the pipeline's H2 interaction).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stats  # noqa: E402  (experiments/ctrlqgen/stats.py)
from report import PAPER_BOOKS, PAPER_TRACKS_BROAD  # noqa: E402
from stages_eval import H1_PAIRS  # noqa: E402
from study import ABLATION_REFERENCE, Study, read_config  # noqa: E402

SYSTEM_ORDER = ("BM25", "zero-shot", "Click", "QGen", "InPars", "CtrlQGen_narrow",
                "CtrlQGen_broad", "CtrlQGen_both")
SYNTHETIC = ("QGen", "InPars", "CtrlQGen_narrow", "CtrlQGen_broad", "CtrlQGen_both")
# The paper's other columns of the two H1 comparisons (Gini at c = 100), beside PAPER_BOOKS
# (Table 2, Books) and PAPER_TRACKS_BROAD (Table 3, Tracks_broad) of report.py.
PAPER_GINI_OTHER = {
    "Tracks": {"CtrlQGen_narrow": 0.693, "Click": 0.856},          # Table 2, rows f and h
    "Podcasts": {"CtrlQGen_narrow": 0.676, "Click": 0.763},        # Table 2, rows f and h
    "Podcasts_broad": {"CtrlQGen_broad": 0.831, "Click": 0.846},   # Table 3, rows a and b
}
NARROW_TARGET = 0.80
# The paper's Table 4 (ablation; "-": not reported; †: significantly better than QGen, its t-test)
PAPER_TABLE4_COLUMNS = ("R@100 Tracks", "R@100 Podcasts", "R@100 Books", "Gini Tracks",
                        "Gini Podcasts", "Gini Books", "R@100 Tracks_broad",
                        "R@100 Podcasts_broad", "Gini Tracks_broad", "Gini Podcasts_broad")
PAPER_TABLE4 = {
    "QGen": ("0.289", "0.512", "0.756", "0.701", "0.674", "0.766", "0.009", "0.744", "0.540", "0.820"),
    "+(1)": ("0.312†", "0.509", "0.761†", "0.694†", "0.666†", "0.761†", "0.006", "0.711", "0.528†",
             "0.824"),
    "+(2a,3)": ("0.305†", "0.505", "0.761†", "0.688†", "0.669†", "0.756†", "0.008", "0.751", "0.528†",
                "0.820"),
    "+(2a,2b,3)": ("0.289", "0.508", "-", "0.704", "0.704", "-", "0.036†", "0.787†", "0.486†", "0.829"),
    "+(1,2a,3)": ("0.300†", "0.522†", "0.763†", "0.694†", "0.676", "0.760†", "0.007", "0.713",
                  "0.522†", "0.822"),
    "+(1,2a,2b,3)": ("0.283", "0.490", "-", "0.701", "0.674", "-", "0.033†", "0.780†", "0.480†",
                     "0.833"),
}
ABLATION_ROW_LABEL = {"QGen": "QGen", "+(1)": "+(1) serialization",
                      "+(2a,3)": "+(2a,3) intent-aware, IP",
                      "+(2a,2b,3)": "+(2a,2b,3) intent-aware, IP+Un",
                      "+(1,2a,3)": "+(1,2a,3) CtrlQGen, IP",
                      "+(1,2a,2b,3)": "+(1,2a,2b,3) CtrlQGen, IP+Un"}
SET_LABEL = {"test": "Click test", "broad_test": "broad test", "log": "query-log sample"}

# ---- verdict rules (pure functions of the numbers) ---------------------------------------------


@dataclass(frozen=True)
class Diff:
    """One tested difference a − b: point estimate, 95 % interval, raw and corrected p."""

    diff: float
    low: float
    high: float
    p: float
    p_bonf: float

    @classmethod
    def from_json(cls, t: dict) -> Diff:
        return cls(t["diff"], t["low"], t["high"], t["p"], t.get("p_bonf", math.nan))

    def flipped(self) -> Diff:
        """The same test read as b − a."""
        return Diff(-self.diff, -self.high, -self.low, self.p, self.p_bonf)


def significant(p_bonf: float, alpha: float = 0.05) -> bool:
    """Corrected p strictly below α (p_bonf = α is not significant)."""
    return p_bonf < alpha


def h1_component(d: Diff | None, alpha: float = 0.05) -> str:
    """H1-narrow / H1-broad from Gini(synthetic) − Gini(Click): *reproduced* if negative with
    corrected p < α, *refuted* if positive with corrected p < α, *not reproduced* otherwise;
    *not tested* when the pair is not in the results."""
    return _plan_verdict((d,), lambda: significantly_lower(d, alpha),
                         lambda: significantly_higher(d, alpha))


def h1_overall(narrow: str, broad: str, narrow_low: str = "not reproduced",
               broad_low: str = "not reproduced") -> str:
    """H1 overall from the component verdicts at c = 100 (``narrow``, ``broad``) and c = 10
    (``*_low``), the plan's rules in their written order (the first that applies):
    *reproduced* if both are reproduced; *partly* if one is, or if neither is at c = 100 but
    one is at c = 10; *refuted* if one is refuted and none reproduced; *not reproduced*
    otherwise. *incomplete* when a c = 100 component was not tested."""
    if "not tested" in (narrow, broad):
        return "incomplete"
    at_100 = [narrow, broad]
    if at_100.count("reproduced") == 2:
        return "reproduced"
    if "reproduced" in at_100 or "reproduced" in (narrow_low, broad_low):
        return "partly"
    if "refuted" in at_100:
        return "refuted"
    return "not reproduced"


def any_synthetic_count(diffs: dict[str, Diff | None], alpha: float = 0.05) -> tuple[int, int]:
    """The paper's "any synthetic set" claim: (number of the synthetic sets with a significantly
    lower Gini than Click, number tested); ``diffs``: Gini(set) − Gini(Click) per set."""
    tested = [d for d in diffs.values() if d is not None]
    return sum(significant(d.p_bonf, alpha) and d.diff < 0 for d in tested), len(tested)


def h2_verdict(effect: Diff | None, interaction: Diff | None, alpha: float = 0.05) -> str:
    """H2 from the CtrlQGen_broad effect Gini(Q ∪ S) − Gini(Q ∪ C) at c = 100 and the
    interaction (CtrlQGen_broad effect − Click effect): *reproduced* if both are negative with
    corrected p < α; *partly* if only the effect is; *refuted* if the effect is positive with
    corrected p < α; *not reproduced* otherwise; *not tested* when either is missing."""
    if effect is None or interaction is None:
        return "not tested"
    if significant(effect.p_bonf, alpha) and effect.diff < 0:
        if significant(interaction.p_bonf, alpha) and interaction.diff < 0:
            return "reproduced"
        return "partly"
    if significant(effect.p_bonf, alpha) and effect.diff > 0:
        return "refuted"
    return "not reproduced"


def significantly_lower(d: Diff | None, alpha: float = 0.05) -> bool:
    """a − b negative with corrected p < α."""
    return d is not None and significant(d.p_bonf, alpha) and d.diff < 0


def significantly_higher(d: Diff | None, alpha: float = 0.05) -> bool:
    """a − b positive with corrected p < α."""
    return d is not None and significant(d.p_bonf, alpha) and d.diff > 0


def _plan_verdict(diffs: tuple[Diff | None, ...], reproduced: Callable[[], bool],
                  refuted: Callable[[], bool]) -> str:
    """A finding's verdict by the plan's rules in their written order: *not tested* when a pair
    is missing (``None`` among ``diffs``), *reproduced* if ``reproduced()``, *refuted* if
    ``refuted()`` (both asked only when every pair is there), *not reproduced* otherwise."""
    if any(d is None for d in diffs):
        return "not tested"
    if reproduced():
        return "reproduced"
    if refuted():
        return "refuted"
    return "not reproduced"


def finding_serialization(gini: list[Diff | None], r100: list[Diff | None],
                          alpha: float = 0.05) -> str:
    """Finding (I), *serialization helps*, from its two pairs (+(1) vs QGen and +(1,2a,2b,3) vs
    +(2a,2b,3)) on the narrow columns: ``gini`` their Gini(a) − Gini(b) on the Click test at
    c = 100, ``r100`` their R@100(a) − R@100(b) on the Click test. *reproduced* if both have a
    lower Gini with corrected p < α and neither a significantly lower R@100; *refuted* if
    either has a significantly higher Gini; *not reproduced* otherwise; *not tested* when a
    pair is missing."""
    return _plan_verdict(
        (*gini, *r100),
        lambda: all(significantly_lower(d, alpha) for d in gini)
        and not any(significantly_lower(d, alpha) for d in r100),
        lambda: any(significantly_higher(d, alpha) for d in gini))


def finding_weaklabeling_un(broad_r100: list[Diff | None], click_r100: list[Diff | None],
                            alpha: float = 0.05) -> str:
    """Finding (II), *WeakLabeling-Un helps only the broad set*, from its two pairs
    (+(2a,2b,3) vs +(2a,3) and +(1,2a,2b,3) vs +(1,2a,3)): R@100(a) − R@100(b) on the broad test
    (``broad_r100``) and on the Click test (``click_r100``). The plan's rules in their written
    order (the first that applies): *reproduced* if the broad-test R@100 is significantly higher
    (corrected) in at least one pair and the Click-test R@100 is not significantly higher in
    either; *refuted* if the broad-test R@100 is significantly lower in either; *not
    reproduced* otherwise; *not tested* when a pair is missing."""
    return _plan_verdict(
        (*broad_r100, *click_r100),
        lambda: any(significantly_higher(d, alpha) for d in broad_r100)
        and not any(significantly_higher(d, alpha) for d in click_r100),
        lambda: any(significantly_lower(d, alpha) for d in broad_r100))


def narrow_target(share: float, target: float = NARROW_TARGET) -> str:
    """The acceptance item: narrow-query validity (share with a narrow-field term) ≥ 80 %."""
    return "met" if share >= target else "not met"


# ---- reading the results -----------------------------------------------------------------------


def _read(p: Path) -> dict | None:
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None


def load_results(results: Path) -> dict:
    """Every result file the report reads (None where its stage has not run)."""
    exp = {}
    if (results / "exposure").is_dir():
        for p in sorted((results / "exposure").glob("*.json")):
            exp[p.stem] = json.loads(p.read_text(encoding="utf-8"))["summary"]
    return {"exposure": exp, "tests": _read(results / "tests.json"),
            "h2": _read(results / "h2.json"), "validity": _read(results / "validity.json"),
            "weaklabels": _read(results / "weaklabels" / "summary.json"),
            "ablation": _read(results / "ablation.json"),
            "h2_queries": _read_h2_queries(results / "h2_queries.parquet")}


def _read_h2_queries(p: Path) -> list[dict] | None:
    if not p.exists():
        return None
    import pandas as pd

    return pd.read_parquet(p, columns=["system", "suggestion", "control"]).to_dict("records")


def systems(cfg: dict) -> dict[str, list[str]]:
    """Each configured system (baselines, then the trained sets in the paper's order) and its
    models (``<set>-s<seed>``; a baseline is one model)."""
    out = {b: [b] for b in cfg["exposure"].get("baselines", [])}
    seeds = cfg["biencoder"]["seeds"]
    for s in cfg["biencoder"]["sets"]:
        out[s] = [f"{s}-s{seed}" for seed in seeds]
    rank = {s: i for i, s in enumerate(SYSTEM_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def cutoffs(cfg: dict) -> tuple[int, int]:
    """(the plan's c = 10, its c = 100): the smallest and the largest configured cutoff."""
    cs = cfg["tests"]["cutoffs"]
    return min(cs), max(cs)


def pending(stage: str) -> str:
    return f"pending (stage {stage} not run)"


# ---- formatting --------------------------------------------------------------------------------


def _mean_sd(vals: list[float]) -> tuple[float, float]:
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return m, sd


def fmt_seeds(vals: list[float], per_seed: bool = False) -> str:
    """``mean ± sd`` over seeds (sample sd), with the per-seed values if asked; one value alone."""
    if not vals:
        return "pending"
    if len(vals) == 1:
        return f"{vals[0]:.3f}"
    m, sd = _mean_sd(vals)
    out = f"{m:.3f} ± {sd:.3f}"
    return out + f" ({', '.join(f'{v:.3f}' for v in vals)})" if per_seed else out


def fmt_p(p: float) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "–"
    return "1" if p >= 1 else f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def fmt_diff(d: Diff) -> str:
    return f"{d.diff:+.4f} [{d.low:+.4f}, {d.high:+.4f}]"


def fmt_rel(diff: float, ref: float | None) -> str:
    return "–" if not ref else f"{100 * diff / ref:+.1f} %"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


# ---- 1-2. Tables 2 and 3 analogs ---------------------------------------------------------------


def system_table(cfg: dict, exposure: dict, qset: str, paper: dict | None,
                 paper_label: str) -> list[str]:
    """One row per system: R@100, Gini at both cutoffs (mean ± sd, per seed), retrievable
    fraction at both cutoffs (seed means), and the paper's values."""
    lo, hi = cutoffs(cfg)
    header = ["system", "seeds", "R@100", f"Gini c = {lo}", f"Gini c = {hi}",
              f"retrievable c = {lo} / {hi}"]
    if paper is not None:
        header += [f"paper {paper_label} R@100", f"paper {paper_label} Gini (c = 100)"]
    rows = []
    for sy, models in systems(cfg).items():
        summ = [exposure[m][qset] for m in models if m in exposure and qset in exposure[m]]
        rec = [s["R@100"] for s in summ if "R@100" in s]
        ret = " / ".join(f"{_mean_sd([s[f'retrievable_c{c}'] for s in summ])[0]:.3f}"
                         for c in (lo, hi)) if summ else "pending"
        row = [sy, f"{len(summ)}/{len(models)}", fmt_seeds(rec) if rec else "–" if summ else "pending",
               fmt_seeds([s[f"gini_c{lo}"] for s in summ], per_seed=True),
               fmt_seeds([s[f"gini_c{hi}"] for s in summ], per_seed=True), ret]
        if paper is not None:
            pv = paper.get(sy)
            row += [f"{pv[0]:.3f}", f"{pv[1]:.3f}"] if pv else ["–", "–"]
        rows.append(row)
    return table(header, rows)


def section_systems(cfg: dict, res: dict, qset: str, title: str, paper: dict | None,
                    paper_label: str, note: str) -> list[str]:
    out = [f"## {title}", ""]
    if not res["exposure"]:
        return out + [pending("exposure"), ""]
    n_q = next((s[qset]["n_queries"] for s in res["exposure"].values() if qset in s), None)
    out += [f"{SET_LABEL[qset]}: {n_q} queries. R@100: seed mean ± sd; Gini: seed mean ± sd "
            "(per-seed values); retrievable fraction (r(e) > 0): seed mean. " + note, ""]
    out += system_table(cfg, res["exposure"], qset, paper, paper_label)
    return out + [""]


# ---- 3. the H1 family --------------------------------------------------------------------------


def h1_columns(cfg: dict) -> dict[str, str]:
    """tests.json key → label of the six pre-registered metric columns."""
    lo, hi = cutoffs(cfg)
    out = {"R@100 test": "R@100, Click test", "R@100 broad_test": "R@100, broad test"}
    for s in ("test", "broad_test"):
        for c in (lo, hi):
            out[f"Gini {s} c{c}"] = f"Gini, {SET_LABEL[s]}, c = {c}"
    return out


def _ref_value(col: dict, system: str) -> float | None:
    v = col["systems"].get(system, {})
    return v.get("R@100", v.get("gini"))


def section_tests(cfg: dict, res: dict) -> list[str]:
    out = ["## 3. H1 family: the planned pairs × six metric columns", ""]
    t = res["tests"]
    if t is None:
        return out + [pending("tests"), ""]
    m = t["bonferroni_m"]
    missing = [f"{a} vs {b}" for a, b in H1_PAIRS if f"{a} vs {b}" not in t["pairs"]
               and f"{a} vs {b}" not in t["exploratory_pairs"]]
    out += [f"Difference a − b with its two-level bootstrap 95 % interval; R@100: raw p of the "
            f"paired t-test over queries; Gini: the bootstrap p. Bonferroni over the {m} planned "
            f"pairs of each column (α = {cfg['tests']['alpha']}); * = corrected p < α.", ""]
    if missing:
        out += [f"Not in this run (a system not configured; m = {m}): {', '.join(missing)}.", ""]
    if t["exploratory_pairs"]:
        out += ["Exploratory pairs (outside the family, same factor): "
                + ", ".join(t["exploratory_pairs"]) + ".", ""]
    for key, label in h1_columns(cfg).items():
        col = t.get(key)
        out += [f"**{label}**", ""]
        if col is None:
            out += ["not in tests.json", ""]
            continue
        rows = []
        for name in t["pairs"] + t["exploratory_pairs"]:
            d = Diff.from_json(col["tests"][name])
            ref = _ref_value(col, name.split(" vs ")[1])
            rows.append([name, fmt_diff(d), fmt_rel(d.diff, ref), fmt_p(d.p),
                         fmt_p(d.p_bonf) + (" *" if significant(d.p_bonf, cfg["tests"]["alpha"])
                                            else "")])
        out += table(["pair a vs b", "a − b [95 % CI]", "relative to b", "p (raw)",
                      f"p (Bonferroni, m = {m})"], rows) + [""]
    return out


# ---- 4. verdicts -------------------------------------------------------------------------------


def gini_diff(tests: dict | None, qset: str, c: int, a: str, b: str) -> Diff | None:
    """Gini(a) − Gini(b) from tests.json, whichever way round the pair was tested."""
    col = (tests or {}).get(f"Gini {qset} c{c}")
    if col is None:
        return None
    if f"{a} vs {b}" in col["tests"]:
        return Diff.from_json(col["tests"][f"{a} vs {b}"])
    if f"{b} vs {a}" in col["tests"]:
        return Diff.from_json(col["tests"][f"{b} vs {a}"]).flipped()
    return None


def _paper_effects(which: str) -> str:
    if which == "narrow":
        cols = {"Books": (PAPER_BOOKS["CtrlQGen_narrow"][1], PAPER_BOOKS["Click"][1]),
                **{k: (PAPER_GINI_OTHER[k]["CtrlQGen_narrow"], PAPER_GINI_OTHER[k]["Click"])
                   for k in ("Tracks", "Podcasts")}}
    else:
        cols = {"Tracks_broad": (PAPER_TRACKS_BROAD["CtrlQGen_broad"][1],
                                 PAPER_TRACKS_BROAD["Click"][1]),
                "Podcasts_broad": (PAPER_GINI_OTHER["Podcasts_broad"]["CtrlQGen_broad"],
                                   PAPER_GINI_OTHER["Podcasts_broad"]["Click"])}
    return "; ".join(f"{k} {s:.3f} vs {c:.3f} ({s - c:+.3f}, {fmt_rel(s - c, c)})"
                     for k, (s, c) in cols.items())


def _effect_line(d: Diff | None, ref: float | None, m: int | str) -> str:
    if d is None:
        return "not tested"
    return (f"{fmt_diff(d)}, relative {fmt_rel(d.diff, ref)}, p = {fmt_p(d.p)}, "
            f"corrected p = {fmt_p(d.p_bonf)} (m = {m})")


def h1_verdicts(cfg: dict, tests: dict | None) -> dict:
    """The numbers and verdicts of H1-narrow, H1-broad, H1 overall and the synthetic count."""
    alpha, (lo, hi) = cfg["tests"]["alpha"], cutoffs(cfg)
    out = {}
    for which, qset in (("narrow", "test"), ("broad", "broad_test")):
        sy = f"CtrlQGen_{which}"
        for c in (hi, lo):
            d = gini_diff(tests, qset, c, sy, "Click")
            col = (tests or {}).get(f"Gini {qset} c{c}", {"systems": {}})
            out[(which, c)] = {"diff": d, "verdict": h1_component(d, alpha),
                               "ref": _ref_value(col, "Click"), "system": sy, "qset": qset}
    out["overall"] = h1_overall(out[("narrow", hi)]["verdict"], out[("broad", hi)]["verdict"],
                                out[("narrow", lo)]["verdict"], out[("broad", lo)]["verdict"])
    out["synthetic"] = {s: gini_diff(tests, "test", hi, s, "Click") for s in SYNTHETIC
                        if s in cfg["biencoder"]["sets"]}
    out["count"] = any_synthetic_count(out["synthetic"], alpha)
    return out


def section_h1_verdicts(cfg: dict, res: dict) -> list[str]:
    out = ["## 4. Verdicts (PLAN.md, pre-registered rules)", "", "### H1", ""]
    t = res["tests"]
    if t is None:
        return out + [pending("tests"), ""]
    alpha, (lo, hi) = cfg["tests"]["alpha"], cutoffs(cfg)
    m, v = t["bonferroni_m"], h1_verdicts(cfg, t)
    for which, label in (("narrow", "H1-narrow"), ("broad", "H1-broad")):
        a = v[(which, hi)]
        out += [f"- **{label}: {a['verdict']}** — Gini({a['system']}) − Gini(Click), "
                f"{SET_LABEL[a['qset']]}, c = {hi}: {_effect_line(a['diff'], a['ref'], m)}. "
                f"At c = {lo}: {_effect_line(v[(which, lo)]['diff'], v[(which, lo)]['ref'], m)} "
                f"→ {v[(which, lo)]['verdict']}. Paper (CtrlQGen vs Click, Gini at c = 100): "
                f"{_paper_effects(which)}."]
    out += [f"- **H1 overall: {v['overall']}** (reproduced if both are; partly if one is, or if "
            f"neither is at c = {hi} but one is at c = {lo}; refuted if one is refuted and none "
            f"reproduced; not reproduced otherwise; α = {alpha} on Bonferroni-corrected p)."]
    k, n = v["count"]
    out += [f"- **Any synthetic set: {k} of {n}** synthetic sets have a significantly lower Gini "
            f"than Click (Click test, c = {hi}; paper, Table 2 rows d, e, f vs h: all of them, "
            "≈ −10 % on average):", ""]
    rows = [[s, _effect_line(d, _ref_value(t[f'Gini test c{hi}'], 'Click'), m) if d else "not tested",
             "yes" if d and significant(d.p_bonf, alpha) and d.diff < 0 else "no"]
            for s, d in v["synthetic"].items()]
    out += table(["set", f"Gini(set) − Gini(Click) [95 % CI], c = {hi}", "significantly lower"],
                 rows) + [""]
    out += ["CtrlQGen vs QGen (paper: −3 % Gini, +24 % R@100 on average): reported per metric "
            "in section 3, no verdict beyond the tests (plan)."]
    return out + [""]


def h2_diffs(h2: dict | None, cfg: dict) -> tuple[Diff | None, Diff | None, dict]:
    """(CtrlQGen_broad effect at c = 100, interaction, the effect's row) from h2.json."""
    hi = cutoffs(cfg)[1]
    rows = (h2 or {}).get("tests", {})
    eff = rows.get(f"CtrlQGen_broad: suggestions vs control, c={hi}")
    inter = next((r for k, r in rows.items() if k.startswith("interaction (CtrlQGen_broad effect")
                  and k.endswith(f"c={hi}")), None)
    return (Diff.from_json(eff) if eff else None,
            Diff.from_json(inter) if inter else None, eff or {})


def section_h2_verdict(cfg: dict, res: dict) -> list[str]:
    out = ["### H2", ""]
    h2 = res["h2"]
    if h2 is None:
        return out + [pending("h2"), ""]
    alpha, hi = cfg["tests"]["alpha"], cutoffs(cfg)[1]
    eff, inter, row = h2_diffs(h2, cfg)
    m = len(h2["tests"])
    out += [f"- **H2: {h2_verdict(eff, inter, alpha)}** (reproduced if the CtrlQGen_broad effect "
            f"at c = {hi} and the interaction are both negative with corrected p < {alpha}; partly "
            "if only the effect; refuted if the effect is positive with corrected p < "
            f"{alpha}; not reproduced otherwise; Bonferroni m = {m}).",
            f"- CtrlQGen_broad effect, Gini(Q ∪ S) − Gini(Q ∪ C) at 100 % acceptance, c = {hi} "
            f"(Gini {row.get('gini_S', math.nan):.4f} vs {row.get('gini_C', math.nan):.4f}): "
            f"{_effect_line(eff, row.get('gini_C'), m)}.",
            f"- Interaction (CtrlQGen_broad effect − Click effect), c = {hi}: "
            f"{_effect_line(inter, None, m)}.",
            "- Paper (Figure 4): Gini down by up to 11 % (Tracks) and 7 % (Podcasts) at full "
            "acceptance under the broad-trained model; no such drop under the Click model.", ""]
    rows = [[k, fmt_diff(Diff.from_json(r)), fmt_rel(r["diff"], r.get("gini_C")), fmt_p(r["p"]),
             fmt_p(r["p_bonf"]) + (" *" if significant(r["p_bonf"], alpha) else "")]
            for k, r in h2["tests"].items()]
    out += table(["H2 test (100 % acceptance)", "difference [95 % CI]", "relative to Q ∪ C",
                  "p (raw)", f"p (Bonferroni, m = {m})"], rows)
    return out + [""]


# ---- 5. H2 curves and figure -------------------------------------------------------------------


def section_h2_curves(cfg: dict, res: dict, figure: str | None) -> list[str]:
    out = ["## 5. H2 curves (Figure 4 analog, with the control)", ""]
    h2 = res["h2"]
    if h2 is None:
        return out + [pending("h2"), ""]
    out += [f"{h2['n_sampled_queries']} Click-test queries get suggestions; S = the accepted "
            "suggestions, C = as many other log queries at the same positions; seed-averaged "
            "Gini and retrievable fraction of Q ∪ S and Q ∪ C.", ""]
    rows = []
    for sy, cur in h2["curves"].items():
        for ck in sorted((k for k in cur if k.startswith("c")), key=lambda k: int(k[1:])):
            for r in cur[ck]:
                rows.append([sy, ck[1:], f"{100 * r['acceptance']:.0f} %",
                             f"{r['n_accepted']} / {cur['n_added']}", f"{r['gini_S']:.4f}",
                             f"{r['gini_C']:.4f}", f"{r['gini_S'] - r['gini_C']:+.4f}",
                             f"{r['retrievable_S']:.4f}", f"{r['retrievable_C']:.4f}"])
    out += table(["system", "c", "acceptance", "accepted", "Gini Q ∪ S", "Gini Q ∪ C",
                  "S − C", "retrievable Q ∪ S", "retrievable Q ∪ C"], rows) + [""]
    if figure:
        out += [f"![H2: Gini and retrievable fraction vs acceptance]({figure})", ""]
    if res.get("h2_queries"):
        out += h2_query_concentration(res["h2_queries"])
    return out


def h2_query_concentration(rows: list[dict], top: int = 10) -> list[str]:
    """Descriptive, not a planned test: how repetitive the added queries are. Each repeat of a
    text retrieves the same top-k, so a set dominated by a few texts concentrates exposure."""
    from collections import Counter

    out = ["How repetitive the added queries are (descriptive; `h2_queries.parquet`): distinct "
           f"texts, and the share of the added queries that are one of the {top} most frequent "
           "texts.", ""]
    body, tops = [], {}
    for sy in dict.fromkeys(r["system"] for r in rows):
        for kind in ("suggestion", "control"):
            cnt = Counter(r[kind] for r in rows if r["system"] == sy)
            n = sum(cnt.values())
            common = cnt.most_common(top)
            body.append([sy, "suggestions S" if kind == "suggestion" else "control C", str(n),
                         str(len(cnt)), f"{100 * sum(c for _, c in common) / n:.1f} %"])
            if kind == "suggestion":
                tops[sy] = ", ".join(f"`{t}` {c}" for t, c in common)
    out += table(["system", "set", "queries", "distinct texts", f"in the {top} most frequent"],
                 body) + [""]
    out += [f"- most frequent suggestions, {sy}: {t}" for sy, t in tops.items()] + [""]
    return out


def h2_figure(h2: dict, path: Path, title: str) -> None:
    """Gini (top) and retrievable fraction (bottom) vs acceptance, one column per cutoff;
    solid: Q ∪ S (suggestions), dashed: Q ∪ C (control). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from limelight._io import atomic_path

    cks = sorted({k for cur in h2["curves"].values() for k in cur if k.startswith("c")},
                 key=lambda k: int(k[1:]))
    fig, axes = plt.subplots(2, len(cks), figsize=(4.5 * len(cks), 6.5), squeeze=False)
    for j, ck in enumerate(cks):
        for i, (metric, label) in enumerate((("gini", "Gini"), ("retrievable", "retrievable fraction"))):
            ax = axes[i][j]
            for n, (sy, cur) in enumerate(h2["curves"].items()):
                x = [100 * r["acceptance"] for r in cur.get(ck, [])]
                for kind, ls in (("S", "-"), ("C", "--")):
                    ax.plot(x, [r[f"{metric}_{kind}"] for r in cur.get(ck, [])], ls, marker="o",
                            color=f"C{n}", label=f"{sy}, Q ∪ {kind}")
            ax.set_xlabel("acceptance of suggestions (%)")
            ax.set_ylabel(f"{label}, c = {ck[1:]}")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


# ---- 6. validity -------------------------------------------------------------------------------


def fmt_share(share: float, ci: list[float] | tuple[float, float]) -> str:
    return f"{100 * share:.1f} % [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def section_validity(cfg: dict, res: dict) -> list[str]:
    out = ["## 6. Validity (acceptance items)", ""]
    v = res["validity"]
    if v is None:
        out += [pending("validity"), ""]
    else:
        src = v["sources"]
        nar, brd = src.get("CtrlQGen narrow"), src.get("CtrlQGen broad")
        if nar:
            out += [f"- **Narrow validity: {narrow_target(nar['share_term_with_narrow_field'])}** "
                    f"(target ≥ {100 * NARROW_TARGET:.0f} %): "
                    f"{fmt_share(nar['share_term_with_narrow_field'], nar['share_ci95'])} of "
                    f"n = {nar['n']} CtrlQGen narrow queries share a term with a narrow field "
                    "(95 % Wilson interval)."]
        if brd:
            out += [f"- Broad queries labelled broad by WeakLabeling-IP: "
                    f"{fmt_share(brd['ip_predicts_broad'], brd['ip_ci95'])}, n = {brd['n']}."]
        rows = []
        for name, s in src.items():
            it = name.split()[-1]
            rows.append([name, str(s["n"]), str(s["n_entities"]),
                         fmt_share(s["share_term_with_narrow_field"], s["share_ci95"]),
                         fmt_share(s[f"ip_predicts_{it}"], s["ip_ci95"]),
                         f"{100 * s['exact_in_click_log']:.1f} %",
                         f"{100 * s['not_substring_of_entity']:.1f} %",
                         f"{100 * s['differs_from_generator_training_queries']:.1f} %"])
        out += [""] + table(["queries", "n", "entities", "term in a narrow field [95 % CI]",
                             "IP predicts the intent [95 % CI]", "exact in Click log",
                             "not a substring of s(e)", "not a generator training query"],
                            rows) + [""]
    out += weaklabel_agreement(res["weaklabels"])
    return out


def weaklabel_agreement(wl: dict | None) -> list[str]:
    """WeakLabeling-IP agreement with the WeakLabeling-Un intents of the Click pairs (stage
    weaklabels), with 95 % Wilson intervals (``stats.wilson``)."""
    if wl is None:
        return ["WeakLabeling-IP agreement with the Click pairs' intents: " + pending("weaklabels"), ""]
    rows = []
    for it, a in wl["ip_agreement_with_wl_un_intent"].items():
        k = round(a["agreement"] * a["n"])
        rows.append([it, str(a["n"]), fmt_share(a["agreement"], stats.wilson(k, a["n"]))])
    return (["WeakLabeling-IP agreement with the intents of the Click pairs (stage weaklabels):", ""]
            + table(["intent", "n", "agreement [95 % Wilson]"], rows) + [""])


# ---- 7. the Table 4 analog (PLAN.md amendment 2026-11-25) --------------------------------------


def ablation_columns(cfg: dict) -> dict[str, str]:
    """ablation.json column → label: the narrow columns (Click test, narrow models), then the
    broad ones (broad test, broad models)."""
    lo, hi = cutoffs(cfg)
    out = {}
    for s, side in (("test", "narrow"), ("broad_test", "broad")):
        out[f"R@100 {s}"] = f"R@100, {SET_LABEL[s]} ({side} models)"
        for c in (lo, hi):
            out[f"Gini {s} c{c}"] = f"Gini, {SET_LABEL[s]}, c = {c} ({side} models)"
    return out


def ablation_diff(abl: dict | None, col: str, a: str, b: str) -> Diff | None:
    """a − b in one ablation.json column, whichever way round the pair was tested."""
    tests = ((abl or {}).get("columns", {}).get(col) or {}).get("tests", {})
    if f"{a} vs {b}" in tests:
        return Diff.from_json(tests[f"{a} vs {b}"])
    if f"{b} vs {a}" in tests:
        return Diff.from_json(tests[f"{b} vs {a}"]).flipped()
    return None


def ablation_verdicts(cfg: dict, abl: dict | None) -> dict:
    """The numbers and verdicts of findings (I) and (II) (amendment 2026-11-25)."""
    alpha, hi = cfg["tests"]["alpha"], cutoffs(cfg)[1]
    ser = [("+(1)", ABLATION_REFERENCE), ("+(1,2a,2b,3)", "+(2a,2b,3)")]
    un = [("+(2a,2b,3)", "+(2a,3)"), ("+(1,2a,2b,3)", "+(1,2a,3)")]
    cols = {"gini": f"Gini test c{hi}", "r_test": "R@100 test", "r_broad": "R@100 broad_test"}
    d = {(a, b, k): ablation_diff(abl, col, a, b) for a, b in ser + un for k, col in cols.items()}
    return {"serialization": finding_serialization([d[(a, b, "gini")] for a, b in ser],
                                                   [d[(a, b, "r_test")] for a, b in ser], alpha),
            "weaklabeling_un": finding_weaklabeling_un([d[(a, b, "r_broad")] for a, b in un],
                                                       [d[(a, b, "r_test")] for a, b in un], alpha),
            "pairs": {"serialization": ser, "weaklabeling_un": un}, "diffs": d, "cols": cols}


def _ablation_cell(col: dict, row: str, alpha: float) -> str:
    """A row's value in a column; † better than QGen at raw p < α (the paper's dagger), *
    corrected p < α (either direction)."""
    v = col["systems"].get(row)
    if v is None:
        return "–"
    val = v.get("R@100", v.get("gini"))
    t = col["tests"].get(f"{row} vs {ABLATION_REFERENCE}")
    if t is None:
        return f"{val:.3f}"
    better = t["diff"] > 0 if "R@100" in v else t["diff"] < 0
    return (f"{val:.3f}" + ("†" if better and t["p"] < alpha else "")
            + (" *" if significant(t["p_bonf"], alpha) else ""))


def ablation_table(cfg: dict, abl: dict) -> list[str]:
    """Our Table 4: one row per configured row, the six columns, the paper's Books and
    Tracks_broad values beside."""
    alpha, cols = cfg["tests"]["alpha"], ablation_columns(cfg)
    rows = []
    for row, models in abl["rows"].items():
        ms = list(dict.fromkeys((models["narrow_model"], models["broad_model"])))
        cells = [_ablation_cell(abl["columns"][k], row, alpha) if k in abl["columns"] else "–"
                 for k in cols]
        pv = PAPER_TABLE4.get(row)
        paper = [f"{pv[2]} / {pv[5]}", f"{pv[6]} / {pv[8]}"] if pv else ["–", "–"]
        rows.append([ABLATION_ROW_LABEL.get(row, row), ", ".join(ms), *cells, *paper])
    return table(["row", "bi-encoder(s)", *cols.values(), "paper Books R@100 / Gini",
                  "paper Tracks_broad R@100 / Gini"], rows)


def ablation_tests_table(cfg: dict, abl: dict) -> list[str]:
    """Every tested pair in every column: a − b [95 % CI], raw and corrected p."""
    alpha, m = cfg["tests"]["alpha"], abl["bonferroni_m"]
    rows = []
    for key, label in ablation_columns(cfg).items():
        col = abl["columns"].get(key, {"tests": {}, "systems": {}})
        for name in abl["pairs"] + abl["extra_pairs"]:
            if name not in col["tests"]:
                continue
            d = Diff.from_json(col["tests"][name])
            ref = _ref_value(col, name.split(" vs ")[1])
            extra = " (extra)" if name in abl["extra_pairs"] else ""
            rows.append([label, name + extra, fmt_diff(d), fmt_rel(d.diff, ref), fmt_p(d.p),
                         fmt_p(d.p_bonf) + (" *" if significant(d.p_bonf, alpha) else "")])
    return table(["column", "pair a vs b", "a − b [95 % CI]", "relative to b", "p (raw)",
                  f"p (Bonferroni, m = {m})"], rows)


def section_ablation(cfg: dict, res: dict) -> list[str]:
    out = ["## 7. Table 4 analog: the ablation (PLAN.md amendment 2026-11-25)", ""]
    abl = res.get("ablation")
    if abl is None:
        return out + [pending("ablation"), ""]
    alpha, hi = cfg["tests"]["alpha"], cutoffs(cfg)[1]
    m = abl["bonferroni_m"]
    out += [f"Components added to QGen; each row one seed-0 bi-encoder per set (Click test "
            f"{abl.get('n_queries_test')} queries: the row's narrow model; broad test "
            f"{abl.get('n_queries_broad_test')} queries: its broad model; QGen rows: one model). "
            f"R@100: paired t-test over queries; Gini: paired bootstrap over queries "
            f"(B = {abl['n_boot']}; {abl['note']}). † = better than QGen at raw p < {alpha} (the "
            f"paper's daggers); * = Bonferroni-corrected p < {alpha} (m = {m} rows against QGen "
            "per column), either direction.", ""]
    out += ablation_table(cfg, abl) + [""]
    out += [f"Every test ({abl['correction']}):", ""] + ablation_tests_table(cfg, abl) + [""]
    v = ablation_verdicts(cfg, abl)
    out += ["### Findings (pre-registered rules)", ""]
    for key, title, rule in (
            ("serialization", "(I) serialization helps",
             f"both pairs a lower Gini (Click test, c = {hi}) with corrected p < {alpha} and "
             "neither a significantly lower Click-test R@100: reproduced; either a "
             "significantly higher Gini: refuted; not reproduced otherwise"),
            ("weaklabeling_un", "(II) WeakLabeling-Un helps only the broad set",
             "broad-test R@100 significantly higher in at least one pair and Click-test R@100 "
             "significantly higher in neither: reproduced; broad-test R@100 significantly "
             "lower in either: refuted; not reproduced otherwise")):
        out += [f"- **{title}: {v[key]}** ({rule}):"]
        for a, b in v["pairs"][key]:
            parts = [f"{label} {fmt_diff(d)}, p = {fmt_p(d.p)}, corrected p = {fmt_p(d.p_bonf)}"
                     if (d := v["diffs"][(a, b, k)]) else f"{label} not tested"
                     for k, label in (("gini", f"Gini c = {hi}"), ("r_test", "R@100 Click test"),
                                      ("r_broad", "R@100 broad test"))]
            out += [f"  - {a} vs {b}: " + "; ".join(parts) + "."]
    out += ["", "Paper, Table 4 (Click validation sets, predominantly narrow; broad sets):", ""]
    out += table(["row", *PAPER_TABLE4_COLUMNS],
                 [[ABLATION_ROW_LABEL[r], *vals] for r, vals in PAPER_TABLE4.items()])
    return out + [""]


# ---- the report --------------------------------------------------------------------------------


def stage_status(cfg: dict, res: dict) -> str:
    n_models = sum(len(m) for m in systems(cfg).values())
    n_exp = sum(m in res["exposure"] for ms in systems(cfg).values() for m in ms)
    done = [f"exposure {n_exp}/{n_models} models"]
    stages = ("tests", "h2", "validity") + (("ablation",) if cfg.get("ablation") else ())
    done += [f"{s} {'done' if res.get(s) is not None else 'pending'}" for s in stages]
    return "Stages: " + ", ".join(done) + "."


def build_report(cfg: dict, res: dict, figure: str | None = None) -> str:
    """The whole report (markdown) from the loaded results; ``figure``: the H2 figure's file
    name beside the report, if drawn."""
    name = cfg.get("name", "study")
    lo, hi = cutoffs(cfg)
    out = [f"# CtrlQGen study (issue 26): {name}", "",
           "Pre-registered analysis: experiments/ctrlqgen/PLAN.md. Rendered by "
           "experiments/ctrlqgen/study_report.py from the results under "
           f"`{cfg.get('results')}`.", "", stage_status(cfg, res), ""]
    if (lo, hi) != (10, 100):
        out += [f"Cutoffs of this run: c = {lo} stands for the plan's c = 10, c = {hi} for its "
                "c = 100.", ""]
    out += section_systems(cfg, res, "test", "1. Table 2 analog: Click test", PAPER_BOOKS, "Books",
                           "Paper: Table 2, Books column (its CtrlQGen row beside CtrlQGen_narrow).")
    out += section_systems(cfg, res, "broad_test", "2. Table 3 analog: broad test",
                           PAPER_TRACKS_BROAD, "Tracks_broad", "Paper: Table 3, Tracks_broad.")
    if any("log" in s for s in res["exposure"].values()):
        out += section_systems(cfg, res, "log", "Secondary: real query-log sample (diagnostic)",
                               None, "", "Web queries, not catalog searches; not tested.")
    out += section_tests(cfg, res)
    out += section_h1_verdicts(cfg, res)
    out += section_h2_verdict(cfg, res)
    out += section_h2_curves(cfg, res, figure)
    out += section_validity(cfg, res)
    if cfg.get("ablation"):
        out += section_ablation(cfg, res)
    return "\n".join(out).rstrip() + "\n"


def write_report(cfg: dict, results: Path) -> tuple[Path, str]:
    """Render ``results``' report.md (and h2.png once H2 has run), atomically; returns the path
    and the text."""
    from limelight._io import atomic_path

    res = load_results(results)
    figure = None
    if res["h2"] is not None:
        h2_figure(res["h2"], results / "h2.png", f"{cfg.get('name', '')}: H2 (Figure 4 analog)")
        figure = "h2.png"
    text = build_report(cfg, res, figure)
    path = results / "report.md"
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path, text


def main(argv: list[str] | None = None) -> int:
    from limelight.errors import LimelightError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="the study settings (debian.toml, movies.toml)")
    args = ap.parse_args(argv)
    try:
        cfg = read_config(args.config)
        _, text = write_report(cfg, Study(cfg).results)
    except LimelightError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
