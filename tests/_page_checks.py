"""What a page of ``limelight serve`` must not show a content owner (issue 43), checked in a real
browser (Playwright): the report's checker :func:`limelight.report.browser.check_page` (console
errors, scientific notation, raw field names, Greek symbols outside a glossary link, figures
without a caption; the collection's and the log's own text, marked ``data-raw``, is shown as it
is) plus the web app's inline SVG charts: each needs an axis label.

Run over any served audit, or over every page of an audit directory and its report (what
``make demo`` does with the demo audit)::

    python tests/_page_checks.py http://127.0.0.1:8000/ http://127.0.0.1:8000/retrievability ...
    python tests/_page_checks.py --audit demo-out
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from urllib.parse import quote

from limelight.report.browser import CHROMIUM, CHROMIUM_ARGS, check_page, watch

_CHARTS = """() => Array.from(document.querySelectorAll('svg.chart')).map(svg => ({
  label: svg.getAttribute('aria-label') || '',
  axis_labels: Array.from(svg.querySelectorAll('text.axis-label')).map(t => t.textContent.trim()).filter(Boolean),
}))"""


def chart_problems(page) -> list[str]:
    """Each ``svg.chart`` of the page open in ``page`` without an axis label (``text.axis-label``)."""
    return [f"chart {c['label']!r} has no axis label" for c in page.evaluate(_CHARTS) if not c["axis_labels"]]


def page_problems(page) -> list[str]:
    """Every problem of the page open in ``page`` (watched with :func:`watch` before it loaded),
    each line prefixed with the page's URL."""
    return [f"{page.url}: {p}" for p in [*check_page(page), *chart_problems(page)]]


def check_urls(urls: list[str], chromium: str = CHROMIUM) -> list[str]:
    """Open each URL in headless Chromium and return every problem of every page."""
    from playwright.sync_api import sync_playwright

    out: list[str] = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            for url in urls:
                pg = b.new_page()
                pg.set_default_timeout(300_000)
                watch(pg)
                pg.goto(url, wait_until="load")
                out += page_problems(pg)
                pg.close()
        finally:
            b.close()
    return out


def serve_pages(audit):
    """``limelight serve``'s app over ``audit`` on a free loopback port (uvicorn in a thread);
    returns ``(base URL, service, stop)``."""
    import uvicorn

    from limelight.service.app import create_app
    from limelight.service.core import AuditService

    svc = AuditService(audit)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(svc), host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and t.is_alive(), "uvicorn did not start"
        time.sleep(0.05)

    def stop():
        server.should_exit = True
        t.join(10)

    return f"http://127.0.0.1:{port}", svc, stop


def audit_pages(svc) -> list[str]:
    """Every page of an audit: search (empty and with results), the most and a least
    retrievable document of each system, its queries, a query, retrievability at each cutoff,
    the groups page (each target the audit allows), the topics page with the most retrievable
    document's standing, the glossary, the EQI form."""
    urls = ["/", "/?q=state+of+the+union", "/queries", "/queries?search=state", "/glossary", "/eqi"]
    for name in svc.systems:
        top = svc.ranked_documents(name, 100, "most", 1, 0)["documents"][0]["docid"]
        low = svc.ranked_documents(name, 10, "least", 1, 0)["documents"][0]["docid"]
        qid = svc.document(top, name, limit=1)["queries"][0]["qid"]
        urls += [f"/documents/{quote(top)}?system={quote(name)}", f"/documents/{quote(low)}?system={quote(name)}",
                 f"/documents/{quote(top)}?system={quote(name)}&browsing=dcg",
                 f"/queries/{quote(qid)}?system={quote(name)}", f"/retrievability?system={quote(name)}&c=10",
                 f"/retrievability?system={quote(name)}", f"/topics?system={quote(name)}&doc={quote(top)}"]
    if svc.group_field:
        urls += ["/groups", "/groups?target=uniform"]
        if len(svc.systems) > 1:
            a, b = list(svc.systems)[:2]
            urls.append(f"/groups?system={quote(a)}&target=merit&merit={quote(b)}")
    return urls



def check_audit(audit: str) -> list[str]:
    """Every page of ``limelight serve`` over ``audit`` (:func:`audit_pages`) and its report
    (re-rendered; its first screen saved to a temporary file, not into the audit, which holds
    only what limelight wrote there): every problem found."""
    import tempfile
    from pathlib import Path

    from limelight.report.browser import screenshot_report

    base, svc, stop = serve_pages(audit)
    try:
        found = check_urls([base + u for u in audit_pages(svc)])
    finally:
        stop()
    with tempfile.TemporaryDirectory() as tmp:
        found += [f"report.html: {p}" for p in screenshot_report(audit, str(Path(tmp) / "report.png"))]
    return found


if __name__ == "__main__":
    found = (check_audit(sys.argv[2]) if sys.argv[1:2] == ["--audit"] and len(sys.argv) == 3
             else check_urls(sys.argv[1:]))
    print("\n".join(found) or "no problems")
    sys.exit(1 if found else 0)
