"""``limelight eqi train|query|evaluate`` (exposing query identification).

The store (``limelight exposure compute --index IDX``) records its index directory and its
system's settings (``System.settings``; a store of earlier code: the ``model`` form, read all the
same by ``System.from_recorded``); the commands reopen them from there. Dense-space methods use all-MiniLM-L6-v2 embeddings of the
store's queries and of the index's documents (cached under ``.cache/embeddings``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from limelight._io import check_output_dir
from limelight.cli.console import print_rows
from limelight.errors import LimelightError, with_article

if TYPE_CHECKING:  # numpy is imported where used (``limelight --help`` does not load it)
    import numpy

app = typer.Typer(help="Exposing query identification: which queries expose a document.",
                  no_args_is_help=True)

QUERY_METHODS = ("exact", "brute-force", "bm25-reverse", "dense-reverse", "residual", "append")


def _index_dir(store) -> Path:
    idx = store.manifest.get("settings", {}).get("index")
    if not idx:
        raise LimelightError(f"{store.path}: the store does not record its index directory "
                             "(compute it with `limelight exposure compute --index`)")
    p = Path(idx)
    if not p.is_dir():
        raise LimelightError(f"{p}: the store's index directory is missing")
    return p


def _store_retriever(store):
    """The retriever a store was computed with, checked against the store's fingerprint."""
    from limelight.errors import IndexMismatchError
    from limelight.retrieval.spec import System

    spec = System.from_recorded(store.manifest.get("settings", {}))  # either form (earlier stores': model)
    _check_rescores(store, spec.kind)
    retriever = spec.open(_index_dir(store))
    if spec.fingerprint(_index_dir(store)) != store.manifest.get("retriever"):
        raise IndexMismatchError(f"{store.path}: its index {_index_dir(store)} changed since the "
                                 "store was computed; recompute the store")
    return retriever


def _check_rescores(store, kind: str) -> None:
    """A one-line error unless the store's system is of a kind that can re-score the store's
    queries against a new document (capability ``exact_reverse``, asked of the kind registry),
    naming the kinds that can."""
    from limelight.retrieval.systems import EXACT_REVERSE, get_kind, kind_names

    if get_kind(kind).has(EXACT_REVERSE):
        return
    able = [k for k in kind_names() if get_kind(k).has(EXACT_REVERSE)]
    raise LimelightError(f"{store.path}: exact reverse search (--text) re-scores the store's queries "
                         f"against the new text, which needs a system whose kind can re-score; the "
                         f"store's one system is {with_article(kind)} system, which cannot, so none "
                         f"of its systems can (kinds that can: {', '.join(able)}): compute a store "
                         "with one of those, or give a stored DOCID")


def _encoder():
    """The dense encoder of the EQI commands, with a progress bar while it encodes."""
    from limelight.retrieval.dense import Encoder

    return Encoder(show_progress=True)


def _doc_embeddings(store, encoder) -> tuple:
    """(embeddings of every store document, the documents' Collection)."""
    from limelight.retrieval.index_dir import load_docs

    coll = load_docs(_index_dir(store))
    dense = _index_dir(store) / "dense"
    if dense.is_dir():
        from limelight.retrieval.dense import DenseIndex

        ix = DenseIndex.load(dense)
        if encoder.compatible_with(ix.encoder_identity):
            return ix.embeddings.astype("float32"), coll
    return encoder.encode_collection(coll, cache_dir=".cache/embeddings"), coll


def _open_method(store, method: str, model_dir: Path | None):
    from limelight.exposure.eqi import (
        BM25Reverse,
        BruteForce,
        DenseReverse,
        EQIModel,
        encode_queries_cached,
    )

    if method == "brute-force":
        return BruteForce(store), None
    if method == "bm25-reverse":
        from limelight.retrieval.bm25 import BM25Index

        an = BM25Index.load(_index_dir(store) / "bm25").analyzer
        return BM25Reverse(store.queries, an), None
    enc = _encoder()
    qemb = encode_queries_cached(store.queries, enc)
    if method == "dense-reverse":
        return DenseReverse(store.queries, qemb, enc), enc
    if model_dir is None:
        raise LimelightError(f"--method {method} needs --model DIR (from `limelight eqi train`)")
    m = EQIModel.load(model_dir)
    if m.method != method:
        raise LimelightError(f"{model_dir}: is {with_article(m.method)} model, not {method}")
    m.check_store(store)
    m.index_queries(store.queries, qemb, enc)
    return m, enc


