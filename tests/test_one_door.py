"""One door (issue 55, item 2): ``limelight exposure compute`` and the audit's exposure stage run
one job assembler (``limelight.audit.job.ExposureJob``), and every store they write is the store
the previous code wrote: the same fingerprint, the same query and document fingerprints, the same
pairs; the audit's ``results.json`` the same figures. The recorded settings are the previous
code's but for their dialect (issue 55, item 1, one settings form): a store of ``exposure
compute`` records ``System.settings()`` (``kind``, as the audit's stores do) where it recorded
the ``model`` form (``FINGERPRINTED``), which its fingerprint still hashes; a store written in
that earlier form resumes and is read as before.

The values below were recorded by the code of commit 2b2069a (before the two doors shared a job)
on cranfield, BM25 and dense, under the first 300 lines of the shared query log plus 40 of them
again (a log read through the on-disk query table, weights above 1): the audit first, then
``exposure compute`` over the audit's index folder (one dense encoding of the collection, taken
from the embedding cache when a run before left it there); the CLI stores' settings rewritten in
the one form. The code before issue 55 (ccc107e) gives the same values: this test, with the
topics stage that code lacks (issue 56) left out of its configuration and ``RESULTS``, passed
over it (the fingerprinted form, ``FINGERPRINTED``, for the CLI stores' settings). The demo's
figures before and after: ``experiments/one_door/compare.py`` (the last tests here)."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
from _audits import BM25, CORE_OFF, stages_off
from _inproc import run_cli

from limelight.audit.config import parse_config
from limelight.audit.runner import AuditRunner
from limelight.data.loaders import data_root
from limelight.retrieval.spec import System

REPO = Path(__file__).resolve().parents[1]

# the store of each door and system: (fingerprint, recorded settings, queries, documents, pairs)
RECORDED: dict[str, tuple] = {'audit_bm25': ('95d3e43f988f590d8374adbc',
                {'kind': 'bm25', 'b': 0.4, 'k1': 0.9},
                '46b6424c618396d3b96a415119e4c65f',
                '1d030edf33e92851f42ec78665a18b17',
                5338),
 'audit_dense': ('e9ef7727de88d309b678ae71',
                 {'kind': 'dense'},
                 '46b6424c618396d3b96a415119e4c65f',
                 '1d030edf33e92851f42ec78665a18b17',
                 15000),
 'cli_bm25': ('ca70929dab02e8db00950ff7aa1d4f9f',
              {'kind': 'bm25', 'b': 0.4, 'k1': 0.9},
              '46b6424c618396d3b96a415119e4c65f',
              '1d030edf33e92851f42ec78665a18b17',
              5338),
 'cli_dense': ('33a78ea5d6e6d81d511a288f348d9b69',
               {'kind': 'dense',
                'encoder': {'model': 'sentence-transformers/all-MiniLM-L6-v2',
                            'fingerprint': '6aed8a0dc1acfb56',
                            'dim': 384,
                            'normalize': True,
                            'max_seq_length': 256,
                            'truncate_dim': None,
                            'variant': 'onnx-int8',
                            'onnx_run': 'per-text'}},
               '46b6424c618396d3b96a415119e4c65f',
               '1d030edf33e92851f42ec78665a18b17',
               15000)}
#: the settings a CLI store recorded before the one form, exactly as the commit 2b2069a recorded
#: them (without the dense encoder's identity, as in RECORDED): what its fingerprint hashes
FINGERPRINTED: dict[str, dict] = {'cli_bm25': {'model': 'bm25', 'k1': 0.9, 'b': 0.4},
                                  'cli_dense': {'model': 'dense'}}
#: the audit's results.json (its query source, a temporary path, left out)
RESULTS: dict = {'audit': 'rec',
 'quick': False,
 'collection': {'source': 'cranfield', 'name': 'cranfield', 'n_docs': 1400},
 'queries': {'n_queries': 300, 'total_weight': 340.0},
 'depth': 50,
 'cutoffs': [10, 50],
 'group_field': None,
 'systems': {'bm25': {'kind': 'bm25',
                      'settings': {'kind': 'bm25', 'b': 0.4, 'k1': 0.9},
                      'n_pairs': 5338,
                      'gini_c10': 0.6761890268005376,
                      'gini_retrieved_only_c10': 0.6463842726370925,
                      'retrievable_fraction_c10': 0.5371428571428571,
                      'gini_c50': 0.4676423966261089,
                      'gini_retrieved_only_c50': 0.4186422428054231,
                      'retrievable_fraction_c50': 0.9157142857142857,
                      'retrievable_fraction': 0.9157142857142857,
                      'mean_exposing_queries': 3.8128571428571427},
             'dense': {'kind': 'dense',
                       'settings': {'kind': 'dense'},
                       'n_pairs': 15000,
                       'gini_c10': 0.6954197478991596,
                       'gini_retrieved_only_c10': 0.6901073016415868,
                       'retrievable_fraction_c10': 0.6257142857142857,
                       'gini_c50': 0.4576655462184874,
                       'gini_retrieved_only_c50': 0.4482062243502052,
                       'retrievable_fraction_c50': 0.9828571428571429,
                       'retrievable_fraction': 0.9828571428571429,
                       'mean_exposing_queries': 10.714285714285714}},
 'stages': {'index': {'status': 'present', 'reason': ''},
            'query-vectors': {'status': 'present', 'reason': ''},
            'exposure-bm25': {'status': 'present', 'reason': ''},
            'exposure-dense': {'status': 'present', 'reason': ''},
            'retrievability-bm25': {'status': 'present', 'reason': ''},
            'retrievability-dense': {'status': 'present', 'reason': ''},
            'figures': {'status': 'present', 'reason': ''},
            'topics': {'status': 'skipped', 'reason': 'switched off in [stages]'},
            'compare': {'status': 'skipped', 'reason': 'switched off in [stages]'},
            'rerank': {'status': 'skipped', 'reason': 'switched off in [stages]'},
            'eqi': {'status': 'skipped', 'reason': 'switched off in [stages]'},
            'robustness': {'status': 'skipped', 'reason': 'switched off in [stages]'},
            'ctrlqgen': {'status': 'skipped', 'reason': 'switched off in [stages]'},
            'intervention': {'status': 'skipped', 'reason': 'switched off in [stages]'}}}
#: what exposure compute printed (--json; its seconds and store path left out)
SUMMARIES: dict[str, dict] = {'bm25': {'queries': 300,
          'documents': 1400,
          'pairs': 5338,
          'depth': 50,
          'gini@50': 0.4676423966261089,
          'retrievable_fraction': 0.9157142857142857,
          'queries_with_results': 211,
          'queries_without_results': 89},
 'dense': {'queries': 300,
           'documents': 1400,
           'pairs': 15000,
           'depth': 50,
           'gini@50': 0.4576655462184874,
           'retrievable_fraction': 0.9828571428571429,
           'queries_with_results': 300,
           'queries_without_results': 0}}

AUDIT = """
[audit]
name = "rec"
depth = 50
cutoffs = [10, 50]
seed = 0
shard_size = 128
embedding_cache = "{cache}"

