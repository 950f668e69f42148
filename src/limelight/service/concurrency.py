"""What keeps a busy ``limelight serve`` responsive: per-key caches and bounded work queues.

The server answers requests on a pool of threads. Three tools keep one slow request from
stalling the others:

- :class:`SingleFlight`: a value computed once per key, *outside* any lock shared with other
  keys. The first request for a key computes it; requests for the same key meanwhile wait for
  that computation only (an event per key), and requests for other keys, or for anything else,
  never wait at all. Used for what is built once and kept (retrievers, EQI engines).
- :class:`ViewCache`: the same for derived views (r(d) of a system at a cutoff, Lorenz
  curves, orders, groups), kept in a least-recently-used cache bounded in bytes
  (:func:`sizeof`), with at most ``workers`` heavy computations running at once (each reads a
  whole store: its transient memory is bounded by the same number), at most ``max_pending``
  distinct keys waiting to compute and at most ``max_waiters`` requests waiting for keys being
  computed (each holds one of the server's threads); beyond that :class:`Busy` (HTTP 429 with
  Retry-After).
- :class:`Gate`: at most ``workers`` jobs at once (EQI pastes: each uses every core), a queue
  of at most ``max_queue`` waiting jobs (:class:`Busy` beyond it), and a wait of at most
  ``timeout`` seconds in the queue (:class:`QueueTimeout`, HTTP 503 with Retry-After).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from limelight.errors import LimelightError

T = TypeVar("T")


class Busy(LimelightError):
    """The server has too much of this kind of work queued (HTTP 429; retry after
    ``retry_after`` seconds)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class QueueTimeout(Busy):
    """A queued job waited longer than the queue allows (HTTP 503; retry after
    ``retry_after`` seconds)."""


