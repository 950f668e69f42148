"""Headless Chromium (Debian's ``chromium``) through the pinned ``playwright`` package: render a
report, collect console errors, take a screenshot, and check a page as a reader sees it
(:func:`check_page`). Never downloads a browser."""

from __future__ import annotations

import os
import re
from pathlib import Path

from limelight.errors import LimelightError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def render_page(html_path: str | os.PathLike, screenshot: str | os.PathLike | None = None,
                width: int = 1280, height: int = 900, full_page: bool = False) -> dict:
    """Open ``html_path`` in headless Chromium; returns ``{"errors": [...], "title": ...,
    "n_tables": ..., "n_images": ..., "broken_images": ..., "problems": [...]}`` (``problems``:
    :func:`check_page`'s) and writes ``screenshot`` (PNG)."""
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
            watch(page)
            page.goto(Path(html_path).resolve().as_uri(), wait_until="load")
            problems = check_page(page)
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
    return {"errors": errors, **info, "problems": problems}


# ---- checking a page as a reader sees it -------------------------------------------------------------
#: scientific notation in visible text (8.379e-04, 1.088e+06)
SCIENTIFIC = re.compile(r"\de[+-]\d\d")
#: a raw field name in visible text (gini_retrieved_only, r_share)
FIELD_NAME = re.compile(r"(?<![\w./:-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w(/-])")
#: a Greek letter (a symbol such as ρ, μ, Σ, γ)
GREEK = re.compile(r"[\u0370-\u03ff\u1f00-\u1fff]")

_WATCHED = "_limelight_problems"

# every visible text node of the body: its text and where it sits (code, a glossary link, the
# glossary itself); the figures and images without a caption; the names the page declares
_SCAN = """() => {
  const out = {texts: [], uncaptioned: [], names: []};
  const meta = document.querySelector('meta[name="limelight-names"]');
  if (meta) { try { out.names = JSON.parse(meta.content); } catch (e) {} }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const t = n.textContent;
    if (!t.trim()) continue;
    const el = n.parentElement;
    if (!el || el.closest('script,style,noscript,template')) continue;
    if (el.checkVisibility && !el.checkVisibility()) continue;
    out.texts.push({text: t,
      code: !!el.closest('code,pre,kbd,samp,textarea,input,[data-raw]'),
      link: !!el.closest('a[href*="glossary"]'),
      glossary: !!el.closest('#glossary,.glossary,[data-glossary]')});
  }
  document.querySelectorAll('img').forEach(function (img) {
    const fig = img.closest('figure');
    const cap = fig && fig.querySelector('figcaption');
    if (!cap || !cap.textContent.trim())
      out.uncaptioned.push(img.getAttribute('alt') || (img.getAttribute('src') || '').slice(0, 40));
  });
  document.querySelectorAll('figure').forEach(function (fig) {
    const cap = fig.querySelector('figcaption');
    if (!fig.querySelector('img') && (!cap || !cap.textContent.trim()))
      out.uncaptioned.push((fig.id || fig.className || 'figure') + ' (no caption)');
  });
  return out;
}"""


def watch(page) -> list[str]:
    """Collect ``page``'s console errors, uncaught page errors and dialogs from now on (call it
    before ``page.goto``); :func:`check_page` reports them. Returns the (live) list."""
    found: list[str] = getattr(page, _WATCHED, None) or []
    if getattr(page, _WATCHED, None) is None:
        page.on("console", lambda m: found.append(f"console {m.type}: {m.text}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: found.append(f"page error: {e}"))
        page.on("dialog", lambda d: (found.append(f"dialog: {d.message}"), d.dismiss()))
        setattr(page, _WATCHED, found)
    return found


def check_page(page, allowed: tuple[str, ...] | list[str] = ()) -> list[str]:
    """What a reader of the page now open in ``page`` (Playwright) would trip over, one line each
    (``[]``: nothing): console errors, page errors and dialogs (those seen since :func:`watch`
    or the previous check; a page never watched is watched and reloaded first), an image or figure without a caption, visible
    scientific notation (``8.379e-04``), a raw field name (``snake_case`` words; code, commands
    and file names in ``<code>`` do not count, nor the names in ``allowed`` and in the page's
    ``<meta name="limelight-names">``, e.g. system names), and a Greek symbol outside a link to
    the glossary and outside the glossary itself."""
    if getattr(page, _WATCHED, None) is None:
        watch(page)
        page.reload(wait_until="load")
    seen = getattr(page, _WATCHED)
    problems = list(seen)
    seen.clear()  # the next check reports what happens after this one
    scan = page.evaluate(_SCAN)
    names = set(allowed) | {str(n) for n in scan["names"]}
    for alt in scan["uncaptioned"]:
        problems.append(f"figure without a caption: {alt[:60]!r}")
    for t in scan["texts"]:
        text, where = t["text"], " ".join(t["text"].split())[:80]
        if t["code"] or t["glossary"]:
            continue
        if m := SCIENTIFIC.search(text):
            problems.append(f"scientific notation {m.group(0)!r} in: {where!r}")
        for m in FIELD_NAME.finditer(text):
            if m.group(0) not in names:
                problems.append(f"raw field name {m.group(0)!r} in: {where!r}")
        if not t["link"] and (m := GREEK.search(text)):
            problems.append(f"Greek symbol {m.group(0)!r} without a glossary link in: {where!r}")
    return problems


def screenshot_report(audit_dir: str | os.PathLike, out: str | os.PathLike, width: int = 1280,
                      height: int = 900) -> list[str]:
    """Write ``audit_dir``'s report again (``DIR/report.html``, from what the directory holds),
    screenshot its first screen into ``out`` (PNG) and return :func:`check_page`'s problems.
    What ``docs/audit-report.png`` comes from::

        python -m limelight.report.browser demo-out docs/audit-report.png
    """
    from limelight.report.html import write_report

    page = write_report(audit_dir)
    info = render_page(page, out, width=width, height=height)
    return info["problems"]


if __name__ == "__main__":  # pragma: no cover - the docs' screenshot command
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m limelight.report.browser AUDIT_DIR OUT.png")
    found = screenshot_report(sys.argv[1], sys.argv[2])
    for line in found:
        print(line)
    sys.exit(1 if found else 0)
