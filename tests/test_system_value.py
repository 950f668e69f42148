"""One system value (issue 55, item 1): the audit's ``[[systems]]`` table, the CLI's ``--system``
file and its ``--model``/``--k1``/``--b`` flags build the same ``System``, and its identities are
the ones recorded before the change (values computed by the code of commit 5364d47, before
``SystemSpec`` and ``RetrieverSpec`` became one value)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from _inproc import run_cli

from limelight.audit.cache import stable_hash
from limelight.audit.config import parse_config
from limelight.audit.stages.exposure import exposure_stage, stable_key
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.exposure.store import ExposureStore
from limelight.retrieval.index_dir import build_index

TEXTS = ["the quick brown fox", "a lazy dog sleeps", "quick dogs and foxes", "brown bread recipe",
         "the dog and the fox are friends", "recipe for a quick lunch"]
RUN = "q1 Q0 d0 1 2.5 t\nq1 Q0 d2 2 1.5 t\nq2 Q0 d1 1 3.0 t\n"

# (the command line's system options, the store's recorded fingerprint, its recorded settings)
CLI_STORES = {
    "default": ([], "a54be64fed4aa771014357878178ba1b", {"b": 0.4, "k1": 0.9, "model": "bm25"}),
    "flags": (["--model", "bm25", "--k1", "1.2", "--b", "0.75"], "483868c4c453389d2c2cf27d51d90bb3",
              {"b": 0.75, "k1": 1.2, "model": "bm25"}),
    "system_file": (["--system", "bm25.toml"], "c19f4084c94b77924ffc3ae0a9771e33", {"b": 0.4, "k1": 1, "model": "bm25"}),
    "run": (["--run", "r.run"], "9ff4a38cf0a0c034fd2187bb",
            {"format": "auto", "match": "id", "model": "run", "path": "r.run", "unknown_docs": "error",
             "sha256": "566559fb629ace2544796426286bf605739c4fa448270885af2c42f3044f5f35"}),
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    coll = Collection(IdMap([f"d{i}" for i in range(len(TEXTS))], kind="document"),
                      np.array(TEXTS, dtype=object), {}, "tiny")
    return build_index(coll, tmp_path_factory.mktemp("idx") / "tiny")


@pytest.mark.parametrize("name", list(CLI_STORES))
def test_cli_store_fingerprints_are_the_recorded_ones(index, tmp_path, name):
    """``limelight exposure compute`` records the fingerprint and settings it recorded before."""
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

# stable_key(DEPS, system) and the exposure stage's cache key of each system of AUDIT
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
        got[s.name] = (stable_key(DEPS, s), stable_hash(stage.name, *stage.key(audit)))
    assert got == AUDIT_KEYS
