"""Audit configuration validation and the stage cache (no models, fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _inproc import run_cli

from limelight._io import OutputRefusedError
from limelight.audit.cache import StageCache, stable_hash
from limelight.audit.config import load_config, parse_config
from limelight.audit.layout import AuditDir, NotAnAuditError
from limelight.errors import FormatError

REPO = Path(__file__).resolve().parents[1]

GOOD = """
[audit]
name = "t"
depth = 50
cutoffs = [10, 50]

[collection]
source = "adi"

[[systems]]
name = "bm25"
kind = "bm25"
k1 = 1.2
"""


def test_shipped_configs_validate():
    for p in sorted((REPO / "configs").glob("*.toml")):
        cfg = load_config(p)
        assert cfg.systems, p
        assert 100 in cfg.cutoffs  # results.json reports gini_c100
        assert all(c <= cfg.depth for c in cfg.cutoffs)


def test_defaults_filled_in():
    cfg = parse_config(GOOD)
    assert cfg.name == "t" and cfg.depth == 50 and cfg.cutoffs == [10, 50]
    assert cfg.query_source == "log"
    assert cfg.systems[0].settings() == {"kind": "bm25", "b": 0.4, "k1": 1.2}
    assert all(cfg.stages.values())


def _assert_one_line_error(tmp_path, text: str, line: int | None, words: str) -> None:
    """Loading ``text`` fails with one line that starts ``FILE:LINE:`` and contains ``words``."""
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(FormatError) as e:
        load_config(p)
    msg = str(e.value)
    assert words in msg
    assert msg.startswith(f"{p}:{line}:" if line else f"{p}:")
    assert "\n" not in msg


@pytest.mark.parametrize("edit, line, words", [
    (GOOD.replace('k1 = 1.2', 'k1 = 1.2\nk3 = 7'), 14, "unknown key 'k3'"),
    (GOOD.replace('kind = "bm25"', 'kind = "splade"'), 12, "kind must be one of"),
    (GOOD.replace('depth = 50', 'depth = "deep"'), 4, "audit.depth must be an int"),
    (GOOD.replace('cutoffs = [10, 50]', 'cutoffs = [10, 500]'), 5, "cutoffs"),
    (GOOD.replace('[collection]\nsource = "adi"', ''), None, "[collection] needs source"),
    (GOOD + '\n[[systems]]\nname = "bm25"\nkind = "dense"\n', 16, "duplicate system name"),
    (GOOD + '\n[stages]\neqi = "yes"\n', 16, "stages.eqi must be a bool"),
    (GOOD + '\n[queries]\nsource = "/no/such/file.tsv"\n', 16, "queries.source"),
    (GOOD.replace('depth = 50', 'depth = 50\ndepth = 60'), 5, "invalid TOML"),
    (GOOD + '\n[evaluation]\nmeasures = ["nDCG@ten"]\n', 16, "evaluation.measures"),
])
def test_errors_name_file_and_line(tmp_path, edit, line, words):
    _assert_one_line_error(tmp_path, edit, line, words)


def test_cli_bad_config_is_one_line_exit_2(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(GOOD.replace('kind = "bm25"', 'kind = "splade"'))
    r = subprocess.run([sys.executable, "-m", "limelight.cli", "audit", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith(f"error: {p}:12:")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def _cli_audit(config: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    """``limelight audit CONFIG --out OUT ARGS`` in this process (tests/_inproc.py: the console
    script's entry point, exit status and streams; test_cli_bad_config_is_one_line_exit_2 runs
    the real one in a new interpreter)."""
    return run_cli("audit", str(config), "--out", str(out), *args)


def test_sample_zero_is_an_error_naming_file_and_key(tmp_path):
    """Issue 24 item 3: ``sample = 0`` used to mean "every query" silently."""
    p = tmp_path / "zero.toml"
    p.write_text(GOOD + '\n[queries]\nsource = "log"\nsample = 0\n')
    r = _cli_audit(p, tmp_path / "o", "--check")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith(f"error: {p}:17:") and "queries.sample must be ≥ 1" in r.stderr
    assert not (tmp_path / "o").exists()
    p.write_text(GOOD + '\n[queries]\nsource = "log"\nsample = 7\n')  # n ≥ 1 and no key are fine
    assert load_config(p).query_sample == 7 and parse_config(GOOD).query_sample == 0


def test_depth_not_below_the_collection_size_is_refused(tmp_path):
    """Issue 24 item 1: depth 100 over adi's 82 documents made every dense query retrieve every
    document (Gini 0.0000 headlined); the audit refuses before writing anything."""
    p = tmp_path / "adi100.toml"
    p.write_text(GOOD.replace("depth = 50", "depth = 100").replace("cutoffs = [10, 50]", "cutoffs = [10, 100]"))
    out = tmp_path / "o"
    r = _cli_audit(p, out)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: {p}:4: audit.depth (100) is not below the 82 documents of adi")
    assert "Gini" in err and "Gini" not in r.stdout
    assert not out.exists()


def test_failed_audit_leaves_no_output_directory(tmp_path):
    """Issue 24 item 10: a bad collection source used to leave an empty output folder."""
    p = tmp_path / "bad.toml"
    p.write_text(GOOD.replace('source = "adi"', 'source = "no-such-collection"'))
    out = tmp_path / "o"
    r = _cli_audit(p, out)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    # issue 42: refused while the configuration is read, naming the file and line
    assert r.stderr.strip().splitlines()[-1].startswith(
        f"error: {p}:8: collection.source 'no-such-collection': not a collection")
    assert not out.exists()


def test_shipped_quick_config_is_deeper_than_nothing():
    """The quick audit's collection is larger than its depth (issue 24 item 1)."""
    from limelight.data.loaders import load_dataset

    cfg = load_config(REPO / "configs" / "quick.toml")
    assert len(load_dataset(cfg.collection).collection) > 5 * cfg.depth


