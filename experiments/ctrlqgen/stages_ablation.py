"""Stage 9 of the issue-26 pipeline: the Table 4 ablation (PLAN.md, amendment 2026-11-25).

Runs only with an ``[ablation]`` section (``generators = [...]``, names of
``pipeline.ABLATION_GENERATORS``). In order, each resumable and skipped when done, as the main
stages (the same functions): the ablation generators (``train_generator``: the main backbone,
settings, step count and seed), their sets (``generate_set``: one query per E' entity, test
texts dropped), one seed-0 bi-encoder per set (``train_biencoder``: the main protocol and leak
check) and its exposure over the catalog (``exposure_model``), and the reference rows' main
seed-0 bi-encoders and exposure when not done (a fresh clone without their committed top-k:
``Study.restore``). Their sub-jobs live in the
generator, generate, finetune and exposure folders under their own names, so no key of the main
study changes. Then ``ablation_tests``: each Table 4 row against QGen in the six columns — R@100
(paired t-test over queries) and Gini at both cutoffs (paired bootstrap over queries: one seed,
so ``stats.gini_tests`` reduces to it) on the Click test with the row's narrow model and on the
broad test with its broad model — Bonferroni over the rows tested against QGen within each
column; the verdicts' three extra pairs are tested the same way and reported with the same
factor (outside the family). ``<results>/ablation.json``; the verdicts are
``study_report.py``'s.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import stats
from study import (
    ABLATION_EXTRA_PAIRS,
    ABLATION_REFERENCE,
    ABLATION_SEED,
    ABLATION_STAGE,
    Study,
    ablation_model,
    ablation_sets_of,
    log,
    write_json,
)

from limelight.errors import LimelightError

COLUMN_SETS = (("test", 0), ("broad_test", 1))  # query set, and which of a row's two models
TESTS_NAME = "table4"  # the ``--only`` name of the comparisons


def check_ablation(study: Study) -> None:
    """One-line errors for an ablation this config cannot run: no ``[ablation]`` section, an
    unknown generator, or a reference row's main bi-encoder (seed 0) not in the main study."""
    if not study.has_ablation:
        raise LimelightError(f"stage {ABLATION_STAGE} needs an [ablation] section in the config "
                             "(PLAN.md amendment 2026-11-25)")
    study.ablation_generators()
    if ABLATION_SEED not in study.seeds:
        raise LimelightError(f"the ablation compares seed-{ABLATION_SEED} models: "
                             f"biencoder.seeds must hold {ABLATION_SEED}")
    main = set(study.trained_models())
    missing = [m for m in study.ablation_row_models()
               if m not in main and m not in study.ablation_models()]
    if missing:
        raise LimelightError(f"the ablation's reference rows need the main bi-encoders "
                             f"{', '.join(missing)}: add their sets to biencoder.sets")


def stage_ablation(study: Study, only: str | None = None) -> None:
    """Ablation generators, sets, seed-0 bi-encoders, their exposure, then the comparisons.

    One generator's whole chain (training, its sets, their bi-encoders and exposure) runs before
    the next generator's: generator weights are not committed, so a session that finishes a
    chain leaves only committed outputs behind it."""
    from stages import _want, generate_set, train_biencoder, train_generator
    from stages_eval import exposure_model

    check_ablation(study)
    for g in study.ablation_generators():
        sets = ablation_sets_of(g)
        models = [ablation_model(s) for s in sets]
        if _want(only, g):
            train_generator(study, g)
        for s in sets:
            if _want(only, s):
                generate_set(study, s)
        for m in models:
            if _want(only, m):
                train_biencoder(study, m)
        for m in models:
            if _want(only, m):
                exposure_model(study, m)
    # the reference rows' main seed-0 models, when not done (a fresh clone restores them only
    # with a committed top-k): the main stages' sub-jobs, the same keys
    for m in study.ablation_row_models():
        if m not in study.ablation_models() and _want(only, m):
            train_biencoder(study, m)
            exposure_model(study, m)
    if _want(only, TESTS_NAME):
        ablation_tests(study)


