"""The user's manual (issue 46): every fenced code block of its pages runs, and the site builds with
no warning.

Each page of the manual (``docs/index.md``, ``docs/manual/**/*.md``) is one session: its blocks run
in order in a fresh folder ``work/`` with ``../shared`` beside it (a link to the shared data, as a
clone sees it), the running interpreter's ``bin`` folder first on ``PATH`` (``.venv`` or, under
``make test``, the venv of the installed wheel):

- ``bash`` (and ``console``, ``sh``): run with ``bash -euo pipefail``; a failing command fails the
  test with the page and line of the block;
- ``python``: run with the running interpreter;
- a block with a ``title="FILE"`` (``toml``, ``tsv``, ``json``, ...): written to ``FILE``, which a
  later block of the page must use;
- ``text``: output shown to the reader, not run. Any other block (no language, another language)
  fails: each block says what it is.

A process a block leaves running (``limelight serve ... &``) is ended with its block's process
group when the page is done. The generated reference pages hold no runnable block (their
``text`` blocks are usage lines).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _shared import stop_process

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SHARED = REPO.parent / "shared"
BIN = Path(sys.executable).parent
PAGES = [DOCS / "index.md", *sorted((DOCS / "manual").rglob("*.md"))]
RUN = {"bash", "console", "sh", "python"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
                   re.M | re.S)


def blocks(page: Path) -> list[dict]:
    """The fenced blocks of ``page``: language, title, body (dedented) and 1-based line."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        lang = info.split()[0].strip("{}.") if info else ""
        title = re.search(r'title="([^"]+)"', info)
        indent = len(m.group("indent"))
        body = "".join(ln[indent:] + "\n" for ln in m.group("body").splitlines())
        out.append({"lang": lang, "title": title.group(1) if title else None, "body": body,
                    "line": text.count("\n", 0, m.start()) + 1})
    return out


def test_blocks_are_read_with_language_title_and_line(tmp_path: Path):
    """The extractor the page tests rely on: fences of any length, indented ones (in a list),
    titles, and the line each block starts on."""
    page = tmp_path / "page.md"
    page.write_text('# t\n\n```bash\nlimelight --version\n```\n\n- item\n\n  ```tsv title="q.tsv"\n'
                    '  1\tquery\n  ```\n\n````text\n```\nnested\n```\n````\n', encoding="utf-8")
    got = [(b["lang"], b["title"], b["body"], b["line"]) for b in blocks(page)]
    assert got == [("bash", None, "limelight --version\n", 3), ("tsv", "q.tsv", "1\tquery\n", 9),
                   ("text", None, "```\nnested\n```\n", 13)]


def test_every_block_says_what_it_is():
    """Each block of the manual is run, written to a file, or marked ``text`` (output)."""
    bad = [f"{p.relative_to(REPO)}:{b['line']}: ```{b['lang']}"
           for p in PAGES for b in blocks(p)
           if b["lang"] not in RUN and b["lang"] != "text" and not b["title"]]
    assert bad == []
    assert sum(b["lang"] in RUN for p in PAGES for b in blocks(p)) >= 30


# the libraries the module's fork-server zygote imports once, before any page's first command: what
# the pages' commands load (tests/_forkserver.py). Not torch: a command forked from a process that
# imported torch ran its model about 5 times slower (the rerank page's `rerank budget`: 45-49 CPU s
# against 8.5-9 with torch imported in the command itself, 2026-11-29), so the re-ranking commands
# import it themselves, as a new process does
PRELOAD = ["limelight.cli.root", "numpy", "pandas", "pyarrow", "pyarrow.parquet", "pyarrow.compute",
           "scipy.sparse", "scipy.stats", "numba", "pydantic", "rich", "tqdm", "bm25s", "asyncio",
           "multiprocessing", "limelight.data.loaders", "limelight.retrieval.bm25",
           "limelight.exposure.store", "limelight.exposure.retrievability", "limelight.evaluation",
           "limelight.retrieval.systems", "limelight.retrieval.index_dir", "limelight.evaluation.measures",
           "limelight.data.searcherlog", "limelight.exposure.compute", "limelight.exposure.topics",
           "limelight.exposure.fairness", "limelight.exposure.diff", "limelight.exposure.eqi",
           "limelight.audit.runner", "limelight.report.runner", "limelight.service.accounts",
           "limelight.service.app", "uvicorn", "matplotlib", "limelight.querygen.generator",
           *(f"limelight.cli.{m}" for m in ("core", "exposure", "audit", "eqi", "evaluate", "fairness",
                                            "generate", "rerank", "serve", "topics", "users", "variations"))]