def test_stage_cache_keys(tmp_path):
    audit = AuditDir(tmp_path / "a")
    cache = StageCache(audit)
    k1, k2 = stable_hash("s", {"a": 1, "b": 2}), stable_hash("s", {"b": 2, "a": 1})
    assert k1 == k2 and stable_hash("s", {"a": 2}) != k1
    out = tmp_path / "a" / "thing"
    out.mkdir()
    (out / "x").write_text("not limelight's")
    with pytest.raises(OutputRefusedError, match="thing/x: limelight did not write"):
        cache.begin("s", k1, [out])  # unknown origin: refused, kept
    assert (out / "x").read_text() == "not limelight's"
    (out / "x").unlink()
    assert cache.begin("s", k1, [out]) is False and not out.exists()  # empty: ours to replace
    out.mkdir()
    (out / "x").write_text("partial")
    assert cache.lookup("s", k1) is None  # running, not done
    assert cache.begin("s", k1, [out]) is True and out.exists()  # same key: resume over it
    cache.finish("s", k1, {"v": 1.5}, 0.1, [out])
    assert cache.lookup("s", k1)["result"] == {"v": 1.5}
    assert cache.lookup("s", "other") is None
    assert cache.begin("s", "other", [out]) is False and not out.exists()  # changed: ours, removed


def test_stage_cache_removes_only_what_it_recorded(tmp_path):
    """A changed key replaces a stage's outputs only when they hold nothing but the files the
    stage's record lists (when it finished, or when it was interrupted); one file of the user's
    anywhere inside refuses the rerun and nothing is removed (issue 52 item 0)."""
    audit = AuditDir(tmp_path / "a")
    cache = StageCache(audit)
    out, table = tmp_path / "a" / "store", tmp_path / "a" / "t.parquet"
    assert cache.begin("s", "k1", [out, table]) is False
    (out / "shards").mkdir(parents=True)
    (out / "shards" / "part-0").write_text("ours")
    table.write_text("ours")
    cache.interrupted("s", "k1", [out, table])  # e.g. Ctrl-C: what is there is ours
    (out / "shards" / "MYNOTES.txt").write_text("mine")
    with pytest.raises(OutputRefusedError, match=r"store/shards/MYNOTES.txt: limelight did not"):
        cache.begin("s", "k2", [out, table])
    assert (out / "shards" / "part-0").exists() and table.exists()
    assert (out / "shards" / "MYNOTES.txt").read_text() == "mine"
    (out / "shards" / "MYNOTES.txt").unlink()
    assert cache.begin("s", "k2", [out, table]) is False
    assert not out.exists() and not table.exists()


def test_audit_dir_errors(tmp_path):
    a = AuditDir(tmp_path / "nothing")
    with pytest.raises(NotAnAuditError, match="not an audit directory"):
        _ = a.manifest
    with pytest.raises(NotAnAuditError, match="has not finished"):
        a.results()


