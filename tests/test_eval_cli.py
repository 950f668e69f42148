"""``limelight evaluate`` / ``limelight compare`` and bad input (one-line errors, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _inproc import run_cli
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data.formats import read_trec_qrels, read_trec_run
from limelight.errors import FormatError, LimelightError
from limelight.evaluation import Evaluator

runner = CliRunner()


def cli(*args: str) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in this process (tests/_inproc.py: the console script's entry point)."""
    return run_cli(*args)


@pytest.fixture()
def two_runs(trec_eval_dir, tmp_path):
    trunc = tmp_path / "results.trunc"
    trunc.write_text("\n".join(" ".join(ln.split()[:6]) for ln in
                               (trec_eval_dir / "results.trunc").read_text().splitlines() if ln.strip()) + "\n")
    return trec_eval_dir / "qrels.test", trec_eval_dir / "results.test", trunc


def test_evaluate_json_contract_matches_trec_eval(two_runs):
    qrels, r1, r2 = two_runs
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(r1), str(r2), "-m", "AP nDCG@10", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert list(out) == ["results.test", "results.trunc"]
    assert list(out["results.test"]) == ["AP", "nDCG@10"]
    assert round(out["results.test"]["AP"], 4) == 0.1785  # out.test: map
    assert round(out["results.test"]["nDCG@10"], 4) == 0.3016  # out.test.a: ndcg_cut_10
    assert round(out["results.trunc"]["AP"], 4) == 0.1016  # out.test.aqc (-c)


def test_evaluate_table_per_query_and_n_docs(two_runs):
    qrels, r1, r2 = two_runs
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(r1), str(r2),
                              "-m", "AP R@1000 LexiRecall TSE", "--per-query", "--n-docs", "100000"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["run", "AP", "R@1000", "LexiRecall", "TSE"]
    assert lines[1].startswith("results.test") and "0.1785" in lines[1]
    assert any(ln.startswith("results.trunc\t302\t") for ln in lines)
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(r1), "-m", "TSE", "--json", "--n-docs", "100000"])
    tse = json.loads(res.stdout)["results.test"]["TSE"]
    res2 = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(r1), "-m", "TSE", "--json"])
    assert tse < json.loads(res2.stdout)["results.test"]["TSE"]  # bigger corpus, lower bottom exposure
    pq = json.loads(runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(r1), "-m", "AP",
                                        "--json", "--per-query"]).stdout)
    assert round(pq["results.test"]["AP"]["301"], 4) == 0.1439 or set(pq["results.test"]["AP"]) == {"301", "302", "303", "all"}


def test_compare_json_pairs_and_mc4(two_runs):
    qrels, r1, r2 = two_runs
    res = runner.invoke(app, ["compare", "--qrels", str(qrels), str(r1), str(r2), str(r1),
                              "--preference", "LexiRecall", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["runs"] == ["results.test", "results.trunc", "results.test#2"]
    assert len(out["pairs"]) == 6
    p = next(x for x in out["pairs"] if x["a"] == "results.test" and x["b"] == "results.trunc")
    assert p["wins"] + p["ties"] + p["losses"] == 3 and p["wins"] >= 2 and 0 < p["p_value"] <= 1
    same = next(x for x in out["pairs"] if x["a"] == "results.test" and x["b"] == "results.test#2")
    assert (same["wins"], same["ties"], same["losses"], same["p_value"]) == (0, 3, 0, 1.0)
    assert out["mc4"][-1] == "results.trunc"
    res = runner.invoke(app, ["compare", "--qrels", str(qrels), str(r1), str(r2), "--preference", "AP"])
    assert res.exit_code == 0 and "MC4 ordering: results.test > results.trunc" in res.stdout


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


BAD_RUNS = {
    "duplicate": ("q1 Q0 d1 1 2.0 t\nq1 Q0 d1 2 1.0 t\n", ":2:"),
    "nan": ("q1 Q0 d1 1 nan t\n", ":1:"),
    "non_numeric": ("q1 Q0 d1 1 high t\n", ":1:"),
    "empty": ("", "empty run"),
    "columns": ("q1 Q0 d1 1\n", ":1:"),
}


@pytest.mark.parametrize("case", sorted(BAD_RUNS))
def test_bad_runs_give_one_line_errors_naming_file_and_line(tmp_path, case):
    text, where = BAD_RUNS[case]
    qrels = _write(tmp_path / "qrels", "q1 0 d1 1\n")
    run = _write(tmp_path / f"{case}.run", text)
    with pytest.raises(FormatError) as e:
        read_trec_run(run)
    assert where in str(e.value) and f"{case}.run" in str(e.value)
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(run), "-m", "AP"])
    assert isinstance(res.exception, LimelightError) and where in str(res.exception)
    assert "\n" not in str(res.exception)


