"""Kind ``run`` (issue 41 item 2): results the user already has, audited as a system; and
``limelight exposure compute`` without a config (item 6: ``--system``, ``--run``, ``--model
hybrid``).

The anchor: ``limelight retrieve`` writes BM25's results to a file, and the ``run`` system over
that file gives the store of BM25 itself, pair for pair and score for score, through the CLI
and through an audit of both systems. The shared TREC runs (trec_eval's and trectools' test
inputs) are read as they are, and every mistake is one line.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from _audits import CORE_STAGES
from _inproc import run_cli
from typer.testing import CliRunner

from limelight._io import file_sha256
from limelight.audit.config import load_config, parse_config
from limelight.cli import app
from limelight.data import read_trec_run
from limelight.data.collection import Collection
from limelight.data.formats import read_queries_tsv, write_run_parquet
from limelight.data.ids import IdMap
from limelight.data.queries import normalise_texts
from limelight.errors import FormatError, LimelightError
from limelight.exposure import ExposureStore, compute_exposure, exposure_from_run
from limelight.report import run_audit
from limelight.retrieval.spec import System
from limelight.retrieval.systems import DETERMINISTIC, describe_kinds, get_kind

runner = CliRunner()


def invoke(*args: str) -> dict:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (res.output, res.exception)
    return res


def cli(*args: str) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in this process (tests/_inproc.py: the console script's entry point)."""
    return run_cli(*args)


def one_line(p: subprocess.CompletedProcess) -> str:
    """The stderr of a refused command: exit status 2, one line, no traceback."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def assert_same_store(a: ExposureStore, b: ExposureStore, scores: bool = True) -> None:
    """Same documents, queries and pairs (query, document, rank; and score when ``scores``)."""
    assert a.doc_ids == b.doc_ids and a.queries.ids == b.queries.ids
    names = ("q", "d", "rank", "score") if scores else ("q", "d", "rank")
    for name, x, y in zip(names, a.pair_arrays(), b.pair_arrays(), strict=False):
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.fixture(scope="module")
def cran(tmp_path_factory, data_dir) -> SimpleNamespace:
    """Cranfield: an index, BM25's top 100 for its 225 queries written by ``limelight retrieve``
    (plain and gzipped), and the store BM25 itself gives (``limelight exposure compute``)."""
    root = tmp_path_factory.mktemp("cran")
    qfile = data_dir / "collections" / "cranfield" / "queries.tsv"
    invoke("index", "--collection", "cranfield", "--out", root / "idx")
    for out in (root / "bm25.run", root / "bm25.run.gz"):
        invoke("retrieve", "--index", root / "idx", "--queries", qfile, "--out", out, "--k", 100)
    invoke("exposure", "compute", "--index", root / "idx", "--queries", qfile, "--out", root / "direct")
    return SimpleNamespace(root=root, idx=root / "idx", qfile=qfile, run=root / "bm25.run",
                           direct=ExposureStore.open(root / "direct"))


def compute_cli(cran, out: Path, *system: str) -> dict:
    res = invoke("exposure", "compute", "--queries", cran.qfile, "--out", out, "--json", *system)
    return json.loads(res.output)


# ---- retrieve → run file → run system: BM25's own store -------------------------------------------
def test_retrieved_run_gives_the_bm25_store_through_the_cli(cran, tmp_path):
    summary = compute_cli(cran, tmp_path / "s1", "--run", cran.run, "--collection", "cranfield")
    assert_same_store(ExposureStore.open(tmp_path / "s1"), cran.direct)
    assert summary["queries_with_results"] == 225 and summary["queries_without_results"] == 0
    settings = ExposureStore.open(tmp_path / "s1").manifest["settings"]
    assert settings["kind"] == "run" and settings["sha256"] == file_sha256(cran.run)
    # gzipped, and the collection from the index's stored documents
    compute_cli(cran, tmp_path / "s2", "--run", cran.root / "bm25.run.gz", "--index", cran.idx)
    assert_same_store(ExposureStore.open(tmp_path / "s2"), cran.direct)
    # a folder of parts (a query's lines split across two of them), beside Spark's marker files
    parts = tmp_path / "parts"
    parts.mkdir()
    lines = cran.run.read_text().splitlines(keepends=True)
    for i, chunk in enumerate(np.array_split(np.arange(len(lines)), 3)):
        (parts / f"part-{i}.txt").write_text("".join(lines[j] for j in chunk))
    (parts / "_SUCCESS").write_text("")
    (parts / ".part-0.txt.crc").write_text("crc")
    compute_cli(cran, tmp_path / "s3", "--run", parts, "--collection", "cranfield")
    assert_same_store(ExposureStore.open(tmp_path / "s3"), cran.direct)
    # --system FILE.toml: any kind, paths relative to the file's folder
    (tmp_path / "sys").mkdir()
    toml = tmp_path / "sys" / "served.toml"
    toml.write_text('[system]\nkind = "run"\npath = "../parts"\n# the folder above\n')
    compute_cli(cran, tmp_path / "s4", "--system", toml, "--collection", "cranfield")
    assert_same_store(ExposureStore.open(tmp_path / "s4"), cran.direct)
    # a bm25 system through --system is limelight's BM25 over --index
    (tmp_path / "bm25.toml").write_text('[system]\nkind = "bm25"\nk1 = 0.9\n')
    compute_cli(cran, tmp_path / "s5", "--system", tmp_path / "bm25.toml", "--index", cran.idx)
    assert_same_store(ExposureStore.open(tmp_path / "s5"), cran.direct)


AUDIT = """
[audit]
name = "cran-run"
depth = 100
cutoffs = [10, 100]
shard_size = 64

