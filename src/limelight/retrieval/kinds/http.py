"""Kind ``http``: a live search service, asked every query of the log over HTTP.

A request template says how to ask (``method``, ``url``, query ``params``, a JSON ``body``,
``headers``) with the placeholders ``{query}``, ``{k}``, ``{qid}`` and ``{offset}``; paths say
where the answer is: ``hits`` (the list of hits in a response), ``id`` and ``score`` (within one
hit), each a JSON Pointer (RFC 6901: ``/hits/hits``) or a dotted path (``hits.hits``; a number
indexes a list). A string that is exactly ``"{k}"`` or ``"{offset}"`` in the body becomes a
number. A ``preset`` fills all of that from the engines' documented search APIs (``url`` is then
the service's base: the preset adds its path; what the configuration sets wins)::

    elasticsearch, opensearch   POST URL/_search   {"query": {"multi_match": {"query": "{query}"}},
                                "size": "{k}", "_source": false, "track_total_hits": false};
                                hits /hits/hits, id /_id, score /_score; with batch_size > 1,
                                _msearch (NDJSON: a {} header line and that body per query;
                                answers /responses, each with its own /status)
                                (URL: http://HOST:9200/INDEX)
    solr                        GET URL/select?q={query}&defType=dismax&rows={k}&fl=id,score&wt=json;
                                hits /response/docs, id /id, score /score
                                (URL: http://HOST:8983/solr/CORE; set params.qf for the fields)
    limelight                   GET URL/api/search?q={query}&limit={k}&offset={offset}&model=bm25
                                &snippets=false (``limelight serve``; no snippets, which a replay
                                does not read), 100 hits per request, deeper top-n page by page;
                                hits /results, id /docid, score /score

Credentials come from environment variables only: a header or query parameter value
``"env:NAME"`` (or ``"Bearer env:NAME"``, any word then a space) is read from ``NAME`` when the
system opens. A literal value under a name that looks like a credential (``Authorization``,
``Cookie``, anything with key, token, secret, password, auth or session), and a URL with a user
or password, are refused; settings, the store's manifest, the report and the replay's log hold
the ``env:`` reference, never the value, and every message that quotes a response has the
values removed.

The store ranks each query's hits by score (ties: document id descending, as trec_eval); with
``score = ""`` the service's own order is kept (the store's score is then 1 / rank). A document
id the service returns that the audited collection lacks is refused, with the first ones named
(``unknown_docs = "drop"`` leaves them out). Another 4xx than the ones no retry changes (401,
403, 404, ...) fails the query (``client_errors = "empty"``: the query gets no results).

The client (:mod:`limelight.retrieval.replay`): ``concurrency`` requests in flight, ``rate``
queries/s, ``timeout``, ``retries`` with ``backoff`` (exponential, jittered, Retry-After
honoured), a ``failure_budget``; answers land in a journal under the system's folder
(``work_dir/replay/<request hash>/``), so a rerun asks only the queries without an answer, and
the journal's log keeps each query's status, attempts and latency for the report. The kind is
not deterministic (a live service changes) unless ``deterministic = true`` says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import re
from array import array
from collections.abc import Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.data.run import Run
from limelight.errors import LimelightError, with_article
from limelight.retrieval.base import Stage
from limelight.retrieval.systems import NEW_QUERIES, REMOTE, Param, SystemKind, register_kind

NUMBER = (int, float)
SCALAR = (str, int, float, bool)

_ES_BODY = {"query": {"multi_match": {"query": "{query}"}}, "size": "{k}", "_source": False,
            "track_total_hits": False}
_ES = {"method": "POST", "path": "/_search", "body": _ES_BODY, "hits": "/hits/hits", "id": "/_id",
       "score": "/_score",
       "batch": {"path": "/_msearch", "header": {}, "responses": "/responses", "status": "/status"}}

#: the request templates of the presets, from each engine's documented search API
PRESETS: dict[str, dict[str, Any]] = {
    "elasticsearch": _ES,
    "opensearch": _ES,
    "solr": {"method": "GET", "path": "/select",
             "params": {"q": "{query}", "defType": "dismax", "rows": "{k}", "fl": "id,score", "wt": "json"},
             "hits": "/response/docs", "id": "/id", "score": "/score"},
    "limelight": {"method": "GET", "path": "/api/search",
                  "params": {"q": "{query}", "limit": "{k}", "offset": "{offset}", "model": "bm25",
                             "snippets": "false"},
                  "hits": "/results", "id": "/docid", "score": "/score", "max_page": 100},
}

_PLACEHOLDER = re.compile(r"\{(query|qid|k|offset)\}")
_EXACT = frozenset({"{query}", "{qid}", "{k}", "{offset}"})
_JSON_PLACEHOLDER = re.compile(r'"\{(k|offset)\}"|\{(query|qid|k|offset)\}')
_ENV = re.compile(r"^(?P<prefix>(?:[A-Za-z][\w-]*\s+)?)env:(?P<name>[A-Za-z_]\w*)$")
_SECRET_WORDS = ("auth", "authorization", "authentication", "cookie", "key", "apikey", "token",
                 "secret", "password", "passwd", "pass", "session", "sessionid", "signature", "sig",
                 "credential", "credentials", "jwt", "bearer")
#: the parameters that say what is asked and how answers are read (the journal's identity);
#: the others (client settings, what happens to answers) can change without asking again
_REQUEST_PARAMS = ("url", "preset", "method", "params", "body", "headers", "hits", "id", "score",
                   "batch", "max_page", "client_errors")


def _secret_name(name: str) -> bool:
    """Whether a header or parameter name looks like a credential's (Authorization, X-Api-Key,
    access_token, sessionid, ...): one of its words (split at non-letters and camelCase) is a
    credential word or ends like one."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())
    return any(w in _SECRET_WORDS or w.endswith(("token", "secret", "apikey", "password"))
               for w in words if w)


