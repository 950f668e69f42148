"""``make demo``: the audit of the Debian catalog under the real query log (BM25, dense, hybrid).

Runs ``limelight audit configs/debian.toml --out demo-out`` (finished stages are reused, an
interrupted run resumes), prints the headline figures and where the report is, and saves a
screenshot of the report rendered in headless Chromium (``--screenshot``).

Run with ``python -m limelight.demo [--out DIR] [--quick] [--config FILE] [--screenshot PNG]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from limelight.errors import LimelightError

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "debian.toml"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m limelight.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="demo-out", help="audit directory (default: demo-out)")
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="audit configuration")
    ap.add_argument("--quick", action="store_true", help="a sample of the query log")
    ap.add_argument("--screenshot", default=None,
                    help="also render the report in headless Chromium and save a PNG here")
    args = ap.parse_args(argv)
    try:
        from rich.console import Console

        from limelight.audit.config import load_config
        from limelight.audit.runner import AuditRunner

        console = Console(stderr=True)
        cfg = load_config(args.config)
        cmd = f"limelight audit {args.config} --out {args.out}" + (" --quick" if args.quick else "")
        t0 = time.perf_counter()
        runner = AuditRunner(cfg, args.out, quick=args.quick, show_progress=True,
                             log=console.print, command=cmd)
        res = runner.run()
        secs = time.perf_counter() - t0
        for name, s in res["systems"].items():
            if "gini_c100" in s:
                print(f"{name:<8} Gini(c=100) {s['gini_c100']:.4f}   retrievable fraction "
                      f"{s['retrievable_fraction']:.4f}")
        for s in runner.statuses:
            if not s.present:
                print(f"skipped {s.name}: {s.reason}")
        if args.screenshot:
            from limelight.report.browser import render_page

            info = render_page(runner.dir.report_html, args.screenshot)
            print(f"screenshot: {args.screenshot} (console errors: {len(info['errors'])})")
        print(f"audit finished in {secs / 60:.1f} min")
        print(f"report: {runner.dir.report_html.resolve()}")
        return 0
    except LimelightError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (run it again to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
