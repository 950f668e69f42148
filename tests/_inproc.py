"""``limelight ...`` run inside the test process: the same entry point as the console script
(``limelight.cli.root.main``: one-line errors, exit statuses), its output captured, without the
1-4 s a new interpreter spends importing the model libraries. For tests of what a command answers;
tests of signals, exit codes of a killed process or a clean environment keep a real subprocess."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path


def run_cli(*args: str, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``limelight ARGS`` in this process; a ``CompletedProcess`` with its exit status,
    standard output and standard error, as ``subprocess.run(..., capture_output=True, text=True)``
    gives."""
    from limelight.cli.root import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    here = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(map(str, args)), prog_name="limelight")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["limelight", *map(str, args)], code, out.getvalue(), err.getvalue())
