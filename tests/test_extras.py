"""Extras: a missing one is a one-line error naming it (``limelight._extras``), from the CLI and
from a package's lazy exports; the extras it names are pyproject.toml's.

Each CLI case runs ``limelight`` in a subprocess where the extra's modules cannot be imported (a
``sys.meta_path`` finder refuses them, as a core-only install would), so the check runs the same
in the full environment of ``make test`` and the core one of ``make test-core``; ``make
wheel-check`` runs the same commands against a real core-only install of the wheel.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from _inproc import run_cli

from limelight._extras import EXTRAS, MissingExtraError, extra_of, missing_extra
from limelight.errors import LimelightError

REPO = Path(__file__).resolve().parents[1]

# runs limelight's CLI with the modules named in argv[1] (comma-separated) refused
RUNNER = textwrap.dedent("""
    import sys

    BLOCKED = set(sys.argv[1].split(","))

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
    from limelight.cli import main

    main(sys.argv[2:], prog_name="limelight")
""")


# the same, for several commands in one interpreter (argv[2]: a JSON list of argument lists), in
# order; prints a JSON list of [exit status, stdout, stderr], one per command
RUNNER_MANY = RUNNER.split("main(sys.argv[2:]")[0] + textwrap.dedent("""
    import contextlib, io, json

    results = []
    for args in json.loads(sys.argv[2]):
        out, err, code = io.StringIO(), io.StringIO(), 0
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                main(args, prog_name="limelight")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        results.append([code, out.getvalue(), err.getvalue()])
    print(json.dumps(results))
""")


def run_without(modules, args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUNNER, ",".join(modules), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def adi(tmp_path_factory, data_dir) -> Path:
    """A copy of adi and a BM25 index of it, in a folder of the test's own."""
    work = tmp_path_factory.mktemp("extras")
    coll = work / "adi"
    coll.mkdir()
    for name in ("docs.jsonl", "queries.tsv", "qrels.txt"):
        (coll / name).write_bytes((data_dir / "collections" / "adi" / name).read_bytes())
    (work / "movies.json").write_bytes((data_dir / "catalogs" / "movies" / "movies.json").read_bytes())
    r = run_cli("index", "--collection", str(coll), "--out", str(work / "idx"))  # in this process
    assert r.returncode == 0, r.stderr
    (work / "terrier.toml").write_text('[system]\nkind = "pyterrier"\n'
                                       'factory = "limelight.retrieval.kinds.pyterrier:pisa_bm25"\n')
    return work


# one command per extra (the same as .ci/wheel_check.py's), run without that extra's modules
COMMANDS = {
    "dense": ["index", "--collection", "adi", "--out", "idx-dense", "--dense"],
    "rerank": ["rerank", "train", "adi", "--out", "tk.pt", "--max-steps", "2"],
    "querygen": ["generate", "train", "--catalog", "movies.json", "--schema", "movies", "--out",
                 "generator", "--steps", "1"],
    "serve": ["serve", "--audit", "no-audit"],
    "scale": ["exposure", "compute", "--index", "idx", "--queries", "adi/queries.tsv", "--out",
              "store-ray", "--engine", "ray"],
    "irds": ["index", "--collection", "irds:cranfield", "--out", "idx-irds"],
    "terrier": ["exposure", "compute", "--system", "terrier.toml", "--collection", "adi",
                "--queries", "adi/queries.tsv", "--out", "store-terrier"],
}


def test_every_extra_of_pyproject_is_known_and_has_a_command():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    runtime = set(extras) - {"all", "test", "dev", "docs"}
    assert runtime == set(EXTRAS) == set(COMMANDS)
    assert set(extras["all"][0].split("[")[1].rstrip("]").split(",")) == runtime


@pytest.mark.parametrize("extra", sorted(COMMANDS))
def test_cli_without_an_extra_says_which_in_one_line(extra, adi):
    r = run_without(EXTRAS[extra], COMMANDS[extra], adi)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"pip install 'limelight[{extra}]'" in lines[0], lines[0]


def test_cli_runs_core_commands_with_every_extra_refused(adi):
    """The core commands need none of the extras' modules (what the core install relies on).
    One interpreter, every extra's modules refused, runs the commands one after the other."""
    every = sorted({m for modules in EXTRAS.values() for m in modules})
    docid = json.loads((adi / "adi" / "docs.jsonl").read_text().splitlines()[0])["id"]
    commands = [
        ["--help"],
        ["exposure", "compute", "--index", "idx", "--queries", "adi/queries.tsv", "--out", "store",
         "--model", "bm25", "--depth", "10"],
        ["retrievability", "--store", "store", "--c", "10"],
        ["eqi", "query", docid, "--store", "store", "--method", "exact", "--json"],
        ["retrieve", "--index", "idx", "--queries", "adi/queries.tsv", "--out", "run.txt", "--k", "100"],
        ["evaluate", "run.txt", "--qrels", "adi/qrels.txt", "--json"],
        ["retrievability", "--run", "run.txt", "--docs", "adi/docs.jsonl"],
    ]
    p = subprocess.run([sys.executable, "-c", RUNNER_MANY, ",".join(every), json.dumps(commands)],
                       cwd=adi, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (help_, compute, retr_store, eqi, retrieve, evaluate, retr_run) = json.loads(p.stdout.splitlines()[-1])
    assert help_[0] == 0 and "exposure" in help_[1], help_[2]
    assert compute[0] == 0, compute[2]
    assert retr_store[0] == 0 and "gini:" in retr_store[1], retr_store[1] + retr_store[2]
    assert eqi[0] == 0 and eqi[1].strip(), eqi[2]
    assert retrieve[0] == 0, retrieve[2]
    assert evaluate[0] == 0 and "nDCG@10" in evaluate[1], evaluate[2]
    assert retr_run[0] == 0 and "gini:" in retr_run[1], retr_run[1] + retr_run[2]


def test_lazy_export_without_its_extra_names_it(adi):
    code = ("import limelight.service\n"
            "try:\n    limelight.service.create_app\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", RUNNER.split("from limelight.cli")[0] + code, "fastapi"],
                       capture_output=True, text=True, timeout=120, cwd=adi)
    assert r.stdout.startswith("MissingExtraError "), r.stdout + r.stderr
    assert "pip install 'limelight[serve]'" in r.stdout


def test_which_extra_a_module_belongs_to():
    assert extra_of("torch") == "dense"
    assert extra_of("torch", "limelight.rerank.models") == "rerank"
    assert extra_of("torch.nn", "limelight.querygen.generator") == "querygen"
    assert extra_of("transformers", "limelight.rerank.train") == "dense"  # rerank has none
    assert extra_of("fastapi.templating", "limelight.service.app") == "serve"
    assert extra_of("numpy") is None


def test_missing_extra_error_is_one_line_and_a_user_error():
    err = missing_extra(ModuleNotFoundError("No module named 'ray'", name="ray"))
    assert isinstance(err, MissingExtraError) and isinstance(err, LimelightError)
    assert isinstance(err, ImportError) and err.extra == "scale" and err.name == "ray"
    assert "\n" not in str(err) and "pip install 'limelight[scale]'" in str(err)
    assert missing_extra(ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None