[collection]
source = "cranfield"

[queries]
source = "{qfile}"

[[systems]]
name = "bm25"
kind = "bm25"

[[systems]]
name = "served"
kind = "run"
path = "results/served.run"     # relative to this file's folder

{stages}
[intervention]                  # reads each system's results for the judged queries too
temperatures = [1]
samples = 2
c = 10
"""


def test_audit_of_bm25_and_its_run_file(cran, tmp_path):
    """Two systems of one audit, BM25 and the run of its results: equal stores; the report says
    how many queries have results; a changed file reruns the run system's stages only."""
    (tmp_path / "results").mkdir()
    served = tmp_path / "results" / "served.run"
    shutil.copy(cran.run, served)
    cfg_path = tmp_path / "audit.toml"
    cfg_path.write_text(AUDIT.format(qfile=cran.qfile, stages=CORE_STAGES))
    cfg = load_config(cfg_path)
    assert cfg.system("served").settings()["sha256"] == file_sha256(served)
    out = tmp_path / "out"
    res = run_audit(cfg, out)
    from limelight.audit import AuditDir

    a = AuditDir(out)
    assert_same_store(a.store("served"), a.store("bm25"))
    assert_same_store(a.store("bm25"), cran.direct)
    cov = res["systems"]["served"]["coverage"]
    assert (cov["queries"], cov["with_results"], cov["without_results"]) == (225, 225, 0)
    assert "coverage" not in res["systems"]["bm25"]
    assert res["stages"]["intervention"]["status"] == "present"
    assert res["systems"]["served"]["gini_c100"] == res["systems"]["bm25"]["gini_c100"]
    page = a.report_html.read_text(encoding="utf-8")
    assert "served: queries with results 225, without 0 (of 225" in page
    # the file changes (query 1's results removed): its stages rerun, BM25's are reused
    lines = served.read_text().splitlines(keepends=True)
    served.write_text("".join(ln for ln in lines if ln.split()[0] != "1"))
    res2 = run_audit(load_config(cfg_path), out)
    status = {s["name"]: s["status"] for s in json.loads(a.manifest_path.read_text())["stages"]}
    assert status["exposure-bm25"] == "cached" and status["exposure-served"] == "done"
    cov = res2["systems"]["served"]["coverage"]
    assert (cov["with_results"], cov["without_results"]) == (224, 1)
    page = a.report_html.read_text(encoding="utf-8")
    assert "served: queries with results 224, without 1 (of 225" in page
    q, d, rank, score = a.store("served").pair_arrays()
    bq, bd, brank, bscore = a.store("bm25").pair_arrays()
    first = a.store("bm25").queries.ids.lookup("1")
    keep = bq != first
    assert not (q == first).any()
    for x, y in ((q, bq), (d, bd), (rank, brank), (score, bscore)):
        np.testing.assert_array_equal(x, y[keep])