[collection]
source = "cranfield"

[queries]
source = "{log}"

""" + BM25 + """
[[systems]]
name = "dense"
kind = "dense"

""" + stages_off(*CORE_OFF, "intervention", "topics")


def _log(path: Path) -> Path:
    with gzip.open(data_root() / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(301)]
    again = ["again\t" + line.split("\t", 1)[1] for line in lines[1:41]]  # the same texts
    path.write_text("".join(lines + again), encoding="utf-8")
    return path


def _store(folder: Path) -> tuple:
    m = json.loads((folder / "manifest.json").read_text())
    settings = {k: v for k, v in m["settings"].items() if k != "index"}  # (a temporary path)
    if "encoder" in settings:  # (the path of the installed model: the environment's)
        settings["encoder"] = {k: v for k, v in settings["encoder"].items() if k != "path"}
    return m["retriever"], settings, m["queries"], m["documents"], m["n_pairs"]


def _index_fingerprint(index: Path, settings: dict) -> str:
    """The previous code's fingerprint of a store of ``exposure compute`` over ``index``, written
    out: its metadata files, then the settings it recorded (``FINGERPRINTED``'s form, without the
    encoder's identity). The dense
    index's metadata holds the installed model's path, so over an index with a dense part (a
    BM25 store's over the audit's index too) it is the environment's: checked by this formula,
    not by the value recorded here."""
    h = hashlib.sha256()
    for f in sorted([index / "meta.json", *index.glob("bm25/*.json"), *index.glob("dense/*.json")]):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    h.update(json.dumps({k: v for k, v in settings.items() if k != "encoder"}, sort_keys=True).encode())
    return h.hexdigest()[:32]


@pytest.fixture(scope="module")
def doors(tmp_path_factory):
    """The audit of cranfield (BM25, dense) and ``exposure compute`` of both over its index."""
    work = tmp_path_factory.mktemp("one-door")
    log = _log(work / "log.tsv")
    cfg = parse_config(AUDIT.format(cache=REPO / ".cache" / "embeddings", log=log),
                       work / "audit.toml")
    results = AuditRunner(cfg, work / "audit").run()
    stores = {f"audit_{n}": _store(work / "audit" / "systems" / n / "exposure")
              for n in ("bm25", "dense")}
    summaries = {}
    for model in ("bm25", "dense"):
        res = run_cli("exposure", "compute", "--queries", log, "--index", work / "audit" / "index",
                      "--model", model, "--out", work / f"s_{model}", "--depth", "50",
                      "--shard-size", "128", "--json")
        assert res.returncode == 0, res.stderr
        summaries[model] = json.loads(res.stdout)
        stores[f"cli_{model}"] = _store(work / f"s_{model}")
    return work, results, stores, summaries


def test_every_store_is_the_one_the_previous_code_wrote(doors):
    """CPU: the audit of cranfield with a dense system (its index from the embedding cache when
    warm; ~1,400 documents encoded when cold) and two exposure computes over its index: the
    smallest case with both doors, both kinds of index key and a query log in a query table."""
    work, results, stores, summaries = doors
    index = work / "audit" / "index"
    expected = dict(RECORDED)
    # a CLI store's fingerprint hashes the index's metadata files, dense/meta.json (the installed
    # model's path) among them, so both are the previous code's formula over this environment's
    # index (the recorded values are this repository's .venv's: CI's wheel venv gives others)
    for model in ("bm25", "dense"):
        key = f"cli_{model}"
        expected[key] = (_index_fingerprint(index, FINGERPRINTED[key]), *RECORDED[key][1:])
    assert stores == expected
    for model, summary in summaries.items():
        assert {k: v for k, v in summary.items() if k not in ("seconds", "store")} == SUMMARIES[model]
    results = json.loads(json.dumps(results))
    results["queries"].pop("source")
    assert results == RESULTS


def test_exposure_compute_resumes_its_store(doors):
    """A store of ``exposure compute`` missing a shard (as an interrupted run leaves it) resumes
    under the same command: the shard computed again, the same store."""
    work, _, stores, summaries = doors
    store = work / "resumed"
    shutil.copytree(work / "s_bm25", store)
    man = json.loads((store / "manifest.json").read_text())
    (store / "manifest.json").write_text(json.dumps({**man, "complete": False}))
    last = sorted((store / "shards").glob("*.parquet"))[-1]
    last.unlink()
    res = run_cli("exposure", "compute", "--queries", work / "log.tsv", "--index", work / "audit" / "index",
                  "--model", "bm25", "--out", store, "--depth", "50", "--shard-size", "128", "--json")
    assert res.returncode == 0, res.stderr
    assert last.exists() and _store(store) == stores["cli_bm25"]
    summary = {k: v for k, v in json.loads(res.stdout).items() if k not in ("seconds", "store")}
    assert summary == SUMMARIES["bm25"]


def test_a_store_of_earlier_code_is_read_and_resumes(doors):
    """A store as ``exposure compute`` wrote it before the one settings form (its manifest's
    settings in the ``model`` form, with its index, and the encoder's identity for dense) keeps
    its fingerprint; ``limelight eqi`` reopens its retriever from those settings (checked against
    that fingerprint) and finds a new document's exposing queries as over today's store; a copy
    missing a shard resumes under the same command into today's store, its settings now in the
    one form."""
    work, _, stores, _ = doors
    index = work / "audit" / "index"
    for model in ("bm25", "dense"):  # the one migration reads the earlier form to the same system
        recorded = json.loads((work / f"s_{model}" / "manifest.json").read_text())
        earlier = {**FINGERPRINTED[f"cli_{model}"], **{k: v for k, v in recorded["settings"].items()
                                                      if k in ("encoder", "index")}}
        system = System.from_recorded(earlier)
        assert system == System.from_recorded(recorded["settings"]) == System.of(model)
        assert system.fingerprint(index) == recorded["retriever"] == _index_fingerprint(index, FINGERPRINTED[f"cli_{model}"])
    store = work / "earlier"
    shutil.copytree(work / "s_bm25", store)
    man = json.loads((store / "manifest.json").read_text())
    man["settings"] = {**FINGERPRINTED["cli_bm25"], "index": str(index)}
    (store / "manifest.json").write_text(json.dumps(man))
    text = "the history of the united states oil industry, government home loan programs and veterans benefits"
    got = [run_cli("eqi", "query", "--store", s, "--text", text, "--k", "20", "--json")
           for s in (store, work / "s_bm25")]
    assert got[0].returncode == 0, got[0].stderr
    assert json.loads(got[0].stdout) == json.loads(got[1].stdout) and len(json.loads(got[0].stdout)) >= 5
    (store / "manifest.json").write_text(json.dumps({**man, "complete": False}))
    last = sorted((store / "shards").glob("*.parquet"))[-1]
    last.unlink()
    res = run_cli("exposure", "compute", "--queries", work / "log.tsv", "--index", index,
                  "--model", "bm25", "--out", store, "--depth", "50", "--shard-size", "128", "--json")
    assert res.returncode == 0, res.stderr
    assert last.exists() and _store(store) == stores["cli_bm25"]
    summary = {k: v for k, v in json.loads(res.stdout).items() if k not in ("seconds", "store")}
    assert summary == SUMMARIES["bm25"]
    # such a store computed with other settings is refused naming the parameter that differs,
    # not the two forms' keys
    other = work / "earlier-other"
    shutil.copytree(work / "s_bm25", other)
    (other / "manifest.json").write_text(json.dumps(man))
    res = run_cli("exposure", "compute", "--queries", work / "log.tsv", "--index", index, "--model",
                  "bm25", "--k1", "1.2", "--out", other, "--depth", "50", "--shard-size", "128")
    assert res.returncode == 2, res.stderr
    assert "another index or retriever (k1 0.9 → 1.2)" in res.stderr, res.stderr


def _compare_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("one_door_compare", REPO / "experiments" / "one_door" / "compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_demo_figures_page_is_the_committed_results():
    """docs/architecture.md's "Figures before and after" is what the comparison of the demo's
    three committed ``results.json`` (before issue 55, before with the dense fix, after) writes,
    so the page cannot say other than the files; and those files say that every figure that
    moved was moved by the dense fix (the section's sentence)."""
    compare = _compare_script()
    doc = (REPO / "docs" / "architecture.md").read_text()
    section = compare.section()
    assert section.rstrip() in doc
    assert "the dense fix moved them, not issue 55" in section


def test_the_demo_comparison_sees_one_changed_figure():
    """The leaf-by-leaf comparison finds a figure moved in the last bit, a leaf removed and one
    added, and takes an int for no float."""
    compare = _compare_script()
    after = json.loads((REPO / "experiments" / "one_door" / "results" / "after.json").read_text())
    moved = json.loads(json.dumps(after))
    gini = moved["systems"]["bm25"]["gini_c10"]
    moved["systems"]["bm25"]["gini_c10"] = math.nextafter(gini, 1.0)
    del moved["stages"]["index"]
    moved["extra"] = {"n": 1}
    c = compare.compare(after, moved)
    assert list(c["differ"]) == ["systems.bm25.gini_c10"]
    assert set(c["only_a"]) == {"stages.index.status", "stages.index.reason"} and c["only_b"] == {"extra.n": 1}
    assert compare.compare({"x": 1}, {"x": 1.0})["differ"] == {"x": (1, 1.0)}
    assert compare.compare(after, after)["equal"] == len(dict(compare.leaves(after)))
