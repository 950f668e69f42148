"""A fresh process that opens the default dense encoder and encodes 100 texts: CPU seconds and
wall time with the light path (the exported ONNX graph run with the ``tokenizers`` library, no
sentence-transformers/transformers/torch import) beside the full path (the
``SentenceTransformer`` loaded to tokenize, as before issue 53).

    .venv/bin/python benchmarks/encoder_load.py [--repeat 5] [--variant onnx-int8]

The two run alternately in fresh processes, after one warm-up each (bytecode, page cache, the
ONNX export made if missing); the medians are recorded with the load average. The texts are the
first 100 cranfield documents; both paths must give the same vectors (checked, max |diff| 0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _summary import record

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from limelight.retrieval.dense import Encoder
class Full(Encoder):
    light = False
mode, variant, texts_file, out_file = sys.argv[1:5]
texts = json.load(open(texts_file))
enc = (Encoder if mode == "light" else Full)(variant=variant)
v = enc.encode(texts)
wall = time.perf_counter() - t0
r = resource.getrusage(resource.RUSAGE_SELF)
import numpy as np
np.save(out_file, v)
heavy = [m for m in ("sentence_transformers", "transformers", "torch") if m in sys.modules]
print(json.dumps({"cpu": r.ru_utime + r.ru_stime, "wall": wall, "heavy": heavy,
                  "light": enc._tokenizer is not None}))
"""


def run(mode: str, variant: str, texts_file: str, out_file: str) -> dict:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", CHILD, mode, variant, texts_file, out_file],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"encoder_load: the {mode} process failed: {r.stderr.strip()[-400:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    got["process_wall"] = time.perf_counter() - t
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--variant", default="onnx-int8")
    args = ap.parse_args()
    import numpy as np

    from limelight.data import load_dataset

    texts = [str(t) for t in load_dataset("cranfield").collection.texts.tolist()[:100]]
    with tempfile.TemporaryDirectory() as tmp:
        tf = os.path.join(tmp, "texts.json")
        Path(tf).write_text(json.dumps(texts))
        out = {m: os.path.join(tmp, f"{m}.npy") for m in ("full", "light")}
        for m in ("full", "light"):  # warm-up (and the export, if the cache has none)
            run(m, args.variant, tf, out[m])
        res: dict[str, list[dict]] = {"full": [], "light": []}
        for _ in range(args.repeat):
            for m in ("full", "light"):
                res[m].append(run(m, args.variant, tf, out[m]))
        diff = float(np.abs(np.load(out["full"]) - np.load(out["light"])).max())
    assert all(r["light"] and not r["heavy"] for r in res["light"]), res["light"][0]
    assert all(not r["light"] for r in res["full"])
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("cpu", "process_wall")}
           for m, rs in res.items()}
    print(f"load {os.getloadavg()}; max |full - light| = {diff}")
    for m in ("full", "light"):
        print(f"{m:5s}: CPU {med[m]['cpu']:.2f} s  wall {med[m]['process_wall']:.2f} s  "
              f"(median of {args.repeat}; {len(texts)} texts, {args.variant})")
    if diff != 0.0:
        raise SystemExit(f"encoder_load: the light path's vectors differ (max |diff| {diff})")
    for k, unit, label in (("cpu", "CPU s", "CPU"), ("process_wall", "s", "wall")):
        record(f"encoder open + 100 texts, light path ({label})", med["light"][k],
               anchor=f"full path {med['full'][k]:.2f} {unit}",
               ratio=med["light"][k] / med["full"][k], unit=unit,
               note="issue 53: fresh process, exported graph; same vectors (max |diff| 0)")


if __name__ == "__main__":
    main()
