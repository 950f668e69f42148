"""``limelight exposure compute|doc|query|diff`` and ``limelight retrievability``."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import typer

from limelight.cli.common import check_k
from limelight.cli.console import print_rows, progress_bar
from limelight.errors import LimelightError, plural, with_article
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1

app = typer.Typer(help="Exact exposure: every query's top-n, stored once.", no_args_is_help=True)


#: the parameters of kinds ``run`` and ``http`` that ``--run``/``--url`` take as options
FLAG_PARAMS = {"match": "--match", "unknown_docs": "--unknown-docs", "queries": "--run-queries"}
_SETTING = re.compile(r'\b(' + "|".join(FLAG_PARAMS) + r')\s*=\s*\\?"([^"\\]+)\\?"')
_KEY = re.compile(r'^(' + "|".join(FLAG_PARAMS) + r')\b')  # a message that opens with a key


def as_flags(message: str) -> str:
    """A kind's message with the configuration settings it suggests (``match = "text"``,
    ``unknown_docs = "drop"``, ``queries = "<file>"``) written as the options of
    ``--run``/``--url`` (``--match text``, ``--unknown-docs drop``, ``--run-queries <file>``):
    the words a user of the command line can type."""
    message = _SETTING.sub(lambda m: f"{FLAG_PARAMS[m[1]]} {m[2]}", message)
    return _KEY.sub(lambda m: FLAG_PARAMS[m[1]], message)


@contextlib.contextmanager
def _flag_words(on: bool):
    """Within it, a ``LimelightError`` names the options of ``--run``/``--url`` rather than the
    configuration keys (``as_flags``) when ``on``."""
    try:
        yield
    except LimelightError as e:
        if not on or (msg := as_flags(str(e))) == str(e):
            raise
        raise LimelightError(msg) from None


def _system(model: str | None, k1: float, b: float, system: Path | None, run: Path | None,
            url: str | None, preset: str | None, flags: dict | None = None):
    """(``System``, the folder its relative paths resolve against) of the options:
    ``--model`` over ``--index`` (bm25 by default), or one of ``--system`` (a file read as an
    audit's ``[[systems]]`` table is: :func:`limelight.audit.config.load_system_file`), ``--run``
    (kind ``run``) and ``--url``/``--preset`` (kind ``http``), its files checked and hashed;
    ``flags``: the parameters given as options (``FLAG_PARAMS``: ``--match``,
    ``--unknown-docs``, ``--run-queries``), which go with ``--run`` or ``--url``."""
    from limelight.retrieval.spec import System
    from limelight.retrieval.systems import get_kind

    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    given = [o for o, v in (("--system", system), ("--run", run), ("--url", url)) if v is not None]
    if len(given) > 1:
        raise LimelightError(f"give one of --system, --run or --url, not {' and '.join(given)}")
    if preset is not None and url is None:
        raise LimelightError("--preset goes with --url")
    if flags and run is None and url is None:
        raise LimelightError(f"{FLAG_PARAMS[next(iter(flags))]} goes with --run or --url "
                             "(in a --system file it is a parameter of the [system] table)")
    if not given:
        return System.from_model(model or "bm25", k1, b), Path.cwd()
    if model is not None:
        raise LimelightError(f"--model goes with --index, not with {given[0]} (which names the system)")
    if system is not None:
        from limelight.audit.config import load_system_file

        return load_system_file(system), system.resolve().parent
    if run is not None:
        kind, params = "run", {"path": str(run), **flags}
    else:
        kind, params = "http", {"url": url, **({"preset": preset} if preset is not None else {}), **flags}
    unknown = [k for k in flags if k not in get_kind(kind).params]
    if unknown:
        raise LimelightError(f"{FLAG_PARAMS[unknown[0]]} goes with --run, not --url")
    with _flag_words(True):
        return System.of(kind, **get_kind(kind).resolved(params, Path.cwd())), Path.cwd()


def _documents(index: Path | None, collection: str | None, kind: str):
    """The collection a system without an index answers from: ``--collection`` (loaded as
    ``limelight index`` loads it), else the documents stored with ``--index``."""
    if collection is not None:
        from limelight.data.loaders import load_collection

        return load_collection(collection)
    if index is not None:
        from limelight.retrieval.index_dir import load_docs

        return load_docs(index)
    raise LimelightError(f"{with_article(kind)} system needs the collection its results come from: "
                         "--collection NAME|FOLDER|FILE (or --index)")


def _job_over(spec, out: Path, index: Path | None, collection: str | None, coll, depth: int,
              shard_size: int, engine: str, address: str | None, cpus_per_task: int) -> dict:
    """The :class:`~limelight.audit.job.ExposureJob` fields of the options besides its system
    and queries (the audit's exposure stage builds the same job): over ``index`` for a kind that
    needs one, its store known by the index's files; else over the collection ``coll``
    (``--collection`` or ``--index``'s documents), known by its document ids; the store records
    the system's ``settings`` and where the documents came from; a live service's answers
    journaled beside the store."""
    from limelight.exposure.fingerprints import ids_fingerprint
    from limelight.retrieval.systems import REMOTE

    if spec.registered.needs_index:
        over = {"where": {"index": str(index)}}
    else:
        over = {"index_key": {"documents": ids_fingerprint(coll.ids)},
                "where": {"collection": collection or str(index)}}
    return {"store": out, "depth": depth, "shard_size": shard_size, "index_dir": index,
            "recorded": "store", "engine": engine, "address": address,
            "engine_options": {"cpus_per_task": cpus_per_task} if engine == "ray" else None,
            "journal": _journal_dir(out) if spec.registered.has(REMOTE) else None, **over}


@app.command("compute")
def compute(
    queries: str = typer.Option(..., help="TSV id<TAB>text, or a query log (header source<TAB>qid<TAB>query: docs/manual/formats.md)"),
    out: Path = typer.Option(..., help="store directory to create (or resume)"),
    index: Path = typer.Option(None, help="index directory (limelight index): for --model"),
    model: str = typer.Option(None, help="bm25, dense or hybrid over --index (default bm25)"),
    system: Path = typer.Option(None, "--system", help="a TOML file with one \\[system] table: kind "
                                                       "and its parameters (limelight systems)"),
    run: Path = typer.Option(None, "--run", help="results you already have (kind run): a TREC run, "
                                                 "Parquet, JSONL or CSV file, or a folder of parts"),
    url: str = typer.Option(None, "--url", help="a live search service (kind http), with --preset"),
    preset: str = typer.Option(None, "--preset", help="with --url: the service's API"),
    match: str = typer.Option(None, "--match", help="with --run: id (the results' query ids are "
                                                    "the log's, the default) or text (their "
                                                    "normalised query texts are)"),
    unknown_docs: str = typer.Option(None, "--unknown-docs", help="a result id the collection "
                                     "lacks: refused (the default), or drop: left out, counted"),
    run_queries: Path = typer.Option(None, "--run-queries", help="with a TREC --run and --match "
                                     "text: its queries' texts (TSV id<TAB>text; a TREC run holds "
                                     "query ids only)"),
    collection: str = typer.Option(None, help="for --system/--run/--url: the collection the results "
                                              "come from (as limelight index takes it; default: "
                                              "--index's documents)"),
    depth: int = typer.Option(100, help="n: documents kept per query"),
    shard_size: int = typer.Option(8192, help="queries per Parquet shard"),
    k1: float = typer.Option(DEFAULT_K1), b: float = typer.Option(DEFAULT_B),
    threads: int = typer.Option(None, help="BM25 threads (default: all cores)"),
    json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    engine: str = typer.Option("local", help="local, or ray: query shards as Ray tasks"),
    address: str = typer.Option(None, help="with --engine ray: a running cluster "
                                           "(HOST:PORT or auto); default a local one"),
    cpus_per_task: int = typer.Option(1, help="with --engine ray: CPUs per shard task"),
) -> None:
    """Compute every query's top-n into the store DIR (resumable): Parquet shards of (query,
    document, rank, float32 score) under DIR/shards/, the query and document tables and a
    per-document index. The system: --model over --index, or --system FILE.toml (any kind),
    --run FILE (results you have) or --url URL --preset NAME (a live service)."""
    import time

    from limelight._io import check_resumable_dir, scratch_dir
    from limelight.audit.job import ExposureJob
    from limelight.retrieval.index_dir import index_size
    from limelight.retrieval.systems import REMOTE

    _check_run_options(engine, address, depth, shard_size)
    spec, base = _system(model, k1, b, system, run, url, preset,
                         {"match": match, "unknown_docs": unknown_docs,
                          "queries": None if run_queries is None else str(run_queries)})
    kind = spec.registered
    if kind.needs_index and index is None:
        raise LimelightError(f"{with_article(spec.kind)} system needs --index (limelight index)")
    if engine == "ray" and not kind.needs_index and not kind.has(REMOTE):
        raise LimelightError(f"--engine ray opens the system over an index in each worker; "
                             f"{with_article(spec.kind)} system runs with --engine local")
    check_resumable_dir(out, "manifest.json", "exposure store")
    if index is not None:
        index_size(index)  # a clear error when it is not an index, before reading the queries
    # the job reads the query file (a log's distinct queries kept on disk while it reads them:
    # bounded memory, in a scratch folder of the store's, so that a killed job leaves nothing in
    # the system's temp folder), checks and fingerprints it, once
    with scratch_dir(out, "queries") as tmp, _flag_words(system is None):
        coll = None if kind.needs_index else _documents(index, collection, spec.kind)
        job = ExposureJob(spec, queries, on_disk=tmp, **_job_over(
            spec, out, index, collection, coll, depth, shard_size, engine, address, cpus_per_task))
        retriever = job.open(threads=threads, collection=coll, base_dir=base)
        t0 = time.perf_counter()
        try:  # Ctrl-C: what is finished is kept, a line says how far it got, exit status 130
            with progress_bar(f"exposure ({spec.kind}, top {depth})", len(job.queries),
                              elapsed=True) as progress:
                st = job.run(retriever, progress)
        except KeyboardInterrupt:
            _interrupted(job)
        summary = _summary(st, out, depth, time.perf_counter() - t0)
    typer.echo(json.dumps(summary) if json_out else
               "\n".join(f"{k}: {v}" for k, v in summary.items()))


def _interrupted(job) -> None:
    """After Ctrl-C: a line says how many shards the job finished and how to resume (and, for
    a service, where its answers are journaled); exit status 130."""
    from limelight.exposure.shards import shard_path

    n_shards = (len(job.queries) + job.shard_size - 1) // job.shard_size
    n_done = sum(shard_path(job.store, i).exists() for i in range(n_shards))
    kept = f" (the service's answers are journaled in {job.journal})" if job.journal is not None else ""
    typer.echo(f"interrupted after {n_done} of {plural(n_shards, 'shard')}{kept}; rerun the same "
               "command to resume", err=True)
    raise typer.Exit(130) from None


def _journal_dir(out: Path) -> Path:
    """Where a service's answers for the store ``out`` are journaled: ``OUT.replay``, beside it
    (a store cleared after an interruption before its first shard is left empty, and the
    journal kept, so that a rerun asks only the queries without an answer)."""
    return out.with_name(out.name + ".replay")


def _check_run_options(engine: str, address: str | None, depth: int, shard_size: int) -> None:
    """``--engine``, ``--address``, ``--depth`` and ``--shard-size`` checked before any work."""
    if engine not in ("local", "ray"):
        raise LimelightError(f"unknown engine {engine!r} (local or ray)")
    if address is not None and engine != "ray":
        raise LimelightError("--address goes with --engine ray")
    check_k(depth, "--depth")  # the store records the depth asked for; retrieval stops at n_docs
    if shard_size < 1:
        raise LimelightError(f"--shard-size must be ≥ 1, got {shard_size}")


def _summary(st, out: Path, depth: int, seconds: float) -> dict:
    """What ``exposure compute`` prints: the store's size, r(d)'s Gini and retrievable
    fraction, and how many queries have results and how many none (read from the store, so
    that a resumed or already complete store counts every query, not only this run's)."""
    res = st.retrievability(c=depth)
    with_results = int((st.n_retrieved() > 0).sum())
    return {"store": str(out), "queries": st.n_queries, "documents": len(st.doc_ids),
            "pairs": st.n_pairs(), "depth": depth, "seconds": round(seconds, 3),
            f"gini@{depth}": res.gini, "retrievable_fraction": res.retrievable_fraction,
            "queries_with_results": with_results, "queries_without_results": st.n_queries - with_results}


@app.command("doc")
def doc(
    docid: str = typer.Argument(..., help="document id"),
    store: Path = typer.Option(..., help="exposure store directory"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    limit: int = typer.Option(100, help="show this many (0: all; a document of a large log can "
                                        "have hundreds of thousands)"),
    offset: int = typer.Option(0, help="skip this many first"),
) -> None:
    """The queries that expose a document, by rank (1-based), then query id."""
    from limelight.exposure.store import ExposureStore

    if limit < 0 or offset < 0:
        raise LimelightError(f"--limit and --offset must be ≥ 0, got {limit} and {offset}")
    st = ExposureStore.open(store)
    rows = st.exposing_queries(docid, limit=limit or None, offset=offset)
    total = st.exposing_count(docid)
    if offset or offset + len(rows) < total:  # a page: say which, on stderr (stdout stays data)
        typer.echo(f"queries {offset + 1:,}-{offset + len(rows):,} of {total:,} exposing {docid} "
                   f"(--limit 0: all; --offset: a later page)", err=True)
    print_rows(rows, json_out, f"queries exposing {docid}")


@app.command("query")
def query(
    qid: str = typer.Argument(..., help="query id"),
    store: Path = typer.Option(..., help="exposure store directory"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The documents a query exposes, by rank (1-based)."""
    from limelight.exposure.store import ExposureStore

    print_rows(ExposureStore.open(store).exposed_documents(qid), json_out,
               f"documents exposed by {qid}")


@app.command("diff")
def diff_cmd(
    a: Path = typer.Argument(..., help="store A (before)"),
    b: Path = typer.Argument(..., help="store B (after), same documents and queries"),
    c: int = typer.Option(None, "--c", help="cutoff c of r(d) and of the exposing queries "
                                           "(default: 100, or the stores' depth when it is below 100)"),
    browsing: str = typer.Option("rbp:0.8", help="browsing model of the mean exposure "
                                                 "(rbp:γ, dcg, exhaustive, cutoff:c)"),
    group_field: str = typer.Option(None, help="document field to group by (section, tags…)"),
    index: Path = typer.Option(None, help="index directory to read --group-field from "
                                          "(default: the one store A records)"),
    top: int = typer.Option(10, help="winners, losers and groups shown"),
    plot: Path = typer.Option(None, help="write the diff plot (PNG and SVG)"),
    out: Path = typer.Option(None, help="write the per-document table (TSV)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """What changes from store A to store B: r(d), exposing queries and mean exposure per
    document and group, the biggest winners and losers, documents that become (ir)retrievable."""
    from limelight.exposure.diff import diff_stores, field_values, plot_diff
    from limelight.exposure.store import ExposureStore

    if top < 1:
        raise LimelightError(f"--top must be ≥ 1, got {top}")
    sa, sb = ExposureStore.open(a), ExposureStore.open(b)
    values = field_values(sa, group_field, index) if group_field else None
    d = diff_stores(sa, sb, c=c, browsing=browsing, group_values=values)
    if out is not None:
        from limelight._io import atomic_path

        with atomic_path(out) as tmp:
            d.docs.to_csv(tmp, sep="\t", index=False, float_format="%.10g")
    if plot is not None:
        plot_diff(d, plot)
    if json_out:
        typer.echo(json.dumps(d.to_dict(top), ensure_ascii=False, default=float))
        return
    typer.echo(f"{a} → {b}")
    typer.echo("\n".join(f"{k}: {v}" for k, v in d.summary.items()))
    cols = ["docid", "r_a", "r_b", "delta_r", "n_a", "n_b"]
    print_rows(d.winners(top)[cols].to_dict("records"), False, "winners (r(d) grows most)")
    print_rows(d.losers(top)[cols].to_dict("records"), False, "losers (r(d) falls most)")
    if d.groups is not None:
        g = d.groups[["group", "n_docs", "share_a", "share_b", "delta_share",
                      "newly_retrievable", "newly_irretrievable"]]
        print_rows(g.head(top).to_dict("records"), False, f"groups of {group_field} gaining share")
        print_rows(g.tail(top).iloc[::-1].to_dict("records"), False,
                   f"groups of {group_field} losing share")


def retrievability_cmd(
    store: Path = typer.Option(None, help="exposure store directory"),
    run: Path = typer.Option(None, help="TREC run (ranks recomputed from the scores, ties "
                                        "as trec_eval breaks them; its rank column is not used)"),
    docs: Path = typer.Option(None, help="with --run: every document id (one per line, or docs.jsonl)"),
    c: int = typer.Option(None, "--c", help="cutoff c (default: 100, or a store's depth when it "
                                           "is below 100)"),
    beta: float = typer.Option(None, "--beta", help="gravity β (f = 1/k^β); default cumulative"),
    out: Path = typer.Option(None, help="write docid<TAB>r for every document"),
    overwrite: bool = typer.Option(False, "--overwrite", help="with --out: replace a file "
                                   "limelight did not write"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    topics: str = typer.Option(None, "--topics", help="with --store: K (or K1,K2,... to sweep): "
                               "cluster the log's queries into K topics and print each topic's "
                               "Gini beside the collection's (T-Retrievability)"),
    topic_vectors: Path = typer.Option(None, "--topic-vectors", help="with --topics: K-means over "
                                       "these query vectors (.npy, one row per query of the store, "
                                       "e.g. an audit's systems/query_vectors.npy) instead of TF-IDF"),
    topic_weighting: str = typer.Option("log", "--topic-weighting", help="with --topics: f(k) = "
                                        "1/ln(1+k) (log, the paper's), cumulative, or gravity (--beta)"),
    population: str = typer.Option("retrieved", "--population", help="with --topics: a topic's "
                                   "documents are those its queries retrieve (retrieved) or every "
                                   "document (collection)"),
    seed: int = typer.Option(0, "--seed", help="with --topics: K-means seed"),
    top: int = typer.Option(5, "--top", help="with --topics: the most unequal topics shown"),
    doc: str = typer.Option(None, "--doc", help="with --topics: this document's standing within its topics"),
    groups_out: Path = typer.Option(None, "--groups-out", help="with --topics: write docid<TAB>topic "
                                    "(each document's home topic) for limelight fairness --groups"),
) -> None:
    """Retrievability r(d) over every document, its Gini and the retrievable fraction; with
    --topics K, the Gini within each of K topics of the log's queries beside it."""
    from limelight.exposure.retrievability import analyse, ranks_from_trec_run, read_doc_ids
    from limelight.exposure.store import ExposureStore

    if (store is None) == (run is None):
        raise LimelightError("give exactly one of --store or --run")
    if topics is not None and store is None:
        raise LimelightError("--topics needs --store (the queries' texts and weights)")
    if topics is None and (topic_vectors or doc or groups_out):
        raise LimelightError("--topic-vectors, --doc and --groups-out go with --topics K")
    if store is not None:
        if docs is not None:
            raise LimelightError("--docs goes with --run (a store knows its documents)")
        st = ExposureStore.open(store)
        res = st.retrievability(c=min(100, st.depth) if c is None else c, beta=beta)
    else:
        doc_ids = read_doc_ids(docs) if docs is not None else None
        ranks, dmap, _ = ranks_from_trec_run(run, doc_ids)
        res = analyse(ranks, dmap, None, 100 if c is None else c, beta)
        res.extra["documents"] = "listed in --docs" if docs else "retrieved by the run only"
    if out is not None:
        res.write_tsv(out, overwrite, "--overwrite")
    d = res.to_dict()
    if topics is not None:
        from limelight.cli.topics import topics_report

        topics_report(st, d, topics, topic_vectors, seed, res.c, topic_weighting, beta, population,
                      top, doc, groups_out, json_out)
        return
    typer.echo(json.dumps(d) if json_out else "\n".join(f"{k}: {v}" for k, v in d.items()))
