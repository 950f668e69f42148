"""A second real search engine behind HTTP for the replay tests: PISA (``pyterrier-pisa``) BM25
over the movies catalog, behind a minimal ASGI app (a process of its own; loopback only).

    python tests/_search_engine.py --index-dir D --port-file F --count C [--port P] [--token-env NAME]

It speaks the part of two engines' documented search APIs that limelight's presets use:
Elasticsearch/OpenSearch ``POST /{index}/_search`` (a ``multi_match`` or ``match`` query, ``size``;
answer ``hits.hits[]._id/_score``) and ``POST /{index}/_msearch`` (NDJSON header/body lines;
answer ``responses[]`` with ``status``), and Solr ``GET /solr/{core}/select`` (``q``, ``rows``;
answer ``response.docs[].id/score``). With ``--token-env NAME`` every request must carry
``Authorization: Bearer <$NAME>`` (401 otherwise).

The engine's own count: one JSON line per query answered (the query text) appended to ``--count``
(``O_APPEND``, one write per line, so lines survive a SIGKILL whole). The PISA index is built in
``--index-dir`` once and reused by a restarted engine. ``running(folder)`` starts it as a process
and stops it (the Ray tests and ``benchmarks/ray_cluster.py``); ``in_thread(collection, folder)``
serves the same APIs from a thread of the test's process with limelight's BM25 over a small
collection (no PISA index to build: for tests that only need a real service on loopback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def running(folder: Path, timeout: float | None = None) -> Iterator[tuple[str, Path]]:
    """This engine as a process of its own on a free loopback port, its files in ``folder``
    (``pisa-index/``, ``engine-port``, ``engine-count.jsonl``, ``engine.log``); yields (the base
    URL of its ``movies`` index, its count file), then terminates it (killed after 10 s).
    ``RuntimeError`` with the end of its log if it ends, or takes over ``timeout`` seconds,
    before it listens."""
    port_file, count, log_path = folder / "engine-port", folder / "engine-count.jsonl", folder / "engine.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--index-dir",
                                 str(folder / "pisa-index"), "--port-file", str(port_file),
                                 "--count", str(count)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not port_file.exists():
            if proc.poll() is not None or (deadline is not None and time.monotonic() > deadline):
                raise RuntimeError(f"the engine did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{int(port_file.read_text())}/movies", count
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class _LimelightBM25:
    """limelight's BM25 over ``collection`` with PISA's ``search(text)`` interface (``docno`` and
    ``score`` columns, best first, top 1000); with ``interrupt_after``, Ctrl-C (SIGINT) is sent
    to this process once that many queries have been answered."""

    def __init__(self, collection, interrupt_after: int | None = None):
        from limelight.retrieval.bm25 import BM25, BM25Index

        self.bm25 = BM25(BM25Index.build(collection))
        self.ids = collection.ids.strings
        self.answered, self.interrupt_after = 0, interrupt_after

    def search(self, text: str) -> dict:
        docs, scores = self.bm25.search_batch([text], 1000)
        keep = docs[0] >= 0
        self.answered += 1
        if self.answered == self.interrupt_after:
            import signal

            os.kill(os.getpid(), signal.SIGINT)
        return {"docno": self.ids[docs[0][keep]], "score": scores[0][keep]}


@contextlib.contextmanager
def in_thread(collection, folder: Path, interrupt_after: int | None = None
              ) -> Iterator[tuple[str, Path]]:
    """``make_app`` over limelight's BM25 of ``collection``, served by uvicorn in a thread of this
    process on a free loopback port; yields (the base URL of its ``movies`` index, its count file:
    one line per query answered), then stops it. ``interrupt_after``: the engine sends Ctrl-C
    (SIGINT) to this process after answering that many queries (a job interrupted at a known
    point, in-process)."""
    import threading

    import uvicorn

    count = folder / "engine-count.jsonl"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(make_app(_LimelightBM25(collection, interrupt_after), str(count), None),
                                           log_level="warning", access_log=False))
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not t.is_alive():
                raise RuntimeError("the engine did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/movies", count
    finally:
        server.should_exit = True
        t.join(10)
        sock.close()


def open_engine(index_dir: Path):
    """PISA BM25 (k1 0.9, b 0.4, top 1000) over the movies catalog, indexed once."""
    import pyterrier_pisa

    idx = pyterrier_pisa.PisaIndex(str(index_dir))
    if not idx.built():
        from limelight.data import load_catalog

        coll = load_catalog("movies")
        idx.index({"docno": str(d), "text": str(t)} for d, t in zip(coll.ids.strings.tolist(),
                                                                   coll.texts.tolist(), strict=True))
    return idx.bm25(num_results=1000)


def make_app(bm25, count_path: str, token: str | None):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    fd = os.open(count_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def search(text: str, k: int) -> list[tuple[str, float]]:
        os.write(fd, (json.dumps(text) + "\n").encode())
        try:
            res = bm25.search(text)
        except Exception:  # a query PISA cannot parse: no hits
            return []
        return [(str(d), float(s)) for d, s in zip(res["docno"].tolist()[:k], res["score"].tolist()[:k],
                                                   strict=True)]

    def query_text(body: dict) -> str:
        q = body.get("query", {})
        if "multi_match" in q:
            return q["multi_match"]["query"]
        (field, m), = q["match"].items()
        return m["query"] if isinstance(m, dict) else m

    def es_hits(index: str, body: dict) -> dict:
        hits = search(query_text(body), int(body.get("size", 10)))
        return {"took": 1, "timed_out": False,
                "hits": {"max_score": hits[0][1] if hits else None,
                         "hits": [{"_index": index, "_id": d, "_score": s} for d, s in hits]}}

    def denied(request: Request):
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            # as a careless server might: the header it got, echoed (the client must not repeat it)
            return JSONResponse({"error": "unauthorized", "got": request.headers.get("authorization")},
                                status_code=401)
        return None

    async def es_search(request: Request):
        if (r := denied(request)) is not None:
            return r
        return JSONResponse(es_hits(request.path_params["index"], json.loads(await request.body())))

    async def es_msearch(request: Request):
        if (r := denied(request)) is not None:
            return r
        lines = [ln for ln in (await request.body()).decode().split("\n") if ln.strip()]
        index = request.path_params["index"]
        out = [{**es_hits(index, json.loads(body)), "status": 200} for body in lines[1::2]]
        return JSONResponse({"took": 1, "responses": out})

    async def solr_select(request: Request):
        if (r := denied(request)) is not None:
            return r
        p = request.query_params
        hits = search(p["q"], int(p.get("rows", 10)))
        return JSONResponse({"responseHeader": {"status": 0, "QTime": 1},
                             "response": {"numFound": len(hits), "start": 0, "maxScore": hits[0][1] if hits else None,
                                          "docs": [{"id": d, "score": s} for d, s in hits]}})

    return Starlette(routes=[Route("/{index}/_search", es_search, methods=["POST"]),
                             Route("/{index}/_msearch", es_msearch, methods=["POST"]),
                             Route("/solr/{core}/select", solr_select, methods=["GET"])])


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--index-dir", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--count", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token-env", default=None)
    a = ap.parse_args()
    app = make_app(open_engine(Path(a.index_dir)), a.count,
                   os.environ[a.token_env] if a.token_env else None)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    sock.listen(512)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(tmp, a.port_file)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


if __name__ == "__main__":
    main()