def test_bad_input_through_the_real_entry_point_exits_2_with_one_line(tmp_path):
    qrels = _write(tmp_path / "qrels", "q1 0 d1 1\n")
    run = _write(tmp_path / "dup.run", BAD_RUNS["duplicate"][0])
    p = cli("evaluate", "--qrels", str(qrels), str(run), "-m", "AP")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error:") and "dup.run:2:" in p.stderr


@pytest.mark.parametrize(("text", "where"), [("q1 0 d1 x\n", ":1:"), ("q1 0 d1 nan\n", ":1:"),
                                             ("q1 0 d1 1\nq1 0 d1 2\n", ":2:"), ("", "empty qrels")])
def test_bad_qrels(tmp_path, text, where):
    qrels = _write(tmp_path / "bad.qrels", text)
    with pytest.raises(FormatError, match=where):
        read_trec_qrels(qrels)


def test_rules_for_queries_without_relevant_documents_and_other_user_errors(tmp_path, two_runs):
    # documented rule: a query whose judgments are all < 1 is not part of the query set
    qrels = _write(tmp_path / "q", "q1 0 d1 1\nq2 0 d2 0\n")
    run = _write(tmp_path / "r", "q1 Q0 d1 1 2.0 t\nq1 Q0 d3 2 1.0 t\nq2 Q0 d2 1 1.0 t\n")
    ev = Evaluator(read_trec_qrels(qrels), "AP")
    assert ev.qids.strings.tolist() == ["q1"]
    assert ev.evaluate(read_trec_run(run), warn=False).aggregate[ev.measures[0]] == 1.0
    # no relevant document at all: an error, not a silent 0
    none = _write(tmp_path / "none", "q1 0 d1 0\n")
    res = runner.invoke(app, ["evaluate", "--qrels", str(none), str(run), "-m", "AP"])
    assert isinstance(res.exception, LimelightError)
    assert "no query has a relevant document" in str(res.exception)
    # unknown measure, missing file, too-small corpus, too few runs to compare
    for args, msg in [(["evaluate", "--qrels", str(qrels), str(run), "-m", "Foo@3"], "unknown measure"),
                      (["evaluate", "--qrels", str(qrels), str(tmp_path / "nope")], "no such file"),
                      (["evaluate", "--qrels", str(qrels), str(run), "-m", "TSE", "--n-docs", "1"], "too small"),
                      (["compare", "--qrels", str(qrels), str(run)], "at least two runs")]:
        res = runner.invoke(app, args)
        assert isinstance(res.exception, LimelightError), (args, res.output)
        assert msg in str(res.exception) and "\n" not in str(res.exception)
    # queries only in the run: ignored, with a warning on stderr
    extra = _write(tmp_path / "extra", "q1 Q0 d1 1 2.0 t\nzz Q0 d2 1 1.0 t\n")
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(extra), "-m", "AP", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == {"extra": {"AP": 1.0}}
    assert isinstance(LimelightError("x"), Exception)


