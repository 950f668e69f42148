"""Issue 25 diagnostic (outside the pre-registered plan): did the TK-2 fine-tunings that the
600-step budget stopped still improve?

The study's fine-tunings end by patience (five validations without improvement) or at the
600-step budget. Those that hit the budget with their best validation in the last 100 steps
(found from the committed logs, not listed by hand) are retrained here with the same command,
seed and patience but a budget of ``EXTEND_STEPS`` into ``results/extended/``:

- the first 600 steps repeat the committed log only where the floating-point arithmetic is the
  same: the script reports the first step at which losses or validation figures differ (on
  another CPU model torch's kernels round differently, and the runs drift apart like two seeds);
- the extended run shows whether validation kept rising: its own best within the first 600
  steps beside its best over the whole run, and where patience ends it;
- its best model is evaluated as the study evaluates (depth and λ on validation queries only)
  and substituted for its fold in the row, to show whether the row's test nDCG@10 and its raw
  paired p against BM25 would change. The study's tables are not changed: this is a diagnostic.

    flock /tmp/heavy.lock .venv/bin/python experiments/rerank/extend.py     # resumable
    → experiments/rerank/results/extended/{report.md,report.json}, <job>.{pt,log.jsonl,curve.png}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study  # noqa: E402

EXTEND_STEPS = 1200
OUT = study.RES / "extended"


_log = study.read_log
_best = study.best_validation


def budget_limited() -> list[dict]:
    """The TK-2 fine-tunings that ran the whole budget with their best validation in its last
    100 steps."""
    out = []
    for job in study.jobs():
        log = job["out"].with_suffix(".log.jsonl")
        if job["kind"] != "finetune" or job["model"] != "tk2" or not log.exists():
            continue
        recs = _log(log)
        if recs[-1]["step"] >= study.FINETUNE_STEPS and _best(recs)["step"] >= study.FINETUNE_STEPS - 100:
            out.append(job)
    return out


def _extended_cmd(job: dict, out: Path) -> list[str]:
    cmd = list(job["cmd"])
    cmd[cmd.index("--out") + 1] = str(out.relative_to(study.ROOT))
    cmd[cmd.index("--max-steps") + 1] = str(EXTEND_STEPS)
    return cmd


def first_difference(a: list[dict], b: list[dict], upto: int) -> int | None:
    """The first logged step ≤ ``upto`` whose loss or validation figures differ between the two
    logs (wall times aside); None when they agree exactly."""
    keys = ("step", "loss", "val_nDCG@10", "val_RR@10")
    for ra, rb in zip((r for r in a if r["step"] <= upto), (r for r in b if r["step"] <= upto), strict=False):
        if tuple(ra.get(k) for k in keys) != tuple(rb.get(k) for k in keys):
            return ra["step"]
    return None


def main() -> None:
    from limelight.data.formats import load_run
    from limelight.evaluation import evaluate_runs

    OUT.mkdir(parents=True, exist_ok=True)
    chosen = budget_limited()
    print(f"{len(chosen)} budget-limited TK-2 fine-tunings with the best validation in the last 100 steps:",
          ", ".join(j["out"].stem for j in chosen), flush=True)
    rows, cache = [], {}
    for job in chosen:
        out = OUT / job["out"].name
        cmd = _extended_cmd(job, out)
        print("→ limelight rerank", " ".join(cmd), flush=True)
        r = subprocess.run([sys.executable, "-m", "limelight.cli", "rerank", *cmd], cwd=study.ROOT)
        if r.returncode != 0:
            sys.exit(r.returncode)
        old, new = _log(job["out"].with_suffix(".log.jsonl")), _log(out.with_suffix(".log.jsonl"))
        tag = f"tk2-{job['init']}{study._lr_tag(job['lr'])}"
        if not out.with_suffix(".eval.json").exists():
            study.evaluate_one(out, job["collection"], tag, cache)
        ob, nb = _best(old), _best(new)
        nb600 = _best([r for r in new if r["step"] <= study.FINETUNE_STEPS])
        rows.append({"job": job["out"].stem, "collection": job["collection"], "seed": job["seed"], "fold": job["fold"],
                     "first_difference_step": first_difference(old, new, study.FINETUNE_STEPS),
                     "steps_600_budget": old[-1]["step"], "best_step_600": ob["step"], "best_val_600": ob["val_nDCG@10"],
                     "steps_extended": new[-1]["step"], "best_step_extended_within_600": nb600["step"],
                     "best_val_extended_within_600": nb600["val_nDCG@10"], "best_step_extended": nb["step"],
                     "best_val_extended": nb["val_nDCG@10"],
                     "stopped_by": "patience" if new[-1]["step"] < EXTEND_STEPS else "budget",
                     "wall_s_extended": new[-1]["wall_s"]})
    # each affected row (collection, seed, init, lr; pure and interpolated): test nDCG@10 and raw
    # paired-t p against BM25 with the study's fold models, then with the extended ones substituted
    effects = []
    groups: dict[tuple, list[dict]] = {}
    for job in chosen:
        groups.setdefault((job["collection"], job["seed"], job["init"], job["lr"]), []).append(job)
    for (c, seed, init, lr), changed in groups.items():
        ds, bm25 = study.dataset_and_bm25(c, cache)
        folds = [j for j in study.jobs() if j["kind"] == "finetune" and j["model"] == "tk2"
                 and (j["collection"], j["seed"], j["init"], j["lr"]) == (c, seed, init, lr)]
        swap = {j["fold"] for j in changed}
        for suffix, kind in ((".test.parquet", "pure"), (".interp.test.parquet", "+BM25 λ")):
            rec = {"collection": c, "row": f"tk2 {init}{study._lr_tag(lr)} s{seed} {kind}",
                   "folds_replaced": sorted(swap)}
            for label, paths in (("study", [j["out"] for j in folds]),
                                 ("extended", [OUT / j["out"].name if j["fold"] in swap else j["out"] for j in folds])):
                rs = [load_run(p.with_suffix(suffix)) for p in paths]
                run = study.concat_runs(rs, label)
                t = evaluate_runs([bm25, run], ds.qrels, "nDCG@10")
                m = t.measures[0]
                rec[label] = {"nDCG@10": t.aggregate()[label][str(m)], "p_raw_vs_bm25": float(t.p_vs_first[m][1])}
            rec["bm25_nDCG@10"] = t.aggregate()["bm25"][str(m)]
            effects.append(rec)
    res = {"extend_steps": EXTEND_STEPS, "patience": study.PATIENCE, "eval_every": study.EVAL_EVERY,
           "trainings": rows, "rows": effects}
    tmp = OUT / "report.json.tmp"
    tmp.write_text(json.dumps(res, indent=1))
    os.replace(tmp, OUT / "report.json")
    lines = ["# Issue 25 diagnostic: the budget-limited TK-2 fine-tunings, extended (generated by extend.py)\n",
             f"Budget {study.FINETUNE_STEPS} → {EXTEND_STEPS} steps, same seed, patience {study.PATIENCE} "
             f"(validation every {study.EVAL_EVERY} steps).\n",
             "| fine-tuning | logs first differ at step | study run (600 steps): best step, val nDCG@10 | "
             "extended run: steps, stopped by | its best within 600 steps | its best over the run |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        diff = "never (identical)" if r["first_difference_step"] is None else str(r["first_difference_step"])
        lines.append(f"| {r['job']} | {diff} | {r['best_step_600']}, {r['best_val_600']:.4f} | "
                     f"{r['steps_extended']}, {r['stopped_by']} | {r['best_step_extended_within_600']}, "
                     f"{r['best_val_extended_within_600']:.4f} | {r['best_step_extended']}, "
                     f"{r['best_val_extended']:.4f} |")
    lines += ["", "Rows with the extended fold models substituted (test folds concatenated; raw paired t-test p "
              "against BM25, not the study's Holm family):\n",
              "| collection | row | folds replaced | BM25 | study nDCG@10 (p) | extended nDCG@10 (p) |", "|---|---|---|---|---|---|"]
    for e in effects:
        lines.append(f"| {e['collection']} | {e['row']} | {e['folds_replaced']} | {e['bm25_nDCG@10']:.4f} | "
                     f"{e['study']['nDCG@10']:.4f} ({e['study']['p_raw_vs_bm25']:.3g}) | "
                     f"{e['extended']['nDCG@10']:.4f} ({e['extended']['p_raw_vs_bm25']:.3g}) |")
    tmp = OUT / "report.md.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, OUT / "report.md")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