# ---- JSON paths -----------------------------------------------------------------------------------
def compile_path(path: str, what: str) -> tuple[str | int, ...]:
    """The steps of a JSON Pointer (``/a/0/b``, RFC 6901: ``~1`` is ``/``, ``~0`` is ``~``) or a
    dotted path (``a.0.b``); ``""`` is the whole value. A step that is a number may index a list."""
    if not isinstance(path, str):
        raise LimelightError(f"http system: {what} must be a path such as /hits/hits, not {path!r}")
    if path in ("", "/"):
        return ()
    if path.startswith("/"):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    else:
        parts = path.split(".")
    return tuple(int(p) if p.isdigit() else p for p in parts)


_MISSING = object()


def resolve(value: Any, steps: tuple[str | int, ...]) -> Any:
    """The value at ``steps`` (:func:`compile_path`) in ``value``; ``_MISSING`` when nothing is."""
    for s in steps:
        if isinstance(value, dict):
            value = value.get(s if isinstance(s, str) else str(s), _MISSING)
        elif isinstance(value, list) and isinstance(s, int) and s < len(value):
            value = value[s]
        else:
            return _MISSING
        if value is _MISSING:
            return value
    return value


def _show_path(steps: tuple[str | int, ...]) -> str:
    return "/" + "/".join(str(s) for s in steps)


