"""The bad-input suite (issue 52): hundreds of bad or hostile inputs, each run in this process
(``limelight.cli.main`` under ``CliRunner``'s isolation, the served app under ``TestClient``, a
hostile service on loopback), a few milliseconds each. Every case asserts what a user is
promised (docs/manual/formats.md, "Errors"):

* the CLI: exit 0, or exit 2 with one line ``error: ...`` on stderr naming the file (and its
  line where the case is about a line), the option, the id or the URL; an interrupt exits 130;
  never a traceback;
* no file of the user's changed: every input, and every file that sat where an output goes, is
  byte-identical afterwards (and nothing half-written is left beside it);
* the API: never a 5xx; JSON with a ``detail`` that names the parameter or says what is wrong.

The categories and their case counts are listed in docs/manual/formats.md; ``test_suite_size``
keeps the two in step.
"""

from __future__ import annotations

import gzip
import json
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import _inproc
import pytest
import test_serve_support as support

audit_dir, service, client = support.audit_dir, support.service, support.client
REPO = Path(__file__).resolve().parents[1]


# ---- running a command ----------------------------------------------------------------------------
def run_cli(*args) -> tuple[int, str, str]:
    """``limelight ARGS`` in this process (``tests/_inproc.py``): (exit status, stdout, stderr)."""
    p = _inproc.run_cli(*map(str, args))
    return p.returncode, p.stdout, p.stderr


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (links by their target)."""
    return {str(p.relative_to(root)): (p.read_bytes() if not p.is_symlink() else str(p.readlink()).encode())
            for p in sorted(root.rglob("*")) if p.is_file() or p.is_symlink()}


def check_answer(res: tuple[int, str, str], names: list[str], ok: bool = True) -> None:
    """Exit 0 (when ``ok``), or exit 2 with one ``error:`` line naming one of ``names`` (the
    file of the case, or another input of the command that its damage shows in)."""
    code, out, err = res
    assert "Traceback" not in out + err, err
    if code == 0 and ok:
        return
    assert code == 2, res
    lines = [ln for ln in err.splitlines() if not ln.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert any(n in lines[0] for n in names), (names, lines[0])


# ---- the shared inputs (built once) ---------------------------------------------------------------
RUN = b"q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1.5 t\nq2 Q0 d3 1 0.5 t\n"
QRELS = b"q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 2\n"
QUERIES = b"1\tinformation retrieval\n2\tcomputer indexing\n"
DOCS = b'{"id": "d1", "text": "apple pie"}\n{"id": "d2", "text": "pear tart"}\n{"id": "d3", "text": "plum cake"}\n'
TOML = (b'[audit]\nname = "x"\ndepth = 10\n\n[collection]\nsource = "adi"\n\n'
        b'[[systems]]\nname = "bm25"\nkind = "bm25"\n')


@pytest.fixture(scope="module")
def built(tmp_path_factory, data_dir) -> dict[str, Path]:
    """An adi index and a store of its queries (depth 10), limelight's own, made once."""
    root = tmp_path_factory.mktemp("bad-inputs")
    assert run_cli(*["index", "--collection", "adi", "--out", root / "idx"])[0] == 0
    code, _, err = run_cli(*["exposure", "compute", "--index", root / "idx", "--queries",
                            data_dir / "collections" / "adi" / "queries.tsv", "--out", root / "store",
                            "--depth", "10"])
    assert code == 0, err
    return {"idx": root / "idx", "store": root / "store"}


