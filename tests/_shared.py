"""Helpers several test files share (one home each; the shared fixtures are conftest.py's, what
audits need ``_audits.py``):

- :func:`format_error`: the one-line error a reader gives for a file that is wrong;
- :func:`random_log`: a random query log's (query, document, rank) rows;
- :func:`local_and_ray`: one ``limelight`` command run locally and on a Ray cluster;
- :func:`stop_process`: a server process a test started, ended.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from limelight.errors import FormatError


def format_error(tmp_path: Path, content: str, read: Callable[[Path], Any],
                 name: str = "bad.txt") -> tuple[Path, str]:
    """``(path, message)``: ``content`` written to ``tmp_path/name`` and read with ``read``,
    which must raise a :class:`~limelight.errors.FormatError` (its one-line message)."""
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(FormatError) as e:
        read(p)
    return p, str(e.value)


def random_log(rng: np.random.Generator, n_docs: int, n_queries: int, depth: int,
               min_k: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, d, rank)`` (int64, rank 1-based) of ``n_queries`` random rankings, each of ``min_k``
    to ``depth`` distinct documents of ``n_docs``, drawn from ``rng``."""
    q, d, r = [], [], []
    for i in range(n_queries):
        k = int(rng.integers(min_k, depth + 1))
        docs = rng.choice(n_docs, size=k, replace=False)
        q += [i] * k
        d += docs.tolist()
        r += list(range(1, k + 1))
    return np.array(q, dtype=np.int64), np.array(d, dtype=np.int64), np.array(r)


def local_and_ray(cmd: list[str], out_local: Path, out_ray: Path,
                  address: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """``cmd --out out_local`` and ``cmd --out out_ray --engine ray --address address`` (no
    ``RAY_ADDRESS`` inherited), each asserted to succeed; both finished processes."""
    env = {**os.environ, "RAY_ADDRESS": ""}
    a = subprocess.run([*cmd, "--out", str(out_local)], capture_output=True, text=True, env=env)
    b = subprocess.run([*cmd, "--out", str(out_ray), "--engine", "ray", "--address", address],
                       capture_output=True, text=True, env=env)
    assert a.returncode == 0, a.stderr
    assert b.returncode == 0, b.stderr
    return a, b


def stop_process(proc: subprocess.Popen, timeout: float) -> None:
    """End ``proc`` if it still runs: terminated, killed when it has not exited ``timeout``
    seconds later."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def cli_until(args: list, cwd: Any, ready: Any, env: dict | None = None,
              preexec_fn: Callable[[], None] | None = None) -> tuple[subprocess.Popen, list[str]]:
    """Start ``limelight ARGS`` (``python -m limelight.cli``) in ``cwd``, in a process group of
    its own, with every progress line printed (``LIMELIGHT_PROGRESS_SECONDS=0``), offline, in the
    suite's model cache (``LIMELIGHT_CACHE``) and ``env`` added; read its stderr until a line
    matches ``ready`` (a compiled pattern). Returns the process, still running, and the lines
    read; an ``AssertionError`` (the process ended, its status and lines) when none matched.
    The caller stops it (and ends it in a ``finally``)."""
    import sys

    from limelight._io import cache_root

    env = {**os.environ, "LIMELIGHT_PROGRESS_SECONDS": "0", "HF_HUB_OFFLINE": "1",
           "LIMELIGHT_CACHE": str(cache_root()), **(env or {})}
    p = subprocess.Popen([sys.executable, "-m", "limelight.cli", *map(str, args)], cwd=cwd, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=preexec_fn)
    seen: list[str] = []
    for line in p.stderr:
        seen.append(line)
        if ready.search(line):
            return p, seen
    raise AssertionError(f"ended ({p.wait()}) before a line matched {ready.pattern!r}: {''.join(seen)}")

