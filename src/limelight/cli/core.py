"""``limelight index``, ``search``, ``retrieve`` and ``info``: parse, call the library, print."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from limelight._io import atomic_output_file, check_output_dir, check_replaceable_file
from limelight.cli.common import check_k
from limelight.errors import LimelightError, plural
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1


def retrieve_with_progress(retriever, queries, k: int, batch: int = 2048, label: str = "retrieving"):
    """``retriever.retrieve`` in batches of queries, with a progress bar (one ``Run``)."""
    import numpy as np

    from limelight.data.run import Run
    from limelight.retrieval.base import run_from_topk

    texts = queries.texts.tolist()
    if len(texts) <= batch:
        return retriever.retrieve(queries, k)
    from limelight.cli.console import progress_bar

    docs, scores = [], []
    with progress_bar(label, len(texts)) as update:
        for s in range(0, len(texts), batch):
            dd, ss = retriever.search_batch(texts[s:s + batch], k)
            docs.append(dd)
            scores.append(ss)
            update(s + len(dd))
    run = run_from_topk(queries.ids, retriever.doc_ids, np.vstack(docs), np.vstack(scores),
                        getattr(retriever, "name", "run"))
    assert isinstance(run, Run)
    return run


def index(
    collection: str = typer.Option(..., help="shared name (scifact, debian, ...), folder with docs.jsonl, JSONL file, or irds:<id>"),
    out: Path = typer.Option(..., help="index directory to create"),
    dense: bool = typer.Option(False, "--dense", help="also build the dense (MiniLM + FAISS) index"),
    stem: bool = typer.Option(False, "--stem", help="Snowball English stemming"),
    stopwords: str = typer.Option("en", help="stopword list: en, en_plus or none"),
    model: str = typer.Option(None, help="sentence-transformers model path or name (dense)"),
    memory_gb: float = typer.Option(2.0, "--memory-gb", help="working memory of the BM25 build "
                                    "(GB); a JSONL file or folder is read in chunks, so the peak "
                                    "is about this plus the index's size"),
    engine: str = typer.Option("local", help="local, or ray: the documents' analysis as Ray "
                                             "tasks (BM25; the same index)"),
    address: str = typer.Option(None, help="with --engine ray: a running cluster "
                                           "(HOST:PORT or auto); default a local one"),
) -> None:
    """Index a collection (BM25, and dense with --dense)."""
    from limelight.analysis import Analyzer
    from limelight.retrieval.index_dir import read_meta

    check_output_dir(out, "index")  # before the work: a folder of the user's is never replaced
    if not memory_gb > 0:
        raise LimelightError(f"--memory-gb must be positive, got {memory_gb}")
    if memory_gb == float("inf"):
        raise LimelightError(f"--memory-gb must be a finite number of gigabytes, got {memory_gb}")
    if engine not in ("local", "ray"):
        raise LimelightError(f"unknown engine {engine!r} (local or ray)")
    if address is not None and engine != "ray":
        raise LimelightError("--address goes with --engine ray")
    if engine == "ray" and dense:
        raise LimelightError("--engine ray builds the BM25 index; build the dense one with "
                             "--engine local (or RayEncoder in Python)")
    analyzer = Analyzer(stopwords=stopwords, stemmer="english" if stem else None)
    try:
        _build(collection, out, dense, analyzer, model, memory_gb, engine, address)
    except KeyboardInterrupt:
        if engine == "ray":  # its analysed runs are kept: main's line (rerun to resume) holds
            raise
        # the local build writes its folder whole or not at all: nothing to resume
        typer.echo(f"interrupted; no index was written to {out} (it is built whole or not at "
                   "all): rerun the same command to build it", err=True)
        raise typer.Exit(130) from None
    meta = read_meta(out)
    typer.echo(f"indexed {plural(meta['n_docs'], 'document')} of {meta['collection']} into {out}")


def _build(collection: str, out: Path, dense: bool, analyzer, model: str | None, memory_gb: float,
           engine: str, address: str | None) -> None:
    """``limelight index``'s build: local, or the documents' analysis as Ray tasks."""
    from limelight.retrieval.index_dir import build_index_from

    if engine == "ray":  # runs of documents analyzed as Ray tasks, merged here (resumable)
        from limelight.scale.index import build_index_ray_from

        build_index_ray_from(collection, out, address=address, analyzer=analyzer,
                             memory_gb=memory_gb)
    else:
        build_index_from(collection, out, dense=dense, analyzer=analyzer, model=model,
                         show_progress=True, memory_gb=memory_gb)


def search(
    text: str = typer.Argument(..., help="query text"),
    index: Path = typer.Option(..., help="index directory"),
    model: str = typer.Option("bm25", help="bm25, dense or hybrid"),
    k: int = typer.Option(10, help="number of results"),
    k1: float = typer.Option(DEFAULT_K1), b: float = typer.Option(DEFAULT_B),
    json_out: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Search one query and print the results."""
    from limelight.data.queries import Queries, check_query_text
    from limelight.retrieval.index_dir import index_size, load_docs
    from limelight.retrieval.spec import System

    text = check_query_text(text)
    k = check_k(k, "--k", index_size(index))
    retriever = System.from_model(model, k1, b).open(index)
    run = retriever.retrieve(Queries.from_lists(["q"], [text]), k)
    docs = load_docs(index)
    rows = []
    for rank, (d, s) in enumerate(zip(run.docids.decode(run.d).tolist(), run.score.tolist(), strict=True), 1):
        snippet = " ".join(docs.texts[docs.ids.lookup(d)].split())[:100]
        rows.append({"rank": rank, "doc_id": d, "score": round(s, 4), "text": snippet})
    if json_out:
        typer.echo(json.dumps(rows))
        return
    from limelight.cli.console import print_table

    print_table(rows, f"{model}: {text}", empty="no results")


