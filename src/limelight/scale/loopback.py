"""A real multi-node Ray cluster on one machine, started with Ray's own CLI, for tests and
benchmarks: ``ray start --head`` plus one ``ray start --address=...`` per extra node, each a
separate raylet (its own object store and worker processes) on loopback, in a temporary
directory of its own, every port chosen free (so that it never meets another cluster on the same
machine), and stopped by process group (``ray stop`` would stop every Ray on the machine).

    with LoopbackCluster(nodes=2, num_cpus=1) as c:
        compute_exposure(..., engine="ray", address=c.address)
        c.kill_node(1)                      # SIGKILL a node: its raylet and its workers

``kill_node`` is what losing a machine looks like to Ray: the node's raylet and workers vanish
without a goodbye; the tasks they ran are retried elsewhere (``max_retries``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from limelight.errors import LimelightError

#: Ray's failure detection, shortened so that a killed node is declared dead in seconds
#: (the defaults take about half a minute)
FAST_FAILURE = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "500",
                "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _ray_cli() -> list[str]:
    exe = Path(sys.executable).with_name("ray")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


class LoopbackCluster:
    """``nodes`` Ray nodes on 127.0.0.1 (node 0 the head), ``num_cpus`` CPUs and
    ``object_store_mb`` MB of object store each; a context manager (``stop`` on exit, also on
    errors). ``address`` is the head's ``HOST:PORT`` for ``ray.init`` / ``--address``."""

    def __init__(self, nodes: int = 2, num_cpus: int = 1, object_store_mb: int = 100,
                 temp_dir: str | os.PathLike | None = None, timeout: float = 120.0):
        if nodes < 1:
            raise LimelightError(f"nodes must be ≥ 1, got {nodes}")
        self.n_nodes, self.num_cpus, self.object_store_mb = nodes, num_cpus, object_store_mb
        self.timeout = timeout
        self._own_tmp = temp_dir is None
        # short: Ray's socket paths must stay under 107 bytes
        self.temp_dir = Path(tempfile.mkdtemp(prefix="llray-", dir="/tmp") if temp_dir is None
                             else temp_dir)
        self.procs: list[subprocess.Popen] = []
        self.killed: set[int] = set()  # nodes lost by kill_node
        self.last_error = ""  # why alive_nodes could not ask the cluster, when it could not
        self.address = ""
        # token authentication off, explicitly: with RAY_AUTH_MODE unset, Ray 2.60's `ray start`
        # turns it on whenever ~/.ray/auth_token exists (any local ray.init() writes one), while
        # a driver joining by address does not send the token, and cannot connect
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                    **FAST_FAILURE}
        self.env.pop("RAY_ADDRESS", None)

    def _start(self, head: bool) -> subprocess.Popen:
        (p_gcs, p_nm, p_om, p_client, p_agent, p_agent_grpc, p_renv, p_metrics, p_dash,
         p_wmin) = _free_ports(10)
        i = len(self.procs)
        cmd = [*_ray_cli(), "start", "--block", "--node-ip-address=127.0.0.1",
               f"--num-cpus={self.num_cpus}",
               f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
               f"--node-manager-port={p_nm}", f"--object-manager-port={p_om}",
               f"--dashboard-agent-listen-port={p_agent}",
               f"--dashboard-agent-grpc-port={p_agent_grpc}",
               f"--runtime-env-agent-port={p_renv}", f"--metrics-export-port={p_metrics}",
               # no log monitor (a Python daemon a node polling the workers' log files): no driver
               # of limelight asks for the workers' output (log_to_driver=False)
               "--include-log-monitor=false", "--disable-usage-stats"]
        if head:
            cmd += ["--head", f"--port={p_gcs}",
                    "--include-dashboard=false", f"--dashboard-port={p_dash}",
                    f"--temp-dir={self.temp_dir}"]
            self.address = f"127.0.0.1:{p_gcs}"
        else:
            cmd += [f"--address={self.address}"]
        log = open(self.temp_dir / f"node-{i}.log", "wb")  # noqa: SIM115 - closed with the process
        try:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)  # its own group: kill_node, stop
        finally:
            log.close()

    def start(self) -> LoopbackCluster:
        """Start the head, then, once its GCS answers, the other nodes (while the head's own
        raylet still starts); wait until all are alive in the GCS."""
        self.procs.append(self._start(head=True))
        self._wait(0)
        for _ in range(self.n_nodes - 1):
            self.procs.append(self._start(head=False))
        self._wait(self.n_nodes)
        return self

    def add_node(self) -> int:
        """Start one more worker node (after a ``kill_node``, to lose another); wait until it
        is alive. Returns its number (for ``node_pids`` and ``kill_node``)."""
        alive = len(self.procs) - len(self.killed)
        self.procs.append(self._start(head=False))
        self._wait(alive + 1)
        return len(self.procs) - 1

    def alive_nodes(self, tries: int = 3) -> int:
        """Nodes alive in the cluster (as the GCS says; -1 when it cannot be asked in ``tries``
        attempts, the last failure kept in ``last_error``). Asked of the GCS directly, in this
        process (Ray's ``GcsClient``: no driver joins the cluster), once its port answers: a
        new interpreter joining as a driver took 2.6 s a question on a busy machine."""
        for attempt in range(max(1, tries)):
            if attempt:
                time.sleep(1)
            host, _, port = self.address.rpartition(":")
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
            except (OSError, ValueError) as e:  # not listening yet (or no head started)
                self.last_error = f"nothing answers at {self.address!r}: {e}"
                continue
            try:
                from ray._raylet import GcsClient  # the scale extra
                from ray.core.generated.gcs_pb2 import GcsNodeInfo

                nodes = GcsClient(address=self.address).get_all_node_info(timeout=30)
            except Exception as e:  # noqa: BLE001 - Ray's RpcError and kin: a failed question
                self.last_error = (str(e).strip().splitlines() or [type(e).__name__])[-1]
                continue
            return sum(1 for n in nodes.values() if n.state == GcsNodeInfo.ALIVE)
        return -1

    def wait_alive(self, n: int, timeout: float = 60.0) -> int:
        """Wait until the GCS counts ``n`` nodes alive (a killed node is declared dead after
        its missed health checks: seconds with ``FAST_FAILURE``); returns the last count."""
        end = time.monotonic() + timeout
        alive = self.alive_nodes()
        while alive != n and time.monotonic() < end:
            time.sleep(0.2)
            alive = self.alive_nodes()
        return alive

    def workers(self) -> list[int]:
        """The numbers of the worker nodes started and not killed (``kill_node``), in order."""
        return [i for i in range(1, len(self.procs)) if i not in self.killed]

    def _wait(self, n: int) -> None:
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            dead = [p for i, p in enumerate(self.procs)
                    if i not in self.killed and p.poll() is not None]
            if dead:
                log = self.temp_dir / f"node-{self.procs.index(dead[0])}.log"
                tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
                raise LimelightError(f"a Ray node exited while starting: "
                                     f"{tail[-1] if tail else 'no output'}")
            if self.alive_nodes(tries=1) >= n:
                return
            time.sleep(0.2)
        raise LimelightError(f"Ray cluster did not reach {n} nodes in {self.timeout:.0f} s "
                             f"(logs in {self.temp_dir})")

    def node_pids(self, i: int) -> list[int]:
        """Pids of node ``i``'s processes: its process group (``ray start``, the raylet, its
        agents) and their descendants (the raylet's worker processes, which Ray starts in
        process groups of their own)."""
        pgid = self.procs[i].pid
        parent: dict[int, int] = {}
        group: set[int] = set()
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
                    pid = int(p.name)
                    parent[pid] = int(fields[1])
                    if int(fields[2]) == pgid:
                        group.add(pid)
        out = set(group)
        for pid in parent:
            seen, q = set(), pid
            while q in parent and q not in seen and q > 1:
                if q in group:
                    out.add(pid)
                    break
                seen.add(q)
                q = parent[q]
        return sorted(out)

    def runs_task(self, i: int, task: str) -> bool:
        """Whether a worker of node ``i`` is executing the Ray task ``task`` (a remote
        function's name) right now: Ray titles such a process ``ray::TASK``."""
        title = b"ray::" + task.encode()
        for pid in self.node_pids(i):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(title):
                    return True
        return False

    def kill_node(self, i: int) -> None:
        """SIGKILL node ``i`` (not the head): every process of it at once (``node_pids``)."""
        if i == 0:
            raise LimelightError("kill_node: node 0 is the head (the cluster itself)")
        for pid in self.node_pids(i):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.procs[i].wait()
        self.killed.add(i)

    def stop(self, grace: float = 5.0) -> None:
        """Stop every node (workers first, the head last): SIGTERM to each node's process group,
        SIGKILL to what is left of it after ``grace`` seconds; then remove the temporary
        directory. The head's ``ray start --block`` takes about 32 s to end after a SIGTERM
        (measured with Ray 2.60, with or without a node killed before): the grace was 30 s, and
        every Ray test module waited it out at its end."""
        for p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):  # stragglers of the group
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        if self._own_tmp:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LoopbackCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
