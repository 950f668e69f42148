"""One system value (issue 55, item 1): the audit's ``[[systems]]`` table, the CLI's ``--system``
file and its ``--model``/``--k1``/``--b`` flags build the same ``System``, and its identities are
the ones recorded before the change (values computed by the code of commit 5364d47, before
``SystemSpec`` and ``System`` became one value)."""

from __future__ import annotations

import pickle
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from _inproc import run_cli

from limelight.audit.cache import stable_hash
from limelight.audit.config import load_system_file, parse_config
from limelight.audit.stages.exposure import exposure_stage
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.errors import FormatError
from limelight.exposure.store import ExposureStore
from limelight.retrieval.index_dir import build_index
from limelight.retrieval.spec import System
from limelight.retrieval.systems import get_kind

TEXTS = ["the quick brown fox", "a lazy dog sleeps", "quick dogs and foxes", "brown bread recipe",
         "the dog and the fox are friends", "recipe for a quick lunch"]
RUN = "q1 Q0 d0 1 2.5 t\nq1 Q0 d2 2 1.5 t\nq2 Q0 d1 1 3.0 t\n"

# (the command line's system options, the store's recorded fingerprint, its recorded settings:
# the fingerprints those of commit 5364d47, the settings in the one form, System.settings(), where
# that code recorded the model form: {"model": "bm25", ...}, {"model": "run", ...})
CLI_STORES = {
    "default": ([], "a54be64fed4aa771014357878178ba1b", {"b": 0.4, "k1": 0.9, "kind": "bm25"}),
    "flags": (["--model", "bm25", "--k1", "1.2", "--b", "0.75"], "483868c4c453389d2c2cf27d51d90bb3",
              {"b": 0.75, "k1": 1.2, "kind": "bm25"}),
    "system_file": (["--system", "bm25.toml"], "c19f4084c94b77924ffc3ae0a9771e33", {"b": 0.4, "k1": 1, "kind": "bm25"}),
    "run": (["--run", "r.run"], "9ff4a38cf0a0c034fd2187bb",
            {"format": "auto", "match": "id", "kind": "run", "path": "r.run", "unknown_docs": "error",
             "sha256": "566559fb629ace2544796426286bf605739c4fa448270885af2c42f3044f5f35"}),
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    coll = Collection(IdMap([f"d{i}" for i in range(len(TEXTS))], kind="document"),
                      np.array(TEXTS, dtype=object), {}, "tiny")
    return build_index(coll, tmp_path_factory.mktemp("idx") / "tiny")


@pytest.mark.parametrize("name", list(CLI_STORES))
def test_cli_store_fingerprints_are_the_recorded_ones(index, tmp_path, name):
    """``limelight exposure compute`` records the fingerprint it recorded before, and the
    system's settings in the one form; they read back to the system the options describe."""
    options, fingerprint, settings = CLI_STORES[name]
    (tmp_path / "q.tsv").write_text("q1\tquick fox\nq2\tlazy dog\n")
    (tmp_path / "bm25.toml").write_text('[system]\nkind = "bm25"\nk1 = 1\n')
    (tmp_path / "r.run").write_text(RUN)
    res = run_cli("exposure", "compute", "--queries", tmp_path / "q.tsv", "--out", tmp_path / "s",
                  "--index", index, "--depth", "3", "--json",
                  *options, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    man = ExposureStore.open(tmp_path / "s").manifest
    recorded = {k: v for k, v in man["settings"].items() if k not in ("index", "collection")}
    assert (man["retriever"], recorded) == (fingerprint, settings)
    system = System.from_recorded(man["settings"])  # the system of the options, read back
    assert system.settings() == settings
    if system.registered.needs_index:  # (a run's store is known by its documents' ids)
        assert system.fingerprint(index) == fingerprint


AUDIT = """
[collection]
source = "adi"

[[systems]]
name = "bm25"
kind = "bm25"

[[systems]]
name = "b2"
kind = "bm25"
k1 = 1

[[systems]]
name = "dense"
kind = "dense"

[[systems]]
name = "hybrid"
kind = "hybrid"
rrf_k = 30

[[systems]]
name = "served"
kind = "run"
path = "r.run"
"""

# the audit's exposure fingerprint of each system of AUDIT (the formula of ``stable_key``,
# stable_hash("retriever", DEPS, settings), before it became ``System.fingerprint(index_key=)``)
# and its exposure stage's cache key
AUDIT_KEYS = {"bm25": ("fe269950b974aeb45b8d44fa", "80b1057bf824182b7a2d6dae"),
              "b2": ("dfad9c02b262f5e5c3519e37", "1d65a41c9bd8b047ce6b6bf0"),
              "dense": ("de1a858575166c88c9bb1162", "5629bdb2492803b8e55b1981"),
              "hybrid": ("bd18bb7fe2b92c3765a72182", "9e538392c5bbae1bce962273"),
              "served": ("f0478c3c00de192dce1932f4", "c93c03431ae55727bbb0cc06")}
DEPS = ["0123abcd", "4567ef01"]


def test_audit_stage_keys_are_the_recorded_ones(tmp_path):
    """The audit's exposure fingerprint and stage key of each system are the ones of before."""
    (tmp_path / "r.run").write_text(RUN)
    (tmp_path / "audit.toml").write_text(AUDIT)
    cfg = parse_config(AUDIT, tmp_path / "audit.toml")
    keys = {"index": "idx0123", "query-vectors": "qv4567"}
    audit = SimpleNamespace(key=keys.get, cfg=cfg, inputs=SimpleNamespace(queries_fp="qfp89ab"))
    got = {}
    for s in cfg.systems:
        stage = exposure_stage(s, cfg.depth)
        assert s.fingerprint(index_key=DEPS) == stable_hash("retriever", DEPS, s.settings())
        got[s.name] = (s.fingerprint(index_key=DEPS), stable_hash(stage.name, *stage.key(audit)))
    assert got == AUDIT_KEYS


def test_one_parser_for_the_audit_table_and_the_system_file(tmp_path):
    """The CLI's ``--system`` file is read as an audit's ``[[systems]]`` table is: the same keys
    (``name`` too), the same value, the same one-line errors at the file's line."""
    (tmp_path / "r.run").write_text(RUN)
    cfg = parse_config(AUDIT, tmp_path / "audit.toml")
    f = tmp_path / "s.toml"
    f.write_text('[system]\nname = "served"\nkind = "run"\npath = "r.run"\n')
    assert load_system_file(f) == cfg.system("served")
    f.write_text('[system]\nname = "b2"\nkind = "bm25"\nk1 = 1\n')
    assert load_system_file(f) == cfg.system("b2") == System.of("bm25", k1=1, name="b2")
    f.write_text('[system]\nkind = "bm25"\nk1 = 1.2\nb = 0.75\n')
    assert load_system_file(f) == System.of("bm25", k1=1.2, b=0.75, name="bm25")
    # the --model/--k1/--b flags: the same value, unnamed
    assert System.from_model("bm25", 1.2, 0.75) == System.of("bm25", k1=1.2, b=0.75)
    assert System.from_model("dense", 1.2, 0.75) == System.of("dense")
    f.write_text('[system]\nkind = "bm25"\n\nk3 = 1\n')
    with pytest.raises(FormatError, match=r"s\.toml:4: unknown key 'k3' in \[system\] \(allowed: b, k1\)"):
        load_system_file(f)
    f.write_text('[system]\nname = "a b"\nkind = "bm25"\n')
    with pytest.raises(FormatError, match=r"s\.toml:2: system\.name 'a b' must be letters"):
        load_system_file(f)


def test_the_kind_is_resolved_once_and_recorded_settings_read_back(tmp_path):
    """A system holds its registered kind (looked up when it is made, again after pickling); its
    recorded settings read back to it: the one form (with a manifest's name, a store's encoder
    and index beside it) and the form a CLI store of earlier code recorded (the one migration)."""
    (tmp_path / "r.run").write_text(RUN)
    cfg = parse_config(AUDIT, tmp_path / "audit.toml")
    for s in cfg.systems:
        assert s.registered is get_kind(s.kind) and s.params == dict(s.params)
        back = pickle.loads(pickle.dumps(s))
        assert back == s and back.registered is s.registered and back.name == s.name
        unnamed = replace(s, name=None)
        assert System.from_recorded({"name": s.name, **s.settings()}) == unnamed
        assert System.from_recorded({**s.settings(), "encoder": {"model": "m"}, "index": "idx"}) == unnamed
        assert System.from_recorded(s._fingerprint_form()) == unnamed  # (the earlier form)
    assert cfg.system("dense").uses_dense and cfg.system("hybrid").needs_dense
    assert not cfg.system("served").uses_dense and cfg.system("b2").params["k1"] == 1


def test_the_parser_looks_each_kind_up_once(tmp_path, monkeypatch):
    """Reading the audit's systems looks each system's kind up in the registry once (issue 55:
    the string followed from the TOML to the engine is resolved once), however many checks and
    constructions follow; the registry is only counted, not replaced."""
    import limelight.audit.config as config
    import limelight.retrieval.spec as spec

    (tmp_path / "r.run").write_text(RUN)
    looked: list[str] = []

    def counted(name):
        looked.append(name)
        return get_kind(name)

    monkeypatch.setattr(config, "get_kind", counted)
    monkeypatch.setattr(spec, "get_kind", counted)
    cfg = parse_config(AUDIT, tmp_path / "audit.toml")
    assert sorted(looked) == sorted(s.kind for s in cfg.systems)
    assert all(s.registered is get_kind(s.kind) for s in cfg.systems)


def test_the_former_name_warns_and_is_the_same_value():
    """``RetrieverSpec`` (the former name) still imports, from the module and the package, warns,
    and is ``System`` itself; no module of the library uses it."""
    import limelight.retrieval as retrieval
    import limelight.retrieval.spec as spec

    for module in (spec, retrieval):
        with pytest.warns(DeprecationWarning, match="RetrieverSpec is now System"):
            assert module.RetrieverSpec is System
    assert "RetrieverSpec" not in retrieval.__all__ and "RetrieverSpec" not in spec.__all__
    src = Path(spec.__file__).parents[1]
    users = [str(p.relative_to(src)) for p in src.rglob("*.py")
             if re.search(r"\bRetrieverSpec\b", p.read_text(encoding="utf-8")) and p.name not in ("spec.py", "__init__.py")]
    assert users == []
