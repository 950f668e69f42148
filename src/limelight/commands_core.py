"""Core CLI commands: index, search, retrieve, info (filled in by the foundation work)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the core commands to ``app``."""

    @app.command()
    def info() -> None:
        """Print limelight's version."""
        from limelight import __version__

        typer.echo(f"limelight {__version__}")
