"""Replaying a query log against a live search service: the client behind system kind ``http``.

:class:`Replayer` asks a service (an *endpoint*: what builds each request and reads each
response, :mod:`limelight.retrieval.kinds.http`) for the answers of many queries:

- asyncio and ``httpx.AsyncClient``, ``concurrency`` requests in flight;
- a rate limit in queries per second (a request asking ``n`` queries counts ``n``; a retry
  counts again): requests start on a fixed schedule, ``1 / rate`` apart, so that the rate holds
  over any stretch of time;
- a ``timeout`` per request (connecting, sending and reading the whole answer);
- retries with exponential backoff and jitter after a connection error, a timeout, HTTP 408, 425,
  429 or 5xx: the ``n``-th retry waits between half and all of ``min(max_backoff, backoff ·
  2^(n-1))`` seconds, and at least what a ``Retry-After`` header asks (seconds or an HTTP date,
  up to ten times ``max_backoff``);
- a failure budget: a query that still fails after ``retries`` retries (or that the service
  refuses with another 4xx) counts as one failure and is asked again later; once more than
  ``failure_budget`` queries have failed, the replay stops with one line naming the service's
  URL and the last failure;
- Ctrl-C: the first stops sending, lets the requests in flight finish, keeps their answers and
  raises ``KeyboardInterrupt``; a second one interrupts at once.

Answers are kept in a :class:`Journal` (a folder of Parquet parts, written atomically): every
answered query with its hits, and one row per query asked with its HTTP status, attempts,
latency and error. A rerun asks only the queries the journal has no answer for, so a query is
never asked again once it was answered. :func:`replay_summaries` reads a journal back as the
figures the audit report shows (queries asked, failed, retried; latency p50/p95/p99).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email.utils
import json
import random
import signal
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from limelight._io import atomic_path, check_resumable_dir
from limelight.errors import LimelightError

#: HTTP statuses worth asking again: the service is busy, restarting or briefly broken
RETRY_STATUSES = frozenset({408, 425, 429})
#: statuses that no retry or other query will change: the template or the credentials are wrong
FATAL_STATUSES = frozenset({401, 403, 404, 405, 407, 410})
FORMAT = "limelight-replay/1"
JOURNAL_FILE = "journal.json"
#: answers kept in memory before a journal part is written (and at most this many seconds)
FLUSH_ROWS, FLUSH_SECONDS = 2048, 5.0

#: one answer, best first: the document ids (``None`` when the codes say it all), their scores
#: (float64, NaN where the service gives none) and the endpoint's int32 codes of the ids in its
#: collection (-1: not in it; ``None`` when unknown, e.g. read back from a journal)
Hits = tuple["list[str] | None", array, "np.ndarray | None"]


def _no_hits() -> Hits:
    return None, array("d"), np.zeros(0, dtype=np.int32)


@dataclass(frozen=True)
class ClientOptions:
    """How the client treats a service: requests in flight, queries/s (0: no limit), seconds
    per request, retries per request, backoff (base and cap, seconds) and the failure budget."""

    concurrency: int = 8
    rate: float = 0.0
    timeout: float = 30.0
    retries: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0
    failure_budget: int = 10

    def __post_init__(self) -> None:
        for name, low in (("concurrency", 1), ("rate", 0), ("timeout", 1e-3), ("retries", 0),
                          ("backoff", 0), ("max_backoff", 0), ("failure_budget", 0)):
            v = getattr(self, name)
            if not isinstance(v, int | float) or isinstance(v, bool) or v < low:
                raise LimelightError(f"http system: {name} must be a number ≥ {low}, not {v!r}")


class Endpoint(Protocol):
    """What a replay asks: ``url`` (shown in messages: no query string, no credentials),
    ``batch_size`` (queries per request), ``page_size(k)`` (hits per request when a top-k is
    asked page by page, else ``None``), ``request(items, k, offset)`` (``(method, url, params,
    headers, content)`` for ``items``, a list of ``(qid, text)``), ``read(status, ctype,
    content, n)`` (``ctype``: the content type, or the response's headers): per item, its
    ``Hits`` or the int HTTP status of its failure (a ``LimelightError`` for a response that is
    no answer at all), and ``join(pages)``: the ``Hits`` of one answer asked page by page.

    Optional: ``settle(answers)``: what ``read`` gave for many answers (an endpoint may give
    a placeholder of its own per answer, and do the work of all of them at once here) as their
    ``Hits`` (a ``LimelightError`` in the place of an answer that is none); ``reset()``: a
    replay starts, no answer is outstanding."""

    url: str
    batch_size: int

    def page_size(self, k: int) -> int | None: ...

    def request(self, items: Sequence[tuple[str, str]], k: int, offset: int) -> tuple: ...

    def read(self, status: int, ctype: str | Any, content: bytes, n: int) -> list[Hits | int]: ...

    def join(self, pages: list[Hits]) -> Hits: ...


def quote_body(content: bytes | str, limit: int = 200) -> str:
    """A response body for a one-line message: decoded, whitespace runs folded, cut at
    ``limit`` characters, quoted."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    text = " ".join(text.split())
    return json.dumps(text[:limit] + ("…" if len(text) > limit else ""), ensure_ascii=False)


# ---- the journal ----------------------------------------------------------------------------------
_LOG_COLUMNS = ("qid", "query", "ok", "status", "attempts", "latency_ms", "total_ms", "error",
                "hits", "run", "at")


class Journal:
    """A replay's memory, in ``folder`` (``None``: in memory only, nothing reused by a rerun).

    Part ``n`` is two Parquet files written atomically, ``hits-n.parquet`` then ``log-n.parquet``
    (a part counts once its log exists): the log has one row per query asked (``qid``,
    ``query``, ``ok``, HTTP ``status`` (0: no response), ``attempts``, ``latency_ms`` of the
    last request, ``total_ms`` from the first request to the answer, ``error``, ``hits``,
    ``run`` and ``at`` (Unix times)); the hits have ``row`` (the query's row in the log part),
    ``docid`` and ``score`` (null: the service gave none), in the service's order. ``journal.json``
    describes the requests (no credentials: ``env:`` references only).

    ``dictionary``: the collection's document ids, in code order; answers given by their codes
    (``Hits``) are written dictionary-encoded, several times faster than as strings (read back as
    strings all the same)."""

    def __init__(self, folder: str | Path | None, description: dict[str, Any] | None = None,
                 dictionary: Sequence[str] | None = None):
        self.folder = None if folder is None else Path(folder)
        self.run = time.time()
        self._log: dict[str, list] = {c: [] for c in _LOG_COLUMNS}
        self._hit_docs: list = []  # per answer: its codes (an array) or its ids (a list)
        self._hit_score: list = []  # per answer: its scores (float64)
        self._dictionary = dictionary
        self._arrow_dictionary = None
        self._flushed = time.monotonic()
        self.done: dict[tuple[str, str], tuple[int, int]] = {}  # (qid, query) → (part, row)
        self.counts: dict[tuple[str, str], int] = {}  # (qid, query) → hits of its answer
        self.parts = 0
        self.memory_log: dict[str, list] = {c: [] for c in _LOG_COLUMNS if c != "query"}  # no folder
        if self.folder is not None:
            self._open(description or {})

    def _open(self, description: dict[str, Any]) -> None:
        import pyarrow.parquet as pq

        folder = self.folder
        check_resumable_dir(folder, JOURNAL_FILE, "replay journal")
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob(".*.tmp"):  # a part being written when the job was killed
            stale.unlink(missing_ok=True)
        if not (folder / JOURNAL_FILE).is_file():
            with atomic_path(folder / JOURNAL_FILE) as tmp:
                tmp.write_text(json.dumps({"format": FORMAT, **description}, indent=1, default=str),
                               encoding="utf-8")
        for log in sorted(folder.glob("log-*.parquet")):
            part = int(log.stem.split("-")[1])
            self.parts = max(self.parts, part)
            t = pq.read_table(log, columns=["qid", "query", "ok", "hits"]).to_pydict()
            for row, (q, text, ok, n) in enumerate(zip(t["qid"], t["query"], t["ok"], t["hits"],
                                                       strict=True)):
                if ok and (q, text) not in self.done:
                    self.done[(q, text)] = (part, row)
                    self.counts[(q, text)] = n

    @property
    def pending(self) -> int:
        """Rows not written yet."""
        return len(self._log["qid"])

    def add(self, key: tuple[str, str], ok: bool, status: int, attempts: int, latency: float,
            total: float, error: str = "", hits: Hits | None = None) -> None:
        """One query asked (``ok``: answered, with ``hits``); written at the next :meth:`flush`."""
        self.add_many([key], [ok], [status], [attempts], [latency], [total], [time.time()],
                      [hits if ok else None], error)

    def add_many(self, keys: Sequence[tuple[str, str]], ok: Sequence[bool], status: Sequence[int],
                 attempts: Sequence[int], latency: Sequence[float], total: Sequence[float],
                 at: Sequence[float], hits: Sequence[Hits | None], error: str = "") -> None:
        """Several queries asked, column by column (as :meth:`add`; ``at``: Unix times of the
        answers, ``error`` the same for all)."""
        counts = self.counts
        ns = []
        docs, scores = self._hit_docs, self._hit_score
        for key, good, h in zip(keys, ok, hits, strict=True):
            if good and h is not None:
                ids, sc, codes = h
                n = len(sc)
                if key not in counts:
                    counts[key] = n
                if n:
                    docs.append(codes if ids is None else ids)
                    scores.append(sc)
                ns.append(n)
            else:
                ns.append(0)
        log = self._log
        log["qid"].extend(k[0] for k in keys)
        log["query"].extend(k[1] for k in keys)
        log["ok"].extend(ok)
        log["status"].extend(status)
        log["attempts"].extend(attempts)
        log["latency_ms"].extend(x * 1e3 for x in latency)
        log["total_ms"].extend(x * 1e3 for x in total)
        log["error"].extend([error] * len(keys))
        log["hits"].extend(ns)
        log["run"].extend([self.run] * len(keys))
        log["at"].extend(at)

    def due(self) -> bool:
        """Whether enough is pending to write a part."""
        return self.pending >= FLUSH_ROWS or (
            self.pending > 0 and time.monotonic() - self._flushed > FLUSH_SECONDS)

    def flush(self) -> None:
        """Write what is pending as the next part (atomically: hits first, then the log)."""
        job = self.take()
        if job is not None:
            write, commit = job
            write()
            commit()

    def take(self) -> tuple[Callable[[], None], Callable[[], None]] | None:
        """What is pending, taken as the next part: ``(write, commit)`` (``None``: nothing to
        write). ``write`` writes the part's files and may run in another thread while more
        answers are added; ``commit`` then records them as done (in the caller's thread)."""
        self._flushed = time.monotonic()
        if not self.pending:
            return None
        if self.folder is None:  # the log rows, for the summary; the hits are not kept
            for c, values in self.memory_log.items():
                values.extend(self._log[c])
            self._clear()
            return None
        import pyarrow as pa

        log_rows, docs, scores = self._log, self._hit_docs, self._hit_score
        self.parts = part = self.parts + 1
        self._clear()
        folder = self.folder
        if self._arrow_dictionary is None and self._dictionary is not None:
            self._arrow_dictionary = pa.array(list(self._dictionary), pa.string())

        def write() -> None:
            import pyarrow.parquet as pq

            score = (np.concatenate([np.asarray(x, dtype=np.float64) for x in scores]) if scores
                     else np.zeros(0, dtype=np.float64))
            n_hits = np.asarray(log_rows["hits"], dtype=np.int64)
            rows = np.repeat(np.arange(len(n_hits), dtype=np.int32), n_hits)
            hits = pa.table({"row": pa.array(rows),
                             "docid": self._docids(docs),
                             "score": pa.array(score, mask=np.isnan(score))})  # null: no score
            log = pa.table({
                "qid": pa.array(log_rows["qid"], pa.string()),
                "query": pa.array(log_rows["query"], pa.string()),
                "ok": pa.array(log_rows["ok"], pa.bool_()),
                "status": pa.array(log_rows["status"], pa.int16()),
                "attempts": pa.array(log_rows["attempts"], pa.int16()),
                "latency_ms": pa.array(log_rows["latency_ms"], pa.float32()),
                "total_ms": pa.array(log_rows["total_ms"], pa.float32()),
                "error": pa.array(log_rows["error"], pa.string()),
                "hits": pa.array(log_rows["hits"], pa.int32()),
                "run": pa.array(log_rows["run"], pa.float64()),
                "at": pa.array(log_rows["at"], pa.float64()),
            })
            # lz4, the ids' dictionary alone dictionary-coded, no statistics: a third of the
            # default writer's time
            with atomic_path(folder / f"hits-{part:06d}.parquet") as tmp:
                pq.write_table(hits, tmp, compression="lz4", use_dictionary=["docid"],
                               write_statistics=False)
            with atomic_path(folder / f"log-{part:06d}.parquet") as tmp:
                pq.write_table(log, tmp, compression="lz4")

        def commit() -> None:
            for row, (q, text, ok) in enumerate(zip(log_rows["qid"], log_rows["query"],
                                                    log_rows["ok"], strict=True)):
                if ok:
                    self.done.setdefault((q, text), (part, row))

        return write, commit

    def _clear(self) -> None:
        self._log = {c: [] for c in _LOG_COLUMNS}
        self._hit_docs, self._hit_score = [], []

    def _docids(self, docs: list):
        """The ids of ``docs`` (per answer: its codes, an array, or its ids, a list) as an Arrow
        column: dictionary-encoded (the dictionary cut to the ids used) when every answer came
        as codes, else strings."""
        import pyarrow as pa

        if not all(isinstance(x, np.ndarray) for x in docs) or self._arrow_dictionary is None:
            strings = self._dictionary
            return pa.array([d for x in docs
                             for d in (x if not isinstance(x, np.ndarray) else [strings[c] for c in x])],
                            pa.string())
        codes = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int32)
        seen = np.zeros(len(self._dictionary), dtype=bool)  # the ids used, in code order (O(n))
        seen[codes] = True
        used = np.flatnonzero(seen)
        index = (np.cumsum(seen, dtype=np.int32) - 1)[codes]
        return pa.DictionaryArray.from_arrays(pa.array(index), self._arrow_dictionary.take(pa.array(used)))

    def lookup(self, keys: Sequence[tuple[str, str]]) -> dict[int, Hits]:
        """The journaled answers of ``keys`` (position → hits), read from their parts."""
        import pyarrow.parquet as pq

        by_part: dict[int, dict[int, list[int]]] = {}
        for i, key in enumerate(keys):
            where = self.done.get(key)
            if where is not None:
                by_part.setdefault(where[0], {}).setdefault(where[1], []).append(i)
        out: dict[int, Hits] = {}
        for part, rows in by_part.items():
            t = pq.read_table(self.folder / f"hits-{part:06d}.parquet")
            row = t["row"].to_numpy()
            keep = np.flatnonzero(np.isin(row, np.fromiter(rows, dtype=np.int64)))
            docs = t["docid"].take(keep).to_pylist()
            scores = t["score"].take(keep).to_numpy(zero_copy_only=False).astype(np.float64)
            sel = row[keep]
            starts = np.flatnonzero(np.r_[True, sel[1:] != sel[:-1]]) if len(sel) else np.array([], int)
            ends = np.r_[starts[1:], len(sel)]
            found = {int(sel[s]): (docs[s:e], array("d", scores[s:e].tobytes()), None)
                     for s, e in zip(starts, ends, strict=True)}
            for r, positions in rows.items():
                for i in positions:
                    out[i] = found.get(r) or _no_hits()  # an answer without hits
        return out


