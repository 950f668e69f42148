"""Intent validity of generated queries, with terms as the analyzer sees them (lowercase
``\\w\\w+`` tokens, English stopwords removed), for the generators of a run.py work folder and for
WeakLabeling-Un on the same entities (the reference).

    .venv/bin/python experiments/ctrlqgen/validity.py WORK N_ENTITIES [N_GEN [N_EXTRA]]
    .venv/bin/python experiments/ctrlqgen/validity.py .cache/ctrlqgen-exp4 2000 160

``N_EXTRA``: also generate narrow and broad queries with WORK's CtrlQGen generator for that many
more entities (seeded, outside E'; cached in WORK) and report the figures over all of them, with
95% Wilson intervals.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``p`` over ``n`` trials."""
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(c - h), float(c + h)


def main(work: str, n_entities: int, n_gen: int = 32, n_extra: int = 0) -> None:
    from limelight.analysis import Analyzer
    from limelight.data import load_catalog
    from limelight.data.collection import Collection
    from limelight.data.ids import IdMap
    from limelight.querygen.serialize import load_schema, serialize_collection
    from limelight.querygen.weaklabel import WeakLabelingUn, role_texts, weaklabel_ip
    from limelight.retrieval.dense import Encoder

    schema = load_schema("debian")
    full = load_catalog("debian")
    sel = np.sort(np.random.default_rng(0).choice(len(full), n_entities, replace=False))
    coll = Collection(IdMap(full.ids.strings[sel], kind="document"),
                      serialize_collection(full, schema, sel),
                      {k: v[sel] for k, v in full.fields.items()}, "debian-sub")
    gen_sel = np.sort(np.random.default_rng(1).choice(len(coll), n_gen, replace=False))
    an = Analyzer()
    enc = Encoder(max_seq_length=64, variant="torch-fp32")
    sources = {}
    for key in ("ctrl-narrow", "ctrl-broad"):
        qs = pickle.loads((Path(work) / f"q-{key}.pkl").read_bytes())
        sources[key] = [x[0] if x else "" for x in qs]
    if n_extra:
        from limelight.querygen.generator import QueryGenerator, entity_dicts

        rest = np.setdiff1d(np.arange(len(coll)), gen_sel)
        extra = np.sort(np.random.default_rng(21).choice(rest, n_extra, replace=False))
        g = None
        for it in ("narrow", "broad"):
            path = Path(work) / f"q-extra-{it}-{n_extra}.pkl"
            if not path.exists():
                g = g or QueryGenerator.load(Path(work) / "gen-ctrlqgen")
                qs = g.generate(entity_dicts(coll, schema, extra), it, n=1, batch_size=32, seed=5)
                path.write_bytes(pickle.dumps(qs))
            qs = pickle.loads(path.read_bytes())
            sources[f"ctrl-{it}"] += [x[0] if x else "" for x in qs]
        gen_sel = np.concatenate([gen_sel, extra])
    narrow_t, _ = role_texts(coll, schema, gen_sel)
    lab = WeakLabelingUn(schema).fit(coll)
    out = {}
    for it in ("narrow", "broad"):
        ei, _, q = lab.generate(gen_sel, it, seed=0)
        pos = {e: i for i, e in enumerate(gen_sel.tolist())}
        wl = [""] * len(gen_sel)
        for e, t in zip(ei.tolist(), q.tolist(), strict=True):
            wl[pos[e]] = t
        sources[f"weaklabel-{it}"] = wl
    for key, qs in sources.items():
        keep = [i for i, q in enumerate(qs) if q]
        share = np.mean([bool(set(an.tokenize(qs[i])) & set(an.tokenize(narrow_t[i]))) for i in keep])
        ip = weaklabel_ip([qs[i] for i in keep], coll, schema, gen_sel[keep], enc)
        pb = float((ip == "broad").mean())
        out[key] = {"n": len(keep), "share_term_with_narrow_field": float(share),
                    "share_ci95": wilson(float(share), len(keep)),
                    "predicted_broad_by_ip": pb, "predicted_broad_ci95": wilson(pb, len(keep))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *(int(x) for x in sys.argv[3:5]))
