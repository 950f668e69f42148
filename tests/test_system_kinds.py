"""The registry of system kinds (``limelight.retrieval.systems``): the shipped kinds keep the
settings and store fingerprints they had before the registry (values recorded from the code of
commit dafff86, the last one with the kind lists), capabilities decide, and a new kind is one
registration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _inproc import run_cli

from limelight.audit.config import parse_config
from limelight.errors import LimelightError
from limelight.retrieval.spec import System, models
from limelight.retrieval.systems import (
    CAPABILITIES,
    EXACT_REVERSE,
    NEW_QUERIES,
    Param,
    SystemKind,
    describe_kinds,
    get_kind,
    kind_names,
    register_kind,
    unregister_kind,
)

# System.fingerprint(index_key=["k", 1]) of these specs under the code before the registry
BEFORE = {
    "bm25": ("2f3742d0b4f58c06ddb5bdb8", System.of("bm25")),
    "bm25_k": ("fac1ecc1a8fec83af464d3f5", System.of("bm25", k1=1.2, b=0.75)),
    "dense": ("b6190d833d7771aec8039fc4", System.of("dense")),
    "dense_m": ("d7fc38e6a072a04a15aea28d",
                System.of("dense", model="all-MiniLM-L6-v2", max_seq_length=128)),
    "hybrid": ("4868638f6e24eed8d84f0af2", System.of("hybrid", rrf_k=30)),
    "reranked": ("7cd5a39d57753acd3b579321",
                 System("reranked", (("depth", 50), ("first", "bm25"), ("checkpoint", "tk.pt")),
                               System.of("hybrid"), "tk.pt", "ab" * 32)),
}


@pytest.mark.parametrize("name", list(BEFORE))
def test_store_fingerprints_are_unchanged(name):
    fp, spec = BEFORE[name]
    assert spec.fingerprint(index_key=["k", 1]) == fp


def test_audit_settings_are_unchanged_and_agree_with_the_spec():
    cfg = parse_config('[collection]\nsource = "adi"\n'
                       '[[systems]]\nname = "bm25"\nkind = "bm25"\n'
                       '[[systems]]\nname = "b2"\nkind = "bm25"\nk1 = 1.2\n'
                       '[[systems]]\nname = "dense"\nkind = "dense"\n'
                       '[[systems]]\nname = "hybrid"\nkind = "hybrid"\nrrf_k = 30\n')
    got = [s.settings() for s in cfg.systems]
    assert got == [{"b": 0.4, "k1": 0.9, "kind": "bm25"}, {"b": 0.4, "k1": 1.2, "kind": "bm25"},
                   {"kind": "dense"},
                   {"b": 0.4, "fusion_depth": 100, "k1": 0.9, "kind": "hybrid", "rrf_k": 30}]
    for s in cfg.systems:
        assert System.from_settings(s.settings()).settings() == s.settings()
        assert s.registered is get_kind(s.kind)  # the kind resolved once, at parse time
    assert [s.uses_dense for s in cfg.systems] == [False, False, True, True]


def test_shipped_kinds_and_capabilities():
    assert kind_names()[:4] == ["bm25", "dense", "hybrid", "reranked"]
    assert models() == ["bm25", "dense", "hybrid"]
    assert get_kind("bm25").has(EXACT_REVERSE) and not get_kind("hybrid").has(EXACT_REVERSE)
    rows = {r["kind"]: r for r in describe_kinds()}
    assert rows["bm25"]["parameters"]["k1"] == {"type": "number", "default": 0.9,
                                                 "help": "term-frequency saturation"}
    assert set(rows["reranked"]["capabilities"]) <= set(CAPABILITIES)
    with pytest.raises(LimelightError, match="unknown capability 'fast'"):
        get_kind("bm25").has("fast")


def test_unknown_kind_and_parameter_name_the_registered_ones():
    with pytest.raises(LimelightError, match=r"unknown system kind 'lucene' \(registered: bm25, dense"):
        System.of("lucene")
    with pytest.raises(LimelightError, match=r"has no parameter 'k3' \(parameters: k1, b\)"):
        System.of("bm25", k3=1)
    with pytest.raises(Exception, match=r"systems\[0\].kind must be one of bm25, dense, hybrid, reranked"):
        parse_config('[collection]\nsource = "adi"\n[[systems]]\nname = "x"\nkind = "lucene"\n')


def test_a_new_kind_is_one_registration(tmp_path):
    """A kind registered from outside is accepted by the spec and the audit configuration, opens
    through the registry, and is listed; its capabilities are what it declares."""
    from limelight.data.ids import IdMap
    from limelight.data.run import Run

    def open_fixed(spec, index_dir, *, name=None, **_):
        docs = IdMap(["d1", "d2"], kind="document")

        def run(queries):
            n = len(queries)
            return Run.from_arrays(queries.ids, docs, [i for i in range(n) for _ in range(2)],
                                   [0, 1] * n, [2.0, 1.0] * n)
        return run

    kind = register_kind(SystemKind("fixed_test", {"top": Param(int, 2, "results per query")},
                                    frozenset({NEW_QUERIES}), open_fixed, "a test kind"), replace=True)
    try:
        assert "fixed_test" in kind_names()
        spec = System.of("fixed_test")
        assert dict(spec.params) == {"top": 2} and not spec.needs_dense
        assert kind.has(NEW_QUERIES) and not kind.has(EXACT_REVERSE)
        cfg = parse_config('[collection]\nsource = "adi"\n[[systems]]\nname = "f"\nkind = "fixed_test"\ntop = 3\n')
        assert cfg.systems[0].settings() == {"kind": "fixed_test", "top": 3}
        with pytest.raises(Exception, match="systems.f.top must be an int"):
            parse_config('[collection]\nsource = "adi"\n[[systems]]\nname = "f"\nkind = "fixed_test"\ntop = "x"\n')
    finally:
        unregister_kind("fixed_test")
    assert "fixed_test" not in kind_names()


def test_systems_command_lists_kinds_parameters_and_capabilities():
    p = run_cli("systems", "--json")  # in this process (tests/_inproc.py)
    assert p.returncode == 0, p.stderr
    rows = {r["kind"]: r for r in json.loads(p.stdout)}
    assert set(rows) >= {"bm25", "dense", "hybrid", "reranked"}
    assert rows["hybrid"]["parameters"]["rrf_k"]["default"] == 60
    assert "exact_reverse" in rows["dense"]["capabilities"]


def test_kinds_are_listed_in_shipped_order_whatever_imported_them_first():
    code = ("import limelight.retrieval.kinds.http, limelight.rerank.kind, limelight.retrieval.kinds.run\n"
            "from limelight.retrieval.systems import kind_names\nprint(','.join(kind_names()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0].split(",")[:7] == ["bm25", "dense", "hybrid", "reranked", "run",
                                                    "pyterrier", "http"]
