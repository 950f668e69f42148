"""Why a query retrieves a document: BM25 term contributions, dense closest sentences.

Every function returns plain JSON-able values (dicts, lists, str, int, float) so that the web
app and the report can show them as they are.

- :func:`explain_bm25`: the query's terms that the document contains, each with its BM25
  weight and its contribution to the score. The contributions are the increments each term adds
  to the retriever's float32 accumulator, replayed in the order the search kernel adds them
  (query tokens in order, a repeated token once per occurrence), so they sum to the score that
  ``BM25.search_batch`` returns (exactly, up to float64 arithmetic on float32 values); each
  differs from ``qtf · w(t, d)`` by float32 rounding only. Character spans of the matched terms
  in the document and in the query (the analyzer's tokens mapped back to the original text,
  stemming and case included) come with it; :func:`highlight_html` wraps them in ``<mark>``.
- :func:`explain_dense`: the document's sentences (:func:`split_sentences`: simple and
  deterministic) ranked by their cosine with the query, both encoded by the system's encoder.
- :func:`explain`: one entry point for an opened system: it asks the kind whether the system
  has an index of its own (``SystemKind.needs_index``) and its capabilities, never its name;
  a system answered from elsewhere gets the sentence of :func:`no_explanation`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from limelight.analysis import Analyzer
from limelight.errors import LimelightError
from limelight.retrieval.bm25 import BM25
from limelight.retrieval.dense import DenseRetriever, Encoder
from limelight.retrieval.fusion import Hybrid
from limelight.retrieval.systems import DETERMINISTIC, NEW_QUERIES, SystemKind

Span = tuple[int, int, str]

# ---- spans of analyzed terms in the original text ---------------------------------------------


def term_spans(analyzer: Analyzer, text: str, terms: Sequence[str] | set[str] | None = None
               ) -> list[list[Any]]:
    """Character spans ``[start, end, term]`` of the tokens of ``text`` whose analyzed form
    (lowercased, not a stopword, stemmed) is in ``terms`` (all kept tokens when ``None``), in
    text order; ``text[start:end]`` is the token as written (original case, unstemmed).

    The analyzer lowercases the whole text before its regular expression runs; when lowercasing
    keeps every character's length (all but a few scripts), the tokens are found in the
    lowercased text and their offsets hold in the original; otherwise they are found in the
    original text and lowercased one by one."""
    text = "" if text is None else str(text)
    low = text.lower() if analyzer.lowercase else text
    source = low if len(low) == len(text) else text
    matches = [(m.start(), m.end(), m.group()) for m in analyzer._re.finditer(source)]
    words = [w.lower() if analyzer.lowercase else w for _, _, w in matches]
    stop = analyzer._stop
    distinct = sorted({w for w in words if w not in stop})
    stems = analyzer._stem.stemWords(distinct) if analyzer._stem is not None else distinct
    stem_of = dict(zip(distinct, stems, strict=True))
    want = None if terms is None else set(terms)
    out: list[list[Any]] = []
    for (s, e, _), w in zip(matches, words, strict=True):
        t = stem_of.get(w)
        if t is not None and (want is None or t in want):
            out.append([s, e, t])
    return out


def highlight_html(text: str, spans: Sequence[Sequence[Any]], tag: str = "mark") -> str:
    """``text`` as HTML with each span (``[start, end, term, ...]``) wrapped in ``<tag>``
    (``data-term`` holds the analyzed term); everything is escaped (``&``, ``<``, ``>``,
    quotes). Overlapping or out-of-range spans are dropped."""
    if not re.fullmatch(r"[a-z][a-z0-9]*", tag):
        raise LimelightError(f"not an HTML tag name: {tag!r}")
    text = "" if text is None else str(text)
    parts: list[str] = []
    pos = 0
    for span in sorted(spans, key=lambda x: (int(x[0]), int(x[1]))):
        s, e = int(span[0]), int(span[1])
        if s < pos or e <= s or e > len(text):
            continue
        term = html.escape(str(span[2]) if len(span) > 2 else text[s:e], quote=True)
        parts.append(html.escape(text[pos:s]))
        parts.append(f'<{tag} data-term="{term}">{html.escape(text[s:e])}</{tag}>')
        pos = e
    parts.append(html.escape(text[pos:]))
    return "".join(parts)


# ---- BM25 ---------------------------------------------------------------------------------------


def _doc_code(doc_ids, doc: int | str) -> int:
    if isinstance(doc, str):
        return int(doc_ids.lookup(doc))
    d = int(doc)
    if not 0 <= d < len(doc_ids):
        raise LimelightError(f"document code {d} out of range (N={len(doc_ids)})")
    return d


def bm25_contributions(retriever: BM25, query: str, doc: int | str) -> dict[str, Any]:
    """The BM25 score of ``(query, doc)`` broken into its terms (no text spans): ``score``
    (float32, as ``BM25.search_batch``/``score`` give it) and ``terms``: one dict per matched
    term, in query order: ``term`` (analyzed), ``idf``, ``tf`` (in the document), ``qtf`` (in the
    query), ``weight`` (w(t, d)), ``contribution`` (its increments of the float32 accumulator;
    Σ = ``score``) and ``share`` (contribution / score). ``doc`` is a document id or code."""
    ix = retriever.index
    d = _doc_code(ix.doc_ids, doc)
    _, qterms, qw = retriever._encode_reference([query])
    indptr, pdocs, w = ix.indptr, ix.docs, retriever.weights
    acc = np.float32(0.0)
    info: dict[int, dict[str, Any]] = {}
    for t, q in zip(qterms.tolist(), qw.tolist(), strict=True):
        lo, hi = int(indptr[t]), int(indptr[t + 1])
        p = lo + int(np.searchsorted(pdocs[lo:hi], d))
        if p >= hi or int(pdocs[p]) != d:
            continue
        new = np.float32(acc + np.float32(np.float32(q) * w[p]))  # the kernel's float32 steps
        entry = info.get(t)
        if entry is None:
            entry = info[t] = {"term": str(ix.vocabulary.strings[t]), "idf": float(ix.idf[t]),
                               "tf": int(ix.tf[p]), "qtf": 0, "weight": float(w[p]),
                               "contribution": 0.0}
        entry["qtf"] += 1
        entry["contribution"] += float(new) - float(acc)
        acc = new
    score = float(acc)
    terms = list(info.values())
    for e in terms:
        e["share"] = e["contribution"] / score if score > 0 else 0.0
    return {"doc": str(ix.doc_ids.strings[d]), "score": score, "terms": terms}


def explain_bm25(retriever: BM25, query: str, doc: int | str, text: str | None = None
                 ) -> dict[str, Any]:
    """:func:`bm25_contributions` plus the matched terms' character spans: ``query_spans`` in
    ``query`` and, when the document's ``text`` is given, ``doc_spans`` in it (each
    ``[start, end, term]``); ``query_html``/``doc_html`` are the texts with ``<mark>`` around
    them, escaped (:func:`highlight_html`). ``kind`` is ``"bm25"``."""
    out = {"kind": "bm25", **bm25_contributions(retriever, query, doc)}
    matched = {e["term"] for e in out["terms"]}
    analyzer = retriever.index.analyzer
    out["query_spans"] = term_spans(analyzer, query, matched)
    out["query_html"] = highlight_html(query, out["query_spans"])
    if text is not None:
        out["doc_spans"] = term_spans(analyzer, text, matched)
        out["doc_html"] = highlight_html(text, out["doc_spans"])
    return out


# ---- dense --------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n\s*")


def split_sentences(text: str) -> list[list[Any]]:
    """The sentences of ``text`` as ``[start, end, sentence]``: split after ``.``, ``!``,
    ``?`` or ``;`` followed by white space, and at line breaks; leading and trailing white space
    trimmed, empty pieces dropped. Deterministic and language-agnostic (no model)."""
    text = "" if text is None else str(text)
    out: list[list[Any]] = []
    pos = 0
    for m in [*_SENTENCE_END.finditer(text), None]:
        end = len(text) if m is None else m.start()
        piece = text[pos:end]
        lead = len(piece) - len(piece.lstrip())
        s, e = pos + lead, pos + len(piece.rstrip())
        if e > s:
            out.append([s, e, text[s:e]])
        if m is not None:
            pos = m.end()
    return out


def explain_dense(encoder: Encoder | DenseRetriever, query: str, text: str, top: int = 3
                  ) -> dict[str, Any]:
    """The ``top`` sentences of ``text`` closest to ``query``: ``sentences``, best first (ties by
    position), each ``{"start", "end", "sentence", "score"}`` with ``score`` the cosine of the
    sentence's and the query's embeddings (the system's encoder; a ``DenseRetriever`` gives its
    own), computed in float64; ``n_sentences`` counts them all. ``kind`` is ``"dense"``."""
    enc = encoder.encoder if isinstance(encoder, DenseRetriever) else encoder
    sents = split_sentences(text)
    if not sents or not str(query or "").strip():
        return {"kind": "dense", "n_sentences": len(sents), "sentences": []}
    emb = enc.encode([query, *[s[2] for s in sents]], show_progress=False).astype(np.float64)
    norms = np.linalg.norm(emb, axis=1)
    norms[norms == 0] = 1.0
    cos = (emb[1:] @ emb[0]) / (norms[1:] * norms[0])
    order = np.lexsort((np.arange(len(cos)), -cos))[:max(0, int(top))]
    best = [{"start": sents[i][0], "end": sents[i][1], "sentence": sents[i][2],
             "score": float(cos[i])} for i in order.tolist()]
    return {"kind": "dense", "n_sentences": len(sents), "sentences": best}


# ---- one entry point ----------------------------------------------------------------------------


def result_source(kind: SystemKind) -> str:
    """Where a system without an index of its own gets its results, from its capabilities: it
    answers only the queries it was given (no ``new_queries``): a run file; it answers new
    queries but not always the same way (no ``deterministic``): a live service; otherwise an
    external engine."""
    if not kind.has(NEW_QUERIES):
        return "a run file"
    if not kind.has(DETERMINISTIC):
        return "a live service"
    return "an external engine"


def no_explanation(kind: SystemKind) -> str | None:
    """The sentence shown instead of an explanation for a system of ``kind``, or ``None`` when
    the kind ranks over limelight's own index (its results can be explained)."""
    if kind.needs_index:
        return None
    return f"no explanation: results came from {result_source(kind)}"


def explain(kind: SystemKind, retriever: Any, query: str, doc: int | str, text: str,
            top_sentences: int = 3) -> dict[str, Any]:
    """Why ``retriever`` (an opened system of ``kind``) retrieves ``doc`` (id or code, with its
    ``text``) for ``query``: ``{"explained": True, "parts": [...]}`` with a BM25 part
    (:func:`explain_bm25`) and/or a dense part (:func:`explain_dense`; a hybrid gets both), or
    ``{"explained": False, "reason": sentence}`` for a system answered from elsewhere
    (:func:`no_explanation`) or one whose scores do not break down (a neural re-ranker)."""
    reason = no_explanation(kind)
    if reason is not None:
        return {"explained": False, "reason": reason}
    parts: list[dict[str, Any]] = []
    for r in (retriever.lexical, retriever.dense) if isinstance(retriever, Hybrid) else (retriever,):
        if isinstance(r, BM25):
            parts.append(explain_bm25(r, query, doc, text))
        elif isinstance(r, DenseRetriever):
            parts.append(explain_dense(r, query, text, top_sentences))
    if not parts:
        return {"explained": False,
                "reason": "no explanation: this system's scores do not break down into "
                          "matched words or sentences"}
    return {"explained": True, "parts": parts}