# ---- the request template -------------------------------------------------------------------------
class Template:
    """The requests of one ``http`` system and how its responses are read (the ``Endpoint`` of
    :class:`~limelight.retrieval.replay.Replayer`), built from the kind's parameters with the
    preset's filled in; credentials read from the environment (``secrets`` holds their values,
    to be removed from any text that leaves)."""

    def __init__(self, params: Mapping[str, Any], read_env: bool = True):
        p = {k: v for k, v in params.items() if v is not None}
        self.read_env = read_env
        preset = p.get("preset")
        if preset is not None and preset not in PRESETS:
            raise LimelightError(f"http system: unknown preset {preset!r} ({', '.join(PRESETS)})")
        pre = PRESETS.get(preset, {})
        self.secrets: list[str] = []
        base = p.get("url")
        if not base:
            raise LimelightError("http system: url is required (the service's search URL, or its "
                                 "base URL with a preset)")
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LimelightError(f"http system: url must be an http:// or https:// URL, not {base!r}")
        if parts.username or parts.password:
            raise LimelightError("http system: the url holds a user or password; credentials come "
                                 "from the environment only: headers.Authorization = \"Basic env:NAME\"")
        path = parts.path.rstrip("/")

        def at(suffix: str) -> str:  # the preset's path under the base URL (unless already there)
            full = path if not suffix or path.endswith(suffix) else path + suffix
            return urlunsplit((parts.scheme, parts.netloc, full or "/", parts.query, ""))

        self.url_template = at(pre.get("path", ""))
        self.url = urlunsplit((parts.scheme, parts.netloc, urlsplit(self.url_template).path, "", ""))
        self.method = str(p.get("method", pre.get("method", "GET"))).upper()
        if self.method not in ("GET", "POST"):
            raise LimelightError(f"http system: method must be GET or POST, not {self.method!r}")
        self.params = {k: self._value(f"params.{k}", v)
                       for k, v in {**pre.get("params", {}), **p.get("params", {})}.items()}
        self._exact_params = (None if any("{" in v and v not in _EXACT for v in self.params.values())
                              else [(n, v, v[1:-1] if v in _EXACT else None) for n, v in self.params.items()])
        self.headers = {k: self._value(f"headers.{k}", v) for k, v in p.get("headers", {}).items()}
        self._check_query_string(parts.query)
        body = p.get("body", pre.get("body"))
        _check_body(body, "body")
        self.body = None if body is None else json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        if self.body is not None and self.method == "GET":
            raise LimelightError("http system: a body goes with method = \"POST\"")
        self.hits = compile_path(p.get("hits", pre.get("hits", "")), "hits")
        self.id = compile_path(p.get("id", pre.get("id", "/id")), "id")
        score = p.get("score", pre.get("score", ""))
        self.score = None if score in ("", None) else compile_path(score, "score")
        self.refused_as_empty = p.get("client_errors", "fail") == "empty"
        self.strings: list[str] = []  # the collection's ids (set_collection)
        self.set_collection([])
        if p.get("client_errors", "fail") not in ("fail", "empty"):
            raise LimelightError(f"http system: client_errors is \"fail\" or \"empty\", not {p['client_errors']!r}")
        self._batch(p, pre, at)
        page = p.get("max_page", pre.get("max_page", 0))
        self.page = page if page and page > 0 else None
        if self.page and self.batch_size > 1:
            raise LimelightError("http system: max_page (paging) and batch_size > 1 do not combine")
        if self.page and not self._uses("offset"):
            raise LimelightError("http system: max_page pages with {offset}: put it in params or body")
        if not self._uses("query"):
            raise LimelightError("http system: the request template has no {query} placeholder: put it "
                                 "in params (e.g. params = {q = \"{query}\"}), the body or the url")

    def _batch(self, p: Mapping[str, Any], pre: Mapping[str, Any], at) -> None:
        self.batch_size = int(p.get("batch_size", 1) or 1)
        batch = {**pre.get("batch", {}), **p.get("batch", {})} if self.batch_size > 1 else {}
        if self.batch_size > 1 and not batch:
            raise LimelightError("http system: batch_size > 1 needs a batch template (batch = {path, "
                                 "header, body, responses, status}; presets elasticsearch and "
                                 "opensearch have _msearch)")
        unknown = sorted(set(batch) - {"path", "url", "header", "body", "responses", "status"})
        if unknown:
            raise LimelightError(f"http system: batch has no key {unknown[0]!r} (path or url, header, "
                                 "body, responses, status)")
        if not batch:
            return
        self.batch_url = batch["url"] if "url" in batch else at(batch.get("path", ""))
        self._check_query_string(urlsplit(self.batch_url).query)
        _check_body(batch.get("header"), "batch.header")
        _check_body(batch.get("body"), "batch.body")
        self.batch_header = json.dumps(batch.get("header", {}), ensure_ascii=False, separators=(",", ":"))
        line = batch.get("body")
        self.batch_body = self.body if line is None else json.dumps(line, ensure_ascii=False,
                                                                    separators=(",", ":"))
        if self.batch_body is None:
            raise LimelightError("http system: the batch template has no body (batch.body or body)")
        self.batch_responses = compile_path(batch.get("responses", "/responses"), "batch.responses")
        self.batch_status = compile_path(batch.get("status", ""), "batch.status") if batch.get("status") else None

    def _value(self, where: str, v: Any) -> str:
        """A header or query parameter value: ``env:NAME`` read from the environment; a literal
        credential refused."""
        if not isinstance(v, SCALAR):
            raise LimelightError(f"http system: {where} must be a string or number, not {v!r}")
        v = ("true" if v else "false") if isinstance(v, bool) else str(v)
        m = _ENV.match(v)
        if m and not self.read_env:
            return v
        if m:
            val = os.environ.get(m["name"])
            if not val:
                raise LimelightError(f"http system: environment variable {m['name']} ({where}) is not set")
            self.secrets.append(val)
            return m["prefix"] + val
        if _secret_name(where.split(".", 1)[1]) and not _PLACEHOLDER.fullmatch(v):
            raise LimelightError(f"http system: {where} is written out; credentials come from the "
                                 f"environment only: {where} = \"env:NAME\" (or \"Bearer env:NAME\")")
        return v

    def _check_query_string(self, query: str) -> None:
        from urllib.parse import parse_qsl

        for name, _ in parse_qsl(query, keep_blank_values=True):
            if _secret_name(name):
                raise LimelightError(f"http system: the url's query string holds {name}; credentials "
                                     f"come from the environment only: params.{name} = \"env:NAME\"")

    def _uses(self, name: str) -> bool:
        texts = [self.url_template, *self.params.values(), self.body or "",
                 getattr(self, "batch_body", "") or ""]
        return any(f"{{{name}}}" in t for t in texts)

    # ---- the Endpoint protocol ---------------------------------------------------------------
    def page_size(self, k: int) -> int | None:
        return self.page if self.page and k > self.page else None

    def request(self, items: Sequence[tuple[str, str]], k: int, offset: int) -> tuple:
        """``(method, url, params, headers, content)`` asking ``items`` (``(qid, text)``)."""
        if self.batch_size > 1:
            lines = []
            for qid, text in items:
                vals = {"query": text, "qid": qid, "k": k, "offset": offset}
                lines += [_render_json(self.batch_header, vals), _render_json(self.batch_body, vals)]
            content = ("\n".join(lines) + "\n").encode()
            return ("POST", self.batch_url, None, {"content-type": "application/x-ndjson"}, content)
        qid, text = items[0]
        vals = {"query": text, "qid": qid, "k": k, "offset": offset}
        url = (self.url_template if "{" not in self.url_template else
               _PLACEHOLDER.sub(lambda m: quote(str(vals[m[1]]), safe=""), self.url_template))
        if self._exact_params is not None:  # every value a literal or exactly one placeholder
            params = {n: v if p is None else str(vals[p]) for n, v, p in self._exact_params}
        else:
            params = {n: (str(vals[v[1:-1]]) if v in _EXACT else
                          _PLACEHOLDER.sub(lambda m: str(vals[m[1]]), v) if "{" in v else v)
                      for n, v in self.params.items()}
        if self.body is None:
            return (self.method, url, params, None, None)
        return (self.method, url, params, {"content-type": "application/json"},
                _render_json(self.body, vals).encode())

    def read(self, status: int, ctype: str | Mapping[str, str], content: bytes, n: int) -> list:
        """Per item asked: its hits (``Hits``, or a ``_Pending`` that :meth:`settle` turns into
        them) or the int status of its failure (a batch item's); a one-line ``LimelightError``
        for a response that is no answer. ``ctype``: the content type, or the response's
        headers (read only for that message)."""
        from limelight.retrieval.replay import quote_body

        try:
            doc = _loads(content)
        except ValueError:
            if not isinstance(ctype, str):
                ctype = ctype.get("content-type", "")
            raise LimelightError(f"{self.url}: the response (HTTP {status}, {ctype or 'no content type'}) "
                                 f"is not JSON: {quote_body(content)}") from None
        if n == 1 and self.batch_size <= 1:
            return [self._hits(doc, content)]
        items = resolve(doc, self.batch_responses)
        if not isinstance(items, list) or len(items) != n:
            raise LimelightError(f"{self.url}: expected a list of {n} answers at batch.responses "
                                 f"{_show_path(self.batch_responses)}, found "
                                 f"{'nothing' if items is _MISSING else type(items).__name__}: {quote_body(content)}")
        out: list = []
        for j, item in enumerate(items):
            st = resolve(item, self.batch_status) if self.batch_status is not None else _MISSING
            if isinstance(st, int) and not 200 <= st < 300:
                out.append(st)
            elif isinstance(item, dict) and "error" in item and resolve(item, self.hits) is _MISSING:
                out.append(st if isinstance(st, int) else 500)
            else:
                out.append(self._hits(item, content, j))
        return out

    def _hits(self, doc: Any, content: bytes, item: int | None = None, fast: bool = True) -> Any:
        """The hits of one answer: a ``_Pending`` (the common case, see :meth:`_fast_hits`), or
        ``Hits`` read in full (``fast = False``: always)."""
        from limelight.retrieval.replay import quote_body

        hits = resolve(doc, self.hits)
        if hits is None:
            hits = []
        if not isinstance(hits, list):
            found = "nothing" if hits is _MISSING else f"{with_article(type(hits).__name__)}, not a list"
            raise LimelightError(f"{self.url}: hits path {_show_path(self.hits)} matches {found} in the "
                                 f"response: {quote_body(content)}")
        if fast:
            token = self._fast_hits(hits, content, item)
            if token is not None:
                return token
        raw: list[str] = []
        scores = array("d")
        for h in hits:
            d = resolve(h, self.id)
            if d is _MISSING or isinstance(d, dict | list) or d is None:
                raise LimelightError(f"{self.url}: id path {_show_path(self.id)} matches "
                                     f"{'nothing' if d is _MISSING else repr(d)[:40]} in a hit: "
                                     f"{quote_body(json.dumps(h, ensure_ascii=False))}; response: "
                                     f"{quote_body(content)}")
            raw.append(d if isinstance(d, str) else str(d))
            if self.score is not None:
                s = resolve(h, self.score)
                if not isinstance(s, int | float) or isinstance(s, bool):
                    raise LimelightError(f"{self.url}: score path {_show_path(self.score)} matches "
                                         f"{'nothing' if s is _MISSING else repr(s)[:40]} in a hit: "
                                         f"{quote_body(json.dumps(h, ensure_ascii=False))}")
                if not math.isfinite(s):  # as a run file's: a score must be a finite number
                    raise LimelightError(f"{self.url}: score {s} of document {raw[-1]!r} is not a finite "
                                         f"number (score path {_show_path(self.score)}); a hit: "
                                         f"{quote_body(json.dumps(h, ensure_ascii=False))}")
                scores.append(float(s))
            else:
                scores.append(math.nan)
        return raw, scores, self.lookup(raw)

    def _fast_hits(self, hits: list, content: bytes, item: int | None) -> _Pending | None:
        """The common case (both paths one key, every hit a dict with them, the scores
        numbers): the hashes of the ids and the scores appended to the pending answers'
        arrays, a ``_Pending`` returned; ``None`` otherwise, for the general reading (and its
        messages). Nothing else is done per answer: :meth:`settle` codes the ids of many
        answers in one pass, and reads an answer with an id the collection lacks (or an id of
        another type) in full from its ``content``."""
        if self._getters is None:
            return None
        get_id, get_score = self._getters
        acc = self._acc
        start = len(acc.hashes)
        try:
            acc.hashes.extend(map(hash, map(get_id, hits)))
            if get_score is not None:
                got = list(map(get_score, hits))
                if bool in set(map(type, got)):  # true is no score (array("d") would take it as 1.0)
                    raise TypeError("a boolean score")
                acc.scores.extend(got)
            else:
                acc.scores.extend(array("d", [math.nan]) * len(hits))
        except (KeyError, TypeError, IndexError, OverflowError):  # a hit without them, or of another type
            del acc.hashes[start:], acc.scores[start:]
            return None
        if len(acc.scores) != len(acc.hashes):  # a score past the ids' end (cannot happen) in full
            del acc.hashes[start:], acc.scores[start:]
            return None
        acc.issued += 1
        return _Pending(acc, start, len(hits), content, item)

    def settle(self, answers: list) -> list:
        """``answers`` (what :meth:`read` gave: ``Hits``, ``_Pending`` or int statuses) with
        every ``_Pending`` turned into its ``Hits``: the ids of all of them coded in one numpy
        pass; an answer with an id the collection lacks, or of another type, read again in full
        (the general reading: its ids kept, or its one-line error raised, as a ``LimelightError``
        in the place of its ``Hits``)."""
        todo = [j for j, a in enumerate(answers) if type(a) is _Pending]
        if not todo:
            return list(answers)
        out = list(answers)
        by_acc: dict[int, list[int]] = {}
        for j in todo:
            by_acc.setdefault(id(answers[j].acc), []).append(j)
        for js in by_acc.values():
            acc = answers[js[0]].acc
            starts = np.fromiter((answers[j].start for j in js), dtype=np.int64, count=len(js))
            ns = np.fromiter((answers[j].n for j in js), dtype=np.int64, count=len(js))
            offs = np.cumsum(ns) - ns
            hashes = np.frombuffer(acc.hashes, dtype=np.int64)
            scores = np.frombuffer(acc.scores, dtype=np.float64)
            if len(js) == 1 or bool((starts[1:] == starts[:-1] + ns[:-1]).all()):  # in order: one slice
                lo = int(starts[0])
                sel_h, sel_s = hashes[lo:lo + int(ns.sum())], scores[lo:lo + int(ns.sum())].copy()
            else:
                at = np.repeat(starts - offs, ns) + np.arange(int(ns.sum()))
                sel_h, sel_s = hashes[at], scores[at]
            codes = self.lookup.of_hashes(sel_h)
            del hashes, scores, sel_h  # the arrays' buffers free again
            bad = set()
            missing = codes < 0
            if self.score is not None:  # a NaN or infinite score: read in full, for its one-line error
                missing |= ~np.isfinite(sel_s)
            if missing.any():
                has = np.flatnonzero(ns > 0)
                bad = set(has[np.add.reduceat(missing, offs[has]) > 0].tolist()) if len(has) else set()
            for t, j in enumerate(js):
                if t in bad:
                    out[j] = self._again(answers[j])
                    continue
                o, n = int(offs[t]), int(ns[t])
                out[j] = (None, sel_s[o:o + n], codes[o:o + n])
            acc.settled += len(js)
        if self._acc.settled == self._acc.issued:  # nothing pending: a fresh start
            self._acc = _Acc()
        return out

    def _again(self, p: _Pending) -> tuple | LimelightError:
        """A pending answer read in full (the general reading) from its response."""
        try:
            doc = _loads(p.content)
            if p.item is not None:
                doc = resolve(doc, self.batch_responses)[p.item]
            return self._hits(doc, p.content, fast=False)
        except LimelightError as e:
            return e

    def reset(self) -> None:
        """Forget the pending answers (a replay starts: none of them is still outstanding)."""
        self._acc = _Acc()

    def set_collection(self, strings: list[str]) -> None:
        """The collection whose codes answers carry (its ids, in code order)."""
        self.strings = strings
        self.lookup = _Codes(strings)
        one_key = len(self.id) == 1 and isinstance(self.id[0], str) and (
            self.score is None or (len(self.score) == 1 and isinstance(self.score[0], str)))
        self._getters = ((itemgetter(self.id[0]), None if self.score is None else itemgetter(self.score[0]))
                         if one_key and self.lookup.dict is None else None)
        self._acc = _Acc()

    def join(self, pages: list[tuple]) -> tuple:
        """One answer of several pages (``Hits`` each, in order)."""
        scores = np.concatenate([np.asarray(p[1], dtype=np.float64) for p in pages]) if pages else np.zeros(0)
        if all(p[0] is None for p in pages):
            return None, scores, np.concatenate([p[2] for p in pages])
        ids = [x for p in pages for x in (p[0] if p[0] is not None else [self.strings[c] for c in p[2]])]
        return ids, scores, self.lookup(ids)


