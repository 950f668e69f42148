"""Exact exposure store (limelight.exposure.compute, limelight.exposure.store) and its CLI, on
real data."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import _inproc
import numpy as np
import pytest
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data import Queries, load_catalog, load_dataset, load_query_log, write_trec_run
from limelight.data.loaders import load_queries_file
from limelight.errors import IndexMismatchError, LimelightError, UnknownIdError
from limelight.exposure import ExposureStore, compute_exposure, exposure_from_run, gini
from limelight.retrieval.index_dir import build_index, open_fingerprinted

LIMELIGHT = [sys.executable, "-m", "limelight.cli"]


@pytest.fixture(scope="module")
def movies_index(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "movies"
    build_index(load_catalog("movies"), out)
    return out


@pytest.fixture(scope="module")
def log_queries() -> Queries:
    return load_query_log()


@pytest.fixture(scope="module")
def movies_store(movies_index, log_queries, tmp_path_factory):
    retriever, fp, _ = open_fingerprinted(movies_index, "bm25")
    qs = log_queries.head(3000)
    st = compute_exposure(retriever, qs, tmp_path_factory.mktemp("st") / "store", depth=20,
                          shard_size=700, fingerprint=fp)
    return retriever, qs, st


def table(path: Path, sql: str):
    """``sql`` over the store through DuckDB (``exposure`` a view over the shards)."""
    with ExposureStore.open(path).connect() as con:
        return con.execute(sql).fetchdf()


def test_store_holds_every_pair_of_the_run(movies_store):
    retriever, qs, st = movies_store
    run = retriever.retrieve(qs, 20)
    q, d, rank, score = st.pair_arrays()
    assert len(q) == len(run) > 0 and st.n_shards == 5
    # same pairs, ranks and scores as the Run the retriever builds
    got = sorted(zip(q.tolist(), d.tolist(), rank.tolist(), strict=True))
    want = sorted(zip(qs.ids.encode(run.qids.decode(run.q)).tolist(), run.d.tolist(),
                      run.ranks().tolist(), strict=True))
    assert got == want
    np.testing.assert_allclose(np.sort(score), np.sort(run.score.astype(np.float32)))
    ex = table(st.path, "SELECT * FROM exposure")
    assert len(ex) == len(run)
    assert ex["rank"].min() == 1 and ex["rank"].max() == 20
    qt = table(st.path, "SELECT * FROM queries ORDER BY q")
    assert qt["qid"].tolist() == qs.ids.strings.tolist()
    np.testing.assert_array_equal(qt["weight"].to_numpy(), qs.weights)
    np.testing.assert_array_equal(qt["n_retrieved"].to_numpy(), np.bincount(q, minlength=len(qs)))
    # the threshold is each query's score at rank n (NULL when fewer than n were retrieved)
    thr = st.thresholds()
    full = np.flatnonzero(run.depths() == 20)
    for i in full[:50].tolist():
        qi = qs.ids.lookup(run.qids[i])
        assert thr[qi] == pytest.approx(run.score[run.offsets[i] + 19], rel=1e-6)
    assert np.isnan(thr[qt["n_retrieved"].to_numpy() < 20]).all()
    assert len(table(st.path, "SELECT * FROM documents")) == len(retriever.doc_ids)


def test_lookups_and_sparse_view(movies_store):
    retriever, qs, st = movies_store
    m = st.ranks()
    assert m.shape == (len(retriever.doc_ids), len(qs))
    n_exp = st.n_exposing()
    doc = int(np.argmax(n_exp))
    docid = retriever.doc_ids[doc]
    rows = st.exposing_queries(docid)
    assert len(rows) == n_exp[doc] == m[doc].nnz
    assert [r["rank"] for r in rows] == sorted(r["rank"] for r in rows)
    r0 = rows[0]
    assert r0["query"] == qs[r0["qid"]] and m[doc, qs.ids.lookup(r0["qid"])] == r0["rank"]
    qid = r0["qid"]
    docs = st.exposed_documents(qid)
    assert [x["rank"] for x in docs] == list(range(1, len(docs) + 1))
    assert docid in [x["docid"] for x in docs]
    with pytest.raises(UnknownIdError):
        st.exposing_queries("no such film")
    # reopening from disk gives the same analysis as the in-memory pairs
    st2 = ExposureStore.open(st.path)
    for c, beta in [(10, None), (20, 0.5)]:
        a, b = st.retrievability(c, beta), st2.retrievability(c, beta)
        np.testing.assert_allclose(a.r, b.r)
        assert a.gini == pytest.approx(gini(a.r)) and a.n_docs == len(retriever.doc_ids)
    with pytest.raises(LimelightError, match="exceeds"):
        st.retrievability(c=50)


def test_callable_retriever_gives_the_same_store(movies_store, tmp_path):
    retriever, qs, st = movies_store
    run = retriever.retrieve(qs, 20)
    st2 = exposure_from_run(run, qs, retriever.doc_ids, tmp_path / "fromrun", depth=20,
                            shard_size=1000)
    a = table(st.path, "SELECT q, d, rank FROM exposure ORDER BY q, rank")
    b = table(st2.path, "SELECT q, d, rank FROM exposure ORDER BY q, rank")
    assert a.equals(b)


def test_resume_skips_finished_shards_and_rejects_other_stores(movies_index, log_queries, tmp_path):
    retriever, fp, _ = open_fingerprinted(movies_index, "bm25")
    qs = log_queries.head(1000)
    out = tmp_path / "store"
    compute_exposure(retriever, qs, out, depth=10, shard_size=300, fingerprint=fp, load=False)
    with pytest.raises(LimelightError, match="not finished"):
        ExposureStore.open(out)
    first = (out / "shards" / "part-00000.parquet").stat().st_mtime_ns
    (out / "shards" / "part-00002.parquet").unlink()  # as if killed before this shard
    st = compute_exposure(retriever, qs, out, depth=10, shard_size=300, fingerprint=fp)
    assert (out / "shards" / "part-00000.parquet").stat().st_mtime_ns == first
    assert st.manifest["complete"] and len(table(out, "SELECT * FROM exposure")) == len(retriever.retrieve(qs, 10))
    with pytest.raises(IndexMismatchError, match="another query set"):
        compute_exposure(retriever, qs.head(999), out, depth=10, shard_size=300, fingerprint=fp)
    with pytest.raises(IndexMismatchError, match="another index"):
        compute_exposure(retriever, qs, out, depth=10, shard_size=300, fingerprint="other")
    with pytest.raises(IndexMismatchError, match="depth"):
        compute_exposure(retriever, qs, out, depth=20, shard_size=300, fingerprint=fp)


class FailsOnCall:
    """``retriever``'s answers, but ``error`` raised by its ``n``-th ``search_batch`` (a failure
    part-way through a job)."""

    def __init__(self, retriever, n: int, error: BaseException):
        self.doc_ids, self.retriever, self.n, self.error, self.calls = retriever.doc_ids, retriever, n, error, 0

    def search_batch(self, texts, k):
        self.calls += 1
        if self.calls == self.n:
            raise self.error
        return self.retriever.search_batch(texts, k)


def test_failing_retriever_leaves_no_partial_database_and_resumes(movies_store, tmp_path):
    """A fresh job builds its DuckDB table while it retrieves; a failure part-way removes the
    half-built database, keeps the finished shards, and the next run equals an unbroken one."""
    retriever, qs, st = movies_store
    qs = qs.head(2100)

    out = tmp_path / "store"
    interval = sys.getswitchinterval()
    with pytest.raises(RuntimeError, match="went away"):
        compute_exposure(FailsOnCall(retriever, 3, RuntimeError("index went away")), qs, out, depth=20,
                         shard_size=700, fingerprint="fp")
    assert sys.getswitchinterval() == interval  # the job's shorter GIL slices are undone
    assert not list(out.glob("*.duckdb*")) and not list(out.glob(".exposure.duckdb*"))
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    resumed = compute_exposure(retriever, qs, out, depth=20, shard_size=700, fingerprint="fp")
    fresh = compute_exposure(retriever, qs, tmp_path / "fresh", depth=20, shard_size=700, fingerprint="fp")
    assert resumed.manifest["complete"] and fresh.manifest["complete"]
    for a, b in zip(_snapshot(out), _snapshot(tmp_path / "fresh"), strict=True):
        assert a.equals(b)
    assert len(_snapshot(out)[0]) == len(retriever.retrieve(qs, 20))


def test_bad_queries_write_nothing(movies_index, tmp_path):
    retriever, fp, _ = open_fingerprinted(movies_index, "bm25")
    out = tmp_path / "store"
    bad = [
        (Queries.from_lists(["a", "b"], ["drama", "  "]), "empty"),
        (Queries.from_lists([], []), "empty"),
    ]
    for qs, msg in bad:
        with pytest.raises(LimelightError, match=msg):
            compute_exposure(retriever, qs, out, depth=10, fingerprint=fp)
        assert not out.exists()
    qs = Queries.from_lists(["a", "b"], ["drama", "war"])
    qs.weights = np.array([1.0, -2.0])
    with pytest.raises(LimelightError, match="weight"):
        compute_exposure(retriever, qs, out, depth=10, fingerprint=fp)
    qs.weights = np.array([1.0, np.nan])
    with pytest.raises(LimelightError, match="weight"):
        compute_exposure(retriever, qs, out, depth=10, fingerprint=fp)
    assert not out.exists()


# ---- CLI -------------------------------------------------------------------------------------


def test_cli_compute_doc_query_retrievability(movies_index, log_queries, tmp_path):
    qfile = tmp_path / "q.tsv"
    qs = log_queries.head(2000)
    qfile.write_text("".join(f"{i}\t{t}\n" for i, t in zip(qs.ids, qs.texts.tolist(), strict=True)))
    out = tmp_path / "store"
    runner = CliRunner()
    r = runner.invoke(app, ["exposure", "compute", "--index", str(movies_index), "--queries", str(qfile),
                            "--model", "bm25", "--depth", "100", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert (out / "doc_index").is_dir() and (out / "shards").is_dir()
    assert not (out / "exposure.duckdb").exists()  # the pairs are stored once, in the shards
    st = ExposureStore.open(out)
    docid = st.doc_ids[int(np.argmax(st.n_exposing()))]
    r = runner.invoke(app, ["exposure", "doc", "--store", str(out), docid, "--json", "--limit", "0"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert set(rows[0]) == {"qid", "query", "rank", "score"} and rows[0]["rank"] >= 1
    assert [x["rank"] for x in rows] == sorted(x["rank"] for x in rows)
    assert len(rows) == st.exposing_count(docid) == st.n_exposing()[st.doc_code(docid)] > 3
    # a page: the same rows, and a line on stderr saying which
    r = runner.invoke(app, ["exposure", "doc", "--store", str(out), docid, "--json", "--limit", "2",
                            "--offset", "1"])
    assert r.exit_code == 0 and json.loads(r.stdout) == rows[1:3]
    assert r.stderr.strip() == f"queries 2-3 of {len(rows):,} exposing {docid} (--limit 0: all; --offset: a later page)"
    r = runner.invoke(app, ["exposure", "query", "--store", str(out), rows[0]["qid"], "--json"])
    assert r.exit_code == 0 and docid in [x["docid"] for x in json.loads(r.output)]
    rfile = tmp_path / "r.tsv"
    r = runner.invoke(app, ["retrievability", "--store", str(out), "--c", "100", "--json",
                            "--out", str(rfile)])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["n_docs"] == 3201 == len(rfile.read_text().splitlines())
    assert res["gini"] == pytest.approx(summary["gini@100"])
    r = runner.invoke(app, ["retrievability", "--store", str(out), "--c", "10", "--beta", "0.5", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["beta"] == 0.5
    # the same from a TREC run (its rank column) with the full docs list
    retriever, _, _ = open_fingerprinted(movies_index, "bm25")
    run_file = tmp_path / "run.txt"
    write_trec_run(retriever.retrieve(st.queries, 100), run_file)
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(st.doc_ids) + "\n")
    r = runner.invoke(app, ["retrievability", "--run", str(run_file), "--docs", str(docs), "--c", "100",
                            "--json"])
    assert r.exit_code == 0, r.output
    from_run = json.loads(r.output)
    # a TSV query file has o_q = 1: compare with the store's r(d) under unit weights
    unit = st.retrievability(100, weights=np.ones(len(st.queries)))
    assert from_run["gini"] == pytest.approx(unit.gini, abs=1e-12)
    assert from_run["n_docs"] == 3201


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in this process (tests/_inproc.py: the console script's entry point,
    its exit status and streams, without a new interpreter's imports)."""
    return _inproc.run_cli(*args)


