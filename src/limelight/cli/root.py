"""The ``limelight`` app: its root options, every command and group in help order, and ``main``.

User errors (``LimelightError``) print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import sys

import typer

# the command modules by full name: ``from limelight.cli import ...`` would read the package
# __init__, which imports this module (an import loop)
import limelight.cli.audit as audit
import limelight.cli.core as core
import limelight.cli.eqi as eqi
import limelight.cli.evaluate as evaluate
import limelight.cli.exposure as exposure
import limelight.cli.fairness as fairness
import limelight.cli.generate as generate
import limelight.cli.rerank as rerank
import limelight.cli.serve as serve
import limelight.cli.users as users
import limelight.cli.variations as variations
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


# ---- the commands, in the order `limelight --help` lists them; then the command groups ---------
app.command("index")(core.index)
app.command("search")(core.search)
app.command("retrieve")(core.retrieve)
app.command("info")(core.info)
app.command("systems")(core.systems)
app.command("retrievability")(exposure.retrievability_cmd)
app.command("fairness")(fairness.fairness_cmd)
app.command("evaluate")(evaluate.evaluate)
app.command("compare")(evaluate.compare)
app.command("variations")(variations.variations_cmd)
app.command("robustness")(variations.robustness_cmd)
app.command("simulate")(variations.simulate_cmd)
app.command("suggest")(generate.suggest_cmd)
app.command("audit")(audit.audit_cmd)
app.command("serve")(serve.serve)
app.add_typer(exposure.app, name="exposure")
app.add_typer(rerank.app, name="rerank")
app.add_typer(generate.app, name="generate")
app.add_typer(eqi.app, name="eqi")
app.add_typer(users.app, name="users")


def main(argv: list[str] | None = None, prog_name: str | None = None) -> None:
    """Entry point: runs the app on ``argv`` (default ``sys.argv[1:]``), turning user errors into
    one-line messages (exit status 2) and warnings into one line each (``warning: ...``, no
    Python source lines: ``console.show_warning``)."""
    import warnings

    from limelight.cli.console import show_warning

    shown = warnings.showwarning
    warnings.showwarning = show_warning
    try:
        app(args=argv, prog_name=prog_name)
    except LimelightError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except ModuleNotFoundError as e:  # a package of an extra: one line naming the extra
        from limelight._extras import missing_extra

        if (err := missing_extra(e)) is None:
            raise
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    finally:
        warnings.showwarning = shown