class _Acc:
    """The pending answers' id hashes and scores (appended per answer, coded by ``settle``)."""

    __slots__ = ("hashes", "scores", "issued", "settled")

    def __init__(self) -> None:
        self.hashes, self.scores = array("q"), array("d")
        self.issued = self.settled = 0


class _Pending:
    """An answer read but not yet coded: its place in an ``_Acc`` and its response (read again
    in full when it needs to be)."""

    __slots__ = ("acc", "start", "n", "content", "item")

    def __init__(self, acc: _Acc, start: int, n: int, content: bytes, item: int | None):
        self.acc, self.start, self.n, self.content, self.item = acc, start, n, content, item


def _loads(content: bytes) -> Any:
    """A response's JSON: orjson when it is there (ranx brings it; several times the standard
    parser's speed, a third of the client's own work per answer), the standard parser for what
    orjson refuses and ``json`` accepts (NaN, integers past 64 bits)."""
    if _orjson_loads is not None:
        try:
            return _orjson_loads(content)
        except ValueError:
            pass
    try:
        return json.loads(content)
    except RecursionError:  # arrays in arrays past the parser's depth: no answer, told as not JSON
        raise ValueError("nested too deeply") from None


try:
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - orjson comes with ranx
    _orjson_loads = None


class _Codes:
    """The collection's codes of id strings (-1: not one of its ids), found by the strings'
    hashes in an open-addressing table of numpy arrays, many ids in one pass: every id of a
    response is a new string, and a dict lookup per id costs several times more (a large table,
    cold in the cache). Ids of the collection that share a hash (never seen) make it use a dict
    instead; an id outside the collection whose 64-bit hash equals one inside would be taken
    for it (odds about n / 2^64 per id)."""

    def __init__(self, strings: list[str]):
        self.strings = strings
        h = np.fromiter(map(hash, strings), dtype=np.int64, count=len(strings))
        srt = np.sort(h)
        unique = len(h) < 2 or bool((srt[1:] != srt[:-1]).all())
        self.dict = None if unique else {x: i for i, x in enumerate(strings)}
        # linear probing, at most two thirds full (code -1: a free slot); built in rounds (a
        # round places, per free slot, the first key that probes it), so that a key's probe
        # sequence never crosses a free slot
        size = 1 << max(4, int(1.5 * max(len(h), 1) - 1).bit_length())
        self.mask = np.uint64(size - 1)
        self.table = np.zeros(size, dtype=np.int64)
        self.code = np.full(size, -1, dtype=np.int32)
        hu = h.view(np.uint64)
        pending = np.arange(len(h)) if unique else np.zeros(0, dtype=np.int64)
        self.probes = 0
        while len(pending):
            slots = ((hu[pending] + np.uint64(self.probes)) & self.mask).astype(np.int64)
            free = self.code[slots] < 0
            won_slots, first = np.unique(slots[free], return_index=True)
            won = pending[free][first]
            self.table[won_slots], self.code[won_slots] = h[won], won.astype(np.int32)
            placed = np.zeros(len(h), dtype=bool)
            placed[won] = True
            pending = pending[~placed[pending]]
            if len(pending):
                self.probes += 1

    def __call__(self, ids: Sequence[str]) -> np.ndarray:
        """The codes of ``ids`` (strings; anything else is hashed as it is)."""
        if self.dict is not None:
            return np.fromiter((self.dict.get(x, -1) for x in ids), dtype=np.int32, count=len(ids))
        return self.of_hashes(np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids)))

    def of_hashes(self, h: np.ndarray) -> np.ndarray:
        """The codes of the ids whose hashes (int64) are ``h``; -1 where none matches."""
        out = np.full(len(h), -1, dtype=np.int32)
        if not len(h) or not len(self.strings):
            return out
        hu = h.view(np.uint64)
        active = None  # all of them
        for p in range(self.probes + 1):
            key = h if active is None else h[active]
            slots = (((hu if active is None else hu[active]) + np.uint64(p)) & self.mask).astype(np.int64)
            code = self.code[slots]
            hit = self.table[slots] == key
            hit &= code >= 0
            out[np.flatnonzero(hit) if active is None else active[hit]] = code[hit]
            go_on = (code >= 0) & ~hit  # a key that is not this one: probe on
            active = np.flatnonzero(go_on) if active is None else active[go_on]
            if not len(active):
                break
        return out


