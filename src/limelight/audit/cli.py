"""``limelight audit CONFIG.toml --out DIR [--quick]``: parse, call the library, print."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add ``audit`` to ``app``."""

    @app.command("audit")
    def audit_cmd(
        config: Path = typer.Argument(..., help="audit configuration (TOML), e.g. configs/debian.toml"),
        out: Path = typer.Option(..., "--out", "-o", help="audit directory to create or resume"),
        quick: bool = typer.Option(False, "--quick", help="a sample of the queries ([quick] in the config)"),
        check: bool = typer.Option(False, "--check", help="validate the configuration and exit"),
    ) -> None:
        """Run an exposure audit: index, exact exposure per system, retrievability/Gini/Lorenz,
        comparison, re-ranking, EQI, robustness; writes DIR/report.html and DIR/results.json.
        Finished stages are reused; an interrupted audit resumes."""
        import json
        import shlex

        from limelight.audit.config import load_config
        from limelight.audit.runner import AuditRunner

        cfg = load_config(config)
        if check:
            typer.echo(json.dumps(cfg.to_dict(), indent=1, default=str))
            return
        cmd = "limelight audit " + " ".join(shlex.quote(a) for a in [str(config), "--out", str(out)]
                                            + (["--quick"] if quick else []))
        runner = AuditRunner(cfg, out, quick=quick, show_progress=True,
                             log=lambda s: typer.echo(s, err=True), command=cmd)
        res = runner.run()
        for name, s in res["systems"].items():
            if "gini_c100" in s:
                typer.echo(f"{name:<12} Gini(c=100) {s['gini_c100']:.4f}  retrievable "
                           f"{s['retrievable_fraction']:.4f}")
        skipped = [s for s in runner.statuses if not s.present]
        for s in skipped:
            typer.echo(f"skipped {s.name}: {s.reason}")
        typer.echo(f"report: {runner.dir.report_html.resolve()}")
        typer.echo(f"results: {runner.dir.results_json.resolve()}")