# ---- the shared TREC runs ---------------------------------------------------------------------------
def _trec_lines(path: Path) -> list[list[str]]:
    return [ln.split() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _collection(ids) -> Collection:
    ids = sorted(set(ids))
    return Collection(IdMap(ids, kind="document"), np.asarray(ids, dtype=object), name="docs")


def _queries_of(rows: list[list[str]]):
    from limelight.data.queries import Queries

    qids = list(dict.fromkeys(r[0] for r in rows))
    return Queries.from_lists(qids, [f"topic {q}" for q in qids])


def _open(path: Path, coll, qs, **params):
    kind = get_kind("run")
    spec = System.of("run", **kind.resolved({"path": str(path), **params}))
    return spec.open(None, collection=coll, queries=qs)


@pytest.mark.parametrize("name", ["results.test", "results.comment.test", "results-302.test"])
def test_shared_trec_runs_read_as_the_trec_reader_reads_them(trec_eval_dir, tmp_path, name):
    """trec_eval's own runs (tab-separated, padded scores; comment lines): the store equals the
    one made from ``read_trec_run``'s Run."""
    path = trec_eval_dir / name
    rows = _trec_lines(path)
    coll, qs = _collection(r[2] for r in rows), _queries_of(rows)
    retr = _open(path, coll, qs)
    assert retr.coverage() == {"queries": len(qs), "with_results": len(qs), "without_results": 0,
                               "unmatched_result_lists": 0, "result_lists": len(qs),
                               "duplicate_result_lists": 0, "results": len(rows),
                               "unknown_doc_results": 0, "unknown_docs": 0}
    depth = max(np.unique([r[0] for r in rows], return_counts=True)[1])
    got = compute_exposure(retr, qs, tmp_path / "a", depth=int(depth))
    want = exposure_from_run(read_trec_run(path), qs, coll.ids, tmp_path / "b", depth=int(depth))
    assert_same_store(got, want)


def test_unknown_documents_are_named_or_dropped_and_counted(trec_eval_dir, tmp_path):
    path = trec_eval_dir / "results.test"
    rows = _trec_lines(path)
    judged = {ln.split()[2] for ln in (trec_eval_dir / "qrels.test").read_text().splitlines() if ln.strip()}
    coll, qs = _collection(judged), _queries_of(rows)
    unknown = [r[2] for r in rows if r[2] not in judged]
    first = list(dict.fromkeys(unknown))[:3]
    with pytest.raises(LimelightError) as e:
        _open(path, coll, qs)
    msg = str(e.value)
    assert f"{len(unknown):,} results name {len(set(unknown)):,} document ids that docs lacks" in msg
    assert f"(first: {', '.join(map(repr, first))})" in msg and 'unknown_docs = "drop"' in msg
    retr = _open(path, coll, qs, unknown_docs="drop")
    cov = retr.coverage()
    assert cov["unknown_doc_results"] == len(unknown) and cov["unknown_docs"] == len(set(unknown))
    st = compute_exposure(retr, qs, tmp_path / "s", depth=1000)
    assert len(st.pair_arrays()[0]) == len(rows) - len(unknown)
    kept = {(r[0], r[2]) for r in rows if r[2] in judged}
    q, d, _, _ = st.pair_arrays()
    assert set(zip(st.queries.ids.decode(q).tolist(), st.doc_ids.decode(d).tolist(), strict=True)) == kept


def test_trectools_runs_file_and_folder(data_dir, tmp_path):
    """trectools' runs: one file reads; a folder of parts that list the same (query, document)
    twice is refused, naming both."""
    src = data_dir / "runs" / "trectools_unittests"
    rows = [r for n in ("r1.run", "r2.run", "r4.run", "input.uic0301_top30") for r in _trec_lines(src / n)]
    coll = _collection(r[2] for r in rows)
    qs = _queries_of(rows)
    top30 = _open(src / "input.uic0301_top30", coll, qs)  # ranks from 0, integer scores
    lines = _trec_lines(src / "input.uic0301_top30")
    assert top30.coverage()["with_results"] == len({r[0] for r in lines}) == 10
    docs, scores = top30(qs, 5).query(lines[0][0])
    assert docs.tolist() == [r[2] for r in lines[:5]] and scores.tolist() == [1000, 999, 998, 997, 996]
    parts = tmp_path / "parts"
    parts.mkdir()
    for n in ("r1.run", "r2.run"):
        shutil.copy(src / n, parts / n)
    with pytest.raises(LimelightError, match="query '1' lists document 'doc1_1' twice"):
        _open(parts, coll, qs)


# ---- matching by text; SERP logs -------------------------------------------------------------------
def _serp_rows(cran) -> pd.DataFrame:
    """BM25's results as a SERP log: query text in odd case and spacing, rank, score, snippet."""
    run = read_trec_run(cran.run)
    qs = read_queries_tsv(cran.qfile)
    texts = qs.texts[qs.ids.encode(run.qids.strings.tolist())]
    odd = np.asarray([("  " + t.upper().replace(" ", "   ") + " ") if i % 2 else t
                      for i, t in enumerate(texts.tolist())], dtype=object)
    return pd.DataFrame({"query": odd[run.q], "qid": run.qids.decode(run.q),
                         "docno": run.docids.decode(run.d), "position": run.ranks(),
                         "score": run.score, "snippet": "some text, with a comma"})


def test_match_by_text_jsonl_serp_log(cran, tmp_path):
    qs = read_queries_tsv(cran.qfile)
    assert len(set(normalise_texts(qs.texts.tolist()))) == len(qs)  # distinct texts: matchable
    df = _serp_rows(cran)[["query", "docno", "position", "snippet"]]
    dup = df[df["query"] == df["query"].iloc[0]].copy()  # query 1 again, another spelling: ignored
    dup["query"] = dup["query"].str.title()
    dup["docno"] = dup["docno"].iloc[::-1].to_numpy()
    path = tmp_path / "serp.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(pd.concat([df, dup]).to_json(orient="records", lines=True))
    (tmp_path / "serp.toml").write_text('[system]\nkind = "run"\npath = "serp.jsonl.gz"\n'
                                        'match = "text"\ndoc_column = "docno"\nrank_column = "position"\n')
    compute_cli(cran, tmp_path / "s", "--system", tmp_path / "serp.toml", "--collection", "cranfield")
    st = ExposureStore.open(tmp_path / "s")
    assert_same_store(st, cran.direct, scores=False)
    np.testing.assert_array_equal(st.pair_arrays()[3], -st.pair_arrays()[2])  # ranks only: -rank
    coll = cran.direct
    retr = _open(path, SimpleNamespace(ids=coll.doc_ids, name="cranfield"), qs, match="text",
                 doc_column="docno", rank_column="position")
    cov = retr.coverage()
    assert cov["duplicate_result_lists"] == 1 and cov["with_results"] == 225
    assert cov["results"] == len(df) + len(dup)


def test_match_by_text_trec_run_with_its_queries_file(cran, tmp_path):
    """A TREC run over other ids (x1, x2, ...) is matched by text through its queries file."""
    lines = cran.run.read_text().splitlines(keepends=True)
    (tmp_path / "other.run").write_text("".join("x" + ln for ln in lines))
    qs = read_queries_tsv(cran.qfile)
    (tmp_path / "other.tsv").write_text("".join(f"x{q}\t{t.upper()}\n" for q, t in
                                                zip(qs.ids, qs.texts.tolist(), strict=True)))
    (tmp_path / "s.toml").write_text('[system]\nkind = "run"\npath = "other.run"\nmatch = "text"\n'
                                     'queries = "other.tsv"\n')
    compute_cli(cran, tmp_path / "s", "--system", tmp_path / "s.toml", "--collection", "cranfield")
    assert_same_store(ExposureStore.open(tmp_path / "s"), cran.direct)
    # by id, nothing matches: one line naming both sides
    p = cli("exposure", "compute", "--queries", cran.qfile, "--out", tmp_path / "t",
            "--run", tmp_path / "other.run", "--collection", "cranfield")
    err = one_line(p)
    assert "none of its 225 queries matches one of the 225 queries by id (results: 'x1', 'x2', 'x3'; queries: '1', '2', '3')" in err
    assert '--match text' in err and not (tmp_path / "t").exists()


def test_parquet_csv_and_tsv_serp_logs(cran, tmp_path):
    write_run_parquet(read_trec_run(cran.run), tmp_path / "r.parquet")
    compute_cli(cran, tmp_path / "p", "--run", tmp_path / "r.parquet", "--collection", "cranfield")
    assert_same_store(ExposureStore.open(tmp_path / "p"), cran.direct)
    df = _serp_rows(cran)
    df[["qid", "docno", "score", "snippet"]].to_csv(tmp_path / "r.csv", index=False)
    compute_cli(cran, tmp_path / "c", "--run", tmp_path / "r.csv", "--collection", "cranfield")
    assert_same_store(ExposureStore.open(tmp_path / "c"), cran.direct)
    df[["qid", "docno", "position"]].to_csv(tmp_path / "r.tsv.gz", sep="\t", index=False)
    (tmp_path / "tsv.toml").write_text('[system]\nkind = "run"\npath = "r.tsv.gz"\n'
                                       'rank_column = "position"\n')
    compute_cli(cran, tmp_path / "t", "--system", tmp_path / "tsv.toml", "--collection", "cranfield")
    assert_same_store(ExposureStore.open(tmp_path / "t"), cran.direct, scores=False)


# ---- mistakes: one line, exit status 2 ---------------------------------------------------------------
def test_bad_results_are_one_line(cran, tmp_path):
    lines = cran.run.read_text().splitlines(keepends=True)
    base = ["exposure", "compute", "--queries", cran.qfile, "--collection", "cranfield"]
    bad = tmp_path / "unknown.run"
    bad.write_text("".join(ln.replace(" Q0 ", " Q0 nope-") if i in (3, 7) else ln
                           for i, ln in enumerate(lines)))
    err = one_line(cli(*base, "--out", tmp_path / "a", "--run", bad))
    assert "2 results name 2 document ids that cranfield lacks (first: 'nope-" in err
    summary = tmp_path / "drop.toml"
    summary.write_text(f'[system]\nkind = "run"\npath = "{bad.name}"\nunknown_docs = "drop"\n')
    assert compute_cli(cran, tmp_path / "b", "--system", summary, "--collection", "cranfield")["pairs"] \
        == len(lines) - 2
    cols = tmp_path / "cols.run"
    cols.write_text("".join(lines[:2]) + "1 Q0 12 3\n" + "".join(lines[2:]))
    err = one_line(cli(*base, "--out", tmp_path / "c", "--run", cols))
    assert f"{cols}:3: expected 6 columns" in err
    js = tmp_path / "serp.jsonl"
    js.write_text('{"qid": "1", "doc_id": "184", "score": 2.5}\n{"qid": "1", "doc_id": 486 "score": 1}\n')
    assert f"{js}:2: invalid JSON" in one_line(cli(*base, "--out", tmp_path / "d", "--run", js))
    csv = tmp_path / "serp.csv"
    csv.write_text("qid,doc_id,score\n1,184,2.5\n1,486,high\n")
    assert f"{csv}:3: score must be a finite number, got 'high'" in one_line(
        cli(*base, "--out", tmp_path / "e", "--run", csv))
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("qid,document,score\n1,184,2.5\n")
    assert "no document id column (doc_id or docno or docid; set doc_column)" in one_line(
        cli(*base, "--out", tmp_path / "f", "--run", nocol))
    assert not any((tmp_path / x).exists() for x in "acdef")


def test_bad_options_are_one_line(cran, tmp_path):
    base = ["exposure", "compute", "--queries", cran.qfile, "--out", tmp_path / "o"]
    toml = tmp_path / "s.toml"
    toml.write_text('[system]\nkind = "run"\npth = "x.run"\n')
    err = one_line(cli(*base, "--system", toml, "--collection", "cranfield"))
    # read as an audit's [[systems]] table is (audit.config.parse_systems): at the file's line
    assert "s.toml:3: unknown key 'pth' in [system] (allowed: doc_column, format, match, path" in err
    toml.write_text('[system]\nkind = "lucene"\n')
    assert "s.toml:2: system.kind must be one of bm25, dense, hybrid, reranked, run" in one_line(
        cli(*base, "--system", toml))
    assert "--model goes with --index, not with --run" in one_line(
        cli(*base, "--run", cran.run, "--model", "bm25", "--collection", "cranfield"))
    assert "a run system needs the collection its results come from" in one_line(cli(*base, "--run", cran.run))
    assert "--preset goes with --url" in one_line(cli(*base, "--preset", "solr"))
    assert "give one of --system, --run or --url, not --system and --run" in one_line(
        cli(*base, "--system", toml, "--run", cran.run))
    assert "a bm25 system needs --index" in one_line(cli(*base))
    assert "path 'missing.run': no such file or folder" in one_line(
        cli(*base, "--run", "missing.run", "--collection", "cranfield"))
    assert not (tmp_path / "o").exists()


def test_configuration_resolves_and_pins_the_content(cran, tmp_path):
    (tmp_path / "results").mkdir()
    shutil.copy(cran.run, tmp_path / "results" / "served.run")
    text = AUDIT.format(qfile=cran.qfile, stages=CORE_STAGES)
    cfg = parse_config(text, tmp_path / "audit.toml")
    sha = file_sha256(tmp_path / "results" / "served.run")
    assert cfg.system("served").settings() == {"kind": "run", "format": "auto", "match": "id",
                                                "path": "results/served.run", "sha256": sha,
                                                "unknown_docs": "error"}
    assert System.from_settings(cfg.system("served").settings()).settings() == \
        cfg.system("served").settings()
    pinned = text.replace('path = "results/served.run"', f'path = "results/served.run"\nsha256 = "{sha}"')
    assert parse_config(pinned, tmp_path / "audit.toml").system("served").settings()["sha256"] == sha
    at = text.splitlines().index('name = "served"')  # the [[systems]] header is the line before
    for change, msg in ((f'sha256 = "{"0" * 64}"', "is not the one pinned"),
                        ('path = "results/nope.run"', "path 'results/nope.run': no such file or folder"),
                        ('format = "xml"', "format must be one of auto, trec, parquet, jsonl, csv"),
                        ('match = "text"', 'match = "text" with a TREC run needs queries'),
                        ('doc_column = "docno"', "doc_column names a column of JSONL, CSV or Parquet")):
        bad = text.replace('path = "results/served.run"', f'path = "results/served.run"\n{change}') \
            if "path" not in change else text.replace('path = "results/served.run"', change)
        with pytest.raises(FormatError, match=msg) as e:
            parse_config(bad, tmp_path / "audit.toml")
        assert str(e.value).startswith(f"{tmp_path / 'audit.toml'}:{at}: systems.served: ")


def test_registered_kind_and_listing():
    kind = get_kind("run")
    assert kind.capabilities == frozenset({DETERMINISTIC}) and not kind.needs_index
    row = next(r for r in describe_kinds() if r["kind"] == "run")
    assert row["capabilities"] == ["deterministic"]
    assert row["parameters"]["unknown_docs"]["default"] == "error"
    assert {"path", "format", "match", "query_column", "doc_column", "score_column", "rank_column",
            "unknown_docs", "sha256"} <= set(row["parameters"])


# ---- --model hybrid ------------------------------------------------------------------------------------
def test_exposure_compute_model_hybrid(tmp_path, data_dir):
    """``--model hybrid`` (refused before) computes the store of the hybrid retriever."""
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    invoke("index", "--collection", "adi", "--out", tmp_path / "idx", "--dense")
    res = invoke("exposure", "compute", "--index", tmp_path / "idx", "--queries", qfile,
                 "--out", tmp_path / "h", "--model", "hybrid", "--depth", 20, "--json")
    assert json.loads(res.output)["queries"] == 35
    st = ExposureStore.open(tmp_path / "h")
    assert st.manifest["settings"]["kind"] == "hybrid"
    spec = System.from_model("hybrid")
    assert System.from_recorded(st.manifest["settings"]) == spec
    want = compute_exposure(spec.open(tmp_path / "idx"), st.queries, tmp_path / "w", depth=20)
    assert_same_store(st, want)


def test_url_and_preset_make_an_http_system():
    """``--url URL --preset NAME`` is the shortcut of an ``http`` system with those parameters."""
    from limelight.cli.exposure import _system

    spec, _ = _system(None, 0.9, 0.4, None, None, "http://127.0.0.1:9", "limelight")
    assert spec.kind == "http"
    assert (spec.param("url"), spec.param("preset")) == ("http://127.0.0.1:9", "limelight")
