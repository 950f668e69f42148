"""``limelight evaluate`` and ``limelight compare``: parse, call the library, print."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import typer

from limelight.errors import LimelightError, plural


def _load(qrels_path: Path, run_paths: list[Path]):
    """The qrels and the runs, all on one document map (the qrels' documents first), TREC
    files read in parallel by the columnar reader; a progress line per file read (on stderr,
    ``progress.progress_bar``), Ctrl-C tested between files (within ``deferred_interrupt``)."""
    from limelight.cli.console import progress_bar
    from limelight.data.formats import read_run_parquet, read_trec_qrels, read_trec_runs
    from limelight.progress import check_interrupt

    if not run_paths:
        raise LimelightError("no run files given")
    qrels = read_trec_qrels(qrels_path)
    trec = [i for i, p in enumerate(run_paths) if not str(p).endswith(".parquet")]
    runs: list = [None] * len(run_paths)
    with progress_bar(f"reading {plural(len(run_paths), 'run')}", len(run_paths)) as update:
        for i, r in zip(trec, read_trec_runs([run_paths[i] for i in trec], doc_map=qrels.docids,
                                             progress=update), strict=True):
            runs[i] = r
        if trec:
            qrels = qrels.with_doc_map(runs[trec[0]].docids)  # re-pointed: same codes
        done = len(trec)
        for i, p in enumerate(run_paths):
            if runs[i] is None:
                runs[i] = read_run_parquet(p)
                done += 1
                update(done)
                check_interrupt()
    return qrels, runs


N_DOCS_HELP = ("corpus size n, where unretrieved relevant documents are imputed (LexiRecall, "
               "LexiPrecision, TSE, EE). Default: the size of --collection if given, else per "
               "run: the judged documents plus the documents that run retrieves (never "
               "depends on the other runs passed)")
COLLECTION_HELP = ("the collection the runs retrieve from (shared name, folder with docs.jsonl "
                   "or JSONL file): its number of documents is the corpus size n")


def _corpus_size(n_docs: int | None, collection: str | None) -> tuple[int | None, str]:
    """(``n_docs`` for the library, how the table's footer names it) from ``--n-docs`` and
    ``--collection`` (at most one of them)."""
    if n_docs is not None and collection is not None:
        raise LimelightError("give --n-docs or --collection, not both")
    if n_docs is not None:
        if n_docs < 1:
            raise LimelightError(f"--n-docs must be at least 1, got {n_docs}")
        return n_docs, f"n = {n_docs} (--n-docs)"
    if collection is not None:
        from limelight.data.loaders import load_collection

        n = len(load_collection(collection))
        return n, f"n = {n} (--collection {collection})"
    return None, "n per run: judged + retrieved documents"


def _fmt(v: float) -> str:
    return f"{v:.4f}" if abs(v) >= 1e-4 or v == 0 else f"{v:.3e}"


def evaluate(
    runs: list[Path] = typer.Argument(..., help="run files (TREC or Parquet)"),
    qrels: Path = typer.Option(..., "--qrels", help="TREC qrels file"),
    measures: list[str] = typer.Option(["AP nDCG@10 R@1000 LexiRecall"], "-m", "--measures",
                                       help='measures, e.g. "AP nDCG@10 R@1000 LexiRecall"'),
    per_query: bool = typer.Option(False, "--per-query", help="also print per-query values"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    n_docs: int = typer.Option(None, "--n-docs", help=N_DOCS_HELP),
    collection: str = typer.Option(None, "--collection", help=COLLECTION_HELP),
    test: str = typer.Option("t", "--test", help="paired test for metrics: t or wilcoxon"),
    alpha: float = typer.Option(0.05, "--alpha", help="significance level of the markers"),
) -> None:
    """Evaluate runs: a runs × measures table; * marks p < alpha against the first run
    (paired test; sign test for LexiRecall/LexiPrecision; Holm-corrected over all pairs of
    runs per measure, the family that compare uses too). A run's values never depend on the
    other runs passed: the corpus size n is --n-docs, the size of --collection, or else each
    run's own (the judged documents plus those the run retrieves)."""
    from limelight.cli.console import progress_bar
    from limelight.evaluation.compare import evaluate_runs
    from limelight.progress import deferred_interrupt

    if not 0 < alpha < 1:  # NaN too: a level is a probability strictly between 0 and 1
        raise LimelightError(f"--alpha must be between 0 and 1 (a significance level such as 0.05), "
                             f"got {alpha}")
    n_docs, n_note = _corpus_size(n_docs, collection)
    try:  # Ctrl-C: tested between files read and between runs evaluated, stops within a second
        with deferred_interrupt():
            q, rs = _load(qrels, runs)
            with warnings.catch_warnings(record=True) as caught, \
                    progress_bar(f"evaluating {plural(len(rs), 'run')}", len(rs)) as update:
                warnings.simplefilter("always")
                table = evaluate_runs(rs, q, " ".join(measures), n_docs=n_docs, test=test,
                                      progress=update)
    except KeyboardInterrupt:  # evaluate only prints: there is nothing to keep or resume
        typer.echo("interrupted; nothing was written; rerun the same command", err=True)
        raise typer.Exit(130) from None
    for w in caught:
        typer.echo(f"warning: {w.message}", err=True)
    if json_out:
        out = table.per_query() if per_query else table.aggregate()
        typer.echo(json.dumps(out, indent=None))
        return
    names = table.names
    width = max(len(n) for n in names + ["run"])
    cols = [str(m) for m in table.measures]
    cw = [max(len(c), 10) for c in cols]
    typer.echo("run".ljust(width) + "  " + "  ".join(c.rjust(w) for c, w in zip(cols, cw, strict=True)))
    agg = table.aggregate()
    for i, n in enumerate(names):
        cells = []
        for m, c, w in zip(table.measures, cols, cw, strict=True):
            p = table.p_vs_first[m][i]
            mark = "*" if (i > 0 and p < alpha) else " "
            cells.append((_fmt(agg[n][c]) + mark).rjust(w))
        typer.echo(n.ljust(width) + "  " + "  ".join(cells))
    typer.echo(f"queries: {len(table.results[0].qids)}; * p < {alpha} vs {names[0]} "
               f"({'paired t-test' if test == 't' else 'Wilcoxon'}; sign test for preferences; "
               f"Holm over all pairs of runs); {n_note}")
    if per_query:
        for n, r in zip(names, table.results, strict=True):
            df = r.to_pandas()
            for qid, row in df.iterrows():
                typer.echo("\t".join([n, str(qid)] + [_fmt(float(v)) for v in row.tolist()]))


def compare(
    runs: list[Path] = typer.Argument(..., help="run files (TREC or Parquet)"),
    qrels: Path = typer.Option(..., "--qrels", help="TREC qrels file"),
    preference: str = typer.Option("LexiRecall", "--preference",
                                   help="LexiRecall, LexiPrecision, or a metric such as AP"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    n_docs: int = typer.Option(None, "--n-docs", help=N_DOCS_HELP),
    collection: str = typer.Option(None, "--collection", help=COLLECTION_HELP),
) -> None:
    """Compare every pair of runs: per-query wins/ties/losses, sign test (Holm-corrected over
    all pairs of runs, as in evaluate), MC4 ordering."""
    from limelight.evaluation.compare import compare_runs

    n_docs, _ = _corpus_size(n_docs, collection)
    q, rs = _load(qrels, runs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cmp = compare_runs(rs, q, preference, n_docs=n_docs)
    for w in caught:
        typer.echo(f"warning: {w.message}", err=True)
    d = cmp.to_dict()
    if json_out:
        typer.echo(json.dumps(d))
        return
    typer.echo(f"preference: {d['preference']}  queries: {d['n_queries']}")
    width = max(len(n) for n in d["runs"])
    typer.echo(f"{'a'.ljust(width)}  {'b'.ljust(width)}  wins  ties  losses  p(sign)  p(Holm)")
    for pr in d["pairs"]:
        typer.echo(f"{pr['a'].ljust(width)}  {pr['b'].ljust(width)}  {pr['wins']:4d}  {pr['ties']:4d}  "
                   f"{pr['losses']:6d}  {pr['p_value']:.4f}   {pr['p_holm']:.4f}")
    typer.echo("MC4 ordering: " + " > ".join(d["mc4"]))
    typer.echo(f"discriminative power (Holm, p<0.05): {d['discriminative_power']:.3f}")