# ---- issue 24 ------------------------------------------------------------------------------
def test_run_of_another_collection_warns_with_the_overlap_counts(tmp_path):
    qrels = _write(tmp_path / "qrels", "1 0 a1 1\n1 0 a2 0\n2 0 a3 2\n")
    other = _write(tmp_path / "other.run", "x1 Q0 b1 1 2.0 t\nx1 Q0 b2 2 1.0 t\nx2 Q0 b3 1 1.0 t\n")
    p = cli("evaluate", "--qrels", str(qrels), str(other), "-m", "AP nDCG@10")
    assert p.returncode == 0 and "Traceback" not in p.stderr
    warn = [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "query overlap 0 of 2" in warn[0] and "document overlap 0 of 3" in warn[0]
    # same queries, documents of another collection: still warned, with the query overlap
    docs_only = _write(tmp_path / "docs_only.run", "1 Q0 b1 1 2.0 t\n2 Q0 b2 1 1.0 t\n")
    res = runner.invoke(app, ["compare", "--qrels", str(qrels), str(other), str(docs_only)])
    assert res.exit_code == 0
    assert "query overlap 2 of 2" in res.stderr and "document overlap 0 of 3" in res.stderr
    # a run of the right collection: no warning
    good = _write(tmp_path / "good.run", "1 Q0 a1 1 2.0 t\n2 Q0 a3 1 1.0 t\n")
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(good), "-m", "AP"])
    assert res.exit_code == 0 and "warning" not in res.stderr


def _lexi_runs(tmp_path):
    """16 queries, one relevant document each; A ranks it first on 13 queries, B on 3; C = A."""
    qrels = _write(tmp_path / "qrels", "".join(f"q{i} 0 r 1\n" for i in range(16)))
    a = "".join(f"q{i} Q0 r 1 2.0 t\nq{i} Q0 x 2 1.0 t\n" if i < 13 else
                f"q{i} Q0 x 1 2.0 t\nq{i} Q0 r 2 1.0 t\n" for i in range(16))
    b = "".join(f"q{i} Q0 x 1 2.0 t\nq{i} Q0 r 2 1.0 t\n" if i < 13 else
                f"q{i} Q0 r 1 2.0 t\nq{i} Q0 x 2 1.0 t\n" for i in range(16))
    return qrels, _write(tmp_path / "A.run", a), _write(tmp_path / "B.run", b), _write(tmp_path / "C.run", a)


def test_evaluate_and_compare_correct_over_the_same_family(tmp_path):
    """Raw sign test A vs B: 13 wins, 3 losses, p = 0.0213. Holm over the 2 tests against the
    first run gave 0.043 (significant in evaluate), Holm over the 3 pairs 0.0638 (not in
    compare); one family now: all pairs of runs, per measure, in both."""
    from limelight.evaluation import compare_runs, evaluate_runs

    qrels, a, b, c = _lexi_runs(tmp_path)
    q = read_trec_qrels(qrels)
    runs = [read_trec_run(p) for p in (a, b, c)]
    table = evaluate_runs(runs, q, "LexiRecall")
    cmp = compare_runs(runs, q, "LexiRecall")
    m = table.measures[0]
    assert table.p_vs_first[m][1] == pytest.approx(cmp.p_holm[0, 1])
    assert table.p_vs_first[m][1] == pytest.approx(3 * 0.021270751953125)  # 3 pairs × raw p
    np.testing.assert_allclose(table.p_pairs[m], cmp.p_holm)
    # through the CLI: no "*" for B in evaluate, p(Holm) 0.0638 in compare
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(a), str(b), str(c), "-m", "LexiRecall"])
    assert res.exit_code == 0, res.output
    row_b = next(ln for ln in res.stdout.splitlines() if ln.startswith("B.run"))
    assert "*" not in row_b
    assert "Holm over all pairs of runs" in res.stdout
    res = runner.invoke(app, ["compare", "--qrels", str(qrels), str(a), str(b), str(c)])
    assert res.exit_code == 0
    row = next(ln for ln in res.stdout.splitlines() if ln.split()[:2] == ["A.run", "B.run"])
    assert row.split()[-1] == "0.0638"


def test_non_numeric_rank_through_the_cli_is_one_line(tmp_path):
    qrels = _write(tmp_path / "qrels", "q1 0 d1 1\n")
    run = _write(tmp_path / "rank.run", "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 second 1.0 t\n")
    p = cli("evaluate", "--qrels", str(qrels), str(run), "-m", "AP")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr == f"error: {run}:2: rank 'second' is not a number\n"


