"""Several server processes over one opened audit (``limelight serve --workers N``).

The audit is opened once, in the first process (the *master*); it then forks ``N`` workers that
share the listening socket (as gunicorn's and uvicorn's pre-fork servers do) and each run
uvicorn's event loop, so every core answers requests. The stores are memory-mapped: one copy in
the page cache, whichever process reads them, and what the master built when it opened the
audit (ids, fields, ownership) stays the master's pages, copied only where a worker writes to
them (``gc.freeze`` keeps the collector from touching them). Everything that must hold across
workers lives in the portal's database (accounts, sessions, the login throttle, the access
log); each worker keeps its own caches and its own EQI queue.

Each worker warms up (search models, retrievability views, near-miss ladders) after the fork,
not the master before it: the native thread pools that warming starts cannot cross a fork. GNU
OpenMP (numba's threadsafe ``omp`` layer, FAISS, torch) stops a child whose parent ran a
parallel region, and numba's fork-safe work queue is not threadsafe (two requests' kernels at
once abort the worker). :func:`fork_safe_threads` also runs OpenMP and BLAS at one thread per
worker (the cores are the workers'), and :func:`serve_workers` refuses to fork once numba's
GNU OpenMP pool runs in the master. What is only code is loaded before the fork: the master
imports the search models' libraries (``AuditService.import_libraries``), which every worker would
otherwise import again (sentence-transformers: about 5 CPU s a worker, and its own copy).

The master serves nothing: it waits for its workers, starts a new one when one dies (unless
workers keep dying within seconds of starting: then it stops), and on SIGTERM, SIGINT or
SIGHUP passes SIGTERM on to them, waits for them to finish their requests and exits. A worker
whose master dies is stopped by the kernel (``PR_SET_PDEATHSIG``). Each response says which
worker answered (``X-Limelight-Worker``: its process id).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

WORKER_HEADER = b"x-limelight-worker"
RESPAWN_WITHIN_S = 10.0  # a worker that dies this soon after starting counts as a failed start
MAX_FAILED_STARTS = 3  # in a row: the master stops instead of starting another
STOP_TIMEOUT_S = 30.0  # after SIGTERM, seconds the workers have to finish before SIGKILL
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def default_workers(auth: str) -> int:
    """``--workers`` when not given: 1 for ``--auth none`` (a researcher on localhost: one copy
    of the models), else one per core this process may use, at most 4."""
    if auth == "none":
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def fork_safe_threads() -> None:
    """One thread per worker for OpenMP and BLAS (unless the environment sets them) and the
    tokenizers' threads off; libraries already loaded are set directly. Call before the
    workers start (the pools start in each worker, after the fork)."""
    for name in _THREAD_ENV:
        os.environ.setdefault(name, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    if "faiss" in sys.modules:
        sys.modules["faiss"].omp_set_num_threads(1)


def check_forkable() -> None:
    """``RuntimeError`` when numba's GNU OpenMP pool already runs in this process (a forked
    worker would stop at its first parallel kernel)."""
    par = sys.modules.get("numba.np.ufunc.parallel")
    if par is not None and getattr(par, "_is_initialized", False):
        import numba

        if numba.threading_layer() == "omp":
            raise RuntimeError("numba's OpenMP threads already run in this process: fork the workers "
                               "before any numba parallel kernel runs (warm up in each worker)")


class WorkerHeader:
    """ASGI middleware: ``X-Limelight-Worker: PID`` on every response (which worker answered)."""

    def __init__(self, app):
        self.app = app
        self.value = str(os.getpid()).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_worker(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (WORKER_HEADER, self.value)]}
            await send(message)

        return await self.app(scope, receive, send_with_worker)


def _die_with(master: int) -> None:
    """Have the kernel send this process SIGTERM when its master exits (Linux), and exit now
    if it already has."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != master:
        os._exit(0)


def _worker(app, sock, config: dict, master: int, after_fork: Callable[[], None],
            at_exit: Callable[[], None]) -> None:
    """A worker's life (in the forked child, its stop signals blocked): serve until SIGTERM,
    then ``at_exit``; never returns."""
    import uvicorn

    code = 1
    server: list = []
    asked: list[int] = []

    def on_signal(sig, _frame) -> None:  # outside uvicorn's own handlers: stop it all the same
        asked.append(sig)
        for s in server:
            s.should_exit = True

    try:
        # uvicorn restores the handlers it found and raises the signal it caught again once it
        # has stopped: a handler that does not kill lets at_exit run (SIG_DFL would kill).
        for sig in STOP_SIGNALS:
            signal.signal(sig, on_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one sent meanwhile arrives now
        _die_with(master)
        after_fork()
        server.append(uvicorn.Server(uvicorn.Config(WorkerHeader(app), **config)))
        server[0].should_exit = bool(asked)
        server[0].run(sockets=[sock])
        code = 0
    except BaseException:  # noqa: BLE001 - the worker's last words, then its exit status
        traceback.print_exc()
    finally:
        try:
            at_exit()
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve_workers(app, sock, n: int, config: dict[str, Any], *, before_fork: Callable[[], None] = lambda: None,
                  after_fork: Callable[[], None] = lambda: None, at_exit: Callable[[], None] = lambda: None,
                  echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)) -> int:
    """Serve ``app`` on the listening socket ``sock`` from ``n`` forked worker processes (uvicorn
    with ``config``) until SIGTERM, SIGINT or SIGHUP; returns the exit status (0, or 1 when
    workers kept failing to start). ``before_fork`` runs once in the master (close database
    connections: a connection must not be shared by two processes), ``after_fork`` in each
    worker before it serves (warm up), ``at_exit`` in each worker after it stopped (write what it keeps
    pending)."""
    master = os.getpid()
    check_forkable()
    before_fork()
    gc.collect()
    gc.freeze()  # the loaded objects stay shared: the collector does not write to their pages
    workers: dict[int, float] = {}  # pid -> start time
    stopping = {"since": None}
    failed_starts = 0
    status = 0

    def start() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        # the stop signals wait while the child is made: the master's handler must not run in it
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:
            _worker(app, sock, config, master, after_fork, at_exit)
        workers[pid] = time.monotonic()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def stop(sig, _frame) -> None:
        if stopping["since"] is None:
            stopping["since"] = time.monotonic()
            for pid in list(workers):
                _signal(pid, signal.SIGTERM)

    old = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        for _ in range(n):
            start()
        while workers:
            pid, code = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                if stopping["since"] is not None and time.monotonic() - stopping["since"] > STOP_TIMEOUT_S:
                    for p in list(workers):
                        _signal(p, signal.SIGKILL)
                time.sleep(0.2)
                continue
            started = workers.pop(pid, None)
            if started is None or stopping["since"] is not None:
                continue
            why = _exit_reason(code)
            if time.monotonic() - started < RESPAWN_WITHIN_S:
                failed_starts += 1
            else:
                failed_starts = 0
            if failed_starts >= MAX_FAILED_STARTS:
                echo(f"worker {pid} {why}; {failed_starts} workers in a row stopped within "
                     f"{RESPAWN_WITHIN_S:.0f} s of starting: stopping the server")
                status = 1
                stop(signal.SIGTERM, None)
                continue
            echo(f"worker {pid} {why}: starting another")
            start()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        gc.unfreeze()
    return status


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _exit_reason(code: int) -> str:
    if os.WIFSIGNALED(code):
        return f"was killed by {signal.Signals(os.WTERMSIG(code)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(code)}"