COMMAND = re.compile(r"(?:^|[;&|(]|&&|\|\|)\s*(?:[A-Z_]+=\S+\s+)*limelight\s", re.M)


def processes(page_blocks: list[dict]) -> int:
    """How many ``limelight`` commands and Python blocks a page runs (roughly: what decides
    whether a fork server is worth its start)."""
    return sum(b["lang"] == "python" or len(COMMAND.findall(b["body"]))
               for b in page_blocks if b["lang"] in RUN and not b["title"])


PR_SET_CHILD_SUBREAPER = 36


def _children() -> set[int]:
    """The pids of this process's children (``/proc/self/task/*/children``)."""
    kids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            kids.update(int(pid) for pid in (task / "children").read_text().split())
    return kids


def _end(pid: int, timeout: float = 30.0) -> None:
    """Send ``SIGTERM`` to this process's child ``pid``, wait for it (``SIGKILL`` after
    ``timeout`` s): its CPU time counts in the test's."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    try:
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.05)
    except ChildProcessError:
        pass


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """This process as a child subreaper while a page runs: the page server the zygote forks for
    it, and any process of the page whose parent ends before it (a launcher left in the
    background), become its children; at the end, those still here are ended and waited for, so
    that their CPU time counts in the page's test and none is left running."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = _children()
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        for pid in _children() - before:
            _end(pid, timeout=10.0)


class Zygote:
    """The module's fork-server zygote (``tests/_forkserver.py --zygote``), started on first use:
    the libraries imported once for every page, a page server forked from it per page."""

    def __init__(self, folder: Path, env: dict[str, str], modules: list[str]):
        self.folder, self.env, self.modules = folder, env, modules
        self.address = f"limelight-manual-zygote-{os.getpid()}-{uuid.uuid4().hex}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if self.proc is not None:
            return
        log = self.folder / "zygote.log"
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_forkserver.py")),
                                      "--zygote", self.address, *self.modules], cwd=self.folder,
                                     env=self.env, stdout=subprocess.PIPE, stderr=log.open("w"),
                                     stdin=subprocess.DEVNULL, text=True)
        ready = self.proc.stdout.readline()
        assert ready == "ready\n", log.read_text()[-3000:]

    def spawn(self, address: str, cwd: Path, env: dict[str, str]) -> int:
        """A page server listening on ``address``, in ``cwd`` with ``env``: a child of this
        process, which must be a child subreaper (``subreaper``); its pid."""
        self.start()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect("\0" + self.address)
            s.sendall((json.dumps({"address": address, "cwd": str(cwd), "env": env}) + "\n").encode())
            with s.makefile("r") as f:
                line = f.readline()
        assert line.strip().isdigit(), (self.folder / "zygote.log").read_text()[-3000:]
        return int(line)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 30)