def retrieve(
    index: Path = typer.Option(..., help="index directory"),
    queries: str = typer.Option(..., help="TSV id<TAB>text, or the query log file"),
    out: Path = typer.Option(..., help="TREC run to write (.gz compresses)"),
    k: int = typer.Option(1000, help="depth per query"),
    model: str = typer.Option("bm25", help="bm25, dense or hybrid"),
    k1: float = typer.Option(DEFAULT_K1), b: float = typer.Option(DEFAULT_B),
    threads: int = typer.Option(None, help="BM25 threads (default: all cores)"),
    tag: str = typer.Option(None, help="run tag (default: the model)"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace --out even when limelight "
                                   "did not write it (its own run files are replaced anyway)"),
) -> None:
    """Retrieve the top k for every query and write a TREC run (atomically). An existing --out
    that limelight did not write is refused unless --overwrite."""
    from limelight.data.formats import write_trec_run
    from limelight.data.loaders import load_queries
    from limelight.retrieval.index_dir import index_size
    from limelight.retrieval.spec import System

    check_replaceable_file(out, overwrite)  # before the work
    k = check_k(k, "--k", index_size(index))
    qs = load_queries(queries)
    retriever = System.from_model(model, k1, b).open(index, threads=threads)
    run = retrieve_with_progress(retriever, qs, k)
    with atomic_output_file(out, overwrite) as tmp:
        write_trec_run(run, tmp, tag=tag or model, gzip=str(out).endswith(".gz"))
    typer.echo(f"wrote {plural(len(run), 'line')} for {run.n_queries:,} of {plural(len(qs), 'query')} "
               f"to {out}")


def info(index: Path = typer.Option(None, help="show what an index directory holds")) -> None:
    """Version, data folder, and (with --index) an index's metadata."""
    from limelight import __version__

    if index is None:
        from limelight.data.loaders import data_root

        try:
            root = str(data_root())
        except LimelightError:
            root = "not found (set LIMELIGHT_DATA)"
        typer.echo(json.dumps({"limelight": __version__, "data": root}, indent=1))
        return
    from limelight.retrieval.index_dir import read_meta

    meta = read_meta(index)
    bm = Path(index) / "bm25" / "meta.json"
    if bm.exists():
        m = json.loads(bm.read_text())
        meta["bm25"] = {k: v for k, v in m.items() if k not in ("vocabulary", "doc_ids")}
    typer.echo(json.dumps(meta, indent=1, default=str))


def systems(json_out: bool = typer.Option(False, "--json", help="print JSON instead of a table")) -> None:
    """The kinds of system an audit can measure: their parameters (type, default) and
    capabilities."""
    from limelight.cli.console import print_rows
    from limelight.retrieval.systems import CAPABILITIES, describe_kinds

    rows = describe_kinds()
    if json_out:
        print_rows(rows, True, "system kinds")
        return
    table = [{"kind": r["kind"], "what it is": r["description"],
              "parameters": ", ".join(f"{n} ({p['type']}" + (f", default {p['default']})" if p["default"]
                                                               is not None else ")")
                                      for n, p in r["parameters"].items()) or "none",
              "capabilities": ", ".join(r["capabilities"])} for r in rows]
    print_rows(table, False, "system kinds")
    for name, what in CAPABILITIES.items():
        typer.echo(f"{name}: {what}")
