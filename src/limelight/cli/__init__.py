"""The ``limelight`` command line: a thin layer that parses, calls the library and prints.

One module per command group, each with top-level command functions (and a module-level Typer app
for a group with subcommands): ``core`` (index, search, retrieve, info), ``exposure`` (exposure
compute|doc|query|diff, retrievability), ``eqi``, ``evaluate`` (evaluate, compare), ``rerank``,
``variations`` (variations, robustness, simulate), ``generate`` (generate entity|train|dataset,
suggest), ``audit`` and ``serve``;
``console`` prints tables and progress; ``root`` assembles the app. Nothing outside this package
imports it.

User errors (``LimelightError``) print one line on stderr and exit with status 2.
"""

from __future__ import annotations

from limelight._lazy import lazy_exports
from limelight.cli.root import app, main

__all__, __getattr__, __dir__ = lazy_exports(__name__)
