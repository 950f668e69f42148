"""Result snippets: the passage of a document with the most query terms, and where they are.

Terms are matched with the project's one :class:`~limelight.analysis.Analyzer` (the index's, so a
stemmed index highlights ``running`` for the query ``run``). A snippet is plain text plus
``[start, end)`` character offsets of the matches; pages escape the text and wrap the offsets in
``<mark>`` (``segments``), so nothing in a document is ever rendered as markup.
"""

from __future__ import annotations

import numpy as np

from limelight.analysis import Analyzer

WINDOW = 32  # tokens shown
MAX_CHARS = 20_000  # only the head of very long documents is scanned

_default = Analyzer()


def make_snippet(text: str, query: str, analyzer: Analyzer | None = None, window: int = WINDOW) -> dict:
    """``{"snippet": str, "highlights": [[start, end], ...]}`` for ``text`` and ``query``."""
    an = analyzer or _default
    text = "" if text is None else str(text)
    head = text[:MAX_CHARS]
    spans = [(m.start(), m.end()) for m in an._re.finditer(head)]
    if not spans:
        return {"snippet": _clip(head, 0, min(len(head), 240), len(text)), "highlights": []}
    words = [head[s:e] for s, e in spans]
    norm = an.tokenize_many(words)  # [] for a stopword, else [term]
    qterms = set(an.tokenize(query))
    term_of = np.array([(t[0] if t else "") for t in norm], dtype=object)
    hit = np.fromiter((t in qterms for t in term_of.tolist()), dtype=bool, count=len(spans))
    n = len(spans)
    w = min(window, n)
    if hit.any() and n > w:
        c = np.concatenate([[0], np.cumsum(hit)])
        counts = c[w:] - c[:-w]  # hits in the window starting at each token
        start = int(np.argmax(counts))
        start = max(0, min(start - 2, n - w))  # a little context before the first hit
    else:
        start = 0
    end = start + w
    cs, ce = spans[start][0], spans[end - 1][1]
    if start == 0:
        cs = 0
    snippet = _clip(head, cs, ce, len(text))
    shift = (1 if cs > 0 else 0) - cs  # the leading ellipsis is one character
    marks = [[spans[i][0] + shift, spans[i][1] + shift] for i in np.flatnonzero(hit[start:end]) + start]
    return {"snippet": snippet, "highlights": marks}


def _clip(text: str, s: int, e: int, full_len: int) -> str:
    return ("…" if s > 0 else "") + text[s:e] + ("…" if e < full_len else "")


def segments(snippet: str, highlights: list[list[int]]) -> list[tuple[str, bool]]:
    """``(text, is_match)`` pieces of a snippet, for templates (which escape each piece)."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for s, e in sorted(highlights):
        if s < pos:
            continue
        if s > pos:
            out.append((snippet[pos:s], False))
        out.append((snippet[s:e], True))
        pos = e
    if pos < len(snippet):
        out.append((snippet[pos:], False))
    return out
