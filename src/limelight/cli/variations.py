"""``limelight variations``, ``robustness`` and ``simulate``: parse, call the library, print."""

from __future__ import annotations

from pathlib import Path

import typer

from limelight._io import check_output_file
from limelight.cli.common import COLLECTION_HELP, check_k
from limelight.errors import LimelightError, plural

MODEL_HELP = "local checkpoint of a model-based method, METHOD=PATH (T5DescToTitle, T5QQP, BackTransl); repeatable"


def _models(specs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in specs or []:
        if "=" not in s:
            raise LimelightError(f"--model expects METHOD=PATH, got {s!r}")
        k, v = s.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _dataset(name: str, queries: Path | None, qrels: Path | None):
    from limelight.data.formats import read_queries_tsv, read_trec_qrels
    from limelight.data.loaders import load_dataset

    ds = load_dataset(name)
    q = read_queries_tsv(queries) if queries else ds.queries
    r = read_trec_qrels(qrels, doc_map=ds.collection.ids) if qrels else ds.qrels
    if q is None:
        raise LimelightError(f"{name}: no queries (give --queries)")
    if r is None:
        raise LimelightError(f"{name}: no qrels (give --qrels)")
    return ds, q, r


def variations_cmd(
    queries: Path = typer.Option(..., "--queries", "-q", help="queries TSV (id<TAB>text)"),
    out: Path = typer.Option(..., "--out", "-o", help="TSV to write: qid variant_id text method category"),
    methods: str = typer.Option("all", help="'all' or comma-separated method names"),
    n: int = typer.Option(1, "--n", help="variants per query and method"),
    seed: int = typer.Option(0),
    model: list[str] = typer.Option(None, "--model", help=MODEL_HELP),
) -> None:
    """Generate query variations (Penha et al., ECIR 2022, Table 3)."""
    from limelight.data.formats import read_queries_tsv
    from limelight.querygen.variations import generate_variations

    check_output_file(out)
    qs = read_queries_tsv(queries)
    v = generate_variations(qs, methods, n=n, seed=seed, models=_models(model))
    v.write_tsv(out)
    counts = v.frame.groupby("method", sort=False)["qid"].nunique()
    for m in v.methods:
        typer.echo(f"{m}: {int(counts.get(m, 0))}/{len(qs)} queries with a variant")
    for m, why in v.skipped.items():
        typer.echo(f"skipped {m}: {why}")
    typer.echo(f"wrote {plural(len(v), 'variant')} to {out}")


def robustness_cmd(
    collection: str = typer.Option(..., "--collection", "-c", help=COLLECTION_HELP),
    queries: Path = typer.Option(None, help="queries TSV (default: the collection's)"),
    qrels: Path = typer.Option(None, help="TREC qrels (default: the collection's)"),
    systems: str = typer.Option("bm25,dense", help="comma-separated: bm25, dense"),
    tk: Path = typer.Option(None, help="trained TK/KNRM checkpoint: adds BM25 >> TK"),
    rerank_depth: int = typer.Option(100, help="BM25 depth that the re-ranker re-ranks"),
    variations: Path = typer.Option(None, help="variants TSV from `limelight variations`"),
    methods: str = typer.Option("all"),
    measure: str = typer.Option("nDCG@10"),
    mode: str = typer.Option("full", help="full, rerank or both"),
    k: int = typer.Option(1000, help="first-stage depth"),
    seed: int = typer.Option(0),
    model: list[str] = typer.Option(None, "--model", help=MODEL_HELP),
    out_md: Path = typer.Option(None, help="write the Table 4 markdown here"),
    out_json: Path = typer.Option(None, help="write every number as JSON here"),
    plot: Path = typer.Option(None, help="write a PNG bar chart here"),
) -> None:
    """Robustness of pipelines to query variations (Table 4): drops, t-tests, judged@10."""
    from limelight.querygen.robustness import build_systems, robustness_report
    from limelight.querygen.variations import read_variations_tsv

    check_k(k, "--k")
    check_k(rerank_depth, "--rerank-depth")
    ds, qs, rq = _dataset(collection, queries, qrels)
    k = check_k(k, "--k", len(ds.collection))
    var = read_variations_tsv(variations, qs) if variations else None
    if var is not None:
        var.original = qs
    pipes = build_systems(ds.collection, systems, k, tk, rerank_depth)
    rep = robustness_report(pipes, qs, rq, methods=methods, measure=measure, variations=var,
                            mode=mode, seed=seed, models=_models(model), dataset=ds.name)
    md = rep.to_markdown()
    typer.echo(md)
    if out_md:
        from limelight._io import atomic_path

        with atomic_path(out_md) as tmp:
            tmp.write_text(md, encoding="utf-8")
    if out_json:
        rep.to_json(out_json)
    if plot:
        rep.plot(plot)


def simulate_cmd(
    collection: str = typer.Option(..., "--collection", "-c", help=COLLECTION_HELP),
    strategy: str = typer.Option("S2'", help="S1, S2, S2' (S2p), S3, S3' (S3p), S4, S4' (S4p), S4'' (S4pp)"),
    source: str = typer.Option("TTS", help="TTS (topic terms) or KIS (known-item language model)"),
    n: int = typer.Option(10, "--n", help="queries per topic"),
    lam: float = typer.Option(0.4, "--lambda", help="background weight of the KIS model"),
    out: Path = typer.Option(..., "--out", "-o", help="queries TSV to write (id<TAB>text)"),
    validate: bool = typer.Option(False, help="compare the first simulated query with the real one (BM25 grid)"),
) -> None:
    """Simulate user query variants (Breuer et al., ECIR 2022) from topics and qrels."""
    from limelight.data.formats import write_queries_tsv
    from limelight.querygen.simulation import TermModel, simulate_queries, validate_simulation

    check_output_file(out)
    ds, qs, rq = _dataset(collection, None, None)
    tm = TermModel.build(ds.collection)
    sim = simulate_queries(qs, strategy, source, n, term_model=tm, qrels=rq, lam=lam)
    write_queries_tsv(sim, out)
    typer.echo(f"wrote {len(sim)} simulated queries for {len(set(sim.fields['topic']))} topics to {out}")
    if validate:
        from limelight.retrieval.bm25 import BM25, BM25Index

        idx = BM25Index.build(ds.collection)
        systems = {f"bm25(k1={k1},b={b})": BM25(idx, k1=k1, b=b) % 1000
                   for k1 in (0.3, 0.9, 1.5) for b in (0.2, 0.75)}
        v = validate_simulation(systems, qs, sim, rq)
        typer.echo(f"{v.measure}: real {next(iter(v.real_means.values())):.4f}  simulated "
                   f"{next(iter(v.simulated_means.values())):.4f}  RMSE {v.rmse:.4f}  p {v.p_value:.3g}  "
                   f"Kendall tau {v.tau:.3f}  Jaccard {v.jaccard:.3f}  ({v.n_topics} topics)")
