"""Connecting to Ray: a local one-machine cluster when no address is given, or an existing one.

``ray_session`` is the one place limelight starts or joins Ray. It is a context manager: a
cluster it started (or a connection it opened) is shut down on exit, also on errors and Ctrl-C;
a Ray that the caller had already initialised (``ray.init(...)`` in a notebook) is used as it is
and left running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator

from limelight.errors import LimelightError

#: object store of a local cluster started by limelight (bytes); Ray's default is 30% of RAM,
#: too much on a shared machine. ``LIMELIGHT_RAY_OBJECT_STORE`` overrides it.
DEFAULT_OBJECT_STORE = 300 * 1024 * 1024


def _import_ray():
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is in the dev and scale extras
        raise LimelightError("the ray engine needs Ray: pip install 'limelight[scale]'") from None
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None,
                object_store_memory: int | None = None) -> Iterator[object]:
    """Yield the ``ray`` module, initialised.

    ``address``: ``None`` starts a local cluster on this machine (``num_cpus`` workers, default
    all cores; ``object_store_memory`` bytes, default 300 MB); ``"auto"`` or ``"HOST:PORT"``
    joins a running cluster (``ray start --head`` ...). A connection failure is a one-line
    ``LimelightError``.
    """
    # Ray's usage telemetry phones home and runs background polling threads: off unless the
    # user turned it on (no network at run time).
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict = {"include_dashboard": False, "logging_level": logging.WARNING,
                    "log_to_driver": False, "configure_logging": True}
    if address is None:
        mem = object_store_memory or int(os.environ.get("LIMELIGHT_RAY_OBJECT_STORE",
                                                        DEFAULT_OBJECT_STORE))
        kwargs.update(num_cpus=num_cpus, object_store_memory=mem)
    else:
        if num_cpus is not None or object_store_memory is not None:
            raise LimelightError("num_cpus and object_store_memory set up a local cluster; "
                                 "an existing cluster at an address has its own")
        kwargs.pop("include_dashboard")
        kwargs["address"] = address
        _probe(address)
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = f"at {address}" if address else "on this machine"
        raise LimelightError(f"cannot start or reach a Ray cluster {where}: {first}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast (Ray itself retries for minutes) when nothing listens at ``HOST:PORT``."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise LimelightError(f"Ray address {address!r}: expected HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise LimelightError(f"cannot reach a Ray cluster at {address}: {e.strerror or e}") from None


def cluster_cpus(ray) -> int:
    """The CPUs of the connected cluster (at least 1)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
