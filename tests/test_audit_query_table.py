"""An audit reads a query log through the on-disk query table (issue 55, item 2, "one door"):
the log's distinct queries are kept in a query table in a temporary folder
(``limelight.data.querytable``), as ``limelight exposure compute`` keeps them, and the exposure
stages read their texts a shard at a time. The stores and the figures are those of the previous
code, which read the whole log into memory: the values pinned below were computed by it
(commit 68fccb6) on the same audit."""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
from pathlib import Path

import _inproc
import numpy as np
import pytest
from _audits import BM25, CORE_OFF, tiny_adi_audit

from limelight.audit.config import parse_config
from limelight.audit.runner import AuditRunner


def write_log(path: Path) -> Path:
    """The shared log's first 3,000 lines, then 1,000 repeats of its first 1,000 texts under
    other ids, every other one upper-cased, padded with blanks (3,000 distinct queries, weight
    4,000)."""
    from limelight.data.loaders import data_root

    with gzip.open(data_root() / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        lines = [ln for _, ln in zip(range(3001), f, strict=False)]
    with open(path, "w", encoding="utf-8") as g:
        g.writelines(lines)
        for i, ln in enumerate(lines[1:1001]):
            _, _, text = ln.rstrip("\n").split("\t")
            g.write(f"repeats\tr{i}\t  {text.upper() if i % 2 else text}  \n")
    return path


def config(log: Path, extra: str = "") -> str:
    """The audit of ``log`` (``extra``: more lines of its ``[queries]`` table) by two BM25
    systems, the default and k1 1.2, b 0.75."""
    return tiny_adi_audit("adi-log-table", CORE_OFF, queries=f'source = "{log}"\n{extra}',
                          systems=BM25 + '\n[[systems]]\nname = "bm25b"\nkind = "bm25"\nk1 = 1.2\nb = 0.75\n')


#: what the previous code (the log read into memory) gave on this audit: each store's manifest
#: fingerprints and a digest of its pairs, and the figures of results.json and of the topics stage
QUERIES_FP = "c39895e3eeb367b7fe4c5cd4912dc7e0"
STORES = {
    "bm25": {"retriever": "00ad2c4fcb5db711f915ce7f", "pairs_sha": "271f6662de43da25",
             "gini_c10": 0.2736690270128508, "gini_c20": 0.2807998003229153,
             "topic_gini_mean": 0.5117062498074618, "topic_fairness_tvd": 0.05012997715317476},
    "bm25b": {"retriever": "866f677c06504f8b3ff96b0d", "pairs_sha": "5b07567747839eeb",
              "gini_c10": 0.27172769503000926, "gini_c20": 0.2804306057131566,
              "topic_gini_mean": 0.5101776099961335, "topic_fairness_tvd": 0.0513514608687293},
}


def pairs_sha(store) -> str:
    h = hashlib.sha256()
    for a in store.pair_arrays():
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    return write_log(tmp_path_factory.mktemp("log") / "log.tsv")


def test_audit_of_a_log_reads_the_query_table_and_keeps_stores_and_figures(log, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # the system's: the audit writes nothing there
    scratch = tmp_path / "audit" / ".limelight-scratch-queries"  # where it keeps the query table
    seen: dict[str, tuple] = {}
    runner: AuditRunner

    def hook(stage: str, done: int, total: int) -> None:
        qs = runner.inputs.queries
        if stage.startswith("exposure-") and done == total:
            # read from the table a shard at a time: none of its columns built whole
            seen[stage] = (qs.on_disk, Path(qs.path).is_relative_to(scratch),
                           qs._texts is None and qs._ids is None and qs._fields is None)

    runner = AuditRunner(parse_config(config(log)), tmp_path / "audit", progress=hook)
    res = runner.run()
    assert seen == {"exposure-bm25": (True, True, True), "exposure-bm25b": (True, True, True)}
    assert list(tmp.iterdir()) == [] and not scratch.exists()  # the table's folder is gone with the audit

    man = json.loads(runner.dir.manifest_path.read_text())
    assert man["queries"]["fingerprint"] == QUERIES_FP
    assert res["queries"]["n_queries"] == 3000 and res["queries"]["total_weight"] == 4000.0
    topics = next(s for s in man["stages"] if s["name"] == "topics")["result"]["systems"]
    for name, want in STORES.items():
        st = runner.dir.store(name)
        m = st.manifest
        assert (m["retriever"], m["queries"], m["documents"], m["n_queries"], m["n_pairs"],
                m["queries_name"]) == (want["retriever"], QUERIES_FP, "a9eeca865b19023bbf499444f7bce067",
                                       3000, 7042, "querylog")
        assert pairs_sha(st) == want["pairs_sha"]
        s = res["systems"][name]
        assert (s["n_pairs"], s["gini_c10"], s["gini_c20"], s["mean_exposing_queries"]) == (
            7042, want["gini_c10"], want["gini_c20"], 85.8780487804878)
        assert topics[name]["topic_gini_mean"] == want["topic_gini_mean"]
        assert topics[name]["topic_fairness_tvd"]["value"] == want["topic_fairness_tvd"]
        ex = runner.status(f"exposure-{name}").result
        assert (ex["n_pairs"], ex["n_queries"], ex["n_docs"]) == (7042, 3000, 82)

    # an audit the previous code started resumes: every stage's key is the same, so all cached
    again = AuditRunner(parse_config(config(log)), tmp_path / "audit")
    again.run()
    assert {s.status for s in again.statuses if s.present} == {"cached"}


def test_a_sample_of_the_log_is_the_in_memory_reader_s(log, tmp_path):
    """``[queries] sample`` draws from the table the queries the in-memory log gives."""
    from limelight.audit.inputs import load_inputs

    cfg = parse_config(config(log, "sample = 500\n"))
    mem = load_inputs(cfg)
    disk = load_inputs(cfg, on_disk=tmp_path)
    assert not mem.queries.on_disk and len(disk.queries) == 500
    assert disk.queries_fp == mem.queries_fp
    a, b = mem.queries, disk.queries
    assert a.ids.strings.tolist() == b.ids.strings.tolist() and a.texts.tolist() == b.texts.tolist()
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.fields.keys() == b.fields.keys()
    assert all(a.fields[k].tolist() == b.fields[k].tolist() for k in a.fields)
    whole = load_inputs(parse_config(config(log)), on_disk=tmp_path / "whole")
    assert whole.queries.on_disk and whole.queries_fp == QUERIES_FP


def test_a_bad_log_line_is_one_line_naming_it(log, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    bad = tmp_path / "bad.tsv"
    bad.write_text(log.read_text(encoding="utf-8") + "repeats\tonly-two-columns\n", encoding="utf-8")
    toml = tmp_path / "audit.toml"
    toml.write_text(config(bad), encoding="utf-8")
    p = _inproc.run_cli("audit", str(toml), "--out", str(tmp_path / "out"))
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(errors) == 1 and f"{bad}:4002" in errors[0], p.stderr
    assert not (tmp_path / "out").exists() and list(tmp.iterdir()) == []
