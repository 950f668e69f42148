"""An audit of a 10M-line query log in the memory ``limelight exposure compute`` needs (issue 55,
item 2, "one door": the audit reads a log through the on-disk query table).

    .venv/bin/python benchmarks/audit_memory.py [--work DIR] [--quick] [--lines N] [--out JSON]

Side by side in one run, on the same log over the same catalog (BM25, top 100, shards of 8,192
queries), each a fresh process under ``/usr/bin/time -v`` (wall time, peak RSS), the load
average beside it:

* ``limelight exposure compute --index IDX --queries LOG --out STORE`` over a ``limelight
  index`` of the catalog (the anchor: 544 MB on 2026-11-27, docs/scale.md);
* the audit of the same log (``limelight.report.run_audit``, what ``limelight audit`` runs): a
  configuration with one BM25 system and every optional stage off, so that it runs the index,
  ``exposure-bm25``, ``retrievability-bm25`` and ``figures`` stages and writes the report. Its
  process reads its high-water mark (``VmHWM``) as each stage starts and resets it
  (``/proc/self/clear_refs``), so the peak is given stage by stage too: the exposure stage's own
  peak is the second row recorded. The index stage builds BM25 in a child process: its peak is
  read from the process's children (``RUSAGE_CHILDREN``) and counts in the audit's (the kernel's
  figure for a process includes its children's peaks).

The log is ``scale_curve.py``'s (``scale_data.py``, seed 0: 10,000,000 lines, about 3.44M
distinct queries) and so is the index, both kept in ``WORK`` (the default is ``scale_curve.py``'s
folder: a run of either generates them once for both); the two stores (about 8 GB each) are
removed once measured. The target: the audit's peak ≤ 1.2× exposure compute's. The two stores
must hold the same queries, documents and pairs (checked: their query and document fingerprints,
pair counts and r(d)'s Gini at c = 100). ``--quick``: npl and a 20,000-line generated log, a
minute: the shape of the output, not the figures. ``--lines N``: a log of another length (a
change tried on a smaller log first).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from _summary import record
from scale_curve import LIMELIGHT, Data, index, timed

FULL = {"catalog": "debian", "lines": 10_000_000}
QUICK = {"catalog": "npl", "lines": 20_000}
TARGET = 1.2
MB = 1 << 20

CONFIG = """[audit]
name = "audit-memory"
depth = 100
cutoffs = [100]
seed = 0
shard_size = 8192

[collection]
source = "{catalog}"

[queries]
source = "{log}"

[[systems]]
name = "bm25"
kind = "bm25"

[stages]
eqi = false
robustness = false
ctrlqgen = false
rerank = false
compare = false
intervention = false
topics = false
"""

# the audit, as ``limelight audit`` runs it, printing the peak RSS of each stage: the process's
# high-water mark (VmHWM) read as the next stage starts, then reset to the current RSS (writing 5
# to /proc/self/clear_refs), so that each mark is the peak of one stage alone
AUDIT = r"""
import json, resource, sys
from limelight.audit.config import load_config
from limelight.report import run_audit

def hwm(key="VmHWM:"):
    with open("/proc/self/status") as f:
        return int(next(ln for ln in f if ln.startswith(key)).split()[1]) * 1024

def reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False

marks, now = [], ["start, configuration read"]
def children():  # the largest peak of the child processes waited for so far (the index's build)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024

def log(line):
    marks.append({"during": now[0], "peak": hwm(), "rss_after": hwm("VmRSS:"), "reset": reset(),
                  "children_peak": children()})
    now[0] = line.strip()
    print(line, file=sys.stderr, flush=True)

res = run_audit(load_config(sys.argv[1]), sys.argv[2], log=log)
marks.append({"during": now[0] + "; then results.json and the report", "peak": hwm(),
              "rss_after": hwm("VmRSS:"), "reset": False, "children_peak": children()})
