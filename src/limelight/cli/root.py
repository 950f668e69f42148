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
app.command("distfair")(fairness.distfair_cmd)
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


#: what an interrupted command that says nothing more prints (its outputs are written atomically:
#: each is there whole or not at all)
INTERRUPTED = "interrupted; what was finished is kept: rerun the same command to resume"


def main(argv: list[str] | None = None, prog_name: str | None = None) -> None:
    """Entry point: runs the app on ``argv`` (default ``sys.argv[1:]``), turning user errors into
    one-line messages (exit status 2) and warnings into one line each (``warning: ...``, no
    Python source lines: ``console.show_warning``).

    Ctrl-C: a command started with SIGINT ignored (``limelight ... &`` in a script: the shell
    ignores it for background commands) takes it back, so that Ctrl-C or ``kill -INT`` stops it
    as it stops a foreground command; an interrupted command (status 130) ends at once once its
    own cleanup has run and its line is printed, without the interpreter's teardown of the
    model libraries (1-2 s after sentence-transformers is loaded)."""
    import signal
    import warnings

    from limelight.cli.console import show_warning

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    shown = warnings.showwarning
    warnings.showwarning = show_warning
    try:
        app(args=argv, prog_name=prog_name)
    except SystemExit as e:
        if e.code == 130:
            if isinstance(getattr(e.__context__, "__cause__", None), KeyboardInterrupt):
                # Ctrl-C the command did not answer itself (Typer turned it into status 130)
                typer.echo(INTERRUPTED, err=True)
            _exit_now(130)
        raise
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
        typer.echo(INTERRUPTED, err=True)
        _exit_now(130)
    finally:
        warnings.showwarning = shown


def _exit_now(status: int) -> None:
    """End the process with ``status`` now: the output flushed, no interpreter teardown (every
    ``finally`` of the command has run, a replay's journal included; what it finished is on
    disk). The teardown of a process that loaded MiniLM takes 1.2-1.5 s idle, over 2 s at load 4,
    and Ctrl-C must stop a command within 2 s."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