def _log_frame(folder: Path):
    import pandas as pd
    import pyarrow.parquet as pq

    logs = sorted(folder.glob("log-*.parquet"))
    if not logs:
        return None
    return pd.concat([pq.read_table(p).to_pandas() for p in logs], ignore_index=True)


def summarize_log(log) -> dict[str, Any]:
    """The figures of a replay log (a frame of :class:`Journal` log rows): queries ``asked``
    (distinct), ``answered``, ``failed`` (asked, still without an answer), ``refused`` (answered
    with a 4xx as no hits), ``retried`` (sent more than once), ``attempts`` (times a query was
    sent, retries included; a batch request sends several) and latency percentiles (ms, of the
    answering requests)."""
    if log is None or not len(log):
        return {"asked": 0, "answered": 0, "failed": 0, "refused": 0, "retried": 0, "attempts": 0,
                "latency_p50_ms": None, "latency_p95_ms": None, "latency_p99_ms": None}
    key = log["qid"].astype(str) + "\x00" + (log["query"].astype(str) if "query" in log else "")
    per = log.assign(key=key).groupby("key")
    answered = per["ok"].any()
    ok = log[log["ok"]]
    lat = ok["latency_ms"].to_numpy(np.float64)
    pct = np.percentile(lat, [50, 95, 99]) if len(lat) else [None] * 3
    return {"asked": int(len(answered)), "answered": int(answered.sum()),
            "failed": int((~answered).sum()),
            "refused": int((ok["status"] >= 400).sum()),
            "retried": int((per["attempts"].sum() > 1).sum()),
            "attempts": int(log["attempts"].sum()),
            **{f"latency_p{p}_ms": (None if v is None else round(float(v), 3))
               for p, v in zip((50, 95, 99), pct, strict=True)}}


