"""Issue 26 item 4: the dry draw that sized the movies study (PLAN.md, "Second domain: movies").

The Click log of ``movies.toml`` (WeakLabeling-Un only, no model, seconds) drawn for several
``n_queries``: the split sizes left by the entity- and text-disjoint filters, and what the broad
test is made of. Run under the heavy-job lock:

    flock /tmp/heavy.lock .venv/bin/python experiments/ctrlqgen/size_movies.py 8000 14000
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stages import field_popularity  # noqa: E402

from limelight.data import load_catalog  # noqa: E402
from limelight.querygen.serialize import load_schema  # noqa: E402
from limelight.querygen.weaklabel import (  # noqa: E402
    WeakLabelingUn,
    click_dataset,
    heldout_entities,
    normalize_query,
)


def sizes(n_queries: int, coll, lab, held, w) -> dict:
    """Split sizes (queries, narrow, films, distinct texts) of one draw with movies.toml's
    other [split] and [click] settings."""
    cs = click_dataset(coll, lab.schema, n_queries, 0.75, (0.40, 0.25, 0.35), len(held), seed=0,
                       labeler=lab, entity_weights=w, heldout=held)
    out = {}
    for s in ("train", "val", "test", "broad_test"):
        q = cs.queries[s]
        out[s] = {"n": len(q), "narrow": int((np.asarray(q.intents) == "narrow").sum()),
                  "entities": len(set(cs.entity_idx[s].tolist())),
                  "distinct_texts": len({normalize_query(x) for x in q.texts})}
    tr = cs.queries["train"]
    out["train_broad_distinct_texts"] = len({normalize_query(x) for x, i in
                                             zip(tr.texts, tr.intents, strict=True) if i == "broad"})
    out["broad_test_first"] = [str(x) for x in cs.queries["broad_test"].texts[:15]]
    return out


def main(argv: list[str]) -> None:
    t = time.perf_counter()
    coll = load_catalog("movies")
    lab = WeakLabelingUn(load_schema("movies")).fit(coll)
    held = heldout_entities(len(coll), 0.2, 0)
    w = field_popularity(coll, "IMDB Votes")
    for n in map(int, argv or ["4000", "8000", "12000", "14000", "16000", "24000"]):
        print(json.dumps({"n_queries": n, **sizes(n, coll, lab, held, w)}), flush=True)
    print(f"# {time.perf_counter() - t:.1f} s, load {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