def _check_body(value: Any, where: str) -> None:
    """Refuse a credential written into a JSON template (a key that looks like one, with a
    literal value): credentials go in headers, from the environment."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str) and _secret_name(str(k)) and not _PLACEHOLDER.fullmatch(v):
                raise LimelightError(f"http system: {where}.{k} is written out; credentials come from "
                                     f"the environment only, in a header: headers.NAME = \"env:VAR\"")
            _check_body(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_body(v, f"{where}[{i}]")


def _render_json(template: str, vals: Mapping[str, Any]) -> str:
    """A JSON template with its placeholders filled in one pass: ``"{k}"``/``"{offset}"`` as
    numbers, placeholders inside strings as escaped text."""
    def sub(m: re.Match) -> str:
        if m[1]:
            return str(int(vals[m[1]]))
        return json.dumps(str(vals[m[2]]), ensure_ascii=False)[1:-1]

    return _JSON_PLACEHOLDER.sub(sub, template)


def request_identity(params: Mapping[str, Any], k: int) -> str:
    """The hash of what is asked and how answers are read (the journal's folder name): the
    request parameters as written (``env:`` references, never values) and ``k``."""
    ident = {n: params.get(n) for n in _REQUEST_PARAMS if params.get(n) is not None}
    blob = json.dumps([ident, int(k)], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---- the retriever --------------------------------------------------------------------------------
class HttpRetriever(Stage):
    """A live service as a pipeline stage and as the callable ``compute_exposure`` calls per
    batch of queries (``retriever(queries, k) -> Run``); ``doc_ids``: the audited collection's.
    ``replay_summary()``: the figures of its replay journals (for the report)."""

    default_k = 1000

    def __init__(self, params: Mapping[str, Any], doc_ids: IdMap, work_dir: str | Path | None = None,
                 name: str = "http", queries: Queries | None = None):
        from limelight.retrieval.replay import ClientOptions

        self.params = dict(params)
        self.template = Template(self.params)
        self.options = ClientOptions(**{n: self.params[n] for n in (
            "concurrency", "rate", "timeout", "retries", "backoff", "max_backoff", "failure_budget")
            if self.params.get(n) is not None})
        self.doc_ids = doc_ids
        self.name = name
        self.url = self.template.url
        self.deterministic = bool(self.params.get("deterministic", False))
        self.unknown_docs = self.params.get("unknown_docs", "fail")
        if self.unknown_docs not in ("fail", "drop"):
            raise LimelightError(f"http system: unknown_docs is \"fail\" or \"drop\", not {self.unknown_docs!r}")
        self.work_dir = None if work_dir is None else Path(work_dir)
        self.fingerprint = "http:" + request_identity(self.params, 0)
        self._replayers: dict[int, Any] = {}
        self._queries = queries
        self._last_k: int | None = None
        self.template.set_collection(doc_ids.strings.tolist())
        self.dropped = 0

    def redact(self, text: str) -> str:
        """``text`` with every credential value read from the environment replaced by ``***``."""
        for s in self.template.secrets:
            text = text.replace(s, "***")
        return text

    def _replayer(self, k: int):
        from limelight.retrieval.replay import Journal, Replayer

        rep = self._replayers.get(k)
        if rep is None:
            ident = request_identity(self.params, k)
            folder = None if self.work_dir is None else self.work_dir / "replay" / ident
            desc = {"url": self.url, "k": int(k), "identity": ident,
                    "request": {n: self.params.get(n) for n in _REQUEST_PARAMS
                                if self.params.get(n) is not None}}
            rep = Replayer(self.template, self.options, Journal(folder, desc, self.template.strings),
                           self.redact, self.template.headers)
            self._replayers[k] = rep
        return rep

    def __call__(self, queries: Queries, k: int | Run | None = None) -> Run:
        """``retriever(queries, k)`` (``compute_exposure``) or, as a stage, ``(queries, run)``."""
        if isinstance(k, numbers.Integral) and not isinstance(k, bool):
            return self.retrieve(queries, int(k))
        return self.transform(queries, k)

    def transform(self, queries: Queries, run: Run | None = None) -> Run:
        return self.retrieve(queries, self.default_k)

    def retrieve(self, queries: Queries, k: int | None = None) -> Run:
        """Every query's top ``k`` from the service (journaled answers reused) as a ``Run``."""
        k = self.default_k if k is None else int(k)
        keys = list(zip(queries.ids.strings.tolist(), [str(t) for t in queries.texts.tolist()],
                        strict=True))
        answers = self._replayer(k).ask(keys, k)
        self._last_k = k
        return self._run(queries, answers, k)

    def _run(self, queries: Queries, answers: list, k: int) -> Run:
        """The ``Run`` of ``answers`` (per query ``(ids or None, scores, codes or None)``), top ``k``."""
        sc, parts, named = [], [], []
        counts = np.zeros(len(answers), dtype=np.int64)
        for i, (ids, scores, codes) in enumerate(answers):
            n = min(len(scores), k)
            counts[i] = n
            sc.append(scores[:n])
            c = codes[:n] if codes is not None else self.template.lookup(ids[:n])
            parts.append(c)
            if ids is not None:
                named.append((ids[:n], c))
        q = np.repeat(np.arange(len(answers), dtype=np.int32), counts)
        d = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
        scores = (np.concatenate([np.asarray(x, dtype=np.float64) for x in sc]) if sc
                  else np.zeros(0, dtype=np.float64))
        ranks = np.arange(len(d)) - np.repeat(np.cumsum(counts) - counts, counts) + 1
        none = np.isnan(scores)  # the service gave no score: its order kept, 1 / rank
        scores[none] = 1.0 / ranks[none]
        unknown = d < 0
        if unknown.any():
            if self.unknown_docs != "drop":
                bad = [x for ids, c in named for x, ci in zip(ids, c.tolist(), strict=True) if ci < 0]
                first = list(dict.fromkeys(bad))[:3]
                raise LimelightError(
                    f"{self.url}: {int(unknown.sum())} result ids are not documents of the collection "
                    f"(first: {', '.join(map(repr, first))}); set unknown_docs = \"drop\" to leave them out")
            self.dropped += int(unknown.sum())
            q, d, scores = q[~unknown], d[~unknown], scores[~unknown]
        q, d, scores = _first_places(q, d, scores, len(self.doc_ids))
        return Run.from_codes(queries.ids, self.doc_ids, q, d, scores, self.name)

    def coverage(self) -> dict[str, int] | None:
        """Of the queries it opened with (the audit's log), how many the service answered with
        results and how many with none (by the journal of the last depth asked)."""
        if self._queries is None or self._last_k is None:
            return None
        counts = self._replayers[self._last_k].journal.counts
        keys = zip(self._queries.ids.strings.tolist(), [str(t) for t in self._queries.texts.tolist()],
                   strict=True)
        with_results = sum(counts.get(key, 0) > 0 for key in keys)
        n = len(self._queries)
        return {"queries": n, "with_results": with_results, "without_results": n - with_results}

    def replay_summary(self) -> list[dict[str, Any]]:
        """Per replay journal of this system (one per depth asked): queries asked, answered,
        failed, retried, requests and latency p50/p95/p99 (ms)."""
        from limelight.retrieval.replay import replay_summaries, summarize_log

        if self.work_dir is not None:
            return replay_summaries(self.work_dir)
        out = []
        for k, rep in self._replayers.items():
            import pandas as pd

            log = rep.journal.memory_log
            out.append({"url": self.url, "k": k, **summarize_log(pd.DataFrame(log) if log["qid"] else None)})
        return out

    def __repr__(self) -> str:
        return f"HttpRetriever({self.url!r})"


def _first_places(q: np.ndarray, d: np.ndarray, scores: np.ndarray, n_docs: int) -> tuple:
    """The rows with each (query, document) at its first place only (a service's pages that
    overlap can list a document twice); the rows as they are when none repeats."""
    pair = q.astype(np.int64) * n_docs + d
    srt = np.sort(pair)
    if not len(srt) or not (srt[1:] == srt[:-1]).any():
        return q, d, scores
    _, first = np.unique(pair, return_index=True)
    keep = np.sort(first)
    return q[keep], d[keep], scores[keep]


def check_http(params: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """The kind's ``resolve``: the request template checked where the configuration is read
    (a missing ``{query}``, a credential written out, an unknown preset: one line there, before
    anything is written); the environment is read only when the system opens."""
    Template(params, read_env=False)
    return dict(params)


def open_http(spec: Any, index_dir: str | Path | None, *, name: str | None = None,
              collection: Any = None, work_dir: str | Path | None = None, queries: Any = None,
              **_: Any) -> HttpRetriever:
    """The service of ``spec`` over the documents of ``collection`` (the audit's; else the ids
    stored with ``index_dir``, a ``limelight index`` directory), journaled under ``work_dir``."""
    if collection is not None:
        doc_ids = collection.ids
    elif index_dir is not None:
        import pyarrow.parquet as pq

        p = Path(index_dir) / "docs.parquet"
        if not p.is_file():
            raise LimelightError(f"{index_dir}: not a limelight index (no docs.parquet): an http system "
                                 "needs the collection whose document ids the service returns")
        doc_ids = IdMap(pq.read_table(p, columns=["doc_id"])["doc_id"].to_pylist(), kind="document")
    else:
        raise LimelightError("an http system needs the collection whose document ids the service "
                             "returns (an audit gives it; elsewhere an index directory)")
    return HttpRetriever(dict(spec.params), doc_ids, work_dir, name or "http", queries)


KIND = register_kind(SystemKind(
    "http",
    {"url": Param(str, None, "the service's search URL (with a preset: its base URL)"),
     "preset": Param(str, None, f"a request template: {', '.join(PRESETS)}"),
     "method": Param(str, None, "GET or POST (default: the preset's, else GET)"),
     "params": Param(dict, None, "query parameters; placeholders {query} {k} {qid} {offset}; "
                                 "\"env:NAME\" reads a variable"),
     "body": Param(dict, None, "JSON body (POST), same placeholders; \"{k}\" alone becomes a number"),
     "headers": Param(dict, None, "HTTP headers; credentials only as \"env:NAME\" / \"Bearer env:NAME\""),
     "hits": Param(str, None, "JSON Pointer (/hits/hits) or dotted path to the list of hits"),
     "id": Param(str, None, "path within a hit to the document id (default /id)"),
     "score": Param(str, None, "path within a hit to the score (\"\": keep the service's order)"),
     "batch_size": Param(int, 1, "queries per request through the batch template (e.g. _msearch)"),
     "batch": Param(dict, None, "batch template: path or url, header, body, responses, status"),
     "max_page": Param(int, None, "most hits per request; deeper top-n asked page by page"),
     "concurrency": Param(int, 8, "requests in flight"),
     "rate": Param(NUMBER, 0, "queries per second (0: no limit; a retry counts again)"),
     "timeout": Param(NUMBER, 30, "seconds per request"),
     "retries": Param(int, 5, "retries of a request after a connection error, timeout, 429 or 5xx"),
     "backoff": Param(NUMBER, 0.5, "first retry's wait in seconds (doubling, jittered; Retry-After "
                                   "honoured)"),
     "max_backoff": Param(NUMBER, 30, "longest wait between retries (seconds)"),
     "failure_budget": Param(int, 10, "queries that may fail after their retries before the replay stops"),
     "unknown_docs": Param(str, "fail", "a result id the collection lacks: fail, or drop it"),
     "client_errors": Param(str, "fail", "another 4xx for a query: fail, or empty (no results)"),
     "deterministic": Param(bool, False, "the service always answers a query the same way")},
    frozenset({NEW_QUERIES, REMOTE}),
    open_http,
    "a live search service over HTTP (Elasticsearch, OpenSearch, Solr, limelight serve, or a template)",
    needs_index=False,
    resolve=check_http,
))
