"""The ``limelight`` command line: a thin layer that parses, calls the library and prints.

User errors (``LimelightError``) print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import sys

import typer

from limelight.errors import LimelightError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="limelight: who search puts in the limelight, for whom, and how to change it.")


def _version(value: bool) -> None:
    if value:
        from limelight import __version__

        typer.echo(f"limelight {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="print the version and exit")) -> None:
    """limelight: who search puts in the limelight, for whom, and how to change it."""


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error and exit non-zero."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


# ---- command registration: each capability module adds its commands here ----------------------
def _register_all() -> None:
    from limelight import commands_core

    commands_core.register(app)
    # further capability modules register below (one line each)
    from limelight.exposure.cli import register as _rx; _rx(app)  # noqa: E702, I001
    from limelight.evaluation.cli import register as _reg_eval; _reg_eval(app)  # noqa: E702, I001
    from limelight.rerank.cli import register as _rr; _rr(app)  # noqa: E702, I001
    from limelight.querygen.variations_cli import register as _rv; _rv(app)  # noqa: E702, I001
    from limelight.audit.cli import register as _ra; _ra(app)  # noqa: E702, I001
    from limelight.service.cli import register as _rs; _rs(app)  # noqa: E702, I001
    from limelight.querygen.ctrlqgen_cli import register as _rq; _rq(app)  # noqa: E702, I001
    from limelight.exposure.eqi_cli import register as _re; _re(app)  # noqa: E702, I001


_register_all()


def main() -> None:
    """Entry point: runs the app, turning user errors into one-line messages (exit status 2)."""
    try:
        app()
    except LimelightError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
