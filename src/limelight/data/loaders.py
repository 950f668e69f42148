"""Loaders for the shared datasets, local files by path, and ``irds:<id>`` (ir_datasets).

``name_or_path`` accepts a shared collection name (``scifact``), a catalog name (``debian``,
``movies``), a folder with ``docs.jsonl`` (and optionally ``queries.tsv``, ``qrels.txt``), a
JSONL/JSONL.gz file, or ``irds:<dataset id>`` when the optional ``ir_datasets`` extra is installed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from limelight.data.collection import Collection
from limelight.data.formats import (
    read_jsonl,
    read_jsonl_docs,
    read_queries_tsv,
    read_text,
    read_trec_qrels,
)
from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.queries import Queries, normalise_texts
from limelight.errors import LimelightError

SHARED_COLLECTIONS = ("cranfield", "med", "cacm", "npl", "scifact", "adi")
CATALOGS = ("debian", "movies")

# Catalog field roles (CtrlQGen): narrow fields name the entity, broad fields describe its kind.
CATALOG_SCHEMAS: dict[str, dict[str, tuple[str, ...]]] = {
    "debian": {"id": ("name",), "narrow": ("name", "summary"), "broad": ("section", "tags"),
               "broad_ft": ("description",),
               "text": ("name", "summary", "section", "tags", "description")},
    "movies": {"id": ("Title",), "narrow": ("Title", "Director", "Distributor"),
               "broad": ("Major Genre", "Creative Type", "Source", "MPAA Rating"), "broad_ft": (),
               "text": ("Title", "Director", "Distributor", "Major Genre", "Creative Type",
                        "Source", "MPAA Rating")},
}


def data_root() -> Path:
    """The shared data folder: ``$LIMELIGHT_DATA``, else ``../shared/data`` beside the repo or cwd."""
    env = os.environ.get("LIMELIGHT_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for base in [Path.cwd(), *Path.cwd().parents, *here.parents]:
        cand = base / "shared" / "data"
        if cand.is_dir():
            return cand
        cand = base.parent / "shared" / "data"
        if cand.is_dir():
            return cand
    raise LimelightError("shared data folder not found: set LIMELIGHT_DATA to the data directory")


@dataclass
class Dataset:
    """A collection with its optional queries and qrels."""

    collection: Collection
    queries: Queries | None = None
    qrels: Qrels | None = None
    name: str = "dataset"


def load_dataset(name_or_path: str | os.PathLike) -> Dataset:
    """Collection, queries and qrels for a shared collection name, folder or ``irds:`` id."""
    s = str(name_or_path)
    if s.startswith("irds:"):
        return load_irds(s[5:])
    if s in CATALOGS:
        return Dataset(load_catalog(s), name=s)
    folder = data_root() / "collections" / s if s in SHARED_COLLECTIONS else Path(s)
    if folder.is_file():
        return Dataset(load_collection(folder), name=folder.stem)
    if not (folder / "docs.jsonl").exists():
        raise LimelightError(f"{s}: not a collection (expected a shared name "
                             f"{', '.join(SHARED_COLLECTIONS + CATALOGS)}, a folder with docs.jsonl, "
                             f"a JSONL file or irds:<id>)")
    coll = read_jsonl_docs(folder / "docs.jsonl", name=folder.name,
                           duplicates="first" if s in SHARED_COLLECTIONS else "error")
    queries = read_queries_tsv(folder / "queries.tsv", name=folder.name) if (folder / "queries.tsv").exists() else None
    qrels = (read_trec_qrels(folder / "qrels.txt", name=folder.name, doc_map=coll.ids)
             if (folder / "qrels.txt").exists() else None)
    return Dataset(coll, queries, qrels, folder.name)


def load_collection(name_or_path: str | os.PathLike) -> Collection:
    """Just the documents of ``name_or_path`` (see module docstring)."""
    s = str(name_or_path)
    if s in CATALOGS:
        return load_catalog(s)
    p = Path(s)
    if p.is_file():
        if p.name.startswith("catalog.jsonl") or p.suffix == ".json":
            return load_catalog(p)
        return read_jsonl_docs(p, name=p.stem.split(".")[0])
    return load_dataset(s).collection


def collection_source_problem(name_or_path: str | os.PathLike) -> str | None:
    """Why ``name_or_path`` names no collection that ``load_dataset`` loads (one line), or None.
    Nothing is read: an ``irds:`` id is only checked when it is loaded."""
    s = str(name_or_path)
    if s.startswith("irds:") or s in CATALOGS or s in SHARED_COLLECTIONS:
        return None
    p = Path(s)
    if p.is_file() or (p / "docs.jsonl").is_file():
        return None
    what = "a folder without docs.jsonl" if p.is_dir() else "no such file or folder"
    return (f"not a collection ({what}; expected a shared name "
            f"{', '.join(SHARED_COLLECTIONS + CATALOGS)}, a folder with docs.jsonl, a JSONL file "
            f"or irds:<id>)")


def peek_fields(name_or_path: str | os.PathLike, n: int = 1000) -> list[str] | None:
    """The document fields of a collection as ``load_dataset`` gives them (the keys of its
    first ``n`` records, the id left out), read from its first ``n`` records only; None where
    that cannot be told without loading it (``irds:`` ids, a file that does not read)."""
    from itertools import islice

    from limelight._io import open_text

    s = str(name_or_path)
    try:
        if s.startswith("irds:"):
            return None
        if s in CATALOGS:
            path = _catalog_path(s)
        elif s in SHARED_COLLECTIONS:
            path = data_root() / "collections" / s / "docs.jsonl"
        else:
            path = Path(s) if Path(s).is_file() else Path(s) / "docs.jsonl"
        if path.suffix == ".json":  # the movies catalog: one JSON array
            recs = json.loads(path.read_text(encoding="utf-8"))[:n]
        else:
            with open_text(path) as f:
                recs = [json.loads(ln) for ln in islice(f, n) if ln.strip()]
    except (LimelightError, OSError, ValueError, TypeError):
        return None
    keys: dict[str, None] = {}
    for r in recs:
        if not isinstance(r, dict):
            return None
        keys.update(dict.fromkeys(k for k in r if k != "id"))
    return list(keys)


def _catalog_path(s: str) -> Path:
    """The file of a shared catalog (``debian``, ``movies``), else ``s`` as a path."""
    if s == "debian":
        return data_root() / "catalogs" / "debian" / "catalog.jsonl.gz"
    if s == "movies":
        return data_root() / "catalogs" / "movies" / "movies.json"
    return Path(s)


def load_catalog(name_or_path: str | os.PathLike) -> Collection:
    """The Debian catalog (JSONL.gz) or the movies catalog (JSON array) as a Collection whose
    ``texts`` join every searchable field; all metadata stays in ``fields``."""
    path = _catalog_path(str(name_or_path))
    if path.suffix == ".json":
        try:
            recs = json.loads(read_text(path))
        except json.JSONDecodeError as e:
            raise LimelightError(f"{path}:{e.lineno}: invalid JSON: {e.msg} column {e.colno}") from None
        # films have no id; titles repeat, so the id is the position in the file
        for i, r in enumerate(recs):
            r.setdefault("id", f"movie{i:05d}")
        schema = CATALOG_SCHEMAS["movies"]
        coll = Collection.from_records(recs, schema["text"], "id", "movies")
    else:
        recs = read_jsonl(path)
        schema = CATALOG_SCHEMAS["debian"]
        coll = Collection.from_records(recs, schema["text"], "id", "debian")
    return coll


def load_queries(path: str | os.PathLike) -> Queries:
    """Queries from a TSV file (``id<TAB>text``) or the query log format."""
    return read_queries_tsv(path)


def load_query_log(path: str | os.PathLike | None = None, distinct: bool = True,
                   on_disk: str | os.PathLike | None = None) -> Queries:
    """The shared query log (``source<TAB>qid<TAB>query``).

    With ``distinct`` (default), queries are normalised (lowercased, whitespace collapsed) and
    de-duplicated: each distinct text becomes one query whose weight o_q is the number of log
    entries that share it. A query keeps the log's own id of its first entry, ``SOURCE:QID``
    (the log's qids repeat across sources); its ``source`` field is that entry's source.
    ``ExposureStore`` and the CLI also accept the bare ``QID`` where only one source has it.
    ``on_disk`` (with ``distinct``): the distinct queries kept on disk in that folder, as
    ``load_queries_file`` keeps them (the same queries).
    """
    path = Path(path) if path else data_root() / "querylogs" / "queries.tsv.gz"
    if distinct and on_disk is not None:
        return load_queries_file(path, on_disk=on_disk)
    if distinct and _searcher_log(path):
        from limelight.data.searcherlog import read_searcher_log

        return read_searcher_log(path)
    if distinct:
        qs = _distinct_streamed(path)
        if qs is not None:
            return qs
    log = read_queries_tsv(path, name="querylog")
    return _distinct(log, path) if distinct else log


def _searcher_log(path: Path) -> bool:
    """Whether ``path`` is a log with a searcher column (the AOL layout among them:
    ``limelight.data.searcherlog``)."""
    from limelight.data.searcherlog import log_columns

    return log_columns(path) is not None


def _distinct_streamed(path: Path) -> Queries | None:
    """``_distinct(read_queries_tsv(path))`` of a log read in blocks, holding its distinct
    queries only (``limelight.data.querylog``); None when it is not a log or a line needs the
    whole-file reader's error."""
    from limelight.data.querylog import distinct_log, is_log

    return distinct_log(path, MAX_LOG_QUERY_CHARS) if is_log(path) else None


MAX_LOG_QUERY_CHARS = 1 << 16  # a log line's query beyond this is not a query a user typed


def _distinct(log: Queries, where: str | os.PathLike | None = None) -> Queries:
    """A query log's distinct normalised texts, weighted by their number of entries (see
    ``load_query_log``). Queries longer than ``MAX_LOG_QUERY_CHARS`` characters are dropped with
    one warning that counts them (a 1 MB line would cost seconds of retrieval on its own)."""
    log = _drop_long(log, where or log.name)
    norm = normalise_texts(log.texts.tolist())
    uniq, first, counts = np.unique(norm, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    first, counts, uniq = first[order], counts[order], uniq[order]
    ids = IdMap(log.ids.strings[first].tolist(), kind="query")
    fields = {"source": log.fields["source"][first], "log_id": log.ids.strings[first]} if "source" in log.fields else {}
    return Queries(ids, uniq.astype(object), counts.astype(np.float64), fields=fields, name="querylog")


def _drop_long(log: Queries, where: str | os.PathLike) -> Queries:
    """``log`` without its queries longer than ``MAX_LOG_QUERY_CHARS`` (one warning if any)."""
    texts = log.texts.tolist()
    lens = np.fromiter((len(t) if isinstance(t, str) else 0 for t in texts), dtype=np.int64,
                       count=len(texts))
    long = np.flatnonzero(lens > MAX_LOG_QUERY_CHARS)
    if not len(long):
        return log
    import warnings

    first = int(long[0])
    warnings.warn(f"{where}: {len(long)} log line(s) longer than {MAX_LOG_QUERY_CHARS:,} "
                  f"characters skipped (first: query {log.ids[first]!r}, {int(lens[first]):,} "
                  "characters)", stacklevel=3)
    return log.take(np.flatnonzero(lens <= MAX_LOG_QUERY_CHARS))


def load_queries_file(path: str | os.PathLike, on_disk: str | os.PathLike | None = None) -> Queries:
    """Queries from a TSV ``id<TAB>text`` file, or the query log (header ``source qid query``),
    which is normalised and de-duplicated with weight o_q = number of occurrences
    (``load_query_log``). ``load_queries`` reads the log's lines as they are instead.

    ``on_disk``: a folder (new or limelight's) where a query log's distinct queries are written as
    a query table (``queries.arrow``) and read from as they are used (``QueryTable``): memory
    that does not grow with the log. A TSV file of queries is read into memory either way.

    The file is read once, by ``read_queries_tsv`` (whose errors, a non-UTF-8 byte included,
    name the line)."""
    p = Path(path)
    if not p.is_file():
        raise LimelightError(f"{p}: no such query file")
    if _searcher_log(p):
        from limelight.data.searcherlog import read_searcher_log

        return read_searcher_log(p)
    # (a log's fast readers give None for a line the whole-file reader names: it reads it next)
    fast = _distinct_table(p, Path(on_disk)) if on_disk is not None else _distinct_streamed(p)
    if fast is not None:
        return fast
    qs = read_queries_tsv(p)
    return _distinct(qs, p) if "source" in qs.fields else qs


def _distinct_table(path: Path, folder: Path) -> Queries | None:
    """The log at ``path`` de-duplicated into ``folder/queries.arrow`` and opened as a
    ``QueryTable``; None when it is not a log or a line needs the whole-file reader's error."""
    from limelight.data.querylog import distinct_log_table, is_log
    from limelight.data.querytable import QueryTable

    if not is_log(path):
        return None
    out = distinct_log_table(path, MAX_LOG_QUERY_CHARS, folder / "queries.arrow")
    return None if out is None else QueryTable(out)


def load_irds(dataset_id: str) -> Dataset:
    """Load an ir_datasets dataset (needs the ``irds`` extra and, usually, the network)."""
    try:
        import ir_datasets
    except ImportError:
        raise LimelightError("irds: ids need the optional extra: pip install 'limelight[irds]'") from None
    try:
        ds = ir_datasets.load(dataset_id)
    except KeyError:
        raise LimelightError(f"unknown ir_datasets id {dataset_id!r}") from None
    coll = queries = qrels = None
    if ds.has_docs():
        recs = [d._asdict() for d in ds.docs_iter()]
        idf = "doc_id"
        tf = tuple(k for k in ("title", "text", "body") if recs and k in recs[0])
        coll = Collection.from_records(recs, tf, idf, dataset_id)
    if ds.has_queries():
        qs = list(ds.queries_iter())
        queries = Queries.from_lists([q.query_id for q in qs],
                                     [getattr(q, "text", None) or q[1] for q in qs], name=dataset_id)
    if ds.has_qrels():
        rows = list(ds.qrels_iter())
        qrels = Qrels.from_arrays([r.query_id for r in rows], [r.doc_id for r in rows],
                                  [r.relevance for r in rows], dataset_id)
    if coll is None:
        raise LimelightError(f"ir_datasets {dataset_id!r} has no documents")
    return Dataset(coll, queries, qrels, dataset_id)
