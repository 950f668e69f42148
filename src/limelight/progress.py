"""Progress for the command line: a rich bar on a terminal, plain periodic lines otherwise.

When stderr is not a terminal (piped, redirected, a CI log), rich draws nothing; long jobs
would then be silent. ``progress_bar`` instead prints one line on stderr every ``every``
seconds (default ``$LIMELIGHT_PROGRESS_SECONDS`` or 10): ``DESCRIPTION: DONE/TOTAL (P%), Ns``.

A long job stops soon after Ctrl-C, keeping what it finished: ``deferred_interrupt`` turns
SIGINT into a flag that its loops test at safe points (``check_interrupt``), never mid-kernel.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator


def _every() -> float:
    try:
        return max(0.0, float(os.environ.get("LIMELIGHT_PROGRESS_SECONDS", "10")))
    except ValueError:
        return 10.0


class PlainProgress:
    """``update(done, total)`` / ``advance(n)`` printing a line at most every ``every`` seconds
    (and once at the end when a line was printed before)."""

    def __init__(self, description: str, total: int | None, every: float | None = None,
                 stream=None):
        self.description, self.total = description, total
        self.every = _every() if every is None else every
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.t0 = time.monotonic()
        self.last = self.t0
        self.printed = False
        self.printed_done = -1

    def _line(self) -> None:
        tot = "" if not self.total else f"/{self.total} ({100 * self.done / self.total:.0f}%)"
        print(f"{self.description}: {self.done}{tot}, {time.monotonic() - self.t0:.0f}s",
              file=self.stream, flush=True)
        self.printed = True
        self.printed_done = self.done

    def update(self, done: int, total: int | None = None) -> None:
        self.done = int(done)
        if total is not None:
            self.total = total
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._line()

    def advance(self, n: int = 1) -> None:
        self.update(self.done + int(n))

    def finish(self) -> None:
        if self.printed and self.total and self.done >= self.total and self.printed_done != self.done:
            self._line()


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def progress_bar(description: str, total: int | None, elapsed: bool = False
                 ) -> Iterator[Callable[[int, int | None], None]]:
    """Yield ``update(done, total=None)``: a transient rich bar on a terminal, plain lines on
    stderr every few seconds otherwise."""
    if not stderr_is_terminal():
        plain = PlainProgress(description, total)
        yield plain.update
        plain.finish()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            *([TimeElapsedColumn()] if elapsed else []), TimeRemainingColumn()]
    with Progress(*cols, transient=True, console=Console(stderr=True)) as prog:
        task = prog.add_task(description, total=total)

        def update(done: int, tot: int | None = None) -> None:
            prog.update(task, completed=done, **({"total": tot} if tot is not None else {}))

        yield update


@contextlib.contextmanager
def progress_counter(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """``progress_bar`` yielding ``advance(n)`` (n more items done) instead of ``update``."""
    with progress_bar(description, total) as update:
        done = 0

        def advance(n: int = 1) -> None:
            nonlocal done
            done += int(n)
            update(done)

        yield advance


# ---- Ctrl-C in long jobs ------------------------------------------------------------------------
_INTERRUPT = threading.Event()  # Ctrl-C arrived while deferred (deferred_interrupt)


def _on_sigint(signum, frame) -> None:
    if _INTERRUPT.is_set():  # a second Ctrl-C: at once
        raise KeyboardInterrupt
    _INTERRUPT.set()


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[Callable[[], None]]:
    """Within it, Ctrl-C (SIGINT) does not raise where it lands (inside a native kernel numba
    turns it into a ``SystemError``) but sets a flag that the job's own loops test at safe
    points, often enough to stop within a second: ``interrupt_requested()`` (from any thread:
    a worker stops taking work) and ``check_interrupt()`` (raises ``KeyboardInterrupt``),
    which it yields. A second Ctrl-C raises at once. Active in the main thread, where SIGINT
    has Python's default handler (or an outer ``deferred_interrupt``); elsewhere a no-op."""
    import signal

    prev = None  # the handler to restore: set by the outermost one only
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        _INTERRUPT.clear()
        prev = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield check_interrupt
    finally:
        if prev is not None:
            signal.signal(signal.SIGINT, prev)
            _INTERRUPT.clear()


def interrupt_requested() -> bool:
    """Whether Ctrl-C arrived during a ``deferred_interrupt`` (the job should stop at its next
    safe point)."""
    return _INTERRUPT.is_set()


def check_interrupt() -> None:
    """``KeyboardInterrupt`` if Ctrl-C arrived during a ``deferred_interrupt``: what a job's
    loop calls at a safe point (between batches, chunks, steps)."""
    if _INTERRUPT.is_set():
        raise KeyboardInterrupt