# ---- reranked systems --------------------------------------------------------------------------
RR = '\n[[systems]]\nname = "tk"\nkind = "reranked"\nfirst = "bm25"\ncheckpoint = "tk.pt"\ndepth = 50\n'


@pytest.fixture(scope="module")
def tk_bytes(tmp_path_factory) -> bytes:
    """An (untrained) 1-layer TK checkpoint over a tiny vocabulary."""
    from limelight.rerank import NeuralRanker, TKConfig, Vocabulary

    vocab = Vocabulary.build(["information retrieval of documents", "search engines index text"], min_cf=1)
    p = NeuralRanker.create(TKConfig(n_layers=1), vocab).save(tmp_path_factory.mktemp("tk") / "tk.pt")
    return p.read_bytes()


def test_reranked_system_resolves_first_and_checkpoint(tmp_path, tk_bytes):
    import hashlib

    (tmp_path / "tk.pt").write_bytes(tk_bytes)
    p = tmp_path / "a.toml"
    p.write_text(GOOD + RR.replace("depth = 50\n", ""))  # rerank depth defaults to 100
    cfg = load_config(p)
    bm25, tk = cfg.systems
    assert tk.first is bm25 and not tk.uses_dense and not tk.needs_dense
    assert tk.checkpoint == str((tmp_path / "tk.pt").resolve())  # against the config's folder
    s = tk.settings()
    assert s["depth"] == 100 and s["first"] == "bm25" and s["first_settings"] == bm25.settings()
    assert s["checkpoint_sha256"] == hashlib.sha256(tk_bytes).hexdigest()
    # the stage keys follow the checkpoint's bytes and the first system's settings
    (tmp_path / "tk.pt").write_bytes(tk_bytes + b"\0")
    assert load_config(p).systems[1].settings() != s
    (tmp_path / "tk.pt").write_bytes(tk_bytes)
    p.write_text(GOOD.replace("k1 = 1.2", "k1 = 1.0") + RR.replace("depth = 50\n", ""))
    assert load_config(p).systems[1].settings() != s


@pytest.mark.parametrize("edit, line, words", [
    (GOOD + RR.replace('first = "bm25"', 'first = "nope"'), 18,
     "systems.tk.first 'nope' is not a system of this config (systems: bm25, tk)"),
    (GOOD + RR + '\n[[systems]]\nname = "tk2"\nkind = "reranked"\nfirst = "tk"\ncheckpoint = "tk.pt"\n', 25,
     "systems.tk2.first 'tk' is a reranked system, which cannot be a first stage (systems that can: bm25)"),
    (GOOD + RR.replace('first = "bm25"\n', ''), 15, "systems.tk (kind reranked) needs first ="),
    (GOOD + RR.replace('checkpoint = "tk.pt"\n', ''), 15, "systems.tk (kind reranked) needs checkpoint ="),
    (GOOD + RR.replace('"tk.pt"', '"absent.pt"'), 19, "systems.tk.checkpoint 'absent.pt': no such file"),
    (GOOD + RR.replace('"tk.pt"', '"junk.pt"'), 19,
     "systems.tk.checkpoint 'junk.pt' is not a loadable TK/KNRM checkpoint"),
    (GOOD + RR.replace('depth = 50', 'depth = 20'), 20, "systems.tk.depth (20) must be ≥ audit.depth (50)"),
    (GOOD.replace('depth = 50', 'depth = 200') + RR.replace('depth = 50\n', ''), 4,
     "audit.depth (200) exceeds systems.tk.depth (100, the default)"),
    (GOOD + RR.replace('depth = 50', 'depth = "all"'), 20, "systems.tk.depth must be an int"),
])
def test_reranked_errors_name_file_line_and_key(tmp_path, tk_bytes, edit, line, words):
    (tmp_path / "tk.pt").write_bytes(tk_bytes)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    _assert_one_line_error(tmp_path, edit, line, words)