def page_env() -> dict[str, str]:
    """The environment of a page's blocks (before a fork server's launchers go first on ``PATH``)."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "HF_HUB_OFFLINE": "1", "LIMELIGHT_DATA": str(SHARED / "data"), "NO_COLOR": "1",
            "COLUMNS": "120"}


@pytest.fixture(scope="module")
def zygote(tmp_path_factory) -> Iterator[Zygote]:
    """The fork-server zygote the pages of this module share (``Zygote``): started by the first
    page that runs three or more commands, ended with the module (its own CPU time, the imports,
    about 3 s, counts in the module's last test, where it is waited for)."""
    z = Zygote(tmp_path_factory.mktemp("zygote"), page_env(), PRELOAD)
    try:
        yield z
    finally:
        z.stop()


def test_fork_server_runs_commands_as_a_process_would(tmp_path: Path):
    """The launcher a page's blocks run (``tests/_forkserver.py``) passes on what a page test
    judges: a command's output and exit status, its one-line error, a Python block's exception
    (status 1) and a death by signal, so that a page through the fork server fails as it would
    without it."""
    from _forkserver import launcher_script

    address = f"limelight-manual-test-{os.getpid()}-{uuid.uuid4().hex}"
    for name, mode in (("limelight", "limelight"), ("python-forked", "python")):
        (tmp_path / name).write_text(launcher_script(address, mode), encoding="utf-8")
        (tmp_path / name).chmod(0o755)
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_forkserver.py")), address,
                               "limelight.cli.root"], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        assert server.stdout.readline() == "ready\n"

        def run(*cmd: str) -> subprocess.CompletedProcess:
            return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "MARK": "from-the-launcher"})

        from limelight import __version__

        ok = run(str(tmp_path / "limelight"), "--version")
        assert (ok.returncode, __version__ in ok.stdout) == (0, True), ok
        bad = run(str(tmp_path / "limelight"), "exposure", "doc", "1", "--store", "nope")
        assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr, bad
        (tmp_path / "ok.py").write_text("import os, sys\nprint(os.environ['MARK'], os.getcwd(), sys.argv[1:])\n")
        got = run(str(tmp_path / "python-forked"), "ok.py", "x")
        assert got.returncode == 0 and got.stdout == f"from-the-launcher {tmp_path} ['x']\n", got
        (tmp_path / "raises.py").write_text("raise ValueError('a page that is wrong')\n")
        raised = run(str(tmp_path / "python-forked"), "raises.py")
        assert raised.returncode == 1 and "ValueError: a page that is wrong" in raised.stderr, raised
        (tmp_path / "killed.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
        assert run(str(tmp_path / "python-forked"), "killed.py").returncode == -signal.SIGTERM
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


def test_zygote_hands_page_servers_to_the_test(tmp_path: Path):
    """The zygote the pages share forks each page's server as a child of the test that asked
    (so that the test waits for it and counts its CPU time), in the page's folder, where a command
    answers as a process would; a process of the page left running in the background after its
    parent ended is ended and waited for when the page is done."""
    from _forkserver import launcher_script

    from limelight import __version__

    z = Zygote(tmp_path, page_env(), ["limelight.cli.root"])
    z.start()
    try:
        with subreaper():
            address = f"limelight-manual-test-{os.getpid()}-{uuid.uuid4().hex}"
            (tmp_path / "limelight").write_text(launcher_script(address, "limelight"), encoding="utf-8")
            (tmp_path / "limelight").chmod(0o755)
            work = tmp_path / "work"
            work.mkdir()
            pid = z.spawn(address, work, page_env())
            assert pid in _children()
            ok = subprocess.run([str(tmp_path / "limelight"), "--version"], cwd=work, capture_output=True,
                                text=True, timeout=60)
            assert (ok.returncode, __version__ in ok.stdout) == (0, True), ok
            left = subprocess.run(["bash", "-c", "sleep 600 > /dev/null 2>&1 & echo $!"], capture_output=True,
                                  text=True, timeout=60)
            orphan = int(left.stdout)
            assert orphan in _children()  # handed to this process when its bash ended
            os.kill(pid, signal.SIGTERM)
            assert os.waitpid(pid, 0)[1] == 0
        with pytest.raises(ProcessLookupError):
            os.kill(orphan, 0)
    finally:
        z.stop()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_manual_page_runs(page: Path, tmp_path: Path, zygote: Zygote):
    """CPU: each page's blocks run as written (the rerank page trains TK and re-ranks cranfield); a page is what a reader runs, so its cost is the page's.

    A page that runs three or more ``limelight`` commands and Python blocks runs them through a
    fork server of its own (``tests/_forkserver.py``): ``limelight`` on the blocks' ``PATH`` is a
    launcher that has the command forked from an interpreter that already imported limelight and
    its libraries, the console script's entry point run there with the command's arguments,
    folder, environment, standard streams and exit status, without the second or so a new
    interpreter spends importing numpy, pandas, pyarrow, numba per command. The page's
    server is forked from the module's zygote (``zygote``), which imported those libraries once for
    all the pages, and is this test's child (``subreaper``): the page's commands count in its CPU
    time. The other pages (``index.md`` among them: ``limelight --version`` is the reader's check
    of the installed console script) run the console script itself."""
    if not SHARED.is_dir():
        pytest.fail(f"the shared data folder {SHARED} is missing")
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)
    env = page_env()
    page_blocks = blocks(page)
    forked = processes(page_blocks) >= 3
    if forked:
        zygote.start()  # before subreaper(): the zygote outlives the page
    with subreaper():
        run_page(page, page_blocks, tmp_path, work, env, zygote if forked else None)


