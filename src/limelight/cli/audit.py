"""``limelight audit CONFIG --out DIR [--quick] [--screenshot PNG]``: parse, call the library, print.

CONFIG is a TOML file, or the name of a configuration shipped inside the package
(``src/limelight/configs/NAME.toml``: ``debian`` is ``make demo``'s audit, ``quick`` the small
one on med); a file of that name in the working directory takes precedence.
"""

from __future__ import annotations

from pathlib import Path

import typer

SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def shipped_configs() -> list[str]:
    """The names of the configurations shipped inside the package (``limelight audit NAME``)."""
    return sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.toml"))


def resolve_config(config: Path) -> Path:
    """CONFIG as given when it is a file (or looks like a path); otherwise the shipped
    configuration of that name when there is one. Anything else is passed on unchanged, so that
    ``load_config`` names the missing file."""
    if config.is_file() or config.suffix or len(config.parts) != 1:
        return config
    shipped = SHIPPED_CONFIGS / f"{config}.toml"
    return shipped if shipped.is_file() else config


def audit_cmd(
    config: Path = typer.Argument(..., help="audit configuration (TOML), e.g. configs/debian.toml, "
                                  "or the name of one shipped with limelight: debian (make demo), quick"),
    out: Path = typer.Option(..., "--out", "-o", help="audit directory to create or resume"),
    quick: bool = typer.Option(False, "--quick", help="a sample of the queries (the config's \\[quick] table)"),
    check: bool = typer.Option(False, "--check", help="validate the configuration and exit"),
    screenshot: Path = typer.Option(None, "--screenshot",
                                    help="also render DIR/report.html in headless Chromium and save a PNG here"),
) -> None:
    """Run an exposure audit: index, exact exposure per system, retrievability/Gini/Lorenz,
    comparison, re-ranking, EQI, robustness; writes DIR/report.html and DIR/results.json.
    Finished stages are reused; an interrupted audit resumes."""
    import json
    import shlex

    from limelight.audit.config import load_config
    from limelight.report import ReportingAuditRunner

    cfg = load_config(resolve_config(config))
    if check:
        typer.echo(json.dumps(cfg.to_dict(), indent=1, default=str))
        return
    from limelight.audit.layout import AuditDir

    AuditDir(out).check_writable()  # before any work
    cmd = "limelight audit " + " ".join(shlex.quote(a) for a in [str(config), "--out", str(out)]
                                        + (["--quick"] if quick else []))
    # the audit computes and records its stages; the runner of the report layer also writes
    # DIR/report.html (limelight.report.run_audit as a library call)
    runner = ReportingAuditRunner(cfg, out, quick=quick, show_progress=True,
                                  log=lambda s: typer.echo(s, err=True), command=cmd)
    try:
        res = runner.run()
    except KeyboardInterrupt:  # Ctrl-C: the stages finished so far are recorded and kept
        typer.echo(f"interrupted; the finished stages are kept in {out}: rerun the same command "
                   f"to resume ({cmd})", err=True)
        raise typer.Exit(130) from None
    for name, s in res["systems"].items():
        if "gini_c100" in s:
            typer.echo(f"{name:<12} Gini(c=100) {s['gini_c100']:.4f}  retrievable "
                       f"{s['retrievable_fraction']:.4f}")
    skipped = [s for s in runner.statuses if not s.present]
    for s in skipped:
        typer.echo(f"skipped {s.name}: {s.reason}")
    if screenshot is not None:
        from limelight.report.browser import render_page

        info = render_page(runner.dir.report_html, screenshot)
        typer.echo(f"screenshot: {screenshot} (console errors: {len(info['errors'])})")
    typer.echo(f"report: {runner.dir.report_html.resolve()}")
    typer.echo(f"results: {runner.dir.results_json.resolve()}")
