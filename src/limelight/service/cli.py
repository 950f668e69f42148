"""``limelight serve --audit DIR``: the web app and JSON API over an audit directory."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to the limelight CLI."""

    @app.command("serve")
    def serve(
        audit: Path = typer.Option(..., "--audit", help="an audit directory (limelight audit --out DIR)"),
        host: str = typer.Option("127.0.0.1", help="interface to listen on"),
        port: int = typer.Option(8000, min=0, max=65535, help="TCP port (0: any free port)"),
        reranker: Path | None = typer.Option(None, "--reranker",
                                             help="a re-ranker checkpoint (limelight rerank) for the search page"),
        workers: int = typer.Option(1, min=1, help="worker threads of the BM25 kernel"),
        max_body: int = typer.Option(1 << 20, min=1024, help="largest accepted request body in bytes"),
        preload: bool = typer.Option(True, help="load the search models and retrievability before serving"),
    ) -> None:
        """Serve search, exposing queries, retrievability and EQI over an audit (read-only)."""
        import uvicorn

        from limelight.service.app import create_app
        from limelight.service.core import AuditService, open_service

        service: AuditService = open_service(audit, reranker)
        service.threads = workers
        if preload:
            service.warm()
        application = create_app(service, max_body=max_body)
        typer.echo(f"serving {audit} ({service.info()['collection']}, {len(service.systems)} systems) "
                   f"on http://{host}:{port}/  — API docs at /docs", err=True)
        uvicorn.run(application, host=host, port=port, log_level="warning", access_log=False,
                    timeout_keep_alive=30)