# ---- malformed files and encodings: each reader, through the command that reads it ---------------
#: per kind of file: a valid seed, its name, and the command that reads it ({f}: the file)
READERS = {
    "run": (RUN, "r.run", ["evaluate", "{f}", "--qrels", "{qrels}"]),
    "run-retrievability": (RUN, "r.run", ["retrievability", "--run", "{f}"]),
    "qrels": (QRELS, "q.qrels", ["evaluate", "{run}", "--qrels", "{f}"]),
    "queries": (QUERIES, "q.tsv", ["retrieve", "--index", "{idx}", "--queries", "{f}", "--k", "5",
                                   "--out", "{work}/out.run"]),
    "docs": (DOCS, "docs.jsonl", ["index", "--collection", "{f}", "--out", "{work}/idx-new"]),
    "groups": (b"1\tpress\n2\tlibrary\n", "g.tsv", ["fairness", "--store", "{store}", "--groups", "{f}",
                                                    "--boot", "0"]),
    "doc-list": (b"d1\nd2\nd3\n", "docs.txt", ["retrievability", "--run", "{run}", "--docs", "{f}"]),
    "config": (TOML, "a.toml", ["audit", "{f}", "--out", "{work}/audit", "--check"]),
}


def _mutations(seed: bytes) -> dict[str, bytes | None]:
    """Malformed versions of a seed (``None``: the path is a folder)."""
    lines = seed.splitlines(keepends=True)
    rng = random.Random(len(seed))
    return {
        "empty": b"",
        "blank-lines": b"\n  \n\t\n",
        "latin1-line-2": lines[0] + lines[1].replace(b"e", b"\xe9", 1) + b"".join(lines[2:]),
        "utf16": seed.decode().encode("utf-16"),
        "nul-byte": seed[:5] + b"\x00" + seed[5:],
        "cut-mid-line": seed[: len(seed) - 4],
        "binary": bytes(rng.randrange(256) for _ in range(300)),
        "one-long-line": seed.rstrip(b"\n") + b"x" * 200_000 + b"\n",
        "crlf": seed.replace(b"\n", b"\r\n"),
        "bom": b"\xef\xbb\xbf" + seed,
        "repeated": seed + seed,
        "tab-soup": seed.replace(b" ", b"\t\t").replace(b"\t", b" \t "),
        "json-instead": b'{"not": "this format"}\n',
        "html": b"<!doctype html><html><body>404</body></html>\n",
        "a-folder": None,
    }


FILE_CASES = [(kind, m) for kind in READERS for m in _mutations(READERS[kind][0])]


def _materialize(work: Path, name: str, data: bytes | None) -> Path:
    p = work / name
    if data is None:
        p.mkdir()
        (p / "inside.txt").write_text("the user's")
    else:
        p.write_bytes(data)
    return p


def _argv(template: list[str], work: Path, built: dict, **files: Path) -> list[str]:
    fill = {"work": str(work), "idx": str(built["idx"]), "store": str(built["store"]),
            **{k: str(v) for k, v in files.items()}}
    return [t.format(**fill) for t in template]


def _inputs(work: Path) -> tuple[Path, Path]:
    run, qrels = work / "good.run", work / "good.qrels"
    run.write_bytes(RUN)
    qrels.write_bytes(QRELS)
    return run, qrels


@pytest.mark.parametrize("kind, mutation", FILE_CASES, ids=[f"{k}-{m}" for k, m in FILE_CASES])
def test_malformed_files(built, tmp_path, kind, mutation):
    seed, name, template = READERS[kind]
    run, qrels = _inputs(tmp_path)
    f = _materialize(tmp_path, name, _mutations(seed)[mutation])
    before = snapshot(tmp_path)
    res = run_cli(*_argv(template, tmp_path, built, f=f, run=run, qrels=qrels))
    check_answer(res, [str(f), str(run), str(qrels)])
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing of the user's changed