def test_evaluate_starts_without_pandas_torch_or_scipy(two_runs):
    """Process start matters (issue 22): the evaluate path imports numpy and pyarrow, not
    pandas (0.2 s) nor scipy (0.3 s)."""
    qrels, r1, r2 = two_runs
    code = ("import sys; from limelight.cli import main; "
            f"sys.argv = ['limelight', 'evaluate', '--qrels', {str(qrels)!r}, {str(r1)!r}, {str(r2)!r}, "
            "'-m', 'AP nDCG@10 P@10 R@1000 RR nDCG']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'torch', 'scipy', 'numba', 'sklearn') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


# ---- the default corpus size never depends on the other runs (issue 42) -----------------------
N_DEPENDENT = "LexiRecall LexiPrecision TSE AP"


def _per_query(qrels, *runs, extra=()):
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), *map(str, runs), "-m", N_DEPENDENT,
                              "--json", "--per-query", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_a_runs_lexirecall_alone_equals_its_lexirecall_beside_other_runs(two_runs, trec_eval_dir):
    """LexiRecall moved with the runs passed beside it (0.5437 alone, 0.5452 with two others):
    the runs share one document map, whose size was the default n. Now every run's values,
    per query, are those it gets alone."""
    qrels, r1, r2 = two_runs
    r3 = trec_eval_dir / "results-302.test"
    together = _per_query(qrels, r1, r2, r3)
    for r in (r1, r2, r3):
        alone = _per_query(qrels, r)
        assert together[r.name] == alone[r.name], r.name
    assert together["results.trunc"]["LexiRecall"]["all"] == pytest.approx(7.7317e-08, rel=1e-4)
    # the library agrees: evaluate_runs, Evaluator.evaluate_many and evaluate alone
    from limelight.evaluation import evaluate_runs

    q = read_trec_qrels(qrels)
    runs = [read_trec_run(p) for p in (r1, r2, r3)]
    table = evaluate_runs(runs, q, N_DEPENDENT)
    many = Evaluator(q, N_DEPENDENT).evaluate_many(runs)
    for r, t, m in zip(runs, table.results, many, strict=True):
        alone = Evaluator(q, N_DEPENDENT).evaluate(r)
        for k in alone.per_query:
            np.testing.assert_array_equal(t.per_query[k], alone.per_query[k])
            np.testing.assert_array_equal(m.per_query[k], alone.per_query[k])


def test_sign_tests_compare_runs_at_one_corpus_size(two_runs, trec_eval_dir):
    """Preferences compare positions across runs: they still use one n for all runs (the
    largest run's own), and give what one explicit large n gives."""
    from limelight.evaluation import compare_runs, evaluate_runs

    qrels, r1, r2 = two_runs
    q = read_trec_qrels(qrels)
    runs = [read_trec_run(p) for p in (r1, r2, trec_eval_dir / "results-302.test")]
    for measure in ("LexiRecall", "LexiPrecision"):
        t, big = evaluate_runs(runs, q, measure), evaluate_runs(runs, q, measure, n_docs=10**6)
        m = t.measures[0]
        np.testing.assert_allclose(t.p_pairs[m], big.p_pairs[m])
        np.testing.assert_array_equal(compare_runs(runs, q, measure).prefs,
                                      compare_runs(runs, q, measure, n_docs=10**6).prefs)


def test_collection_gives_its_size_as_n_and_help_says_the_default(tmp_path, data_dir):
    adi = data_dir / "collections" / "adi"
    qrels = adi / "qrels.txt"
    lines = [ln.split() for ln in qrels.read_text().splitlines()]
    run = _write(tmp_path / "adi.run", "".join(f"{q} Q0 {d} {i} {100 - i} t\n"
                                               for i, (q, _, d, _) in enumerate(lines[:60])))
    by_coll = _per_query(qrels, run, extra=("--collection", "adi"))
    assert by_coll == _per_query(qrels, run, extra=("--n-docs", "82"))
    assert by_coll != _per_query(qrels, run)  # the run-and-qrels default is smaller than 82
    res = runner.invoke(app, ["evaluate", "--qrels", str(qrels), str(run), "-m", "LexiRecall",
                              "--collection", str(adi)])
    assert res.exit_code == 0 and "n = 82 (--collection" in res.stdout
    p = cli("evaluate", "--qrels", str(qrels), str(run), "--collection", "adi", "--n-docs", "82")
    assert p.returncode == 2 and p.stderr == "error: give --n-docs or --collection, not both\n"
    helptext = " ".join(runner.invoke(app, ["evaluate", "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert "the judged documents plus the documents that run retrieves" in helptext
    assert "never depends on the other runs passed" in helptext
