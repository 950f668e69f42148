"""Headless Chromium (Debian's ``chromium``) through the pinned ``playwright`` package: render a
report, collect console errors, take a screenshot. Never downloads a browser."""

from __future__ import annotations

import os
from pathlib import Path

from limelight.errors import LimelightError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def render_page(html_path: str | os.PathLike, screenshot: str | os.PathLike | None = None,
                width: int = 1280, height: int = 900, full_page: bool = False) -> dict:
    """Open ``html_path`` in headless Chromium; returns ``{"errors": [...], "title": ...,
    "n_tables": ..., "n_images": ..., "broken_images": ...}`` and writes ``screenshot`` (PNG)."""
    exe = os.environ.get("LIMELIGHT_CHROMIUM", CHROMIUM)
    if not Path(exe).exists():
        raise LimelightError(f"{exe}: Chromium is missing (run `make browser`, which installs "
                             "Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise LimelightError("the playwright package is missing (pip install -e '.[dev]')") from None
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(Path(html_path).resolve().as_uri(), wait_until="load")
            info = page.evaluate("""() => ({
                title: document.title,
                n_tables: document.querySelectorAll('table').length,
                n_images: document.images.length,
                broken_images: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length
            })""")
            if screenshot is not None:
                Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot), full_page=full_page)
        finally:
            browser.close()
    return {"errors": errors, **info}