def replay_summaries(work_dir: str | Path) -> list[dict[str, Any]]:
    """One summary (:func:`summarize_log`, with the journal's ``url`` and ``k``) per replay
    journal under ``work_dir/replay/`` (a system's folder in an audit); ``[]`` when none."""
    out = []
    for j in sorted(Path(work_dir).glob(f"replay/*/{JOURNAL_FILE}")):
        try:
            desc = json.loads(j.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if desc.get("format") != FORMAT:
            continue
        out.append({"url": desc.get("url"), "k": desc.get("k"), **summarize_log(_log_frame(j.parent))})
    return out


# ---- the client -----------------------------------------------------------------------------------
def _retry_after(value: str | None, cap: float) -> float:
    """Seconds a ``Retry-After`` header asks for (a number or an HTTP date), at most ``cap``."""
    if not value:
        return 0.0
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return 0.0
        secs = when.timestamp() - time.time()
    return min(max(secs, 0.0), cap)


class _Asked:
    """How asking one query went so far (a row of the journal's log)."""

    __slots__ = ("started", "status", "attempts", "latency", "error")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.status, self.attempts, self.latency, self.error = 0, 0, 0.0, ""

    def failure(self) -> str:
        return self.error or f"HTTP {self.status}"


class _Stop(Exception):
    """Raised inside a worker to leave its job when the replay stops."""


class Replayer:
    """Answers queries from ``endpoint`` under ``options``, journaled in ``journal``;
    ``redact(text)`` removes credentials from any text that leaves it (messages, the log)."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions, journal: Journal,
                 redact: Callable[[str], str] = lambda s: s, headers: dict[str, str] | None = None):
        self.endpoint, self.opt, self.journal, self.redact = endpoint, options, journal, redact
        self.headers = dict(headers or {})
        self.failures = 0
        self.last_failure = ""
        self._rng = random.Random()

    # ---- the synchronous entry point ---------------------------------------------------------
    def ask(self, keys: Sequence[tuple[str, str]], k: int) -> list[Hits]:
        """The hits of every ``(qid, text)`` in ``keys`` (top ``k``): journaled answers are read
        back, the others asked. Raises ``LimelightError`` (failure budget spent, a response that
        is no answer, a status no retry changes) or ``KeyboardInterrupt`` (Ctrl-C), after
        journaling every answer received."""
        known = self.journal.lookup(keys)
        todo = [i for i in range(len(keys)) if i not in known]
        if todo:
            got = self._run(list(keys), todo, k)
            known.update(got)
        return [known[i] for i in range(len(keys))]

    def _run(self, keys: list[tuple[str, str]], todo: list[int], k: int) -> dict[int, Hits]:
        self._keys, self._k, self._results = keys, k, {}
        self._error: BaseException | None = None
        self._interrupted = False
        self._stop = asyncio.Event()
        self._aloop = asyncio.new_event_loop()
        b = max(1, self.endpoint.batch_size)
        units = deque(todo[i:i + b] for i in range(0, len(todo), b))
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal")
        self._writing = None
        self._answers: list = []  # (position, _Asked, perf_counter time, what endpoint.read gave)
        self._settled_at = time.monotonic()
        self._clock = (time.time(), time.perf_counter())
        settle = getattr(self.endpoint, "settle", None)
        self._settle_answers = settle if settle is not None else list
        reset = getattr(self.endpoint, "reset", None)
        if reset is not None:
            reset()
        try:
            if _loop_running():  # inside a running event loop (a notebook): a thread of its own
                t = threading.Thread(target=self._loop, args=(units,))
                t.start()
                t.join()
            else:
                with self._sigint():
                    self._loop(units)
        finally:
            self._finish_writing()
            self._settle()
            self.journal.flush()
        if self._error is not None:
            raise self._error
        if self._interrupted:
            raise KeyboardInterrupt
        return self._results

    def _loop(self, units: deque) -> None:
        loop = self._aloop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(units))
        finally:
            tasks = asyncio.all_tasks(loop)
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            asyncio.set_event_loop(None)
            loop.close()

    @contextlib.contextmanager
    def _sigint(self):
        """Ctrl-C while the replay runs: the first stops it cleanly, a second at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame) -> None:
            if self._interrupted:
                raise KeyboardInterrupt
            self._interrupted = True
            self._aloop.call_soon_threadsafe(self._stop_now)

        prev = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, prev)

    # ---- the event loop ----------------------------------------------------------------------
    async def _main(self, units: deque) -> None:
        import httpx

        if self._stop.is_set():  # interrupted before the loop started
            return
        self._next = 0.0  # the rate limiter's next start (loop time)
        n = self.opt.concurrency
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        async with httpx.AsyncClient(headers=self.headers, timeout=httpx.Timeout(self.opt.timeout),
                                     limits=limits, follow_redirects=False, trust_env=False) as client:
            workers = [asyncio.create_task(self._worker(client, units)) for _ in range(min(n, len(units)))]
            await asyncio.gather(*workers)

    def _stop_now(self, error: BaseException | None = None) -> None:
        if error is not None and self._error is None:
            self._error = error
        self._stop.set()

    async def _worker(self, client, units: deque) -> None:
        while units and not self._stop.is_set():
            unit = units.popleft()
            try:
                if self.endpoint.batch_size > 1:
                    await self._ask_batch(client, unit, units)
                else:
                    await self._ask_one(client, unit[0], units)
            except _Stop:
                return
            except LimelightError as e:
                self._stop_now(LimelightError(self.redact(str(e))))
                return
            if self._writing is None and (len(self._answers) >= FLUSH_ROWS or self.journal.due() or (
                    self._answers and time.monotonic() - self._settled_at > FLUSH_SECONDS)):
                self._settle()
                if self.journal.pending:
                    await self._write_part()

    async def _write_part(self) -> None:
        """The pending answers as the journal's next part, written in a thread (pyarrow lets
        the event loop go on asking meanwhile), then committed; one part at a time."""
        job = self.journal.take()
        if job is None:
            return
        write, commit = job
        self._writing = (self._pool.submit(write), commit)
        await asyncio.wrap_future(self._writing[0])
        commit()
        self._writing = None

    def _finish_writing(self) -> None:
        """After the loop: wait for a part still being written (an interrupted replay), and
        commit it; its errors are raised."""
        self._pool.shutdown(wait=True)
        if self._writing is not None:
            fut, commit = self._writing
            self._writing = None
            fut.result()
            commit()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or leave the job (``_Stop``) as soon as the replay stops."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), seconds)
        if self._stop.is_set():
            raise _Stop

    async def _limit(self, n: int) -> None:
        """The rate limit: this request's start on the schedule (``n`` queries' worth)."""
        if self.opt.rate <= 0:
            if self._stop.is_set():
                raise _Stop
            return
        now = self._aloop.time()
        start = max(now, self._next)
        self._next = start + n / self.opt.rate
        await self._sleep(start - now)

    async def _send(self, client, n: int, items: Sequence[tuple[str, str]], k: int, offset: int,
                    asked: Sequence[_Asked]):
        """One request for ``items`` (``n`` queries), timed; the response, or ``None`` after a
        connection error or a timeout (recorded in ``asked``)."""
        import httpx

        method, url, params, headers, content = self.endpoint.request(items, k, offset)
        await self._limit(n)
        t0 = time.perf_counter()
        resp, error = None, ""
        try:
            async with asyncio.timeout(self.opt.timeout):
                resp = await client.request(method, url, params=params, headers=headers, content=content)
        except httpx.UnsupportedProtocol as e:
            raise LimelightError(f"{self.endpoint.url}: {e}") from None
        except TimeoutError:
            error = "timeout"
        except httpx.TimeoutException as e:
            error = f"timeout ({type(e).__name__})"
        except httpx.TransportError as e:
            error = type(e).__name__
        latency = time.perf_counter() - t0
        for a in asked:
            a.attempts += 1
            a.latency = latency
            a.status = 0 if resp is None else resp.status_code
            a.error = error
        return resp

    def _check_status(self, resp) -> str:
        """``"ok"`` (2xx), ``"retry"`` or ``"refused"`` (another 4xx); a one-line
        ``LimelightError`` for a status no retry changes (a redirect, 401, 403, 404, ...)."""
        s = resp.status_code
        if 200 <= s < 300:
            return "ok"
        if s in RETRY_STATUSES or s >= 500:
            return "retry"
        if 300 <= s < 400 or s in FATAL_STATUSES:
            where = f" to {resp.headers.get('location')}" if 300 <= s < 400 else ""
            hint = {401: "; check the credentials (headers from env:NAME)",
                    403: "; check the credentials (headers from env:NAME)",
                    404: "; check the URL (and the preset's path)"}.get(s, "")
            raise LimelightError(f"{self.endpoint.url}: HTTP {s} {resp.reason_phrase}{where}{hint}: "
                                 f"{quote_body(resp.content)}")
        return "refused"

    async def _backoff(self, tries: int, resp) -> None:
        cap = min(self.opt.max_backoff, self.opt.backoff * 2 ** (tries - 1))
        wait = cap / 2 + self._rng.random() * cap / 2
        if resp is not None:
            wait = max(wait, _retry_after(resp.headers.get("retry-after"), 10 * max(self.opt.max_backoff, 1)))
        await self._sleep(wait)

    # ---- one query, one batch ----------------------------------------------------------------
    async def _ask_one(self, client, i: int, units: deque) -> None:
        """One query: its top-k in one request, or page by page (``endpoint.page_size``)."""
        key, k, a = self._keys[i], self._k, _Asked()
        page = self.endpoint.page_size(k)
        pages: list[Hits] = []
        offset = 0
        while True:
            size = k if page is None else min(page, k - offset)
            tries = 0
            while True:
                tries += 1
                resp = await self._send(client, 1, [key], size, offset, [a])
                verdict = "retry" if resp is None else self._check_status(resp)
                if verdict == "ok":
                    break
                if verdict == "refused" or tries > self.opt.retries:
                    self._gave_up([i], [a], verdict, units)
                    return
                await self._backoff(tries, resp)
            got = self.endpoint.read(resp.status_code, resp.headers,
                                     resp.content, 1)[0]
            if isinstance(got, int):  # a single answer has no per-item status
                got = _no_hits()
            if page is not None:  # a page: its hits now (their number says whether more follow)
                got = self._settle_answers([got])[0]
                if isinstance(got, LimelightError):
                    raise LimelightError(self.redact(f"{got} (query {key[0]!r}: {key[1]!r})"))
            pages.append(got)
            offset += size
            if page is None or len(got[1]) < size or offset >= k:
                break
        self._answered(i, a, pages[0] if len(pages) == 1 else self.endpoint.join(pages))

    async def _ask_batch(self, client, unit: list[int], units: deque) -> None:
        """Several queries in one request (a batch template such as ``_msearch``): the ones
        whose answer came back are done, the others asked again (alone in the batch)."""
        pending = list(unit)
        asked = {i: _Asked() for i in pending}
        tries = 0
        while pending:
            tries += 1
            keys = [self._keys[i] for i in pending]
            resp = await self._send(client, len(pending), keys, self._k, 0, [asked[i] for i in pending])
            verdict = "retry" if resp is None else self._check_status(resp)
            if verdict == "ok":
                got = self.endpoint.read(resp.status_code, resp.headers,
                                         resp.content, len(pending))
                again = []
                for i, g in zip(pending, got, strict=True):
                    if not isinstance(g, int):
                        self._answered(i, asked[i], g)
                        continue
                    asked[i].status, asked[i].error = g, f"HTTP {g} (in the batch)"
                    if g in FATAL_STATUSES or not (g in RETRY_STATUSES or g >= 500):
                        self._gave_up([i], [asked[i]], "refused", units)
                    else:
                        again.append(i)
                pending = again
            elif verdict == "refused":
                self._gave_up(pending, [asked[i] for i in pending], verdict, units)
                return
            if not pending:
                return
            if tries > self.opt.retries:
                self._gave_up(pending, [asked[i] for i in pending], "retry", units)
                return
            await self._backoff(tries, resp)

    def _answered(self, i: int, a: _Asked, hits: Any) -> None:
        """Query ``i`` answered: kept as the endpoint read it, settled (:meth:`_settle`) with the
        others of its part."""
        self._answers.append((i, a, time.perf_counter(), hits))

    def _settle(self) -> None:
        """The answers received since the last part: turned into ``Hits`` all at once
        (``endpoint.settle``: the ids of many answers coded in one pass), kept as results and
        added to the journal; an answer that turns out to be no answer (its one-line error in
        the place of its hits) stops the replay, as it would have where it was read."""
        answers, self._answers = self._answers, []
        self._settled_at = time.monotonic()
        if not answers:
            return
        hits = self._settle_answers([x[3] for x in answers])
        wall, perf = self._clock
        keys, asked, good = self._keys, [], []
        for (i, a, t, _), h in zip(answers, hits, strict=True):
            if isinstance(h, LimelightError):  # named with the query it answers
                self._stop_now(LimelightError(self.redact(f"{h} (query {keys[i][0]!r}: {keys[i][1]!r})")))
                continue
            self._results[i] = h
            asked.append((i, a, t))
            good.append(h)
        self.journal.add_many([keys[i] for i, _, _ in asked], [True] * len(asked),
                              [a.status for _, a, _ in asked], [a.attempts for _, a, _ in asked],
                              [a.latency for _, a, _ in asked], [t - a.started for _, a, t in asked],
                              [wall + t - perf for _, _, t in asked], good)

    def _gave_up(self, items: list[int], asked: list[_Asked], verdict: str, units: deque) -> None:
        """Queries that failed for good this time: refused ones answered with no hits when the
        endpoint says so; the others count against the failure budget and are asked again
        later, or the replay stops."""
        for i, a in zip(items, asked, strict=True):
            if verdict == "refused" and getattr(self.endpoint, "refused_as_empty", False):
                self._answered(i, a, _no_hits())
                continue
            self.journal.add(self._keys[i], False, a.status, a.attempts, a.latency,
                             time.perf_counter() - a.started, self.redact(a.failure()))
            self.failures += 1
            self.last_failure = self.redact(a.failure())
            if self.failures > self.opt.failure_budget:
                how = ("refused" if verdict == "refused"
                       else f"failed after {self.opt.retries} retries each")
                self._stop_now(LimelightError(
                    f"{self.endpoint.url}: {self.failures} queries {how} (last: {self.last_failure}); "
                    f"failure budget of {self.opt.failure_budget} spent, replay stopped (answers kept: "
                    "rerun to ask only the queries without one)"))
                raise _Stop
            units.append([i])


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


__all__ = ["ClientOptions", "Endpoint", "Journal", "Replayer", "quote_body", "replay_summaries",
           "summarize_log"]
