"""Fair exposure for groups (issue 45) on the Debian and movies catalogs, BM25 vs dense vs hybrid.

    flock /tmp/heavy.lock .venv/bin/python experiments/fairness/run.py [--work /tmp/limelight-fairness]
        [--boot 200] [--seed 0] [--catalogs debian,movies]

Two query sets per catalog:
- **judged**: the CtrlQGen Click test set committed under ``experiments/ctrlqgen/results/<catalog>/
  weaklabels/click_test.parquet`` (each query judged relevant to the one entity it was written
  for; o_q = 1): merit = those judgments, target ``merit``;
- **log**: every distinct query of the shared query log (o_q = occurrences), no judgments:
  target ``size`` (each document of the catalog equally).

Stores: Debian's log stores are the demo audit's (``demo-out/systems/<system>/exposure``, read
only); every other store is computed here with ``limelight exposure compute`` (top 100) into
``--work``: over a copy of the demo audit's index for Debian (BM25 k1 0.9 b 0.4, all-MiniLM-L6-v2
with its cached catalog embeddings, hybrid RRF k = 60), and over ``limelight index --collection
movies --dense`` for movies. Groups: Debian ``section`` and ``priority``, movies ``Major Genre``
and ``Distributor`` (documents without a value form ``(none)``). Each result is written to
``results/<catalog>-<queries>-<field>-<system>.json`` (``GroupFairness.to_dict()``, the three
top contributors per group, timings and the load average); ``report.py`` turns them into the
section of ``docs/results-exposure.md``; ``results/notes.json`` holds, per field, the number of
documents without a value and the mean length of their text against the others'.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from limelight._io import atomic_path
from limelight.data.formats import read_trec_qrels
from limelight.exposure.fairness import Groups, Merit, group_fairness
from limelight.exposure.store import ExposureStore

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from _shared import click_files, index_for, limelight  # noqa: E402

LOG = ROOT.parent / "shared" / "data" / "querylogs" / "queries.tsv.gz"
SYSTEMS = ("bm25", "dense", "hybrid")
FIELDS = {"debian": ("section", "priority"), "movies": ("Major Genre", "Distributor")}


def store_for(catalog: str, queries: str, system: str, work: Path, idx: Path, qfile: Path) -> Path:
    if catalog == "debian" and queries == "log":
        return ROOT / "demo-out" / "systems" / system / "exposure"
    out = work / catalog / queries / system
    if not (out / "manifest.json").exists() or not json.loads((out / "manifest.json").read_text()).get("complete"):
        limelight("exposure", "compute", "--index", str(idx), "--queries", str(qfile), "--model", system,
                  "--depth", "100", "--out", str(out))
    return out


def text_lengths(catalog: str, idx: Path) -> dict:
    """Per field: how many documents have no value, and the mean length (characters) of the
    indexed text of those documents and of the others (short entries become dense hubs)."""
    import pyarrow.parquet as pq

    t = pq.read_table(idx / "docs.parquet", columns=["text", *FIELDS[catalog]]).to_pandas()
    n = t["text"].str.len()
    out = {}
    for f in FIELDS[catalog]:
        none = t[f].isna() | (t[f].astype(str).str.strip().isin(["", "[]"]))
        out[f] = {"n_none": int(none.sum()), "n_docs": len(t),
                  "mean_chars_none": float(n[none].mean()) if none.any() else None,
                  "mean_chars_rest": float(n[~none].mean())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-fairness"))
    ap.add_argument("--boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--catalogs", default="debian,movies")
    ap.add_argument("--notes-only", action="store_true", help="only notes.json (needs the indexes)")
    a = ap.parse_args()
    out_dir = HERE / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    notes = {}
    for catalog in a.catalogs.split(","):
        idx = index_for(catalog, a.work)
        notes[catalog] = text_lengths(catalog, idx)
        if a.notes_only:
            continue
        cq, cr = click_files(catalog, a.work)
        for queries, qfile in (("click", cq), ("log", LOG)):
            for system in SYSTEMS:
                st = ExposureStore.open(store_for(catalog, queries, system, a.work, idx, qfile))
                merit = Merit.from_qrels(read_trec_qrels(cr), st, "CtrlQGen Click test") if queries == "click" else None
                for field in FIELDS[catalog]:
                    t = time.perf_counter()
                    res = group_fairness(st, Groups.from_field(st, field, idx), merit,
                                         "merit" if merit is not None else "size",
                                         n_boot=a.boot, seed=a.seed, top=3)
                    d = res.to_dict()
                    d["run"] = {"catalog": catalog, "queries": queries, "field": field, "system": system,
                                "seconds": time.perf_counter() - t, "load": list(os.getloadavg()),
                                "n_pairs": int(st.manifest.get("n_pairs", 0)), "depth": st.depth}
                    d["summary"]["store"] = os.path.relpath(d["summary"]["store"], ROOT) \
                        if str(d["summary"]["store"]).startswith(str(ROOT)) else f"{catalog}/{queries}/{system}"
                    name = f"{catalog}-{queries}-{field.replace(' ', '_')}-{system}.json"
                    with atomic_path(out_dir / name) as tmp:
                        tmp.write_text(json.dumps(d, indent=1, ensure_ascii=False))
                    print(f"{name}: tvd {d['summary']['tvd']['value']:.4f}, {d['run']['seconds']:.1f} s", flush=True)
    with atomic_path(out_dir / "notes.json") as tmp:
        tmp.write_text(json.dumps(notes, indent=1))
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