def run_page(page: Path, page_blocks: list[dict], tmp_path: Path, work: Path, env: dict[str, str],
             zygote: Zygote | None) -> None:
    """Run ``page``'s blocks in ``work``, through a page server forked by ``zygote`` if given."""
    groups: list[int] = []
    server = None
    python = [sys.executable]
    if zygote is not None:
        from _forkserver import launcher_script

        address = f"limelight-manual-{os.getpid()}-{uuid.uuid4().hex}"
        launchers = tmp_path / "bin"
        launchers.mkdir()
        for name, mode in (("limelight", "limelight"), ("python-forked", "python")):
            (launchers / name).write_text(launcher_script(address, mode), encoding="utf-8")
            (launchers / name).chmod(0o755)
        server = zygote.spawn(address, work, env)
        env = {**env, "PATH": f"{launchers}{os.pathsep}{env['PATH']}"}
        python = [str(launchers / "python-forked")]
    try:
        for i, b in enumerate(page_blocks):
            where = f"{page.relative_to(REPO)}:{b['line']}"
            if b["title"]:
                target = work / b["title"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(b["body"], encoding="utf-8")
                later = " ".join(x["body"] for x in page_blocks[i + 1:] if x["lang"] in RUN)
                assert b["title"] in later, f"{where}: no later block uses {b['title']}"
                continue
            if b["lang"] not in RUN:
                continue
            script = tmp_path / f"block-{i}.{'py' if b['lang'] == 'python' else 'sh'}"
            script.write_text(b["body"], encoding="utf-8")
            cmd = ([*python, str(script)] if b["lang"] == "python"
                   else ["bash", "-euo", "pipefail", str(script)])
            log = tmp_path / f"block-{i}.log"
            with log.open("w") as out:  # a file, not a pipe: a server left running keeps no pipe open
                proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
                groups.append(proc.pid)
                try:
                    rc = proc.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    rc = None
            tail = log.read_text(errors="replace")[-3000:]
            assert rc == 0, f"{where}: the {b['lang']} block exited {rc}:\n{tail}"
    finally:
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if server is not None:  # it ends what still runs (a server a block started) and waits for it
            _end(server)


def test_manual_builds_without_warnings(tmp_path: Path):
    """``mkdocs build --strict`` (what ``make docs`` runs): every warning is an error, e.g. a broken
    link or anchor, a docstring mkdocstrings cannot read, a page outside the navigation; and the
    generated reference pages hold every configuration key and every command."""
    mkdocs = BIN / "mkdocs"
    if not mkdocs.exists():
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]'")
    site = tmp_path / "site"
    env = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "WARNING" not in r.stderr, r.stderr[-4000:]
    for page in ("index.html", "reference/configuration/index.html", "reference/cli/index.html",
                 "reference/glossary/index.html", "reference/api/data/index.html",
                 "results/index.html", "architecture/index.html"):
        assert (site / page).is_file(), page
    conf = (site / "reference/configuration/index.html").read_text(encoding="utf-8")
    from limelight.audit.stages import STAGE_OPTIONS
    from limelight.retrieval.systems import describe_kinds

    for table, schema in STAGE_OPTIONS.items():
        assert f"[{table}]" in conf
        for key in schema.keys:
            assert f"<code>{key}</code>" in conf, (table, key)
    for kind in describe_kinds():
        assert f"kind <code>{kind['kind']}</code>" in conf
        for param in kind["parameters"]:
            assert f"<code>{param}</code>" in conf, (kind["kind"], param)
    cli = (site / "reference/cli/index.html").read_text(encoding="utf-8")
    for command in ("limelight audit", "limelight exposure compute", "limelight eqi query",
                    "limelight rerank train", "limelight generate train", "limelight serve"):
        assert f"<code>{command}</code>" in cli, command