LEARNED = ("residual", "append")


def _check_model_arg(method: str, model_dir: Path | None) -> None:
    """Arguments first: a learned method needs ``--model`` (before seconds of loading)."""
    if method in LEARNED:
        if model_dir is None:
            raise LimelightError(f"--method {method} needs --model DIR (from `limelight eqi train`)")
        if not Path(model_dir).exists():
            raise LimelightError(f"{model_dir}: no such model directory (from `limelight eqi train`)")


def _test_docs(store, n: int, seed: int, learned: dict) -> numpy.ndarray:
    """The documents ``eqi evaluate`` scores: ``n`` of the store's documents with an exposing
    query, a seeded sample. With learned models (``learned``: model directory → metadata) only
    documents each held out of its training (``eqi train --test-docs``, drawn by ``_split``) are
    eligible, so that none is scored on a document it was trained on. Fewer eligible documents
    than ``n``: all of them, with a warning that says how many."""
    import warnings

    import numpy as np

    pool = np.flatnonzero(store.n_exposing() > 0)
    what = "documents with an exposing query"
    for path, meta in learned.items():
        if "test_docs" not in meta or "test_docs_seed" not in meta:
            warnings.warn(f"{path}: the model does not record which documents its training held "
                          "out (`limelight eqi train` does): documents it was trained on may be "
                          "among those evaluated", stacklevel=2)
            continue
        pool = np.intersect1d(pool, _split(len(store.doc_ids), int(meta["test_docs"]),
                                           int(meta["test_docs_seed"])))
        what += f" held out of {path}'s training"
    if len(pool) == 0:
        raise LimelightError(f"no {what.replace('documents', 'document', 1)}")
    if len(pool) < n:
        warnings.warn(f"--docs {n}: the store has only {len(pool)} {what}; evaluating all "
                      f"{len(pool)}", stacklevel=2)
        return pool
    return np.sort(np.random.default_rng(seed).choice(pool, size=n, replace=False))


def _split(n_docs_total: int, n_test: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_docs_total, size=min(n_test, n_docs_total), replace=False))


