"""Cache MiniLM embeddings for the EQI experiments (query log, npl, Debian catalog).

    .venv/bin/python experiments/eqi/embed.py [querylog] [npl] [debian]

Embeddings go to .cache/embeddings (keyed by model, settings and content); the Debian catalog
is encoded with max_seq_length=64 (descriptions truncated: ~4x cheaper on CPU)."""

from __future__ import annotations

import sys
import time

from limelight.data import load_dataset, load_query_log
from limelight.data.collection import Collection
from limelight.retrieval.dense import Encoder

CACHE = ".cache/embeddings"


def main(which: list[str]) -> None:
    enc = Encoder()
    for name in which:
        t0 = time.perf_counter()
        if name == "querylog":
            q = load_query_log()
            coll = Collection(q.ids, q.texts, name="querylog")
            enc.encode_collection(coll, cache_dir=CACHE)
        elif name == "debian":
            enc64 = Encoder(max_seq_length=64)
            enc64.encode_collection(load_dataset("debian").collection, cache_dir=CACHE)
        else:
            enc.encode_collection(load_dataset(name).collection, cache_dir=CACHE)
        print(name, f"{time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["npl", "querylog", "debian"])
