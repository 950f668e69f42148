"""A fork server for the manual's pages (``tests/test_manual.py``): ``limelight`` commands and
Python blocks forked from an interpreter that has already imported limelight and the libraries its
commands load (numpy, pandas, pyarrow, scipy, numba, ...), instead of a new interpreter that
spends about a second importing them for each command.

``python tests/_forkserver.py ADDRESS [MODULE ...]`` imports the modules, then listens on the
abstract Unix socket ``ADDRESS``. A launcher (``launcher_script``: a few lines of the standard
library, put first on ``PATH`` as ``limelight``) sends its arguments, working folder, environment
and its standard input, output and error (the file descriptors themselves); the server forks a
child that takes them over and runs the console script's entry point (``limelight.cli.main``) or
a Python file as ``__main__``, as a new process would, and the launcher exits with the child's
status (a child killed by a signal kills the launcher with the same signal). A signal sent to the
launcher (the page's process group ended at the end of a page) is passed on to the child.

The children are the server's own, waited for by it, and the server is the test's child: their
CPU time is counted in the test that ran the page when the server ends (``SIGTERM``: it ends the
children still running, e.g. a ``limelight serve ... &``, waits for them and exits).

``python tests/_forkserver.py --zygote ADDRESS [MODULE ...]`` imports the modules once for all the
pages of a test module and loads numba's compiler registries (``warm``: what every command's first
numba kernel otherwise loads, about a third of a second), then hands out page servers: a request
``{"address", "cwd", "env"}`` on ``ADDRESS`` gets a server forked from it, already listening on
``address``, in the page's folder and environment, and its pid. It is forked twice (``spawn``) so
that it is the child of the process that asked, which must be a child subreaper
(``prctl(PR_SET_CHILD_SUBREAPER)``) while it asks: the page's test waits for its server and so
counts the server's CPU time, as it did for a server it started itself.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import socket
import sys
import time
import traceback

LAUNCHER = '''#!{python} -S
import json, os, signal, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect({address!r})
msg = json.dumps({{"mode": {mode!r}, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(s, [len(msg).to_bytes(8, "big")], [0, 1, 2])
s.sendall(msg)
f = s.makefile("r")
pid = int(f.readline())
def forward(sig, frame):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, forward)
kind, value = (f.readline().split() or ["exit", "1"])
if kind == "signal":
    signal.signal(int(value), signal.SIG_DFL)
    os.kill(os.getpid(), int(value))
sys.exit(int(value))
'''


def launcher_script(address: str, mode: str = "limelight", python: str = sys.executable) -> str:
    """The text of a launcher for the server at ``address``: ``mode`` ``limelight`` runs the
    console script with the launcher's arguments, ``python`` runs the file its first argument
    names."""
    return LAUNCHER.format(python=python, address="\0" + address, mode=mode)


def _child(conn: socket.socket, fds: list[int], req: dict) -> None:
    """In the forked child: take over the launcher's descriptors, folder and environment, run
    the command, exit with its status."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", 1 if os.isatty(1) else -1, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", 1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    conn.sendall(f"{os.getpid()}\n".encode())
    code: int = 0
    try:
        if req["mode"] == "python":
            import runpy

            sys.argv = list(req["argv"])
            sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:
            from limelight.cli import main

            sys.argv = ["limelight", *req["argv"]]
            code = main()
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # what an interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: S110 - a closed pipe at exit, as an interpreter ignores it
        pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def listen(address: str) -> socket.socket:
    """A socket listening on the abstract Unix address ``address``."""
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind("\0" + address)
    lsock.listen(64)
    return lsock


def serve(address: str | socket.socket) -> None:
    """Accept launchers on ``address`` (or a socket already listening) until ``SIGTERM``; fork a
    child for each."""
    lsock = listen(address) if isinstance(address, str) else address
    announce = isinstance(address, str)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stopping = []
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    children: dict[int, socket.socket] = {}
    if announce:
        print("ready", flush=True)

    def reap(block: bool) -> None:
        while children:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            if pid == 0:
                return
            conn = children.pop(pid, None)
            if conn is None:
                continue
            word = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                    else f"exit {os.WEXITSTATUS(status)}")
            try:
                conn.sendall(f"{word}\n".encode())
            except OSError:
                pass
            conn.close()

    while not stopping:
        try:
            ready, _, _ = select.select([lsock, wake_r], [], [])
        except InterruptedError:
            ready = []
        if wake_r in ready:
            os.read(wake_r, 4096)
        reap(block=False)
        if lsock in ready and not stopping:
            conn, _ = lsock.accept()
            head, fds, _, _ = socket.recv_fds(conn, 8, 3)
            size = int.from_bytes(head, "big")
            body = b""
            while len(body) < size:
                body += conn.recv(size - len(body))
            req = json.loads(body)
            pid = os.fork()
            if pid == 0:
                lsock.close()
                for c in children.values():
                    c.close()
                try:
                    _child(conn, fds, req)
                finally:  # never back into the server's loop
                    traceback.print_exc()
                    os._exit(1)
            for fd in fds:
                os.close(fd)
            children[pid] = conn
    for sig in (signal.SIGTERM, signal.SIGKILL):  # what runs still, e.g. a server a page started
        for pid in list(children):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        for _ in range(100):
            reap(block=False)
            if not children:
                return
            time.sleep(0.1)


def warm() -> None:
    """Load numba's typing and target registries (cffi, pycparser and numba's own), which the
    first numba kernel a process calls loads otherwise, cached or not."""
    try:
        from numba.core.registry import cpu_target
    except ImportError:
        return
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


def spawn(req: dict, inherited: tuple[socket.socket, ...] = ()) -> int:
    """Fork a page server for ``req`` (``address``, ``cwd``, ``env``) twice over, so that the
    intermediate process exits at once and the server is handed to the nearest child subreaper
    (the process that asked); its pid. ``inherited``: the zygote's sockets, closed in the server."""
    lsock = listen(req["address"])
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(r)
            pid = os.fork()
            if pid == 0:
                os.close(w)
                code = 1
                try:
                    for sock in inherited:
                        os.close(sock.detach())
                    os.chdir(req["cwd"])
                    os.environ.clear()
                    os.environ.update(req["env"])
                    serve(lsock)
                    code = 0
                finally:
                    if code:
                        traceback.print_exc()
                    os._exit(code)
            os.write(w, f"{pid}\n".encode())
        finally:
            os._exit(0)
    os.close(w)
    lsock.close()
    with os.fdopen(r) as f:
        pid = int(f.readline())
    os.waitpid(middle, 0)
    return pid


def zygote(address: str) -> None:
    """Hand out page servers (``spawn``) on ``address`` until ended (``SIGTERM``)."""
    lsock = listen(address)
    print("ready", flush=True)
    while True:
        conn, _ = lsock.accept()
        with conn, conn.makefile("rw") as f:
            f.write(f"{spawn(json.loads(f.readline()), (lsock, conn))}\n")
            f.flush()


if __name__ == "__main__":
    # a console script's first path entry is its own folder (the venv's bin), not tests/
    sys.path[0] = os.path.dirname(sys.executable)
    as_zygote = sys.argv[1] == "--zygote"
    args = sys.argv[2:] if as_zygote else sys.argv[1:]
    for name in args[1:]:
        try:
            importlib.import_module(name)
        except ImportError:  # an extra this install lacks: its commands import what they need
            pass
    if as_zygote:
        warm()
        zygote(args[0])
    else:
        serve(args[0])
