"""``limelight rerank train|run|explain|budget``: parse, call the library, print."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from limelight._io import check_output_file
from limelight.cli.common import COLLECTION_HELP, check_k
from limelight.errors import LimelightError, plural

app = typer.Typer(help="Neural re-ranking with TK (Transformer-Kernel) and KNRM.", no_args_is_help=True)


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
            import numpy as np  # imported here: `limelight --help` must not pay for numpy

            a, b, s = (float(x) for x in spec.split(":"))
            return list(np.arange(a, b + s / 2, s))
        return [float(x) for x in spec.split(",")]
    except ValueError:
        raise LimelightError(f"bad budget list {spec!r} (from:to:step or comma-separated ms)") from None


def _check_train_options(model: str, weak: str | None, max_steps: int | None, epochs: int) -> None:
    if model not in ("tk", "knrm"):
        raise LimelightError(f"unknown model {model!r} (tk or knrm)")
    if weak is not None and weak not in ("bm25-log", "title-body"):
        raise LimelightError(f"unknown --weak source {weak!r} (bm25-log or title-body)")
    if max_steps is not None and max_steps < 1:
        raise LimelightError(f"--max-steps must be ≥ 1, got {max_steps}")
    if epochs < 1:
        raise LimelightError(f"--epochs must be ≥ 1, got {epochs}")


def _weak_triples(ds, weak: str, weak_queries: int, seed: int):
    """Weakly supervised training triples (``bm25-log`` or ``title-body``); no query of the
    collection, of any fold, is a training query."""
    from limelight.rerank import weak as weak_mod

    every_query = ds.queries.texts.tolist()
    if weak == "bm25-log":
        from limelight.data.loaders import load_query_log

        return weak_mod.bm25_log_triples(ds.collection, load_query_log(), weak_queries, seed,
                                         exclude=every_query)
    return weak_mod.title_body_triples(ds.collection, seed, exclude=every_query)


def _judged_triples(ds, first_stage: Path | None, folds: int, fold: int, val_share: float,
                    split_seed: int, val_depth: int):
    """``(triples, validation or None, train, validation, test query ids)`` of a fold's judged
    queries, negatives from the first-stage run (default: BM25 top 100)."""
    from limelight.rerank.train import TripleSet, Validation, fold_split

    run = _first_stage(ds, first_stage, 100)
    judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
    qids = [q for q in ds.queries.ids if q in judged]
    tr, val, test = fold_split(qids, folds, fold if folds > 1 else None, val_share, split_seed)
    data = TripleSet.from_qrels(ds.queries, ds.qrels, run, ds.collection, tr)
    validation = Validation(ds.collection, ds.queries, run, ds.qrels, val, val_depth) if val else None
    return data, validation, tr, val, test


@app.command("train")
def train_cmd(
    collection: str = typer.Argument(..., help=COLLECTION_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="best-model checkpoint to write; beside it "
                             "<stem>.state.pt (resumable state), <stem>.log.jsonl, <stem>.curve.png"),
    model: str = typer.Option("tk", help="tk or knrm"),
    layers: int = typer.Option(2, help="TK Transformer layers (1-3 in the paper)"),
    min_cf: int = typer.Option(2, help="vocabulary: minimum collection frequency"),
    max_steps: int = typer.Option(None, help="optimizer-step budget (default: --epochs epochs)"),
    epochs: int = typer.Option(10, help="budget in epochs when --max-steps is not given"),
    batch_size: int = typer.Option(32),
    eval_every: int = typer.Option(50, help="validate every N steps"),
    checkpoint_every: int = typer.Option(50, help="write the resumable state every N steps"),
    patience: int = typer.Option(5, help="stop after N validations without improvement (0: never)"),
    metric: str = typer.Option("nDCG@10", help="validation selection measure: nDCG@10 or RR@10"),
    max_seconds: float = typer.Option(None, help="safety stop after this many seconds (checkpointed, resumable)"),
    resume: bool = typer.Option(False, "--resume", help="continue from <stem>.state.pt (bit-identical)"),
    init: Path = typer.Option(None, help="start from this checkpoint's weights (e.g. a weakly supervised one)"),
    weak: str = typer.Option(None, help="weak supervision instead of qrels: bm25-log or title-body "
                             "(no judged query is used or validated on)"),
    weak_queries: int = typer.Option(20000, help="bm25-log: log queries sampled"),
    folds: int = typer.Option(1, help="query folds; the test fold --fold is never trained or validated on"),
    fold: int = typer.Option(0, help="the test fold (with --folds > 1)"),
    split_seed: int = typer.Option(0, help="seed of the fold and validation split"),
    val_share: float = typer.Option(0.2, help="share of the non-test judged queries used for validation"),
    val_depth: int = typer.Option(100, help="validation: re-rank the first-stage top N"),
    first_stage: Path = typer.Option(None, help="run supplying negatives (default: BM25 top 100)"),
    threads: int = typer.Option(1, help="torch CPU threads"),
    seed: int = typer.Option(0),
    lr_scale: float = typer.Option(1.0, help="multiply the paper's learning rates (1e-4 embeddings and "
                                   "contextualization, 1e-3 the rest) by this; e.g. 0.1 to fine-tune a "
                                   "pre-trained --init without erasing it"),
    throttle: float = typer.Option(0.0, hidden=True, help="sleep per step (interruption tests)"),
) -> None:
    """Train TK or KNRM (resumable): on a fold's judged training queries, or weakly supervised."""
    from limelight.rerank.models import KNRMConfig, TKConfig
    from limelight.rerank.ranker import NeuralRanker, ranker_fingerprint
    from limelight.rerank.train import FitConfig, collection_fingerprint, fit
    from limelight.rerank.vocab import Vocabulary

    _check_train_options(model, weak, max_steps, epochs)
    check_output_file(out)
    if not lr_scale > 0:
        raise LimelightError(f"--lr-scale must be > 0, got {lr_scale}")
    ds = _dataset(collection, need_qrels=weak is None)
    vocab = Vocabulary.build(ds.collection.texts.tolist(), min_cf)
    cfg = TKConfig(n_layers=layers) if model == "tk" else KNRMConfig()
    ranker = NeuralRanker.create(cfg, vocab, seed)
    fps = {"collection": collection_fingerprint(ds.collection)}
    if init is not None:
        ranker.load_weights(init)  # another vocabulary/collection → VocabularyMismatchError
        fps["init"] = ranker_fingerprint(ranker)
    if weak is not None:
        data, validation, tr, val, test = _weak_triples(ds, weak, weak_queries, seed), None, [], [], []
    else:
        data, validation, tr, val, test = _judged_triples(ds, first_stage, folds, fold, val_share,
                                                          split_seed, val_depth)
    steps = max_steps or epochs * -(-data.n_positives // batch_size)
    ranker.meta.update({"collection": ds.name, "train_queries": list(tr), "val_queries": list(val),
                        "test_queries": list(test), "weak": weak, "init": str(init) if init else None,
                        "seed": seed, "folds": folds, "fold": fold, "split_seed": split_seed})
    typer.echo(f"{ranker.name}: {len(vocab)} vocabulary rows (GloVe covers "
               f"{ranker.meta['glove_coverage']:.1%}), {data.name}: {data.n_queries} training queries, "
               f"{data.n_positives} positives, {len(val)} validation queries, {len(test)} test queries "
               f"(unused); budget {plural(steps, 'step')}")
    base = FitConfig()
    fc = FitConfig(max_steps=steps, batch_size=batch_size, eval_every=eval_every,
                   lr_embed=base.lr_embed * lr_scale, lr_context=base.lr_context * lr_scale,
                   lr_other=base.lr_other * lr_scale,
                   checkpoint_every=checkpoint_every, patience=patience, metric=metric, seed=seed,
                   threads=threads, max_seconds=max_seconds, throttle=throttle)
    res = fit(ranker, data, fc, out, validation, resume=resume, fingerprints=fps, progress=typer.echo)
    if res.stopped in ("interrupted", "time"):
        typer.echo(f"stopped ({res.stopped}) at step {res.steps}; continue with the same command and --resume")
        if res.stopped == "interrupted":
            raise typer.Exit(130)
        return
    best = (f"best validation MRR@10 {res.best.get('RR@10', float('nan')):.4f}, nDCG@10 "
            f"{res.best.get('nDCG@10', float('nan')):.4f} at step {res.best_step}" if validation
            else "no validation (the last weights are kept)")
    typer.echo(f"{plural(res.steps, 'step')} in {res.seconds:.0f} s ({res.stopped}); {best}; wrote {out}")


@app.command("run")
def run_cmd(
    collection: str = typer.Argument(..., help=COLLECTION_HELP),
    checkpoint: Path = typer.Option(..., "--checkpoint", "-c"),
    out: Path = typer.Option(..., "--out", "-o", help="run file to write (TREC, or .parquet)"),
    first_stage: Path = typer.Option(None, help="run to re-rank (default: BM25 top --k)"),
    k: int = typer.Option(100, help="BM25 depth when no --first-stage is given"),
    depth: int = typer.Option(None, help="re-rank only each query's top DEPTH"),
    batch_size: int = typer.Option(256),
    threads: int = typer.Option(1),
    interpolate: str = typer.Option(None, help="also write <out stem>.interp<suffix>: λ·minmax(first "
                                    "stage) + (1−λ)·minmax(model) over the re-ranked top; a λ in [0, 1] "
                                    "or 'auto' (tuned on the checkpoint's validation queries only)"),
) -> None:
    """Re-rank a first-stage run with a trained checkpoint (optionally also interpolated). With
    qrels, nDCG@10 and MRR@10 are printed over the judged queries the checkpoint was neither
    trained nor validated on (its held-out queries; the line above the figures says which)."""
    import torch

    from limelight.data.formats import write_run_parquet, write_trec_run
    from limelight.rerank.ranker import KernelReranker, NeuralRanker

    check_k(k, "--k")
    if depth is not None:
        check_k(depth, "--depth")
    check_output_file(out)
    torch.set_num_threads(threads)
    ranker = NeuralRanker.load(checkpoint)
    ds = _dataset(collection)
    first = _first_stage(ds, first_stage, check_k(k, "--k", len(ds.collection)))
    stage = KernelReranker(ranker, ds.collection, depth=depth, batch_size=batch_size)
    run = stage.transform(ds.queries, first)
    lam = None
    if interpolate is not None:
        if interpolate == "auto":
            val = list(ranker.meta.get("val_queries") or [])
            if not val or ds.qrels is None:
                raise LimelightError("--interpolate auto needs a checkpoint with validation queries "
                                     "and a collection with qrels")
        else:
            try:
                lam = float(interpolate)
            except ValueError:
                raise LimelightError(f"--interpolate must be a number in [0, 1] or auto, got {interpolate!r}") from None
            if not 0 <= lam <= 1:
                raise LimelightError(f"--interpolate must be in [0, 1], got {lam}")
    write = write_run_parquet if str(out).endswith(".parquet") else write_trec_run
    write(run, out)
    n = len(run) if depth is None else int((first.ranks() <= depth).sum())
    typer.echo(f"re-ranked {plural(n, 'document')} of {plural(run.n_queries, 'query')} in "
               f"{stage.last_model_seconds:.2f} s of model time; wrote {out}")
    rows = [first, run]
    if interpolate is not None:
        from limelight.rerank.interpolate import interpolate as mix
        from limelight.rerank.interpolate import tune_lambda

        if lam is None:
            lam, _ = tune_lambda(first, run, ds.qrels, val, depth)
            typer.echo(f"λ = {lam:g} (best validation nDCG@10 over {len(val)} validation queries)")
        mixed = mix(first, run, lam, depth, name=f"{run.name}+{first.name}(λ={lam:g})")
        ipath = out.with_name(out.stem + ".interp" + out.suffix)
        write(mixed, ipath)
        typer.echo(f"wrote {ipath}")
        rows.append(mixed)
    if ds.qrels is not None:
        _evaluate_held_out(rows, ds, ranker.meta, checkpoint)


def _evaluate_held_out(runs: list, ds, meta: dict, checkpoint: Path) -> None:
    """nDCG@10 and MRR@10 of ``runs`` over the judged queries the checkpoint neither trained
    nor validated on (``held_out_queries``), the line above them saying which queries those are."""
    from limelight.evaluation.evaluate import Evaluator
    from limelight.rerank.interpolate import subset_qrels
    from limelight.rerank.train import held_out_queries

    relevant = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
    judged = [q for q in ds.queries.ids if q in relevant]  # as _judged_triples splits them
    test = held_out_queries(meta, judged, ds.name)
    if not test:
        typer.echo(f"no held-out query: every judged query of {ds.name} was a training or "
                   f"validation query of {checkpoint}")
        return
    left = len(judged) - len(test)
    typer.echo(f"on the {len(test)} judged queries {checkpoint.name} was neither trained nor "
               f"validated on" + (f" ({left} training and validation queries left out):" if left
                                  else " (all of them):"))
    ev = Evaluator(subset_qrels(ds.qrels, test) if left else ds.qrels, "nDCG@10 RR@10")
    for r in runs:
        res = ev.evaluate(r, warn=not left)  # the left-out queries' rows are ignored, not warned
        typer.echo(f"  {r.name}: nDCG@10 {res['nDCG@10']:.4f}  MRR@10 {res['RR@10']:.4f}")


@app.command("explain")
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


@app.command("budget")
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