class _Flight:
    """One computation in progress: its waiters block on ``done``."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class SingleFlight:
    """Values computed once per key (and kept), each computation outside any shared lock.

    ``get(key, make)`` returns the kept value, else calls ``make()`` in the calling thread while
    other callers of the same key wait for it (an error is raised to every one of them and
    nothing is kept, so a later call tries again); callers of other keys are not delayed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held only to read or update the dictionaries, never to compute
        self._values: dict[Hashable, Any] = {}
        self._flights: dict[Hashable, _Flight] = {}

    def _lookup(self, key: Hashable) -> tuple[bool, Any]:
        """``(True, value)`` for a kept key (called with the lock held)."""
        if key in self._values:
            return True, self._values[key]
        return False, None

    def _keep(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key`` (called with the lock held)."""
        self._values[key] = value

    def _claim(self, key: Hashable) -> tuple[bool, Any, _Flight | None, bool]:
        """``(found, value, flight, owner)``: the kept value, or the flight to wait for or to run."""
        with self._lock:
            found, value = self._lookup(key)
            if found:
                return True, value, None, False
            flight = self._flights.get(key)
            if flight is not None:
                self._admit_waiter()
                return False, None, flight, False
            self._admit_new()
            flight = self._flights[key] = _Flight()
            return False, None, flight, True

    def _admit_waiter(self) -> None:
        """A caller is about to wait for a key being computed (called with the lock held); a
        subclass may refuse it by raising."""

    def _admit_new(self) -> None:
        """A new key is about to be computed (called with the lock held); a subclass may
        refuse it by raising."""

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The value of ``key``, computed by ``make()`` once."""
        found, value, flight, owner = self._claim(key)
        if found:
            return value
        assert flight is not None
        if not owner:
            return self._wait(flight)
        return self._run(key, flight, make)

    @staticmethod
    def _wait(flight: _Flight) -> Any:
        flight.done.wait()
        if flight.error is not None:
            raise flight.error
        return flight.value

    def _run(self, key: Hashable, flight: _Flight, make: Callable[[], T]) -> T:
        try:
            value = make()
        except BaseException as e:
            flight.error = e
            with self._lock:
                del self._flights[key]
            flight.done.set()
            raise
        flight.value = value
        with self._lock:
            del self._flights[key]
            self._keep(key, value)
        flight.done.set()
        return value

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return self._lookup(key)[0]

    def computing(self) -> int:
        """How many keys are being computed now."""
        with self._lock:
            return len(self._flights)


class ViewCache(SingleFlight):
    """A :class:`SingleFlight` whose values are evicted least recently used first, so that they
    take at most ``max_bytes`` (as :func:`sizeof` counts them); a value larger than that is
    returned but not kept. At most ``workers`` heavy computations (``get(..., heavy=True)``: a
    leaf, whose ``make`` looks nothing else up in the cache) run at once; a light one (a view
    derived from heavy ones, whose ``make`` may look them up) takes no turn, so that a thread
    holding a turn never waits for another key. A new key finding ``max_pending`` others
    already waiting or running raises :class:`Busy`, and so does a request for a key being
    computed that finds ``max_waiters`` requests already waiting.

    ``hits``, ``misses``, ``evictions`` and ``bytes`` say how it is doing (``stats()``).
    """

    def __init__(self, max_bytes: int = 256 << 20, workers: int = 1, max_pending: int = 8,
                 max_waiters: int = 16):
        super().__init__()
        self.max_bytes = int(max_bytes)
        self.max_pending = int(max_pending)
        self.max_waiters = int(max_waiters)
        self.waiters = 0
        self._values: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()  # type: ignore[assignment]
        self._slots = threading.BoundedSemaphore(max(1, int(workers)))
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0
        self._seconds = 1.0  # a running estimate of one computation's duration (Retry-After)

    def _lookup(self, key: Hashable) -> tuple[bool, Any]:
        hit = self._values.get(key)
        if hit is None:
            return False, None
        self._values.move_to_end(key)
        self.hits += 1
        return True, hit[0]

    def _keep(self, key: Hashable, value: Any) -> None:
        size = sizeof(value)
        if size > self.max_bytes:
            return
        self._values[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, s) = self._values.popitem(last=False)
            self.bytes -= s
            self.evictions += 1

    def _admit_waiter(self) -> None:
        if self.waiters >= self.max_waiters:
            wait = math.ceil(self._seconds)
            raise Busy(f"{self.waiters} requests wait for views being computed; try again in {wait} s", wait)
        self.waiters += 1

    def _admit_new(self) -> None:
        if len(self._flights) >= self.max_pending:
            wait = math.ceil(self._seconds * len(self._flights))
            raise Busy(f"{len(self._flights)} views are being computed; try again in {wait} s", wait)
        self.misses += 1

    def _wait(self, flight: _Flight) -> Any:
        try:
            return super()._wait(flight)
        finally:
            with self._lock:
                self.waiters -= 1

    def get(self, key: Hashable, make: Callable[[], T], heavy: bool = False) -> T:
        """The value of ``key``, computed by ``make()`` once (taking a turn when ``heavy``)."""
        if not heavy:
            return super().get(key, make)

        def limited() -> T:
            with self._slots:
                t0 = time.perf_counter()
                value = make()
                self._seconds = 0.8 * self._seconds + 0.2 * (time.perf_counter() - t0)
                return value

        return super().get(key, limited)

    def stats(self) -> dict:
        """Entries, bytes held, the bound, hits, misses, evictions and computations running."""
        with self._lock:
            return {"entries": len(self._values), "bytes": self.bytes, "max_bytes": self.max_bytes,
                    "hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "computing": len(self._flights), "waiting": self.waiters}


def sizeof(value: Any, _depth: int = 0) -> int:
    """Bytes a cached view holds: numpy arrays by ``nbytes``, pandas objects by their deep
    memory usage, dataclasses, tuples, lists and dicts by their parts (an ``IdMap`` or other
    object shared with the service counts as a pointer: it is not the view's own)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if _depth > 3 or value is None or isinstance(value, int | float | bool | str | bytes):
        return 64 + (len(value) if isinstance(value, str | bytes) else 0)
    try:
        import pandas as pd

        if isinstance(value, pd.DataFrame | pd.Series):
            usage = value.memory_usage(deep=True)
            return int(usage.sum() if hasattr(usage, "sum") else usage)
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    if isinstance(value, dict):
        return 64 + sum(sizeof(v, _depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return 64 + sum(sizeof(v, _depth + 1) for v in value)
    fields = getattr(value, "__dataclass_fields__", None)
    if fields:
        return 64 + sum(sizeof(getattr(value, f), _depth + 1) for f in fields
                        if not _shared(getattr(value, f)))
    return 64


def _shared(v: Any) -> bool:
    """An object a view refers to but does not own (the served id maps)."""
    return type(v).__name__ == "IdMap"


class Gate:
    """At most ``workers`` jobs at once, at most ``max_queue`` waiting, each waiting at most
    ``timeout`` seconds.

    ``with gate.slot(): ...`` runs the block when a slot is free; :class:`Busy` when the queue is
    full (at once), :class:`QueueTimeout` when no slot freed within ``timeout``. The
    Retry-After of both is the queue's length times the recent mean duration of a job.
    """

    def __init__(self, workers: int = 1, max_queue: int = 4, timeout: float = 30.0, what: str = "jobs"):
        self.workers = max(1, int(workers))
        self.max_queue = max(0, int(max_queue))
        self.timeout = float(timeout)
        self.what = what
        self._sem = threading.Semaphore(self.workers)
        self._lock = threading.Lock()
        self.waiting = 0
        self.running = 0
        self.rejected = 0
        self.timed_out = 0
        self._seconds = 1.0  # a running estimate of one job's duration

    def _retry_after(self, queued: int) -> int:
        return max(1, math.ceil(self._seconds * (queued + 1) / self.workers))

    def slot(self) -> _Slot:
        """A context manager holding one slot for its block."""
        with self._lock:
            if self.running + self.waiting >= self.workers + self.max_queue:
                self.rejected += 1
                wait = self._retry_after(self.waiting)
                raise Busy(f"the server is busy with {self.running + self.waiting} {self.what} "
                           f"(at most {self.max_queue} wait); try again in {wait} s", wait)
            self.waiting += 1
        got = self._sem.acquire(timeout=self.timeout)
        with self._lock:
            self.waiting -= 1
            if not got:
                self.timed_out += 1
                wait = self._retry_after(self.waiting)
                raise QueueTimeout(f"waited {self.timeout:g} s in the queue of {self.what} without a "
                                   f"turn; try again in {wait} s", wait)
            self.running += 1
        return _Slot(self)

    def _release(self, seconds: float) -> None:
        with self._lock:
            self.running -= 1
            self._seconds = 0.8 * self._seconds + 0.2 * seconds
        self._sem.release()

    def stats(self) -> dict:
        """Running, waiting, rejected (429) and timed-out (503) jobs so far."""
        with self._lock:
            return {"workers": self.workers, "max_queue": self.max_queue, "timeout_s": self.timeout,
                    "running": self.running, "waiting": self.waiting, "rejected": self.rejected,
                    "timed_out": self.timed_out}


class _Slot:
    """A slot of a :class:`Gate`, released when its block ends."""

    def __init__(self, gate: Gate):
        self.gate = gate
        self.t0 = time.perf_counter()

    def __enter__(self) -> _Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate._release(time.perf_counter() - self.t0)


def release_memory() -> None:
    """Hand back to the system what Arrow's memory pool and C's ``malloc`` keep of buffers
    already freed (Parquet decoding of the documents, of a store's pairs; the temporaries of an
    engine's build): otherwise it stays resident for nothing."""
    import ctypes
    import ctypes.util

    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    libc = ctypes.util.find_library("c")
    if libc and hasattr(ctypes.CDLL(libc), "malloc_trim"):  # glibc
        ctypes.CDLL(libc).malloc_trim(0)
