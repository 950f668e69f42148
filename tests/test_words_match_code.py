"""The words match the code (issue 42): what the help, the docstrings, the report and the README
say about the exposure store and the query files is what the code does, and the compatibility
modules that only old callers used are gone."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _audits import tiny_adi_audit
from typer.testing import CliRunner

from limelight.audit.config import parse_config
from limelight.audit.layout import AuditDir
from limelight.cli import app
from limelight.data.loaders import load_queries, load_queries_file, load_query_log
from limelight.errors import FormatError
from limelight.exposure.compute import ExposureOptions, compute_exposure
from limelight.report import ReportingAuditRunner

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
#: the manual's page of file formats and conventions (moved there from the README, issue 46)
FORMATS = (REPO / "docs" / "manual" / "formats.md").read_text(encoding="utf-8")

#: a BM25-only audit of adi, its optional stages off: a store and a report in a few seconds
TINY_AUDIT = tiny_adi_audit("adi-words", ("eqi", "robustness", "ctrlqgen", "rerank", "compare",
                                          "intervention"))


@pytest.fixture(scope="module")
def tiny_audit(tmp_path_factory) -> AuditDir:
    root = tmp_path_factory.mktemp("words")
    cfg = parse_config(TINY_AUDIT, root / "audit.toml")
    ReportingAuditRunner(cfg, root / "out", quick=True).run()
    return AuditDir(root / "out")


def test_exposure_compute_offers_no_duckdb_options(tmp_path):
    """``--art-indexes`` and ``--view`` did nothing (a warning Python's default filter hid): gone,
    and so is ``DIR/exposure.duckdb`` from the help."""
    runner = CliRunner()
    res = runner.invoke(app, ["exposure", "compute", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "--art-indexes" not in res.output and "--view" not in res.output
    assert "duckdb" not in res.output.lower() and "per-document index" in res.output
    for opt in ("--art-indexes", "--view"):
        bad = runner.invoke(app, ["exposure", "compute", "--index", "i", "--queries", "q",
                                  "--out", str(tmp_path / "o"), opt])
        assert bad.exit_code == 2 and "No such option" in bad.output, bad.output
    assert not (tmp_path / "o").exists()


def test_the_library_has_no_duckdb_options(tmp_path):
    assert [f.name for f in dataclasses.fields(ExposureOptions)] == ["shard_size", "batch_size",
                                                                    "load", "pairs_in_memory"]
    for kw in ({"materialize": False}, {"art_indexes": True}):
        with pytest.raises(TypeError, match="unexpected keyword"):
            compute_exposure(None, None, tmp_path / "o", **kw)
    assert not (tmp_path / "o").exists()


def test_report_and_store_say_what_is_on_disk(tiny_audit):
    """The report named the stores "DuckDB + Parquet shards"; they hold Parquet shards and a
    per-document index, and no DuckDB file."""
    page = tiny_audit.report_html.read_text(encoding="utf-8")
    assert "duckdb" not in page.lower()
    assert "(Parquet shards and a per-document index)" in page
    store = tiny_audit.store_dir("bm25")
    assert list((store / "shards").glob("part-*.parquet")) and (store / "doc_index").is_dir()
    assert not list(store.rglob("*duckdb*"))


def test_source_and_docs_name_duckdb_only_for_what_it_does():
    """DuckDB reads a store in place (``ExposureStore.connect``) and the first layout's
    ``exposure.duckdb`` is migrated away: only the migration's own lines name that file, and no
    text offers the removed options or calls a store a DuckDB database."""
    files = [*(REPO / "src" / "limelight").rglob("*.py"), *(REPO / "docs").glob("*.md"),
             REPO / "README.md"]
    stale = re.compile(r"--art-indexes|art_indexes|exposure compute[^\n]*--view|"
                       r"DuckDB \+ Parquet|Parquet shards \+ DuckDB|DuckDB database", re.I)
    migration = {"src/limelight/exposure/store.py", "docs/results-exposure.md"}
    bad = []
    for f in files:
        rel = f.relative_to(REPO).as_posix()
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if stale.search(line) or ("exposure.duckdb" in line and rel not in migration):
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert bad == []


def test_readme_gives_the_stores_score_type(tiny_audit):
    """The README said scores are kept as float64; an exposure store keeps float32 (the manual's
    conventions say so now)."""
    store = tiny_audit.store_dir("bm25")
    shard = sorted((store / "shards").glob("part-*.parquet"))[0]
    assert pq.read_schema(shard).field("score").type == pa.float32()
    text = " ".join(FORMATS.split())
    assert "score float32" in text and "exposure store keeps each pair's score as float32" in text
    assert not re.search(r"Scores are kept as float64", text)


def _readme_query_log_example() -> str:
    """The code block of the query-log format (the manual's file formats page)."""
    part = FORMATS.split("## Query files and the query-log format", 1)[1]
    block = re.search(r"```[^\n]*\n(.*?)```", part, re.S)
    assert block, "the README shows an example of the query-log format"
    return "".join(line.strip(" ") + "\n" for line in block.group(1).splitlines())


def test_readme_query_log_example_reads_as_documented(tmp_path):
    """The README's three-column example, read by the real readers: one distinct query
    ``trec-mq-2007:1`` of weight 2 (``exposure compute``, the audit), every entry as it is
    (``retrieve``); a line of another number of columns is an error naming it."""
    log = tmp_path / "log.tsv"
    log.write_text(_readme_query_log_example(), encoding="utf-8")
    assert log.read_text().splitlines()[0].split("\t") == ["source", "qid", "query"]
    for read in (load_queries_file, load_query_log):
        qs = read(log)
        assert qs.ids.strings.tolist() == ["trec-mq-2007:1"] and qs.weights.tolist() == [2.0]
        assert qs.texts.tolist() == ["after school program evaluation"]
    every = load_queries(log)
    assert every.ids.strings.tolist() == ["trec-mq-2007:1", "aol:1"]
    assert every.weights.tolist() == [1.0, 1.0]
    log.write_text(_readme_query_log_example() + "aol\t2\tone\ttoo many\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r":5: .*found 4 columns"):
        load_queries_file(log)


@pytest.mark.parametrize("module", ["limelight.exposure.exact", "limelight.exposure.cli",
                                    "limelight.querygen.variations_cli", "limelight.demo"])
def test_compatibility_modules_are_gone(module):
    """Own code calls the real modules; the re-exporting shims only old callers used are gone."""
    assert importlib.util.find_spec(module) is None


@pytest.mark.parametrize(("module", "name"), [("limelight.cli.root", "fail"),
                                              ("limelight.querygen.serialize", "entity_record"),
                                              ("limelight.querygen.variations", "method_category")])
def test_unused_helpers_are_gone(module, name):
    assert not hasattr(importlib.import_module(module), name)
