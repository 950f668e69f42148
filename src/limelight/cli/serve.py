"""``limelight serve --audit DIR``: the web app and JSON API over an audit directory."""

from __future__ import annotations

import errno
from pathlib import Path

import typer


def serve(
    audit: Path = typer.Option(..., "--audit", help="an audit directory (limelight audit --out DIR)"),
    host: str = typer.Option("127.0.0.1", help="interface to listen on"),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port (0: any free port)"),
    reranker: Path | None = typer.Option(None, "--reranker",
                                         help="a re-ranker checkpoint (limelight rerank) for the search page"),
    workers: int = typer.Option(1, min=1, help="worker threads of the BM25 kernel"),
    max_body: int = typer.Option(1 << 20, min=1024, help="largest accepted request body in bytes"),
    preload: bool = typer.Option(True, help="load the search models and retrievability before serving"),
    preload_eqi: bool = typer.Option(False, help="build the exact reverse search engines before serving "
                                                 "(else on the first EQI search of each system; ~650 MB on "
                                                 "the Debian demo audit)"),
    eqi_queue: int = typer.Option(4, min=0, help="EQI searches that may wait behind the running one "
                                                 "(one more: 429 with Retry-After)"),
    eqi_timeout: float = typer.Option(30.0, min=0.1, help="seconds an EQI search may wait for its turn "
                                                          "(longer: 503 with Retry-After)"),
    eqi_threads: int = typer.Option(1, min=1, help="FAISS and numba threads of an EQI search (the other "
                                                    "cores keep answering the rest of the API)"),
    view_cache_mb: int = typer.Option(256, min=1, help="MiB of derived retrievability views kept "
                                                       "(least recently used dropped first)"),
) -> None:
    """Serve search, exposing queries, retrievability and EQI over an audit (read-only)."""
    import uvicorn

    from limelight.audit import AuditDir
    from limelight.service.app import create_app
    from limelight.service.core import AuditService, open_service

    AuditDir(audit).manifest  # noqa: B018 - a one-line error for a directory that is no audit
    sock = bind_socket(host, port)  # before loading anything: a busy port fails at once
    try:
        service: AuditService = open_service(audit, reranker, eqi_queue=eqi_queue, eqi_timeout=eqi_timeout,
                                             eqi_threads=eqi_threads, view_cache_bytes=view_cache_mb << 20)
        service.threads = workers
        if preload:
            service.warm(eqi=preload_eqi)
        application = create_app(service, max_body=max_body)
        config = uvicorn.Config(application, log_level="warning", access_log=False, timeout_keep_alive=30)
        server = uvicorn.Server(config)
        bound = sock.getsockname()
        url_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        typer.echo(f"serving {audit} ({service.info()['collection']}, {len(service.systems)} systems) "
                   f"on http://{url_host}:{bound[1]}/  — API at /api (offline; schema /openapi.json)", err=True)
        server.run(sockets=[sock])
    finally:
        sock.close()


def bind_socket(host: str, port: int):
    """A TCP socket bound to ``host:port`` (``LimelightError`` in one line when it cannot be:
    the port is in use, the address is not this machine's, the name does not resolve)."""
    import socket

    from limelight.errors import LimelightError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise LimelightError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        why = "the port is in use (choose another with --port, or 0 for any free one)" \
            if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise LimelightError(f"cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(True)
    return sock
