"""DistFaiR's sequence walks a log in time order where the log has a time column (issue 56 item
2, "over time where the log has timestamps"): a generated AOL-layout log sorted by searcher, so
its file order is not its time order; the accumulated values hand-computed in both orders."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.loaders import load_query_log
from limelight.data.logorder import FILE_ORDER, query_time_order
from limelight.errors import LimelightError
from limelight.exposure import compute_exposure
from limelight.exposure.distfair import distfair
from limelight.exposure.fairness import Merit
from limelight.exposure.store import ExposureStore
from limelight.retrieval.bm25 import BM25, BM25Index

runner = CliRunner()
AOL = "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n"
# sorted by searcher: distinct queries in file order apple, banana, cherry, date (lines 2, 3, 4, 6);
# first issued at 10:00, 09:00, 08:00, 08:00 -> time order cherry, date (the tie: file order),
# banana, apple. banana is issued twice (o = 2), the others once.
ROWS = [("1", "apple", "2006-03-01 10:00:00"), ("1", "banana", "2006-03-01 09:00:00"),
        ("2", "cherry", "2006-03-01 08:00:00"), ("2", "banana", "2006-03-01 11:00:00"),
        ("3", "date", "2006-03-01 08:00:00")]
FRUIT = ["apple", "banana", "cherry", "date"]
# merit: apple and date have it on the document they retrieve; banana's is on cherry's document,
# cherry's on banana's. Each query retrieves its one document at rank 1 (dcg: attention 1).
MERIT = {"apple": "apple", "banana": "cherry", "cherry": "banana", "date": "date"}


def _write(path, timed: bool = True):
    header = AOL if timed else "AnonID\tQuery\tItemRank\tClickURL\n"
    path.write_text(header + "".join("\t".join((a, q, t, "", "") if timed else (a, q, "", "")) + "\n"
                                     for a, q, t in ROWS))
    return path


@pytest.fixture(scope="module")
def fruit(tmp_path_factory):
    root = tmp_path_factory.mktemp("distfair_time")
    log = _write(root / "log.tsv")
    coll = Collection(IdMap(FRUIT, kind="document"), np.asarray(FRUIT, dtype=object), name="fruit")
    st = compute_exposure(BM25(BM25Index.build(coll)), load_query_log(log), root / "store", depth=4)
    st = ExposureStore.open(st.path)
    q, d, _, _ = st.pair_arrays()
    assert st.queries.texts.tolist() == FRUIT  # the store keeps file order
    assert [FRUIT[i] for i in d] == FRUIT and q.tolist() == [0, 1, 2, 3]  # one document each
    qrels = root / "qrels.txt"
    qrels.write_text("".join(f"{qid} 0 {MERIT[t]} 1\n" for qid, t in
                             zip(st.queries.ids.strings, st.queries.texts, strict=True)))
    return st, log, qrels, root


def _merit(st) -> Merit:
    qc = np.arange(4)
    dc = np.array([FRUIT.index(MERIT[t]) for t in FRUIT])
    return Merit.from_codes(qc, dc, np.ones(4), 4, 4, "test")


def test_time_order_of_the_generated_log(fruit):
    st, log, _, root = fruit
    order, label = query_time_order(log, st.queries.ids)
    assert order.tolist() == [2, 3, 1, 0] and label == "time order, from column QueryTime"
    order, label = query_time_order(_write(root / "untimed.tsv", timed=False), st.queries.ids)
    assert order.tolist() == [0, 1, 2, 3] and label == FILE_ORDER


def test_sequence_follows_time_order_and_file_order_without_times(fruit):
    st, log, _, root = fruit
    # o_q (a − τ): banana (o = 2) banana's doc +2, cherry's −2; cherry (o = 1) cherry's +1,
    # banana's −1; apple and date 0. Z grows by o_q (each query hands out attention 1 × o_q).
    # time order cherry, date, banana, apple:
    #   z 1, 2, 4, 5; aware 1/1, 1/2, 3/4, 3/5; agnostic ½|(±1)|·2/z = 1, 1/2, then ½(1 + 1)/4, /5
    timed = distfair(st, _merit(st), n_boot=0, checkpoints=4, log=log)
    seq = timed.sequence
    assert timed.summary["order"] == "time order, from column QueryTime"
    assert seq["n_queries"].tolist() == [1, 2, 3, 4] and seq["attention"].tolist() == [1, 2, 4, 5]
    assert seq["individual_aware"].tolist() == pytest.approx([1, 1 / 2, 3 / 4, 3 / 5])
    assert seq["individual_agnostic"].tolist() == pytest.approx([1, 1 / 2, 1 / 4, 1 / 5])
    # file order apple, banana, cherry, date: z 1, 3, 4, 5; aware 0, 2/3, 3/4, 3/5
    for res in (distfair(st, _merit(st), n_boot=0, checkpoints=4),
                distfair(st, _merit(st), n_boot=0, checkpoints=4, log=_write(root / "u.tsv", timed=False))):
        seq = res.sequence
        assert res.summary["order"] == FILE_ORDER
        assert seq["attention"].tolist() == [1, 3, 4, 5]
        assert seq["individual_aware"].tolist() == pytest.approx([0, 2 / 3, 3 / 4, 3 / 5])
        assert seq["individual_agnostic"].tolist() == pytest.approx([0, 2 / 3, 1 / 4, 1 / 5])
    # the whole log's values do not depend on the order
    assert timed.summary["individual_aware"]["value"] == pytest.approx(3 / 5)


def test_cli_log_option_names_the_order(fruit):
    st, log, qrels, root = fruit
    args = ["distfair", "--store", str(st.path), "--merit", f"qrels:{qrels}", "--boot", "0",
            "--checkpoints", "4"]
    r = runner.invoke(app, [*args, "--log", str(log), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["summary"]["order"] == "time order, from column QueryTime"
    assert [x["individual_aware"] for x in out["sequence"]] == pytest.approx([1, 1 / 2, 3 / 4, 3 / 5])
    r = runner.invoke(app, [*args, "--log", str(log)])
    assert r.exit_code == 0 and "in time order, from column QueryTime" in r.output
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "in file order" in r.output


def test_a_log_without_the_stores_queries_is_named(fruit):
    st, _, _, root = fruit
    other = root / "other.tsv"
    other.write_text(AOL + "1\tapple\t2006-03-01 10:00:00\t\t\n")
    with pytest.raises(LimelightError, match=r"other.tsv: query 'line3' of the store is not in this log"):
        distfair(st, _merit(st), n_boot=0, log=other)
