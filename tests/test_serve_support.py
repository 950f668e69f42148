"""A small real audit directory for the ``limelight serve`` tests (built once per test session).

The movies catalog (3,201 films; group field ``Major Genre``) and the first 3,000 distinct
queries of the shared query log, BM25 and dense (all-MiniLM-L6-v2) systems at depth 100,
written with the library (``build_index``, ``compute_exposure``) into the ``AuditDir`` layout.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest

N_QUERIES = 3000
DEPTH = 100


def build_audit(out: Path, collection: str = "movies", n_queries: int = N_QUERIES, dense: bool = False,
                group_field: str | None = "Major Genre", run_system: bool = False) -> Path:
    """Build a test audit into ``out`` (skipped when ``out/audit.json`` exists): two BM25 systems
    (bm25s's k1=0.9, b=0.4 and Lucene's classic k1=1.2, b=0.75), the index with a dense part
    when ``dense`` (then a dense system too); with ``run_system``, a third system of kind
    ``run`` reading a TREC run file written from the classic BM25 store (an external system:
    results from a file)."""
    from limelight.audit import AuditDir
    from limelight.data import load_catalog, load_dataset, load_query_log
    from limelight.exposure.compute import compute_exposure
    from limelight.retrieval.index_dir import build_index, open_retriever

    ad = AuditDir(out)
    if ad.exists():
        return out
    coll = load_catalog(collection) if collection in ("movies", "debian") else load_dataset(collection).collection
    queries = load_query_log()
    if n_queries:  # 0: every distinct query of the log
        queries = queries.take(list(range(min(n_queries, len(queries)))))
    build_index(coll, ad.index_dir, dense=dense)
    systems = [{"name": "bm25", "kind": "bm25", "k1": 0.9, "b": 0.4},
               {"name": "bm25-classic", "kind": "bm25", "k1": 1.2, "b": 0.75}]
    if dense:
        systems.append({"name": "dense", "kind": "dense"})
    for s in systems:
        params = {k: v for k, v in s.items() if k in ("k1", "b")}
        retriever = open_retriever(ad.index_dir, s["kind"], **params)
        if s["kind"] == "dense":
            # as the audit does: the query vectors are computed once and kept beside the stores
            retriever = _with_query_vectors(retriever, queries, ad.query_vectors)
        compute_exposure(retriever, queries, ad.store_dir(s["name"]), depth=DEPTH)
    if run_system:
        systems.append(_run_system(ad, coll, queries, "bm25-classic"))
    if dense:  # a learned EQI model (a few training steps: the loop, not the quality)
        import numpy as np

        from limelight.exposure.eqi import train_eqi

        dense_r = open_retriever(ad.index_dir, "dense")
        store = ad.store("dense")
        model = train_eqi("residual", store, np.load(ad.query_vectors), dense_r.index.embeddings,
                          n_queries=len(queries), n_docs=len(coll), steps=3, batch_size=64,
                          encoder=dense_r.encoder)
        model.save(ad.eqi_dir("residual"))
    manifest = {"format": "limelight-audit/1", "name": "serve-test", "complete": True,
                "collection": {"source": "movies", "name": coll.name, "n_docs": len(coll),
                               "group_field": group_field},
                "queries": {"source": "log", "n_queries": len(queries)},
                "depth": DEPTH, "cutoffs": [10, 100], "systems": systems}
    ad.manifest_path.write_text(json.dumps(manifest, indent=1))
    return out


def _run_system(ad, coll, queries, source: str) -> dict:
    """A ``run`` system over a TREC run file written from the store of system ``source``, its
    store computed through the run kind; returns its manifest entry."""
    import numpy as np

    from limelight.exposure.compute import compute_exposure
    from limelight.retrieval.spec import System
    from limelight.retrieval.systems import get_kind

    st = ad.store(source)
    q, d, rank, score = st.pair_arrays()
    path = ad.path / "external" / "results.run"
    path.parent.mkdir(parents=True, exist_ok=True)
    qids, dids = st.queries.ids.decode(q), st.doc_ids.decode(d)
    path.write_text("".join(f"{a} Q0 {b} {r} {x:.6f} ext\n" for a, b, r, x in
                            zip(qids.tolist(), dids.tolist(), np.asarray(rank).tolist(),
                                np.asarray(score).tolist(), strict=True)))
    params = get_kind("run").resolved({"path": str(path)})
    retriever = System.of("run", **params).open(None, collection=coll, queries=queries)
    compute_exposure(retriever, queries, ad.store_dir("external"), depth=DEPTH)
    return {"name": "external", "kind": "run", **params}


def _with_query_vectors(retriever, queries, path: Path):
    """A dense retriever answering the log's queries from vectors saved at ``path``."""
    import numpy as np

    vectors = retriever.encoder.encode(queries.texts.tolist())
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    rows = {t: i for i, t in enumerate(queries.texts.tolist())}

    class Stored:
        doc_ids = retriever.doc_ids
        name = retriever.name
        fingerprint = f"dense-stored-vectors:{len(queries)}"

        def search_batch(self, texts, k):
            return retriever.search_vectors(vectors[[rows[t] for t in texts]], k)

    return Stored()


@pytest.fixture(scope="session")
def audit_dir(tmp_path_factory) -> Path:
    """The shared test audit (a session-wide directory, built by the first test that needs it)."""
    root = tmp_path_factory.getbasetemp() / "serve-audit"
    lock = tmp_path_factory.getbasetemp() / "serve-audit.lock"
    with _file_lock(lock):
        return build_audit(root)


@pytest.fixture(scope="session")
def dense_audit_dir(tmp_path_factory) -> Path:
    """A tiny audit with a dense index and system (adi, 82 documents; 300 log queries)."""
    root = tmp_path_factory.getbasetemp() / "serve-audit-dense"
    with _file_lock(tmp_path_factory.getbasetemp() / "serve-audit-dense.lock"):
        return build_audit(root, "adi", n_queries=300, dense=True, group_field=None)


@pytest.fixture(scope="session")
def run_audit_dir(tmp_path_factory) -> Path:
    """An audit with an external system (kind ``run``) beside two BM25 systems (movies; 500 log
    queries)."""
    root = tmp_path_factory.getbasetemp() / "serve-audit-run"
    with _file_lock(tmp_path_factory.getbasetemp() / "serve-audit-run.lock"):
        return build_audit(root, n_queries=500, run_system=True)


@pytest.fixture(scope="session")
def service(audit_dir):
    from limelight.service.core import AuditService

    return AuditService(audit_dir)


@pytest.fixture(scope="session")
def client(service):
    from fastapi.testclient import TestClient

    from limelight.service.app import create_app

    with TestClient(create_app(service, max_body=256 * 1024)) as c:
        yield c


@pytest.fixture(scope="session")
def live_server(service):
    """The app served by uvicorn on a free loopback port, in a background thread."""
    import uvicorn

    from limelight.service.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service, max_body=256 * 1024), host="127.0.0.1",
                                           port=port, log_level="warning", access_log=False))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    t.join(10)


@contextlib.contextmanager
def _file_lock(path: Path):
    import fcntl

    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def test_support_builds_an_audit_dir(audit_dir):
    from limelight.audit import AuditDir

    ad = AuditDir(audit_dir)
    assert ad.systems == ["bm25", "bm25-classic"]
    assert ad.store("bm25").depth == DEPTH
    assert len(ad.store("bm25-classic").queries) == N_QUERIES
    assert ad.store("bm25").manifest["retriever"] != ad.store("bm25-classic").manifest["retriever"]