def ablation_pairs(rows: dict) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(each row against QGen: the Bonferroni family, the verdicts' extra pairs present)."""
    family = [(r, ABLATION_REFERENCE) for r in rows if r != ABLATION_REFERENCE]
    extra = [(a, b) for a, b in ABLATION_EXTRA_PAIRS if a in rows and b in rows]
    return family, extra


def relevant(study: Study, qset: str) -> np.ndarray:
    """The relevant entity of every query of a held-out set."""
    return pd.read_parquet(study.dir("weaklabels") / f"click_{qset}.parquet")["entity"].to_numpy()


def column_tests(study: Study, qset: str, tops: dict[str, np.ndarray],
                 pairs: list[tuple[str, str]], m: int) -> dict[str, dict]:
    """The columns of one query set (``R@100 <qset>``, ``Gini <qset> c<c>`` per cutoff, as
    tests.json names them): per row and per pair (a − b), with ``p_bonf`` = min(1, p × m)."""
    tc = study.cfg["tests"]
    n = len(study.collection)
    rel = relevant(study, qset)
    rec = {row: stats.recall_at(t, rel)[None, :] for row, t in tops.items()}
    out = {f"R@100 {qset}": stats.recall_tests(rec, pairs, tc["n_boot"], tc["seed"], tc["alpha"])}
    for c in tc["cutoffs"]:
        t = time.perf_counter()
        fs = {row: [stats.f_from_topk(top, n, c)] for row, top in tops.items()}
        out[f"Gini {qset} c{c}"] = stats.gini_tests(fs, pairs, tc["n_boot"], tc["seed"],
                                                    tc["alpha"])
        log(f"ablation: Gini {qset} c={c} in {time.perf_counter() - t:.0f}s")
    for col in out.values():
        stats.bonferroni(col["tests"], m)
    return out


def ablation_tests(study: Study) -> None:
    """Table 4 analog: every row against QGen and the extra pairs, six columns
    (``<results>/ablation.json``)."""
    from stages_eval import load_topk

    if study.done(ABLATION_STAGE):
        return
    t0 = time.perf_counter()
    rows = study.ablation_rows()
    missing = [m for m in study.ablation_row_models() if not study.done("exposure", m)]
    if missing:
        raise LimelightError(f"the ablation comparisons need the exposure of {', '.join(missing)}: "
                             "run the exposure stage (main models) and the ablation stage")
    family, extra = ablation_pairs(rows)
    m = len(family)
    res: dict = {"rows": {r: {"narrow_model": n, "broad_model": b} for r, (n, b) in rows.items()},
                 "pairs": [f"{a} vs {b}" for a, b in family], "bonferroni_m": m,
                 "extra_pairs": [f"{a} vs {b}" for a, b in extra],
                 "correction": f"Bonferroni over the {m} rows against {ABLATION_REFERENCE} within "
                               f"each column; the extra pairs get the same factor (not in the "
                               f"family)",
                 "note": "one bi-encoder seed per row: intervals carry query sampling only",
                 "n_boot": study.cfg["tests"]["n_boot"], "columns": {}}
    for qset, side in COLUMN_SETS:
        tops = {row: load_topk(study, models[side])[qset] for row, models in rows.items()}
        res[f"n_queries_{qset}"] = len(next(iter(tops.values())))
        res["columns"].update(column_tests(study, qset, tops, family + extra, m))
    info = study.mark_done(ABLATION_STAGE, "", {"n_boot": res["n_boot"]}, t0)
    write_json({**info, **res}, study.results / "ablation.json")
    log(f"ablation: {len(rows)} rows, {len(family) + len(extra)} pairs × {len(res['columns'])} "
        f"columns → {study.results / 'ablation.json'}")