@app.command("train")
def train(
    store: Path = typer.Option(..., help="exposure store directory"),
    method: str = typer.Option("residual", help="residual or append"),
    out: Path = typer.Option(..., help="model directory to write"),
    queries: int = typer.Option(50_000, help="|Q_train|: training queries sampled from the log"),
    docs: int = typer.Option(20_000, help="|D_train|: training documents"),
    test_docs: int = typer.Option(1000, help="documents held out of training (seeded)"),
    steps: int = typer.Option(2000, help="at most this many batches of --batch-size triples"),
    batch_size: int = typer.Option(1000),
    lr: float = typer.Option(1e-5, help="Adam learning rate (the paper: 1e-4 for ANCE)"),
    validation: int = typer.Option(300, "--validation-docs",
                                   help="documents held out for early stopping (0: none)"),
    eval_every: int = typer.Option(10, help="batches between validation checks"),
    patience: int = typer.Option(10, help="stop after this many checks without improvement (0: never)"),
    seed: int = typer.Option(0),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Train an Append or Residual model (Algorithm 1 data, RankNet, Adam), keeping the heads
    that score best (RELQ(0.5,0.9)) on held-out validation documents."""
    from limelight.cli.console import progress_bar
    from limelight.exposure.eqi import (
        METHODS,
        encode_queries_cached,
        train_eqi,
        validation_docs,
    )
    from limelight.exposure.store import ExposureStore

    if method not in METHODS:
        raise LimelightError(f"unknown method {method!r} ({', '.join(METHODS)})")
    check_output_dir(out, "EQI model")
    st = ExposureStore.open(store)
    enc = _encoder()
    qemb = encode_queries_cached(st.queries, enc)
    demb, _ = _doc_embeddings(st, enc)
    test = _split(len(st.doc_ids), test_docs, seed)
    val = validation_docs(st, validation, exclude=test, seed=seed + 1) if validation > 0 else None
    with progress_bar(f"training {method} (steps)", steps) as update:
        model = train_eqi(method, st, qemb, demb, n_queries=queries, n_docs=docs,
                          exclude_docs=test, steps=steps, batch_size=batch_size, seed=seed,
                          encoder=enc, lr=lr, validation_docs=val, eval_every=eval_every,
                          patience=patience, progress=lambda step, total, _loss: update(step, total))
    model.meta["test_docs_seed"] = seed
    model.meta["test_docs"] = int(len(test))
    model.save(out)
    summary = {"model": str(out), **{k: model.meta[k] for k in
                                      ("training", "train_seconds", "loss_first_100", "loss_last_100")},
               **({"best_step": model.meta["validation"]["best_step"],
                   "validation_relq": model.meta["validation"]["best"]} if val is not None else {})}
    typer.echo(json.dumps(summary) if json_out else "\n".join(f"{k}: {v}" for k, v in summary.items()))


@app.command("query")
def query(
    docid: str = typer.Argument(None, help="document id of the store; with --text (exact) the id of "
                               "the new document: a stored id means its edited version, a new "
                               "id decides ties (equal scores rank by docid descending)"),
    store: Path = typer.Option(..., help="exposure store directory"),
    method: str = typer.Option("exact", help=" | ".join(QUERY_METHODS)),
    text: str = typer.Option(None, "--text", help="a new document's text instead of DOCID (named 'new-0' when no DOCID "
                             "is given: a text identical to a stored document ties with it "
                             "and the ids decide)"),
    model: Path = typer.Option(None, help="model directory for residual/append"),
    k: int = typer.Option(100, "--k", help="n_{d→q}: queries returned"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """The queries that expose a document (a stored DOCID, or --text for a new one). A stored
    document's exposing queries are read from the store (exact and brute-force); with --text,
    exact computes them for the new document, named DOCID (a stored DOCID: its edited
    version; any other: a new document of that id, which breaks ties) or 'new-0'."""
    from limelight.exposure.eqi import rows
    from limelight.exposure.store import ExposureStore

    if method not in QUERY_METHODS:
        raise LimelightError(f"unknown method {method!r} ({', '.join(QUERY_METHODS)})")
    if (docid is None) == (text is None) and not (method == "exact" and docid and text):
        raise LimelightError("give a DOCID or --text (exact also takes both: an edited document)")
    if text is not None and not text.strip():
        raise LimelightError("--text is empty")
    if k < 1:
        raise LimelightError(f"--k must be ≥ 1, got {k}")
    _check_model_arg(method, model)
    st = ExposureStore.open(store)
    if text is None and docid is not None:
        st.doc_ids.lookup(docid)  # a stored document (unknown id: one line)
    if method == "brute-force" and text is not None:
        raise LimelightError("brute-force reads stored documents: give a DOCID")
    if method in ("exact", "brute-force") and text is None:
        # a stored document's exposing queries are the store's: read, not recomputed
        out = [{"qid": r["qid"], "query": r["query"], "score": r["score"], "rank": r["rank"]}
               for r in st.exposing_queries(docid)[:k]]
    elif method == "exact":  # a new document (a DOCID the store lacks names it) or an edited one
        out = _exact_reverse(st).query(text=text, docid=docid, k=k)
    else:
        m, _ = _open_method(st, method, model)
        if text is None:
            from limelight.retrieval.index_dir import load_docs

            coll = load_docs(_index_dir(st))
            text = str(coll.texts[coll.ids.lookup(docid)])
        codes, scores = m.search(texts=[text], k=k)
        out = rows(st.queries, codes[0], scores[0])
    print_rows(out, json_out, f"queries exposing {docid or 'the text'} ({method})")


def _exact_reverse(store):
    """``ExactReverse`` over the store's own retriever, each slow step with its bar (seconds to
    minutes on a large store): opening the retriever, encoding the store's queries (dense; read
    from the embedding cache when there), reading the stored lists and indexing the queries."""
    from limelight.cli.console import progress_bar
    from limelight.exposure.eqi import ExactReverse, encode_queries_cached

    with progress_bar("opening the store's retriever", 1) as update:
        retriever = _store_retriever(store)
        update(1)
    qemb = None
    if getattr(retriever, "encoder", None) is not None:  # dense: one bar while it encodes
        retriever.encoder.show_progress = True
        qemb = encode_queries_cached(store.queries, retriever.encoder)
    with progress_bar(f"reading the top {store.depth} of {len(store.queries):,} queries", 1) as update:
        ex = ExactReverse.build(store, retriever, qemb)
        update(1)
    return ex


@app.command("evaluate")
def evaluate(
    store: Path = typer.Option(..., help="exposure store directory"),
    methods: str = typer.Option("bm25-reverse,dense-reverse",
                                help="comma-separated: brute-force, bm25-reverse, dense-reverse, residual, append"),
    model: list[Path] = typer.Option(None, help="model directories (residual/append), repeatable"),
    docs: int = typer.Option(500, help="test documents: a seeded sample of this many documents "
                             "with an exposing query (of those a learned --model held out of "
                             "its training); all of them, said on stderr, when there are fewer"),
    seed: int = typer.Option(0),
    k: int = typer.Option(100, "--k"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Mean RELQ (Table 2's four instances) of each method on --docs sampled documents, each
    with an exposing query (RELQ is undefined without one); n_docs says how many."""
    from limelight.exposure.eqi import evaluate_eqi
    from limelight.exposure.store import ExposureStore

    names = [x.strip() for x in methods.split(",") if x.strip()]
    bad = [x for x in names if x not in QUERY_METHODS or x == "exact"]
    if bad or not names:
        raise LimelightError(f"unknown method {bad[0] if bad else methods!r} "
                             "(brute-force, bm25-reverse, dense-reverse, residual, append)")
    if k < 1:
        raise LimelightError(f"--k must be ≥ 1, got {k}")
    if docs < 1:
        raise LimelightError(f"--docs must be ≥ 1, got {docs}")
    for n in names:
        if n in LEARNED and not model:
            _check_model_arg(n, None)
    st = ExposureStore.open(store)
    models, metas = {}, {}
    for p in model or []:
        from limelight.exposure.eqi import EQIModel

        mm = EQIModel.load(p)
        models[mm.method], metas[mm.method] = p, mm.meta
    test = _test_docs(st, docs, seed, {p: metas[n] for n, p in models.items() if n in names})
    opened = {n: _open_method(st, n, models.get(n))[0] for n in names}
    texts = emb = None
    if any(n in ("bm25-reverse",) for n in names):
        from limelight.retrieval.index_dir import load_docs

        coll = load_docs(_index_dir(st))
        texts = coll.texts[coll.ids.encode(st.doc_ids.strings[test])].tolist()
    if any(n in ("dense-reverse", "residual", "append") for n in names):
        enc = _encoder()
        demb, _ = _doc_embeddings(st, enc)
        emb = demb[test]
    res = {}
    for n, m in opened.items():
        res.update(evaluate_eqi(st, {n: m}, test, texts=texts if n == "bm25-reverse" else None,
                                embeddings=emb if n != "bm25-reverse" else None, k=k))
    if json_out:
        typer.echo(json.dumps(res))
    else:
        for n, v in res.items():
            typer.echo(f"{n}: " + ", ".join(f"{a}={b:.4f}" if isinstance(b, float) else f"{a}={b}"
                                           for a, b in v.items()))