# ---- the [rerank] stage's options (issue 25: step budgets, or a trained checkpoint) -------------
@pytest.mark.parametrize("edit, line, words", [
    (GOOD + "\n[rerank]\nlayers = 1\nmax_seconds = 15\n", 17,
     "rerank.max_seconds was removed: a time cap makes the step count depend on the machine's load; "
     "set max_steps = N"),
    (GOOD + "\n[rerank]\nepochs = 1\n", 16, "rerank.epochs was removed: the budget is in optimizer "
                                            "steps, set max_steps = N"),
    (GOOD + "\n[rerank]\nmax_step = 10\n", 16, "unknown key 'max_step' in [rerank] (allowed: checkpoint, "
                                              "depth, eval_every, layers, max_steps, patience)"),
    (GOOD + "\n[rerank]\nmax_steps = 0\n", 16, "rerank.max_steps must be ≥ 1, got 0"),
    (GOOD + "\n[rerank]\npatience = -1\n", 16, "rerank.patience must be ≥ 0, got -1"),
    (GOOD + "\n[rerank]\nmax_steps = 1.5\n", 16, "rerank.max_steps must be an int"),
    (GOOD + '\n[rerank]\ncheckpoint = "absent.pt"\n', 16, "rerank.checkpoint 'absent.pt': no such file"),
    (GOOD + '\n[rerank]\ncheckpoint = "junk.pt"\n', 16,
     "rerank.checkpoint 'junk.pt' is not a loadable TK/KNRM checkpoint"),
])
def test_rerank_option_errors_name_file_line_and_key(tmp_path, edit, line, words):
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    _assert_one_line_error(tmp_path, edit, line, words)


def test_rerank_checkpoint_resolves_against_the_config_folder(tmp_path, tk_bytes, monkeypatch):
    import hashlib

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tk.pt").write_bytes(tk_bytes)
    p = tmp_path / "a.toml"
    p.write_text(GOOD + '\n[rerank]\ncheckpoint = "models/tk.pt"\nmax_steps = 7\n')
    monkeypatch.chdir(tmp_path / "models")  # not the working directory: the config's folder
    opts = load_config(p).options["rerank"]
    assert opts["checkpoint"] == str((tmp_path / "models" / "tk.pt").resolve())
    assert opts["checkpoint_sha256"] == hashlib.sha256(tk_bytes).hexdigest()  # in the stage key
    assert opts["max_steps"] == 7
    (tmp_path / "models" / "tk.pt").write_bytes(tk_bytes + b"\0")
    assert load_config(p).options["rerank"]["checkpoint_sha256"] != opts["checkpoint_sha256"]
    assert "checkpoint" not in parse_config(GOOD + "\n[rerank]\nmax_steps = 7\n").options["rerank"]


# ---- issue 42: everything --check can know, checked up front -----------------------------------
@pytest.mark.parametrize("edit, line, words", [
    (GOOD.replace('source = "adi"', 'source = "no-such-collection"'), 8,
     "collection.source 'no-such-collection': not a collection (no such file or folder"),
    (GOOD.replace('cutoffs = [10, 50]', 'cutoffs = [10, 50]\ngroup_field = "sektion"'), 6,
     "audit.group_field 'sektion' is not a field of adi (fields: authors, text, title)"),
    (GOOD.replace('source = "adi"', 'source = "adi"\nname = " "'), 9, "collection.name must not be empty"),
    (GOOD + "\n[eqi]\ndocz = 30\n", 16, "unknown key 'docz' in [eqi] (allowed: docs, k, methods, steps)"),
    (GOOD + "\n[eqi]\ndocs = 0\n", 16, "eqi.docs must be ≥ 1, got 0"),
    (GOOD + '\n[eqi]\nmethods = ["residual", "magic"]\n', 16, "eqi.methods: unknown 'magic' (known: append,"),
    (GOOD + '\n[robustness]\nmethod = "all"\n', 16,
     "unknown key 'method' in [robustness] (allowed: measure, methods, mode)"),
    (GOOD + '\n[robustness]\nmode = "half"\n', 16, 'robustness.mode must be "full", "rerank" or "both"'),
    (GOOD + '\n[robustness]\nmethods = "RmvStopWords,Typos"\n', 16, "robustness.methods: unknown 'Typos'"),
    (GOOD + '\n[robustness]\nmeasure = "nDCG@ten"\n', 16, "robustness.measure"),
    (GOOD + '\n[ctrlqgen]\nn_entity = 12\n', 16, "unknown key 'n_entity' in [ctrlqgen] (allowed: backbone, "
                                                  "generator, intents, n, n_entities, schema)"),
    (GOOD + '\n[ctrlqgen]\nintents = ["narrow", "vague"]\n', 16, "ctrlqgen.intents: unknown 'vague'"),
    (GOOD + '\n[ctrlqgen]\nn = 0\n', 16, "ctrlqgen.n must be ≥ 1, got 0"),
    (GOOD + '\n[ctrlqgen]\nschema = "absent.toml"\n', 16,
     "ctrlqgen.schema 'absent.toml': neither a shipped schema (debian, movies) nor a TOML file"),
])
def test_check_refuses_what_the_audit_would_fail_on(tmp_path, edit, line, words):
    """Issue 42: a missing collection, an unknown group_field and unknown keys of [eqi],
    [robustness] and [ctrlqgen] used to pass ``--check`` (and fail, or be ignored, later)."""
    _assert_one_line_error(tmp_path, edit, line, words)
    p = tmp_path / "bad.toml"
    r = _cli_audit(p, tmp_path / "o", "--check")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: {p}:{line}:") and words in r.stderr