@pytest.mark.parametrize("kind", ["run", "qrels", "queries", "docs"])
@pytest.mark.parametrize("how", ["not-gzip", "cut", "flipped"])
def test_damaged_gzip_files(built, tmp_path, kind, how):
    reader = {"run": "run", "qrels": "qrels", "queries": "queries", "docs": "docs"}[kind]
    seed, name, template = READERS[reader]
    blob = gzip.compress(seed * 50)
    data = {"not-gzip": seed, "cut": blob[: len(blob) // 2],
            "flipped": blob[:12] + bytes([blob[12] ^ 0xFF]) + blob[13:]}[how]
    run, qrels = _inputs(tmp_path)
    f = _materialize(tmp_path, name + ".gz", data)
    before = snapshot(tmp_path)
    check_answer(run_cli(*_argv(template, tmp_path, built, f=f, run=run, qrels=qrels)), [str(f)])
    assert {k: v for k, v in snapshot(tmp_path).items() if k in before} == before


# ---- hostile numbers: in files (named by file and line) and in options (named by option) ----------
NUMBER_LINES = {
    # kind: (line 2 replaced by each value, where the value goes)
    "run": (["q1 Q0 d2 2 {} t"], ["nan", "inf", "-inf", "1e999", "NaN", "0x10", "1,5", "", "--1", "1e-400"]),
    "run-retrievability": (["q1 Q0 d2 2 {} t"], ["nan", "inf", "-inf", "1e999", "1,5"]),
    "qrels": (["q1 0 d2 {}"], ["1.5", "nan", "inf", "-1", "1e999", "two", "99999999999999999999"]),
}


def _number_cases():
    for kind, (_, values) in NUMBER_LINES.items():
        for v in values:
            yield kind, v


NUMBER_CASES = list(_number_cases())


@pytest.mark.parametrize("kind, value", NUMBER_CASES, ids=[f"{k}-{v or 'blank'}" for k, v in NUMBER_CASES])
def test_hostile_numbers_in_files(built, tmp_path, kind, value):
    seed, name, template = READERS[kind]
    lines = seed.decode().splitlines()
    lines[1] = NUMBER_LINES[kind][0][0].format(value)
    run, qrels = _inputs(tmp_path)
    f = _materialize(tmp_path, name, ("\n".join(lines) + "\n").encode())
    before = snapshot(tmp_path)
    check_answer(run_cli(*_argv(template, tmp_path, built, f=f, run=run, qrels=qrels)), [f"{f}:2"])
    assert snapshot(tmp_path) == before or set(before) <= set(snapshot(tmp_path))


OPTION_CASES = [
    *[("evaluate", "--alpha", v) for v in ["nan", "inf", "-inf", "0", "1", "5", "-0.1", "x"]],
    *[("evaluate", "--n-docs", v) for v in ["0", "-5", "1e3", "nan"]],
    *[("evaluate", "-m", v) for v in ["P@0", "nDCG@-1", "AP@nan", "R@1e99", "Bogus", "P@", "@5", ""]],
    *[("evaluate", "--test", v) for v in ["z", ""]],
    *[("retrieve", "--k", v) for v in ["0", "-1", "nan", "99999999999999999999999"]],
    *[("retrieve", "--threads", v) for v in ["0", "-2"]],
    *[("retrieve", "--model", v) for v in ["magic", ""]],
    *[("retrievability", "--c", v) for v in ["0", "-1", "nan", "1000000000000"]],
    *[("retrievability", "--beta", v) for v in ["nan", "inf", "-inf", "-1"]],
    *[("fairness", "--boot", v) for v in ["-1", "nan"]],
    *[("fairness", "--top", v) for v in ["0", "-3"]],
    *[("fairness", "--browsing", v) for v in ["rbp:0", "rbp:1.5", "rbp:nan", "rbp:-1", "cutoff:0", "cutoff:-1",
                                              "dcg:3", "", "rbp:inf", "magic"]],
    *[("fairness", "--target", v) for v in ["bogus", ""]],
    *[("compute", "--depth", v) for v in ["0", "-1", "nan"]],
    *[("compute", "--shard-size", v) for v in ["0", "-1"]],
    *[("index", "--memory-gb", v) for v in ["0", "-1", "nan", "inf", "-inf"]],
    *[("index", "--stopwords", v) for v in ["klingon", ""]],
    *[("search", "--k", v) for v in ["0", "-1"]],
    *[("search", "TEXT", v) for v in ["", "   ", "\t\n", "\x00"]],
    *[("compare", "--preference", v) for v in ["Bogus", "P@0", ""]],
]


def _option_argv(cmd: str, opt: str, value: str, work: Path, built: dict) -> list[str]:
    run, qrels = _inputs(work)
    queries = work / "q.tsv"
    queries.write_bytes(QUERIES)
    base = {
        "evaluate": ["evaluate", run, run, "--qrels", qrels],
        "compare": ["compare", run, run, "--qrels", qrels],
        "retrieve": ["retrieve", "--index", built["idx"], "--queries", queries, "--out", work / "o.run"],
        "retrievability": ["retrievability", "--store", built["store"]],
        "fairness": ["fairness", "--store", built["store"], "--group-field", "title", "--boot", "0"],
        "compute": ["exposure", "compute", "--index", built["idx"], "--queries", queries, "--out", work / "st"],
        "index": ["index", "--collection", "adi", "--out", work / "i"],
        "search": ["search", "--index", built["idx"]],
    }[cmd]
    if opt == "TEXT":
        return [*base, value]
    return [*base, opt, value] + (["x"] if cmd == "search" else [])


@pytest.mark.parametrize("cmd, opt, value", OPTION_CASES, ids=[f"{c}{o}={v!r}" for c, o, v in OPTION_CASES])
def test_hostile_numbers_and_values_in_options(built, tmp_path, cmd, opt, value):
    argv = _option_argv(cmd, opt, value, tmp_path, built)
    before = snapshot(tmp_path)
    code, out, err = run_cli(*argv)
    assert "Traceback" not in out + err, err
    assert {k: v for k, v in snapshot(tmp_path).items() if k in before} == before
    if code == 0:
        return
    assert code == 2, (code, out, err)
    if f"Invalid value for '{opt}'" in err:  # click's usage error (a type it cannot parse): exit 2, named
        return
    lines = [ln for ln in err.splitlines() if not ln.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    if value.strip():  # named: by its option, or the value as given
        assert opt in lines[0] or value in lines[0] or repr(value) in lines[0], lines[0]


# ---- paths: outputs over the user's files and folders, inputs that are not what they say ---------
def _users(work: Path) -> dict[str, Path]:
    f = work / "notes.txt"
    f.write_text("my notes")
    d = work / "mine"
    d.mkdir()
    (d / "keep.txt").write_text("keep me")
    return {"file": f, "folder": d, "below-file": f / "sub" / "out", "missing": work / "nowhere" / "x",
            "empty-name": work / ""}


PATH_CASES = [
    ("index --out", "file"), ("index --out", "folder"), ("index --out", "below-file"),
    ("retrieve --out", "file"), ("retrieve --out", "folder"), ("retrieve --out", "below-file"),
    ("retrievability --out", "file"), ("retrievability --out", "folder"), ("retrievability --out", "below-file"),
    ("compute --out", "file"), ("compute --out", "folder"), ("compute --out", "below-file"),
    ("audit --out", "file"), ("audit --out", "folder"), ("audit --out", "below-file"),
    ("search --index", "file"), ("search --index", "folder"), ("search --index", "missing"),
    ("retrieve --index", "file"), ("retrieve --index", "folder"), ("retrieve --index", "missing"),
    ("retrievability --store", "file"), ("retrievability --store", "folder"), ("retrievability --store", "missing"),
    ("fairness --store", "file"), ("fairness --store", "folder"), ("fairness --store", "missing"),
    ("evaluate --qrels", "folder"), ("evaluate --qrels", "missing"),
    ("evaluate RUN", "folder"), ("evaluate RUN", "missing"),
    ("retrieve --queries", "folder"), ("retrieve --queries", "missing"),
    ("index --collection", "folder"), ("index --collection", "missing"), ("index --collection", "file"),
    ("audit CONFIG", "folder"), ("audit CONFIG", "missing"), ("audit CONFIG", "file"),
    ("fairness --groups", "folder"), ("fairness --groups", "missing"),
    ("retrievability --docs", "folder"), ("retrievability --docs", "missing"),
    ("exposure doc --store", "file"), ("exposure doc --store", "missing"),
]


def _path_argv(case: str, p: Path, work: Path, built: dict) -> list[str]:
    run, qrels = _inputs(work)
    queries = work / "q.tsv"
    queries.write_bytes(QUERIES)
    cfg = work / "a.toml"
    cfg.write_bytes(TOML)
    return {
        "index --out": ["index", "--collection", "adi", "--out", p],
        "retrieve --out": ["retrieve", "--index", built["idx"], "--queries", queries, "--k", "3", "--out", p],
        "retrievability --out": ["retrievability", "--store", built["store"], "--out", p],
        "compute --out": ["exposure", "compute", "--index", built["idx"], "--queries", queries, "--out", p],
        "audit --out": ["audit", cfg, "--out", p],
        "search --index": ["search", "--index", p, "x"],
        "retrieve --index": ["retrieve", "--index", p, "--queries", queries, "--out", work / "o.run"],
        "retrievability --store": ["retrievability", "--store", p],
        "fairness --store": ["fairness", "--store", p, "--group-field", "title"],
        "evaluate --qrels": ["evaluate", run, "--qrels", p],
        "evaluate RUN": ["evaluate", p, "--qrels", qrels],
        "retrieve --queries": ["retrieve", "--index", built["idx"], "--queries", p, "--out", work / "o.run"],
        "index --collection": ["index", "--collection", p, "--out", work / "i"],
        "audit CONFIG": ["audit", p, "--out", work / "a", "--check"],
        "fairness --groups": ["fairness", "--store", built["store"], "--groups", p],
        "retrievability --docs": ["retrievability", "--run", run, "--docs", p],
        "exposure doc --store": ["exposure", "doc", "1", "--store", p],
    }[case]


@pytest.mark.parametrize("case, what", PATH_CASES, ids=[f"{c}-{w}" for c, w in PATH_CASES])
def test_paths(built, tmp_path, case, what):
    p = _users(tmp_path)[what]
    argv = _path_argv(case, p, tmp_path, built)
    before = snapshot(tmp_path)
    res = run_cli(*argv)
    check_answer(res, [str(p)], ok=case.endswith("--out") and what == "missing")
    assert {k: v for k, v in snapshot(tmp_path).items() if k in before} == before
    assert not [x for x in tmp_path.rglob("*.tmp")], "a temporary file was left"


def test_own_outputs_are_replaced_and_edited_ones_refused(built, tmp_path):
    """The other side of the path rule: limelight's own run file is replaced, one the user
    edited is theirs."""
    queries = tmp_path / "q.tsv"
    queries.write_bytes(QUERIES)
    out = tmp_path / "o.run"
    argv = ["retrieve", "--index", built["idx"], "--queries", queries, "--k", "2", "--out", out]
    assert run_cli(*argv)[0] == 0 and run_cli(*argv)[0] == 0
    out.write_bytes(out.read_bytes() + b"\n")
    check_answer(run_cli(*argv), [str(out)], ok=False)
    assert "--overwrite" in run_cli(*argv)[2]


# ---- interrupts: Ctrl-C in the middle of a command -------------------------------------------------
INTERRUPT_CASES = [
    ("retrieve", "limelight.data.formats.write_trec_run"),
    ("retrieve", "limelight.retrieval.spec.System.open"),
    ("index", "limelight.retrieval.index_dir.build_index_from"),
    ("evaluate", "limelight.evaluation.compare.evaluate_runs"),
    ("retrievability", "limelight.exposure.retrievability.Retrievability.to_pandas"),
    ("fairness", "limelight.exposure.fairness.group_fairness"),
]


@pytest.mark.parametrize("cmd, where", INTERRUPT_CASES, ids=[f"{c}-{w.rsplit('.', 1)[1]}" for c, w in INTERRUPT_CASES])
def test_interrupts(built, tmp_path, monkeypatch, cmd, where):
    """Ctrl-C (a ``KeyboardInterrupt`` raised where the work is) exits 130 without a traceback;
    the user's files are as they were and no half-written output is left."""
    import importlib

    mod_name, attr = where.rsplit(".", 1)
    try:
        target = importlib.import_module(mod_name)
    except ModuleNotFoundError:  # a class attribute
        mod_name, cls = mod_name.rsplit(".", 1)
        target = getattr(importlib.import_module(mod_name), cls)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, attr, interrupted)
    # main ends an interrupted command with os._exit(130) (no interpreter teardown); here that end
    # is a SystemExit, so that this process lives on to look at the files
    monkeypatch.setattr("limelight.cli.root._exit_now", lambda status: sys.exit(status))
    users = _users(tmp_path)
    run, qrels = _inputs(tmp_path)
    queries = tmp_path / "q.tsv"
    queries.write_bytes(QUERIES)
    groups = tmp_path / "g.tsv"
    groups.write_bytes(b"1\tpress\n")
    argv = {
        "retrieve": ["retrieve", "--index", built["idx"], "--queries", queries, "--out", tmp_path / "o.run"],
        "index": ["index", "--collection", "adi", "--out", tmp_path / "i"],
        "evaluate": ["evaluate", run, "--qrels", qrels],
        "retrievability": ["retrievability", "--store", built["store"], "--out", tmp_path / "r.tsv"],
        "fairness": ["fairness", "--store", built["store"], "--groups", groups, "--boot", "0"],
    }[cmd]
    before = snapshot(tmp_path)
    code, out, err = run_cli(*argv)
    assert code == 130 and "Traceback" not in out + err, (code, err)
    assert err.strip().splitlines()[-1].startswith("interrupted"), err
    assert snapshot(tmp_path) == before and users["file"].read_text() == "my notes"


# ---- hostile servers: a live service that answers badly --------------------------------------------
ANSWERS = {  # path: (status, content type, body)
    "html": (200, "text/html", b"<!doctype html><p>search is down</p>"),
    "empty": (200, "application/json", b""),
    "truncated": (200, "application/json", b'{"hits": {"hits": [{"_id": "1", "_sco'),
    "no-hits": (200, "application/json", b'{"took": 3}'),
    "hits-a-dict": (200, "application/json", b'{"hits": {"hits": {"_id": "1"}}}'),
    "hits-a-number": (200, "application/json", b'{"hits": {"hits": 7}}'),
    "no-id": (200, "application/json", b'{"hits": {"hits": [{"_score": 1.0}]}}'),
    "id-null": (200, "application/json", b'{"hits": {"hits": [{"_id": null, "_score": 1.0}]}}'),
    "id-a-list": (200, "application/json", b'{"hits": {"hits": [{"_id": [1], "_score": 1.0}]}}'),
    "nan-score": (200, "application/json", b'{"hits": {"hits": [{"_id": "1", "_score": NaN}]}}'),
    "inf-score": (200, "application/json", b'{"hits": {"hits": [{"_id": "1", "_score": Infinity}]}}'),
    "string-score": (200, "application/json", b'{"hits": {"hits": [{"_id": "1", "_score": "high"}]}}'),
    "bool-score": (200, "application/json", b'{"hits": {"hits": [{"_id": "1", "_score": true}]}}'),
    "unknown-ids": (200, "application/json", b'{"hits": {"hits": [{"_id": "no-such-doc", "_score": 1.0}]}}'),
    "not-utf8": (200, "application/json", b'{"hits": {"hits": [{"_id": "\xff", "_score": 1.0}]}}'),
    "deep": (200, "application/json", b"[" * 100_000 + b"]" * 100_000),
    "404": (404, "application/json", b'{"error": "no such index"}'),
    "401": (401, "application/json", b'{"error": "who are you"}'),
    "403": (403, "text/plain", b"forbidden"),
    "redirect": (302, "text/plain", b""),
    "ok-no-results": (200, "application/json", b'{"hits": {"hits": []}}'),
    "ok-null-hits": (200, "application/json", b'{"hits": {"hits": null}}'),
}


class _Hostile(BaseHTTPRequestHandler):
    def _answer(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        status, ctype, body = ANSWERS[self.path.split("/")[1].split("?")[0]]
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        if status == 302:
            self.send_header("location", "http://127.0.0.1:9/elsewhere")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_hostile_servers(hostile, tmp_path, answer):
    url = f"{hostile}/{answer}/_search"
    queries = tmp_path / "q.tsv"
    queries.write_bytes(QUERIES)
    before = snapshot(tmp_path)
    res = run_cli(*["exposure", "compute", "--url", url, "--preset", "elasticsearch", "--collection", "adi",
                   "--queries", queries, "--out", tmp_path / "store", "--depth", "5"])
    check_answer(res, [url], ok=answer.startswith("ok-"))
    if answer.startswith("ok-"):
        assert res[0] == 0
    else:
        assert res[0] == 2 and not (tmp_path / "store" / "manifest.json").exists()
    assert {k: v for k, v in snapshot(tmp_path).items() if k in before} == before


# ---- the served app: hostile requests ---------------------------------------------------------------
HUGE = "9" * 40
API_GETS = [
    *[("/api/search", {"q": q}) for q in ["", " ", "\x00", "x" * 5000, "\ud800".encode("utf-8", "surrogatepass").decode("latin-1")]],
    *[("/api/search", {"q": "star", "limit": v}) for v in ["0", "-1", HUGE, "nan", "1e3", "", "1.5"]],
    *[("/api/search", {"q": "star", "offset": v}) for v in ["-1", HUGE, "x", "1000"]],
    *[("/api/search", {"q": "star", "model": v}) for v in ["magic", "", "BM25"]],
    *[("/api/search", {"q": "star", p: "1"}) for p in ["k", "size", "limt", "page"]],
    *[("/api/retrievability", {"c": v}) for v in ["0", "-1", HUGE, "nan", "inf", "100000"]],
    *[("/api/retrievability", {"system": v}) for v in ["nope", "x" * 300, "../..", "%00"]],
    *[("/api/retrievability/documents", {"order": v}) for v in ["best", "", "MOST"]],
    *[("/api/retrievability/groups", {"field": v}) for v in ["", "no such field", "x" * 300]],
    *[("/api/queries", {"search": v}) for v in ["x" * 5000]],
    *[("/api/queries", {"limit": v}) for v in ["0", HUGE, "-5"]],
    *[("/api/documents/{doc}", {"browsing": v}) for v in ["rbp:2", "rbp:nan", "rbp:-1", "cutoff:0", "x" * 100,
                                                        "", "dcg;drop", "rbp:0", "exh:2"]],
    *[("/api/documents/{doc}", {"offset": v}) for v in ["-1", HUGE]],
    *[(f"/api/documents/{d}", {}) for d in ["..%2F..%2Fetc%2Fpasswd", "no-such-doc", "x" * 2000, "%00", "%ff"]],
    *[(f"/api/queries/{q}", {}) for q in ["no-such-query", "x" * 2000, "..%2F.."]],
    *[("/api/explain", p) for p in [{}, {"docid": "x"}, {"docid": "{doc}", "qid": "nope"}]],
    *[("/api/near-misses", p) for p in [{"docid": "nope"}, {"docid": "{doc}", "limit": "0"}]],
    *[("/api/info", {p: "1"}) for p in ["x", "limit"]],
    *[(page, {"browsing": "rbp:9"}) for page in ["/documents/{doc}", "/queries/{qid}"]],
    *[(page, {"c": v}) for page in ["/retrievability"] for v in ["0", HUGE, "x"]],
    *[("/", {"offset": v}) for v in ["-1", HUGE]],
    *[(p, {}) for p in ["/nowhere", "/api/nowhere", "/documents/", "/static/../app.py"]],
]

API_POSTS = [
    ("application/json", b""), ("application/json", b"{}"), ("application/json", b"[]"), ("application/json", b'"x"'),
    ("application/json", b"null"), ("application/json", b'{"text": ""}'), ("application/json", b'{"text": "   "}'),
    ("application/json", b'{"text": 1}'), ("application/json", b'{"text": "star", "k": 0}'),
    ("application/json", b'{"text": "star", "k": 99999999999999999999999999}'),
    ("application/json", b'{"text": "star", "k": "5"}'), ("application/json", b'{"text": "star", "k": 1.5}'),
    ("application/json", b'{"text": "star", "system": "nope"}'), ("application/json", b'{"text": "star", "x": 1}'),
    ("application/json", b'{"text": NaN}'), ("application/json", b'{"text": "star", "k": Infinity}'),
    ("application/json", b'{"text": "star", "k": -Infinity}'), ("application/json", b"[" * 100_000 + b"]" * 100_000),
    ("application/json", b'{"text": "\xff\xfe"}'), ("application/json", '{"text": "star"}'.encode("utf-16")),
    ("application/json", b'{"text": "star"'), ("application/json", b"\x00\x00\x00"),
    ("application/json", b'{"text": "' + b"x" * 300_000 + b'"}'),
    ("text/plain", b'{"text": "star"}'), ("application/x-www-form-urlencoded", b"text=star"),
    ("application/json", b'{"text": "star", "k": 5, "text": 7}'),
]


@pytest.mark.parametrize("path, params", API_GETS, ids=[f"{p[:40]}?{'&'.join(f'{k}={v[:12]}' for k, v in q.items())}"
                                                         for p, q in API_GETS])
def test_hostile_requests(client, service, path, params):
    store = service.system("bm25").store
    doc, qid = str(store.doc_ids[0]), str(store.queries.ids.strings[0])
    path = path.replace("{doc}", doc).replace("{qid}", qid)
    params = {k: v.replace("{doc}", doc) for k, v in params.items()}
    r = client.get(path, params=params)
    assert r.status_code < 500, (r.status_code, r.text[:300])
    assert "Traceback" not in r.text
    if r.status_code >= 400 and path.startswith("/api/"):
        _check_detail(r.json()["detail"])


def _check_detail(detail) -> None:
    """A message (404, 413, ...), or validation errors each naming where (``loc``: the
    parameter) and what (``msg``, in words: never a regular expression)."""
    text = json.dumps(detail, ensure_ascii=False)
    assert detail and "^(" not in text, text[:300]
    if isinstance(detail, list):
        assert all(e.get("loc") and e.get("msg") for e in detail), text[:300]
    else:
        assert isinstance(detail, str), text[:300]


@pytest.mark.parametrize("ctype, body", API_POSTS, ids=[f"{c.split('/')[1][:10]}-{b[:24]!r}" for c, b in API_POSTS])
def test_hostile_bodies(client, ctype, body):
    r = client.post("/api/eqi", content=body, headers={"content-type": ctype})
    assert r.status_code < 500 and r.status_code != 400, (r.status_code, r.text[:300])
    if r.status_code >= 400:
        _check_detail(r.json()["detail"])
        assert "Traceback" not in r.text


# ---- the count the docs give -----------------------------------------------------------------------
ENCODINGS = {"latin1-line-2", "utf16", "nul-byte", "binary", "bom"}
CATEGORIES = {
    "malformed files": sum(m not in ENCODINGS for _, m in FILE_CASES) + 4 * 3,
    "encodings": sum(m in ENCODINGS for _, m in FILE_CASES),
    "hostile numbers and values": len(NUMBER_CASES) + len(OPTION_CASES),
    "paths": len(PATH_CASES) + 1,
    "interrupts": len(INTERRUPT_CASES),
    "hostile servers": len(ANSWERS),
    "hostile requests to the web app": len(API_GETS) + len(API_POSTS),
}


def test_suite_size():
    """At least 300 cases, and docs/manual/formats.md gives this suite's count and categories."""
    total = sum(CATEGORIES.values())
    assert total >= 300, CATEGORIES
    text = " ".join((REPO / "docs" / "manual" / "formats.md").read_text().split())
    assert f"{total} cases" in text, f"formats.md should say {total} cases: {CATEGORIES}"
    for name, n in CATEGORIES.items():
        assert f"{name} ({n}:" in text, (name, n)
