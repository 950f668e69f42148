"""How much of an entity the generator reads: s(e) against the plain values (descriptive,
outside PLAN.md's analysis).

    .venv/bin/python experiments/ctrlqgen/prompt_lengths.py --config experiments/ctrlqgen/debian.toml

Every generator of the study reads the first ``generator.max_input_tokens`` tokens of its entity
text. Serialization adds the field names, so a serialized entity is cut earlier in its values.
This script tokenizes the entity text of a random sample of the catalog both ways, with the
backbone's tokenizer, and prints the median and 90th percentile length and the share cut.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stages import backbone  # noqa: E402
from study import Study, read_config  # noqa: E402

from limelight.querygen.generator import QueryGenerator, entity_dicts  # noqa: E402
from limelight.querygen.serialize import plain_text, serialize_entity  # noqa: E402


@functools.cache
def _tokenizer(study: Study):
    """The study's backbone tokenizer (the backbone is loaded once per study)."""
    return QueryGenerator(backbone(study), kind="qgen", schema=study.schema).tokenizer


def lengths(study: Study, idx: np.ndarray, serialize: bool) -> np.ndarray:
    """Token count of each sampled entity's text (s(e) when ``serialize``, else plain values)."""
    text = serialize_entity if serialize else plain_text  # QueryGenerator.entity_text's choice
    texts = [text(e, study.schema, e["id"]) for e in entity_dicts(study.collection, study.schema, idx)]
    ids = _tokenizer(study)(texts, add_special_tokens=False)["input_ids"]
    return np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--n", type=int, default=3000, help="entities sampled (default 3000)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    study = Study(read_config(args.config), None)
    cap = study.cfg["generator"]["max_input_tokens"]
    n = min(args.n, len(study.collection))
    idx = np.sort(np.random.default_rng(args.seed).choice(len(study.collection), n, replace=False))
    print(f"{n} of {len(study.collection)} entities (seed {args.seed}), cut at {cap} tokens")
    for name, ser in (("s(e)", True), ("plain values", False)):
        n_tok = lengths(study, idx, ser)
        print(f"{name:>12}: median {np.median(n_tok):.0f} tokens, p90 {np.percentile(n_tok, 90):.0f}, "
              f"cut {np.mean(n_tok > cap):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
