"""``limelight rerank train|run|explain|budget``: parse, call the library, print."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer

from limelight.errors import LimelightError

COLLECTION_HELP = "shared collection name (cranfield, npl, scifact, adi, ...) or a folder with docs.jsonl, queries.tsv, qrels.txt"


def _dataset(name: str, need_qrels: bool = False):
    from limelight.data.loaders import load_dataset

    ds = load_dataset(name)
    if ds.queries is None:
        raise LimelightError(f"{name}: no queries.tsv")
    if need_qrels and ds.qrels is None:
        raise LimelightError(f"{name}: no qrels.txt (training needs relevance judgments)")
    return ds


def _first_stage(ds, path: Path | None, k: int):
    if path is not None:
        from limelight.data.formats import load_run

        return load_run(path)
    from limelight.retrieval.bm25 import BM25, BM25Index

    return BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, k).rename("bm25")


def _parse_budgets(spec: str) -> list[float]:
    try:
        if ":" in spec:
            a, b, s = (float(x) for x in spec.split(":"))
            return list(np.arange(a, b + s / 2, s))
        return [float(x) for x in spec.split(",")]
    except ValueError:
        raise LimelightError(f"bad budget list {spec!r} (from:to:step or comma-separated ms)") from None


def register(app: typer.Typer) -> None:
    """Add the ``rerank`` command group to ``app``."""
    rr = typer.Typer(help="Neural re-ranking with TK (Transformer-Kernel) and KNRM.", no_args_is_help=True)
    app.add_typer(rr, name="rerank")

    @rr.command("train")
    def train_cmd(
        collection: str = typer.Argument(..., help=COLLECTION_HELP),
        out: Path = typer.Option(..., "--out", "-o", help="checkpoint file to write"),
        model: str = typer.Option("tk", help="tk or knrm"),
        layers: int = typer.Option(2, help="TK Transformer layers (1-3 in the paper)"),
        min_cf: int = typer.Option(2, help="vocabulary: minimum collection frequency"),
        epochs: int = typer.Option(10),
        batch_size: int = typer.Option(64),
        val_share: float = typer.Option(0.2, help="share of the judged queries held out for early stopping"),
        max_seconds: float = typer.Option(None, help="stop training after this many seconds"),
        first_stage: Path = typer.Option(None, help="run supplying negatives (default: BM25 top 100)"),
        threads: int = typer.Option(1, help="torch CPU threads"),
        seed: int = typer.Option(0),
    ) -> None:
        """Train TK or KNRM on a collection's judged queries; keeps the best validation MRR@10."""
        from limelight.rerank.models import KNRMConfig, TKConfig
        from limelight.rerank.ranker import NeuralRanker
        from limelight.rerank.train import QrelsTriples, TrainConfig, train
        from limelight.rerank.vocab import Vocabulary

        if model not in ("tk", "knrm"):
            raise LimelightError(f"unknown model {model!r} (tk or knrm)")
        if not 0 <= val_share < 1:
            raise LimelightError("--val-share must be in [0, 1)")
        ds = _dataset(collection, need_qrels=True)
        run = _first_stage(ds, first_stage, 100)
        judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
        qids = [q for q in ds.queries.ids if q in judged]
        rng = np.random.default_rng(seed)
        qids = [qids[i] for i in rng.permutation(len(qids))]
        n_val = int(len(qids) * val_share)
        val, tr = qids[:n_val], qids[n_val:]
        vocab = Vocabulary.build(ds.collection.texts.tolist(), min_cf)
        cfg = TKConfig(n_layers=layers) if model == "tk" else KNRMConfig()
        ranker = NeuralRanker.create(cfg, vocab, seed)
        triples = QrelsTriples.build(ds.queries, ds.qrels, run, ds.collection, tr)
        typer.echo(f"{ranker.name}: {len(vocab)} vocabulary rows (GloVe covers "
                   f"{ranker.meta['glove_coverage']:.1%}), {len(tr)} training queries, "
                   f"{triples.n_positives} positives, {len(val)} validation queries")
        res = train(ranker, ds.collection, ds.queries, triples,
                    TrainConfig(epochs=epochs, batch_size=batch_size, seed=seed, threads=threads,
                                max_seconds=max_seconds),
                    run if val else None, ds.qrels if val else None, val, checkpoint=out,
                    progress=typer.echo)
        ranker.meta.update({"collection": ds.name, "train_queries": tr, "val_queries": val})
        ranker.save(out)
        typer.echo(f"{res.steps} steps in {res.seconds:.0f} s ({res.stopped}); best validation "
                   f"MRR@10 {res.best_mrr:.4f} at step {res.best_step}; wrote {out}")

    @rr.command("run")
    def run_cmd(
        collection: str = typer.Argument(..., help=COLLECTION_HELP),
        checkpoint: Path = typer.Option(..., "--checkpoint", "-c"),
        out: Path = typer.Option(..., "--out", "-o", help="run file to write (TREC, or .parquet)"),
        first_stage: Path = typer.Option(None, help="run to re-rank (default: BM25 top --k)"),
        k: int = typer.Option(100, help="BM25 depth when no --first-stage is given"),
        depth: int = typer.Option(None, help="re-rank only each query's top DEPTH"),
        batch_size: int = typer.Option(256),
        threads: int = typer.Option(1),
    ) -> None:
        """Re-rank a first-stage run with a trained checkpoint."""
        import torch

        from limelight.commands_core import check_k
        from limelight.data.formats import write_run_parquet, write_trec_run
        from limelight.rerank.ranker import KernelReranker, NeuralRanker

        check_k(k, "--k")
        if depth is not None:
            check_k(depth, "--depth")
        torch.set_num_threads(threads)
        ranker = NeuralRanker.load(checkpoint)
        ds = _dataset(collection)
        first = _first_stage(ds, first_stage, check_k(k, "--k", len(ds.collection)))
        stage = KernelReranker(ranker, ds.collection, depth=depth, batch_size=batch_size)
        run = stage.transform(ds.queries, first)
        (write_run_parquet if str(out).endswith(".parquet") else write_trec_run)(run, out)
        n = len(run) if depth is None else int((first.ranks() <= depth).sum())
        typer.echo(f"re-ranked {n} documents of {run.n_queries} queries in "
                   f"{stage.last_model_seconds:.2f} s of model time; wrote {out}")
        if ds.qrels is not None:
            from limelight.evaluation import evaluate

            for r in (first, run):
                res = evaluate(r, ds.qrels, "nDCG@10 RR@10")
                typer.echo(f"  {r.name}: nDCG@10 {res['nDCG@10']:.4f}  MRR@10 {res['RR@10']:.4f}")

    @rr.command("explain")
    def explain_cmd(
        collection: str = typer.Argument(..., help=COLLECTION_HELP),
        checkpoint: Path = typer.Option(..., "--checkpoint", "-c"),
        query: str = typer.Option(..., "--query", "-q", help="query id"),
        doc: list[str] = typer.Option(..., "--doc", "-d", help="document id (give two for a side-by-side HTML)"),
        html: Path = typer.Option(None, help="write the side-by-side HTML here (needs two --doc)"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Per-kernel scores of documents for a query; optionally an HTML comparison of two."""
        from limelight.rerank.explain import explain, explain_html
        from limelight.rerank.ranker import NeuralRanker

        ranker = NeuralRanker.load(checkpoint)
        ds = _dataset(collection)
        qtext = ds.queries[query] if query in ds.queries.ids else None
        if qtext is None:
            raise LimelightError(f"unknown query id {query!r} in {ds.name}")
        texts = {}
        for d in doc:
            if d not in ds.collection.ids:
                raise LimelightError(f"unknown document id {d!r} in {ds.name}")
            texts[d] = ds.collection.texts[ds.collection.ids.lookup(d)]
        out = {}
        for d, t in texts.items():
            ex = explain(ranker, qtext, t)
            out[d] = ex
            if not as_json:
                typer.echo(f"query {query}: {qtext}\ndocument {d}: score {ex.score:.4f} = "
                           f"s_log {ex.s_log:.4f} + s_len {ex.s_len:.4f}")
                typer.echo(ex.kernels.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        if as_json:
            typer.echo(json.dumps({d: {"score": e.score, "kernels": e.kernels.to_dict("records")}
                                   for d, e in out.items()}, indent=1))
        if html is not None:
            if len(doc) != 2:
                raise LimelightError("--html needs exactly two --doc")
            html.write_text(explain_html(ranker, qtext, texts[doc[0]], texts[doc[1]],
                                         f"document {doc[0]}", f"document {doc[1]}"), encoding="utf-8")
            typer.echo(f"wrote {html}")

    @rr.command("budget")
    def budget_cmd(
        collection: str = typer.Argument(..., help=COLLECTION_HELP),
        checkpoint: list[Path] = typer.Option(..., "--checkpoint", "-c", help="one per model"),
        budgets: str = typer.Option("0:300:10", help="ms per query: from:to:step or a list"),
        depth: int = typer.Option(100, help="first-stage depth scored once per model"),
        batch_size: int = typer.Option(256),
        threads: int = typer.Option(1),
        measure: str = typer.Option("nDCG@10"),
    ) -> None:
        """Documents/ms of each checkpoint on this machine and the measure each affords per budget."""
        import torch

        from limelight.commands_core import check_k
        from limelight.rerank.budget import (
            best_ranges,
            budget_table,
            depth_curve,
            docs_per_ms,
            fixed_length_docs,
        )
        from limelight.rerank.ranker import KernelReranker, NeuralRanker

        check_k(depth, "--depth")
        torch.set_num_threads(threads)
        ds = _dataset(collection, need_qrels=True)
        depth = check_k(depth, "--depth", len(ds.collection))
        first = _first_stage(ds, None, depth)
        curves, speed = {}, {}
        for path in checkpoint:
            ranker = NeuralRanker.load(path)
            name = ranker.name if ranker.name not in curves else f"{ranker.name}:{path.stem}"
            q = ranker.encode_queries(ds.queries.texts.tolist())
            docs = fixed_length_docs(ranker, ds.collection.texts.tolist()[:500], batch_size * 2,
                                     ranker.config.max_doc_len)
            speed[name] = docs_per_ms(ranker, q, docs, batch_size)
            scored = KernelReranker(ranker, ds.collection, batch_size=batch_size).transform(ds.queries, first)
            curves[name] = depth_curve(first, scored, ds.qrels, depth, measure)
            typer.echo(f"{name}: {speed[name]:.2f} documents/ms; {measure} at depth {depth}: {curves[name][-1]:.4f}")
        table = budget_table(curves, speed, _parse_budgets(budgets))
        typer.echo(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        for m, a, b in best_ranges(table):
            typer.echo(f"best {a:g}-{b:g} ms: {m}")
