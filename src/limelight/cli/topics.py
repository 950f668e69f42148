"""``limelight retrievability --topics K``: topic-aware retrievability (T-Retrievability) beside
the collection's Gini (``limelight.exposure.topics``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer

from limelight.cli.console import print_table
from limelight.errors import LimelightError


def parse_ks(spec: str) -> list[int]:
    """``K`` or ``K1,K2,...`` (a sweep) → the numbers of topics (each ≥ 1)."""
    try:
        ks = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise LimelightError(f"--topics {spec!r}: expected a number of topics K or a list K1,K2,...") from None
    if not ks or min(ks) < 1:
        raise LimelightError(f"--topics {spec!r}: every number of topics must be ≥ 1")
    return ks


def _make_topics(st, vectors: Path | None, seed: int):
    """``k → Topics`` for the store's queries: K-means over TF-IDF of their texts, or over the
    rows of ``vectors`` (.npy, one row per query of the store, in its order)."""
    from limelight.exposure.topics import topics_from_texts, topics_from_vectors

    texts = st.queries_table().column("text")  # Arrow strings: the tokenizer reads them as they are
    if vectors is None:
        return lambda k: topics_from_texts(texts, k, seed)
    if not vectors.is_file():
        raise LimelightError(f"--topic-vectors {vectors}: no such file")
    try:
        x = np.load(vectors, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise LimelightError(f"--topic-vectors {vectors}: not a numpy .npy array ({e})") from None
    if x.ndim != 2 or x.shape[0] != len(texts):
        raise LimelightError(f"--topic-vectors {vectors}: shape {x.shape}, expected one row per "
                             f"query of the store ({len(texts):,} × dim)")
    return lambda k: topics_from_vectors(x, k, seed, texts.to_pylist())


def topics_report(st, collection: dict, spec: str, vectors: Path | None, seed: int, c: int,
                  weighting: str, beta: float | None, population: str, top: int, doc: str | None,
                  groups_out: Path | None, json_out: bool) -> None:
    """Print the collection's Gini (``collection``: ``Retrievability.to_dict``) beside the
    per-topic Ginis: their min/mean/max, the most unequal topics and, with ``doc``, that
    document's standing within its topics; several K: one row per K (a sweep)."""
    from limelight.exposure.topics import store_topic_retrievability, sweep_topics

    ks = parse_ks(spec)
    make = _make_topics(st, vectors, seed)
    if len(ks) > 1:
        if doc is not None or groups_out is not None:
            raise LimelightError("--doc and --groups-out take one number of topics, not a sweep")
        q, d, rank, _ = st.pair_arrays()
        rows = sweep_topics(make, ks, q, d, rank, st.doc_ids, st.query_weights, c=c,
                            weighting=weighting, beta=beta, population=population)
        if json_out:
            typer.echo(json.dumps({"collection": collection, "sweep": rows.to_dict("records")}))
            return
        typer.echo(f"collection gini@{collection['c']}: {collection['gini']:.4f}")
        print_table(rows.to_dict("records"), f"per-topic Gini by K ({weighting} weighting, {population} documents)")
        return
    res = store_topic_retrievability(st, make(ks[0]), c, weighting, beta, population)
    if groups_out is not None:
        res.write_groups_tsv(groups_out)
    standing = res.standing(doc).drop(columns=["docid"]) if doc is not None else None
    if json_out:
        out = {"collection": collection, "topics": res.to_dict(top)}
        if standing is not None:
            out["standing"] = standing.to_dict("records")
        typer.echo(json.dumps(out, default=float))
        return
    s = res.summary
    typer.echo(f"collection gini@{collection['c']}: {collection['gini']:.4f} "
               f"({collection['n_docs']:,} documents, {collection['n_queries']:,} queries)")
    typer.echo(f"collection gini, {weighting} weighting, {population} documents (K = 1): "
               f"{s['gini_same_weighting']:.4f}")
    typer.echo(f"per-topic gini over K = {s['k']} topics ({s['topic_method']}, seed {s['seed']}): "
               f"min {s['topic_gini_min']:.4f}, mean {s['topic_gini_mean']:.4f}, "
               f"max {s['topic_gini_max']:.4f}, traffic-weighted mean {s['topic_gini_mean_weighted']:.4f}")
    cols = ["name", "n_queries", "weight", "n_docs", "gini"]
    print_table(res.most_unequal(top)[cols].to_dict("records"), f"the {min(top, s['k'])} most unequal topics")
    if standing is not None:
        print_table(standing[["name", "r", "rank", "n_docs", "below", "share"]].to_dict("records"),
                    f"{doc} within its topics", empty=f"{doc}: retrieved by no topic's queries")
