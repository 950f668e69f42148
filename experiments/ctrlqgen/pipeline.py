"""Issue 26: the resumable CtrlQGen study (H1 and H2 of Penha et al., WWW 2023) at scale.

    .venv/bin/python experiments/ctrlqgen/pipeline.py --config experiments/ctrlqgen/debian.toml status
    flock /tmp/heavy.lock .venv/bin/python experiments/ctrlqgen/pipeline.py \
        --config experiments/ctrlqgen/debian.toml run weaklabels generator --budget-min 20

Stages, in order (PLAN.md pre-registers their settings and analysis):

1. ``weaklabels``: entity-disjoint split (held-out entities for the test sets), the Books-protocol
   Click log (``click_dataset(heldout=...)``), WeakLabeling-IP intents of Click train pairs plus
   WeakLabeling-Un pairs (the CtrlQGen training set), the QGen / InPars pairs, E'; the leakage
   check of everything against the test sets.
2. ``generator``: CtrlQGen and QGen generators (``QueryGenerator.fit`` with checkpoints).
3. ``generate``: one query per E' entity for QGen, InPars, CtrlQGen narrow and broad
   (``generate_queries``, in resumable chunks).
4. ``finetune``: a bi-encoder per training set and seed (``finetune_biencoder`` with checkpoints),
   every set the same number of pairs and steps.
5. ``exposure``: each bi-encoder (and BM25, zero-shot MiniLM) over the whole catalog: top-k for
   the Click test, broad test and query-log sets; R@100, r(e) and Gini per cutoff.
6. ``tests``: the pre-registered comparisons (two-level bootstrap of Gini over queries and
   training seeds, paired t-tests of R@100; Bonferroni).
7. ``h2``: broad suggestions for the top entities of Click-test queries, accepted at 0-100 %,
   against a control of as many other log queries.
8. ``validity``: narrow validity and broad WeakLabeling-IP agreement (Wilson intervals),
   appendix D overlaps.
9. ``ablation`` (only with an ``[ablation]`` section; PLAN.md amendment 2026-11-25, the Table 4
   analog): each ablation generator (``ABLATION_GENERATORS``) with its whole chain — its sets,
   one seed-0 bi-encoder per set and its exposure — before the next generator; sub-jobs of the
   generator, generate, finetune and exposure folders under their own names, so no existing key
   changes — then each row against QGen (``stages_ablation.py``, ``ablation.json``).

Every stage (and every sub-job: one generator, one set, one bi-encoder) writes its output under
``work/<stage>/<name>-<key>`` where ``key`` hashes its settings and its inputs' keys, and a
``done.json`` when complete; a rerun skips what is done and continues what is not (training from
its last checkpoint, generation and encoding from their last chunk). ``--budget-min`` stops
cleanly (checkpoint written) when the time is up: exit status 3, rerun to continue. Small outputs
are copied under ``results`` (committed); model weights stay under ``work``. Bad input (a
catalog without the schema's fields, an empty generation, a generator of another base model, a
leak of test data into a training set) ends with a one-line error and exit status 2.

Sessions start from fresh clones, without ``work``: ``status`` and ``run`` first restore
(``Study.restore``) every sub-job whose committed manifest key equals its current key and whose
committed results suffice — weaklabels (the split and E' recomputed, the parquet files copied), the
generated sets, an exposure whose top-k (``exposure/<model>.topk.npz``) is committed, its
bi-encoder and the generators once nothing left to run reads their weights (never committed), and
the finished comparisons (tests, h2, validity, ablation) — marked ``restored`` in ``done.json``
and in ``status``; everything else (a changed key included) is computed again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study import (  # noqa: E402, F401  (the study's names, as pipeline.X for the tests and scripts)
    ABLATION_GENERATORS,
    ABLATION_SETS,
    ABLATION_STAGE,
    STAGES,
    WEAKLABEL_FILES,
    Stopped,
    Study,
    ablation_sets_of,
    generator_of_set,
    load_avg,
    log,
    read_committed_topk,
    read_config,
    set_intent,
    write_committed_topk,
    write_json,
)

# ---- stage runners (imported lazily so `status` stays fast) -------------------------------------


def stage_funcs() -> dict:
    """Each stage's function (``stages.py``, ``stages_eval.py``, ``stages_ablation.py``)."""
    import stages as S
    import stages_ablation
    import stages_eval as E

    return {"weaklabels": S.stage_weaklabels, "generator": S.stage_generator,
            "generate": S.stage_generate, "finetune": S.stage_finetune,
            "exposure": E.stage_exposure, "tests": E.stage_tests, "h2": E.stage_h2,
            "validity": E.stage_validity, "ablation": stages_ablation.stage_ablation}


def run_stages(study: Study, stages: list[str], only: str | None = None) -> None:
    funcs = stage_funcs()
    for st in stages:
        t = time.perf_counter()
        log(f"stage {st}: start (load {load_avg()})")
        funcs[st](study, only)
        log(f"stage {st}: complete in {time.perf_counter() - t:.0f}s (load {load_avg()})")


def status(study: Study) -> list[str]:
    """One line per sub-job: done (with its time), restored (from the committed results, with
    the time of the run that made them), started or pending. Restores first (``Study.restore``)."""
    study.restore()
    out = []
    for stage, name in study.jobs():
        d = study.done(stage, name)
        where = study.dir(stage, name)
        if d:
            how = "restored" if d.get("restored") else "done"
            out.append(f"{how:8s} {stage:10s} {name:22s} {d['seconds']:8.0f}s  {d['finished']}")
        elif where.exists():
            out.append(f"started  {stage:10s} {name:22s} {study._spent(where):8.0f}s  {where}")
        else:
            out.append(f"pending  {stage:10s} {name}")
    return out


def main(argv: list[str] | None = None) -> int:
    from limelight.errors import LimelightError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--budget-min", type=float, default=None,
                    help="stop cleanly (checkpoint) after this many minutes; rerun to continue")
    ap.add_argument("--only", default=None,
                    help="run only the sub-jobs of the stage whose name contains this")
    ap.add_argument("command", choices=("run", "status"))
    ap.add_argument("stages", nargs="*", help=f"stages to run (default: all, and {ABLATION_STAGE} "
                    f"when configured): {', '.join(STAGES + (ABLATION_STAGE,))}")
    args = ap.parse_args(argv)
    try:
        study = Study(read_config(args.config),
                      None if args.budget_min is None else args.budget_min * 60)
        if args.command == "status":
            print("\n".join(status(study)))
            return 0
        known = STAGES + (ABLATION_STAGE,)
        bad = [s for s in args.stages if s not in known]
        if bad:
            raise LimelightError(f"unknown stage {bad[0]!r} (stages: {', '.join(known)})")
        if ABLATION_STAGE in args.stages and not study.has_ablation:
            raise LimelightError(f"stage {ABLATION_STAGE} needs an [ablation] section in "
                                 f"{args.config} (PLAN.md amendment 2026-11-25)")
        import torch

        torch.set_num_threads(study.threads)
        back = study.restore()
        if back:
            log(f"restored {len(back)} sub-jobs from {study.results}: "
                + ", ".join(f"{st}/{n}" if n else st for st, n in back))
        default = list(STAGES) + ([ABLATION_STAGE] if study.has_ablation else [])
        run_stages(study, args.stages or default, args.only)
    except Stopped as e:
        print(f"stopped (budget): {e}; rerun the same command to continue", file=sys.stderr)
        return 3
    except LimelightError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to continue from the last checkpoint", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
