"""Why a generated narrow query misses the validity check (descriptive, outside PLAN.md's analysis).

    .venv/bin/python experiments/ctrlqgen/narrow_misses.py --config experiments/ctrlqgen/movies.toml

The validity stage counts a CtrlQGen narrow query as valid when it shares an analysed term with
its entity's narrow fields. This script sorts the queries that do not, in this order (first match
wins): ``no term`` (nothing left after analysis), ``near miss`` (a term within a
``difflib`` ratio of 0.75 of one of the entity's narrow terms: a typo or a cut), ``own broad``
(a term of the entity's broad fields), ``other entity`` (a narrow term of some other catalog
entry), ``fragment`` (none of these). It prints the counts with a few examples (no
significance test).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from study import Study, read_config  # noqa: E402

CATEGORIES = ("no term", "near miss", "own broad", "other entity", "fragment")


def classify(query: set[str], narrow: set[str], broad: set[str], catalog_narrow: set[str],
             ratio: float = 0.75) -> str | None:
    """The miss category of one query's terms (``None``: it shares a narrow term, valid)."""
    if query & narrow:
        return None
    if not query:
        return "no term"
    if any(difflib.SequenceMatcher(None, q, t).ratio() >= ratio for q in query for t in narrow):
        return "near miss"
    if query & broad:
        return "own broad"
    if query & catalog_narrow:
        return "other entity"
    return "fragment"


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import pandas as pd

    from limelight.errors import LimelightError
    from limelight.querygen.weaklabel import role_texts
    from limelight.retrieval.bm25 import Analyzer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--examples", type=int, default=6)
    a = ap.parse_args(argv)
    try:
        study = Study(read_config(a.config))
        path = study.results / "queries" / "ctrl_narrow.parquet"
        if not path.exists():
            raise LimelightError(f"{path}: no generated narrow queries (run the generate stage)")
        df = pd.read_parquet(path)
        coll, schema, an = study.collection, study.schema, Analyzer()
        ents = df["entity"].to_numpy()
        narrow_t, broad_t = role_texts(coll, schema, ents)
        all_narrow, _ = role_texts(coll, schema, np.arange(len(coll)))
        catalog_narrow = {t for text in all_narrow for t in an.tokenize(text)}
    except LimelightError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    for q, n, b in zip(df["text"], narrow_t, broad_t, strict=True):
        c = classify(set(an.tokenize(q)), set(an.tokenize(n)), set(an.tokenize(b)), catalog_narrow)
        if c is not None:
            counts[c] += 1
            examples[c].append(q)
    total = len(df)
    print(f"{a.config}: {sum(counts.values())} of {total} CtrlQGen narrow queries share no term "
          "with their entity's narrow fields")
    print("| miss | queries | of all narrow queries | examples |\n|---|---|---|---|")
    for c in CATEGORIES:
        ex = ", ".join(f"`{q}`" for q in examples[c][:a.examples])
        print(f"| {c} | {counts[c]} | {100 * counts[c] / total:.1f} % | {ex} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