def real_cli(args: list[str]) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in a new interpreter: the real entry point, once per file."""
    return subprocess.run(LIMELIGHT + args, capture_output=True, text=True)


def test_cli_errors_are_one_line(movies_index, tmp_path, data_dir):
    qfile = tmp_path / "dup.tsv"
    qfile.write_text("a\tdrama\na\twar\n")
    out = tmp_path / "store"
    # through the real entry point once: one line on stderr, exit status 2, nothing written
    p = real_cli(["exposure", "compute", "--index", str(movies_index), "--queries", str(qfile),
                  "--out", str(out)])
    assert p.returncode == 2 and "duplicate query id 'a'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()
    runner = CliRunner()

    def fails(args: list[str], match: str) -> None:
        r = runner.invoke(app, args)
        assert r.exit_code != 0 and isinstance(r.exception, LimelightError), r.output
        assert match in str(r.exception) and "\n" not in str(r.exception)

    qfile.write_text("a\tdrama\nb\t \n")
    fails(["exposure", "compute", "--index", str(movies_index), "--queries", str(qfile),
           "--out", str(out)], "empty")
    assert not out.exists()
    # a store from another index
    qfile.write_text("a\tdrama\nb\twar\n")
    r = runner.invoke(app, ["exposure", "compute", "--index", str(movies_index), "--queries", str(qfile),
                            "--out", str(out), "--depth", "5"])
    assert r.exit_code == 0, r.output
    other = tmp_path / "other_idx"
    build_index(load_dataset(data_dir / "collections" / "adi").collection, other)
    fails(["exposure", "compute", "--index", str(other), "--queries", str(qfile), "--out", str(out),
           "--depth", "5"], "another")
    fails(["exposure", "doc", "--store", str(out), "no-such-doc", "--json"],
          "unknown document id 'no-such-doc'")
    fails(["exposure", "query", "--store", str(out), "zz", "--json"], "unknown query id 'zz'")
    fails(["retrievability", "--store", str(out), "--c", "10", "--json"], "exceeds")
    fails(["retrievability", "--json"], "exactly one")


# ---- interruption -------------------------------------------------------------------------------


def _snapshot(store: Path):
    return (table(store, "SELECT q, d, rank, score FROM exposure ORDER BY q, rank"),
            table(store, "SELECT * FROM queries ORDER BY q"),
            table(store, "SELECT * FROM documents ORDER BY d"))


@pytest.fixture(scope="module")
def kill_setup(log_queries, tmp_path_factory):
    """scifact's BM25 index, 8,000 log queries as a TSV, and an uninterrupted reference store."""
    base = tmp_path_factory.mktemp("kill_setup")
    idx, qfile = base / "idx", base / "q.tsv"
    build_index(load_dataset("scifact").collection, idx)
    qs = log_queries.head(8000)
    qfile.write_text("".join(f"{i}\t{t}\n" for i, t in zip(qs.ids, qs.texts.tolist(), strict=True)))
    retriever, fp, _ = open_fingerprinted(idx, "bm25")
    ref = compute_exposure(retriever, load_queries_file(qfile), base / "ref", depth=100,
                           shard_size=50, fingerprint=fp)
    return idx, qfile, ref.path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_killed_job_resumes_to_the_same_tables(sig, kill_setup, tmp_path):
    idx, qfile, ref = kill_setup
    out = tmp_path / "store"
    cmd = ["exposure", "compute", "--index", str(idx), "--queries", str(qfile), "--out", str(out),
           "--model", "bm25", "--depth", "100", "--shard-size", "50"]
    # SIGINT at its default in the child even when the test run itself ignores it (a suite
    # started in the background by a non-interactive shell inherits SIG_IGN)
    proc = subprocess.Popen(LIMELIGHT + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    shards = out / "shards"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if shards.is_dir() and len(list(shards.glob("part-*.parquet"))) >= 3:
            break
        time.sleep(0.002)
    assert proc.poll() is None, "the job ended before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    written = len(list(shards.glob("part-*.parquet")))
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in err.decode(), err.decode()
        assert not list(shards.glob(".*.tmp"))  # nothing half-written
        # issue 24 item 8: not silent, and it says how to go on
        assert err.decode().strip().splitlines()[-1] == (
            f"interrupted after {written} of 160 shards; rerun the same command to resume")
    else:
        assert proc.returncode == -signal.SIGKILL
    assert 3 <= written < 160 and not (out / "query_stats.parquet").exists()
    with pytest.raises(LimelightError, match="not finished"):
        ExposureStore.open(out)
    # resume (in-process, same retriever fingerprint as the CLI): finished shards are kept
    before = {p.name: p.stat().st_mtime_ns for p in shards.glob("part-*.parquet")}
    retriever, fp, _ = open_fingerprinted(idx, "bm25")
    compute_exposure(retriever, load_queries_file(qfile), out, depth=100, shard_size=50,
                     fingerprint=fp)
    assert all((shards / n).stat().st_mtime_ns == t for n, t in before.items())
    for a, b in zip(_snapshot(out), _snapshot(ref), strict=True):
        assert a.equals(b)
    # the per-document index too (issue 20: the store equals an uninterrupted one)
    for p in [*sorted((ref / "doc_index").glob("part-*.npy")), ref / "query_stats.parquet"]:
        assert (out / p.relative_to(ref)).read_bytes() == p.read_bytes(), p.name
    assert len(list((out / "doc_index").glob("part-*.npy"))) == 160
    assert not list(out.glob("*.duckdb*")) and not list(out.rglob(".*.tmp"))


def test_query_file_formats(tmp_path, data_dir):
    log = tmp_path / "log.tsv"
    log.write_text("source\tqid\tquery\nmq\t1\tVim editor\nmq\t2\tvim   editor\nnq\t3\tchess\n")
    qs = load_queries_file(log)  # the log format: normalised, de-duplicated, o_q = occurrences
    assert qs.texts.tolist() == ["vim editor", "chess"] and qs.weights.tolist() == [2.0, 1.0]
    full = load_queries_file(data_dir / "querylogs" / "queries.tsv.gz")
    assert len(full) == 114926 and full.weights.sum() == 149104
    tsv = tmp_path / "q.tsv"
    tsv.write_text("a\tvim editor\nb\tchess\n")
    qs = load_queries_file(tsv)
    assert qs.ids.strings.tolist() == ["a", "b"] and qs.weights.tolist() == [1.0, 1.0]
    with pytest.raises(LimelightError):
        load_queries_file(tmp_path / "missing.tsv")


# ---- issue 24: a new user's session ---------------------------------------------------------------


def _log_slice(data_dir: Path, per_source: dict[str, int]) -> list[str]:
    """The real log's header and the first lines of the given sources."""
    import gzip

    out, seen = [], dict.fromkeys(per_source, 0)
    with gzip.open(data_dir / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        out.append(next(f))
        for ln in f:
            src = ln.split("\t", 1)[0]
            if src in seen and seen[src] < per_source[src]:
                seen[src] += 1
                out.append(ln)
    return out


def one_line(p: subprocess.CompletedProcess, code: int = 2) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def test_log_ids_are_kept(movies_index, tmp_path, data_dir):
    # issue 24 item 2: the log's ids were renamed q0, q1, ... so `exposure query 1` failed
    qfile = tmp_path / "log.tsv"
    qfile.write_text("".join(_log_slice(data_dir, {"trec-mq-2007": 200, "trec-tb-2005-efficiency": 50})),
                     encoding="utf-8")
    out = tmp_path / "st"
    runner = CliRunner()
    r = runner.invoke(app, ["exposure", "compute", "--index", str(movies_index), "--queries", str(qfile),
                            "--depth", "10", "--out", str(out)])
    assert r.exit_code == 0, r.output
    ids = set(ExposureStore.open(out).queries.ids.strings.tolist())
    assert "trec-mq-2007:150" in ids and "trec-tb-2005-efficiency:1" in ids
    assert ids <= {f"{ln.split(chr(9))[0]}:{ln.split(chr(9))[1]}" for ln in qfile.read_text().splitlines()[1:]}
    # the log's own id, and its bare qid where one source only has it
    full = runner.invoke(app, ["exposure", "query", "--store", str(out), "trec-mq-2007:150", "--json"])
    bare = runner.invoke(app, ["exposure", "query", "--store", str(out), "150", "--json"])
    assert full.exit_code == 0 and bare.exit_code == 0, bare.output
    assert json.loads(bare.output) == json.loads(full.output)
    # a qid that two sources share: a one-line error naming both
    p = run_cli(["exposure", "query", "--store", str(out), "1"])
    err = one_line(p)
    assert "ambiguous" in err and "trec-mq-2007:1" in err and "trec-tb-2005-efficiency:1" in err
    p = run_cli(["exposure", "query", "--store", str(out), "trec-tb-2005-efficiency:1", "--json"])
    assert p.returncode == 0, p.stderr


def test_non_utf8_query_file_is_one_line(movies_index, tmp_path, data_dir):
    # issue 24 item 5: a Latin-1 query file was a UnicodeDecodeError from load_queries_file
    lines = _log_slice(data_dir, {"beir-hotpotqa-test": 100000})
    accented = [ln for ln in lines if any(c in ln for c in "éèàüöñç")][:5]
    assert accented, "the slice has accented queries"
    qfile = tmp_path / "latin1.tsv"
    qfile.write_bytes("".join([lines[0], *accented]).encode("latin-1", errors="replace"))
    out = tmp_path / "st"
    err = one_line(run_cli(["exposure", "compute", "--index", str(movies_index), "--queries", str(qfile),
                            "--out", str(out)]))
    assert f"{qfile}:2: not UTF-8 text" in err and not out.exists()
    tsv = tmp_path / "latin1_noheader.tsv"  # without the log's header: the same one line
    tsv.write_bytes("".join(f"{i}\t{ln.split(chr(9))[2]}" for i, ln in enumerate(accented))
                    .encode("latin-1", errors="replace"))
    err = one_line(run_cli(["exposure", "compute", "--index", str(movies_index), "--queries", str(tsv),
                            "--out", str(out)]))
    assert f"{tsv}:1: not UTF-8 text" in err and not out.exists()


@pytest.fixture(scope="module")
def adi_setup(tmp_path_factory, data_dir):
    base = tmp_path_factory.mktemp("adi")
    build_index(load_dataset("adi").collection, base / "idx")
    return base / "idx", data_dir / "collections" / "adi" / "queries.tsv"


def test_huge_depth_is_cheap_and_zero_is_an_error(adi_setup, tmp_path):
    # issue 24 items 3, 7: --depth 99999999999 allocated 12.7 TiB; --depth 0 must name the value
    idx, qfile = adi_setup
    out = tmp_path / "st"
    p = run_cli(["exposure", "compute", "--index", str(idx), "--queries", str(qfile), "--out", str(out),
                 "--depth", "0"])
    assert "--depth must be ≥ 1, got 0" in one_line(p) and not out.exists()
    p = run_cli(["exposure", "compute", "--index", str(idx), "--queries", str(qfile), "--out", str(out),
                 "--depth", "99999999999", "--json"])
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert json.loads(p.stdout)["depth"] == 99999999999
    # every document of each query's ranking, as with depth = the collection size (82)
    retriever, fp, _ = open_fingerprinted(idx, "bm25")
    qs = load_queries_file(qfile)
    ref = compute_exposure(retriever, qs, tmp_path / "ref", depth=82, fingerprint=fp)
    big = ExposureStore.open(out)
    for a, b in zip(big.pair_arrays(), ref.pair_arrays(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_failed_job_leaves_no_store_that_blocks_a_rerun(adi_setup, tmp_path):
    # issue 24 item 7: a job failing before its first shard left a store that refused the
    # corrected rerun ("computed with another depth ... remove it")
    idx, qfile = adi_setup
    retriever, fp, _ = open_fingerprinted(idx, "bm25")
    qs = load_queries_file(qfile)

    class OutOfMemory:  # the real retriever, failing as the 12.7 TiB allocation did
        doc_ids = retriever.doc_ids

        def search_batch(self, texts, k):
            raise MemoryError("Unable to allocate 12.7 TiB")

    out = tmp_path / "st"
    with pytest.raises(MemoryError):
        compute_exposure(OutOfMemory(), qs, out, depth=1000, shard_size=10, fingerprint=fp)
    assert not out.exists()
    out.mkdir()  # an empty directory made by the user stays usable too
    with pytest.raises(MemoryError):
        compute_exposure(OutOfMemory(), qs, out, depth=1000, shard_size=10, fingerprint=fp)
    st = compute_exposure(retriever, qs, out, depth=10, shard_size=10, fingerprint=fp)
    assert st.manifest["complete"] and st.depth == 10
    # a failure after a finished shard keeps the store, which resumes
    out2 = tmp_path / "st2"

    with pytest.raises(MemoryError):
        compute_exposure(FailsOnCall(retriever, 3, MemoryError("late")), qs, out2, depth=10, shard_size=10,
                         fingerprint=fp)
    assert sorted(p.name for p in (out2 / "shards").glob("part-*")) == ["part-00000.parquet",
                                                                         "part-00001.parquet"]
    with pytest.raises(IndexMismatchError, match="depth 10 → 20"):
        compute_exposure(retriever, qs, out2, depth=20, shard_size=10, fingerprint=fp)
    assert compute_exposure(retriever, qs, out2, depth=10, shard_size=10, fingerprint=fp).manifest["complete"]


def test_store_mismatch_names_what_differs(adi_setup, tmp_path, data_dir):
    # issue 24 item 11: the message blamed "another index or retriever" whatever differed
    idx, qfile = adi_setup
    out = tmp_path / "st"
    runner = CliRunner()
    base = ["exposure", "compute", "--out", str(out), "--depth", "10"]
    assert runner.invoke(app, [*base, "--index", str(idx), "--queries", str(qfile)]).exit_code == 0
    fewer = tmp_path / "fewer.tsv"
    fewer.write_text("".join(qfile.read_text().splitlines(keepends=True)[:30]))
    err = one_line(run_cli([*base, "--index", str(idx), "--queries", str(fewer)]))
    assert "another query set" in err and "n_queries 35 → 30" in err and "retriever" not in err
    stemmed = tmp_path / "stemmed"
    r = runner.invoke(app, ["index", "--collection", "adi", "--out", str(stemmed), "--stem"])
    assert r.exit_code == 0, r.output
    err = one_line(run_cli([*base, "--index", str(stemmed), "--queries", str(qfile)]))
    assert "another index or retriever" in err and "query set" not in err and str(stemmed) in err
    err = one_line(run_cli([*base, "--index", str(idx), "--queries", str(qfile), "--k1", "1.2"]))
    assert "k1 0.9 → 1.2" in err


def test_eqi_arguments_are_checked_before_loading(tmp_path):
    # issue 24 item 12: `eqi query --method residual` without --model failed after 8 s of loading.
    # The store does not exist: an error naming --model (not the store) shows the arguments were
    # checked before anything was opened.
    err = one_line(run_cli(["eqi", "query", "--store", str(tmp_path / "not-yet-loaded"),
                            "--method", "residual", "--text", "vitamin d"]))
    assert "--method residual needs --model" in err
    err = one_line(run_cli(["eqi", "evaluate", "--store", str(tmp_path / "not-yet-loaded"),
                            "--methods", "bm25-reverse,append"]))
    assert "--method append needs --model" in err
