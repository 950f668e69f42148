"""``python -m limelight.demo``: the old ``make demo`` entry point, an alias of ``limelight audit``.

``make demo`` now runs ``limelight audit debian --out demo-out``: the audit of the Debian catalog
under the real query log (BM25, dense, hybrid) with the configuration shipped inside the package
(``src/limelight/configs/debian.toml``). This module keeps the old options and runs that command::

    python -m limelight.demo [--out DIR] [--quick] [--config FILE] [--screenshot PNG]
    # = limelight audit FILE|debian --out DIR [--quick] [--screenshot PNG]

It is the only module outside ``limelight.cli`` that imports the CLI: it is a command itself.
"""

from __future__ import annotations

import argparse


def audit_argv(argv: list[str] | None = None) -> list[str]:
    """The ``limelight audit`` arguments that ``python -m limelight.demo ARGV`` stands for."""
    ap = argparse.ArgumentParser(prog="python -m limelight.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="demo-out", help="audit directory (default: demo-out)")
    ap.add_argument("--config", default="debian",
                    help="audit configuration: a TOML file or a shipped name (default: debian)")
    ap.add_argument("--quick", action="store_true", help="a sample of the query log")
    ap.add_argument("--screenshot", default=None,
                    help="also render the report in headless Chromium and save a PNG here")
    args = ap.parse_args(argv)
    return (["audit", args.config, "--out", args.out] + (["--quick"] if args.quick else [])
            + (["--screenshot", args.screenshot] if args.screenshot else []))


def main(argv: list[str] | None = None) -> None:
    """Run ``limelight audit`` with the demo's defaults (exits with the command's status)."""
    from limelight.cli import main as cli_main

    cli_main(audit_argv(argv), prog_name="limelight")


if __name__ == "__main__":
    main()