print(json.dumps({"marks": marks, "results": res}))
"""


def store_facts(store: Path) -> dict:
    m = json.loads((store / "manifest.json").read_text())
    return {k: m[k] for k in ("queries", "documents", "n_queries", "n_docs", "n_pairs")}


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(a) -> dict:
    cfg = dict(QUICK if a.quick else FULL)
    if a.lines:
        cfg["lines"] = a.lines
    work = a.work / ("quick" if a.quick else "full")
    work.mkdir(parents=True, exist_ok=True)
    data = Data(work)
    print(f"log of {cfg['lines']:,} lines and the {cfg['catalog']} index (generated once) …", flush=True)
    log = data.log(cfg["lines"])
    idx = index(work, cfg["catalog"], cfg["catalog"])
    out: dict = {"config": cfg, "log": str(log), "uptime_before": subprocess.run(
        ["uptime"], capture_output=True, text=True).stdout.strip()}

    store = work / "audit-memory-store"
    shutil.rmtree(store, ignore_errors=True)
    print("limelight exposure compute …", flush=True)
    r = timed([LIMELIGHT, "exposure", "compute", "--index", str(idx), "--queries", str(log),
               "--out", str(store), "--json"])
    r["summary"] = json.loads(r.pop("stdout").strip().splitlines()[-1])
    r["store"], r["store_bytes"] = store_facts(store), size(store)
    shutil.rmtree(store, ignore_errors=True)
    out["exposure_compute"] = r
    print(f"exposure compute: {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / MB:,.0f} MB "
          f"[load {r['load']}]", flush=True)

    audit = work / "audit-memory-audit"
    shutil.rmtree(audit, ignore_errors=True)
    toml = work / "audit-memory.toml"
    toml.write_text(CONFIG.format(catalog=cfg["catalog"], log=log), encoding="utf-8")
    print("audit …", flush=True)
    r = timed([sys.executable, "-c", AUDIT, str(toml), str(audit)])
    got = json.loads(r.pop("stdout").strip().splitlines()[-1])
    r["marks"], res = got["marks"], got["results"]
    # (resetting the high-water mark resets the one the kernel reports at exit too: the process's
    # peak is the largest of its stages'; the kernel's figure includes the child processes' peaks)
    r["peak_rss"] = max(r["peak_rss"], *(m["peak"] for m in r["marks"]))
    r["results"] = {"queries": res["queries"], "systems": res["systems"]}
    r["store"], r["store_bytes"] = store_facts(audit / "systems" / "bm25" / "exposure"), size(audit)
    shutil.rmtree(audit, ignore_errors=True)
    out["audit"] = r
    out["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"audit: {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / MB:,.0f} MB [load {r['load']}]", flush=True)
    child = 0
    for m in r["marks"]:  # a child process that peaked higher during the stage: its peak
        m["child_peak"], child = (m["children_peak"] if m["children_peak"] > child else 0), max(
            child, m["children_peak"])
        if "skipped" not in m["during"] or "report" in m["during"]:
            print(f"  {m['peak'] / MB:8,.0f} MB peak, {m['rss_after'] / MB:8,.0f} MB after: {m['during']}"
                  + (f" (its child process: {m['child_peak'] / MB:,.0f} MB peak)" if m["child_peak"] else ""))
    return out


def report(out: dict, quick: bool) -> int:
    ex, au = out["exposure_compute"], out["audit"]
    same = {k: (ex["store"][k], au["store"][k]) for k in ex["store"] if ex["store"][k] != au["store"][k]}
    g_ex, g_au = ex["summary"]["gini@100"], au["results"]["systems"]["bm25"]["gini_c100"]
    if abs(g_ex - g_au) > 1e-12:
        same["gini_c100"] = (g_ex, g_au)
    if same:
        print(f"the two stores differ: {same}")
        return 1
    ratio = au["peak_rss"] / ex["peak_rss"]
    s = ex["summary"]
    tag = " (--quick)" if quick else ""
    per_stage = all(m["reset"] for m in au["marks"][:-1])
    top = max(au["marks"], key=lambda m: max(m["peak"], m["child_peak"]))
    where = f"'{top['during']}'" + (" (its child process)" if top["child_peak"] > top["peak"] else "")
    exposure = next(m for m in au["marks"] if m["during"].startswith("exposure-bm25:"))
    record(f"audit peak RSS / exposure compute's, {out['config']['lines']:,}-line generated log over "
           f"{out['config']['catalog']}{tag}", au["peak_rss"] / MB, unit="MB",
           anchor=f"exposure compute {ex['peak_rss'] / MB:,.0f} MB", ratio=ratio,
           target=f"≤ {TARGET}×", met=ratio <= TARGET,
           note=f"{s['queries']:,} distinct queries, {s['pairs']:,} pairs, the same store (fingerprints, "
                f"pairs, Gini); audit {au['seconds'] / 60:.1f} min (index, exposure, retrievability, "
                f"figures, report), exposure compute {ex['seconds'] / 60:.1f} min; the audit's peak is in "
                f"{where}")
    if per_stage:  # the exposure stage's own peak (its high-water mark reset as it starts)
        r = exposure["peak"] / ex["peak_rss"]
        record(f"audit's exposure stage peak RSS / exposure compute's, {out['config']['lines']:,}-line "
               f"generated log over {out['config']['catalog']}{tag}", exposure["peak"] / MB, unit="MB",
               anchor=f"exposure compute {ex['peak_rss'] / MB:,.0f} MB", ratio=r,
               target=f"≤ {TARGET}×", met=r <= TARGET,
               note="the stage alone: the process's high-water mark reset to its RSS as the stage "
                    "starts (what the process holds then included)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-scale-curve"),
                    help="where the log and the index are generated (scale_curve.py's folder)")
    ap.add_argument("--quick", action="store_true", help="npl and a 20,000-line log")
    ap.add_argument("--lines", type=int, help="another length of log (a smaller one to try a change)")
    ap.add_argument("--out", type=Path, help="write the measurement (JSON) here")
    a = ap.parse_args(argv)
    out = run(a)
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))
    return report(out, a.quick)


if __name__ == "__main__":
    raise SystemExit(main())