def test_check_accepts_known_options_and_resolves_the_schema_against_the_config(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    schema = tmp_path / "cfg" / "mine.toml"
    schema.write_text('name = "mine"\nnarrow = ["title"]\nbroad = ["authors"]\n')
    p = tmp_path / "cfg" / "a.toml"
    p.write_text(GOOD.replace('cutoffs = [10, 50]', 'cutoffs = [10, 50]\ngroup_field = "authors"')
                 .replace('source = "adi"', 'source = "adi"\nname = "mydocs"')
                 + '\n[eqi]\ndocs = 30\nsteps = 5\nmethods = ["residual"]\nk = 50\n'
                 + '\n[robustness]\nmethods = ["RmvStopWords"]\nmeasure = "AP"\nmode = "both"\n'
                 + '\n[ctrlqgen]\nschema = "mine.toml"\nintents = ["broad"]\nn = 2\nn_entities = 5\n')
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = load_config(p)
    assert cfg.collection_name == "mydocs" and cfg.group_field == "authors"
    assert cfg.options["ctrlqgen"]["schema"] == str(schema.resolve())
    assert cfg.options["eqi"] == {"docs": 30, "steps": 5, "methods": ["residual"], "k": 50}
    r = _cli_audit(p, tmp_path / "o", "--check")
    assert r.returncode == 0, r.stderr


def test_collection_named_docs_run_beside_a_docs_folder(tmp_path):
    """Issue 42: a user's docs.jsonl (a collection named "docs") audited from a folder with a
    ``docs/`` subfolder died in the CtrlQGen skip check with ``IsADirectoryError: 'docs'``: the
    collection's name was taken for a schema path. The stage is skipped with its reason."""
    import shutil

    from limelight.data.loaders import data_root

    shutil.copy(data_root() / "collections" / "adi" / "docs.jsonl", tmp_path / "docs.jsonl")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("the project's own docs\n")
    p = tmp_path / "audit.toml"
    p.write_text('[audit]\ndepth = 20\ncutoffs = [10, 20]\n\n[collection]\nsource = "docs.jsonl"\n\n'
                 '[queries]\nsource = "log"\nsample = 200\n\n[[systems]]\nname = "bm25"\nkind = "bm25"\n\n'
                 '[stages]\neqi = false\nrobustness = false\nrerank = false\ncompare = false\n'
                 'intervention = false\n')
    r = run_cli("audit", "audit.toml", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    skipped = [ln for ln in r.stdout.splitlines() if ln.startswith("skipped ctrlqgen:")]
    assert skipped and "docs has no CtrlQGen entity schema" in skipped[0], r.stdout
    assert (tmp_path / "docs" / "notes.md").read_text() == "the project's own docs\n"


@pytest.mark.parametrize("table", ["rerank", "eqi", "robustness", "ctrlqgen", "intervention"])
def test_every_stage_table_is_checked_by_the_stage_module_that_owns_it(table):
    """Issue 41: each stage module declares its ``[table]`` (keys, types, defaults, help); an
    unknown key of any of them is one line at its line, listing the stage's keys."""
    from limelight.audit.stages import STAGE_OPTIONS

    schema = STAGE_OPTIONS[table]
    assert schema.table == table and schema.keys and all(o.help for o in schema.keys.values())
    text = GOOD + f"\n[{table}]\nno_such_key = 1\n"
    line = text.splitlines().index("no_such_key = 1") + 1
    with pytest.raises(FormatError) as e:
        parse_config(text, "cfg.toml")
    assert str(e.value) == (f"cfg.toml:{line}: unknown key 'no_such_key' in [{table}] "
                            f"(allowed: {', '.join(sorted(schema.keys))})")
