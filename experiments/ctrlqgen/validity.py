"""Intent validity of generated queries, with terms as the analyzer sees them (lowercase
``\\w\\w+`` tokens, English stopwords removed), for the generators of a run.py work folder and for
WeakLabeling-Un on the same entities (the reference).

    .venv/bin/python experiments/ctrlqgen/validity.py WORK N_ENTITIES [N_GEN]
    .venv/bin/python experiments/ctrlqgen/validity.py .cache/ctrlqgen-exp4 2000 160
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np


def main(work: str, n_entities: int, n_gen: int = 32) -> None:
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
    narrow_t, _ = role_texts(coll, schema, gen_sel)
    lab = WeakLabelingUn(schema).fit(coll)
    out = {}
    sources = {}
    for key in ("ctrl-narrow", "ctrl-broad"):
        qs = pickle.loads((Path(work) / f"q-{key}.pkl").read_bytes())
        sources[key] = [x[0] if x else "" for x in qs]
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
        out[key] = {"n": len(keep), "share_term_with_narrow_field": float(share),
                    "predicted_broad_by_ip": float((ip == "broad").mean())}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *(int(x) for x in sys.argv[3:4]))
