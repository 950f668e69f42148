"""Import time of the core install: ``import limelight`` and ``limelight --help`` beside
``python -c pass`` (issue 46: each ≤ 0.5 s).

    python benchmarks/import_time.py [--python PY | --base 3.13] [--repeat 15]

By default it builds (once, under ``.cache/bench/import-core-X.Y``) a venv with the core install only
(``uv pip install .``: no extra), so that the figure is the one a user of ``pip install limelight``
sees; ``--python`` measures another interpreter's environment instead (e.g. ``.venv/bin/python``,
everything installed); ``--base`` builds the core venv on another interpreter (a path, ``python3.13``
or a version such as ``3.13``: pyenv's newest 3.13.x, as ``make test-core`` finds it), and the rows
then name that Python. Each command runs ``--repeat`` times in fresh processes, alternating, after
one warm-up run each (bytecode compiled, files in the page cache); the median wall time is
recorded with the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _summary import record

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.5


def resolve_base(base: str) -> str:
    """The interpreter ``base`` names: a path, a command on PATH, or a version prefix (pyenv's
    newest match, else ``pythonX.Y`` on PATH). One line and exit 2 when there is none."""
    if Path(base).is_file():
        return base
    version = base.removeprefix("python")
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = sorted(pyenv.glob(f"{version}*/bin/python")) if version[:1].isdigit() else []
    exe = str(found[-1]) if found else shutil.which(base) or shutil.which(f"python{version}")
    if not exe:
        raise SystemExit(f"import_time: no Python {base!r} (not a file, not on PATH, not under {pyenv})")
    return exe


def _run(cmd: list[str]) -> str:
    """Run a set-up command; one line naming it when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"import_time: {' '.join(cmd[:3])} ... failed (exit {r.returncode}): {last}")
    return r.stdout.strip()


def core_venv(base: str) -> Path:
    """The python of a venv with the core install of this checkout (built once)."""
    version = _run([base, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    venv = ROOT / ".cache" / "bench" / f"import-core-{version}"
    py = venv / "bin" / "python"
    # uv: the lock's (make install puts it in .venv; make test-core in .cache/tools)
    uv = next((str(p) for p in (Path(sys.executable).parent / "uv", ROOT / ".cache/tools/bin/uv")
               if p.exists()), None) or shutil.which("uv") or "uv"
    if not py.exists():
        _run([uv, "venv", "--quiet", "--python", base, str(venv)])
        _run([uv, "pip", "install", "--quiet", "--python", str(py), str(ROOT)])
    else:  # the checkout may have changed since: reinstall limelight alone
        _run([uv, "pip", "install", "--quiet", "--no-deps", "--reinstall-package", "limelight",
              "--python", str(py), str(ROOT)])
    return py


def timed(cmd: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr[-500:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", help="measure this interpreter's environment (default: a core venv)")
    ap.add_argument("--base", default=sys.executable,
                    help="the interpreter of the core venv: a path, python3.13 or a version (3.13)")
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    py = Path(a.python) if a.python else core_venv(resolve_base(a.base))
    exe = py.parent / "limelight"
    cwd = Path("/")  # outside the checkout: the installed package, not src/
    pyver = _run([str(py), "-c", "import sys; print(sys.version.split()[0])"])
    # rows of the house's Python keep their names; another Python's rows name it
    minor = ".".join(pyver.split(".")[:2])
    tag = "" if minor == f"{sys.version_info[0]}.{sys.version_info[1]}" else f" (Python {minor})"
    env_note = f"{'core install' if not a.python else py}, Python {pyver}"
    cmds = {"python -c pass": [str(py), "-c", "pass"],
            "import limelight": [str(py), "-c", "import limelight"],
            "limelight --help": [str(exe), "--help"]}
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for cmd in cmds.values():
        timed(cmd, cwd)  # warm-up
    for _ in range(a.repeat):
        for name, cmd in cmds.items():
            times[name].append(timed(cmd, cwd))
    base = statistics.median(times["python -c pass"])
    record("python -c pass" + tag, base, unit="s", anchor="-", note=env_note)
    for name in ("import limelight", "limelight --help"):
        med = statistics.median(times[name])
        record(name + tag, med, unit="s", anchor="python -c pass" + tag, ratio=med / base,
               target=f"≤ {TARGET_S} s", met=med <= TARGET_S,
               note=f"{env_note}; median of {a.repeat}, {med - base:.3f} s over python -c pass")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
