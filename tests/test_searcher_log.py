"""Query logs with a searcher and a time column (issue 54 item 3): the AOL layout read into
distinct queries with times issued and distinct searchers, one period of it, its errors, and the
k rule on distinct searchers (a generated log: the shared log has neither column)."""

from __future__ import annotations

import numpy as np
import pytest

from limelight.errors import LimelightError

AOL = "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n"


def _log(tmp_path, rows, header=AOL):
    p = tmp_path / "log.tsv"
    p.write_text(header + "".join("\t".join(r) + "\n" for r in rows))
    return p


def test_aol_layout_counts_distinct_searchers(tmp_path):
    from limelight.data.loaders import load_queries_file, load_query_log
    from limelight.service.privacy import screen_queries

    rows = [("1", "Cheap Flights", "2006-03-01 10:00:00", "1", "http://a.com"),
            ("1", "cheap  flights", "2006-03-01 10:05:00", "", ""),  # one searcher, twice
            ("1", "cheap flights", "2006-03-02 09:00:00", "", ""),
            ("2", "debian kernel", "2006-03-01 11:00:00", "", ""),
            ("3", "debian kernel", "2006-03-05 12:00:00", "", ""),
            ("4", "Debian Kernel", "2006-03-06 12:00:00", "", "")]
    p = _log(tmp_path, rows)
    for qs in (load_query_log(p), load_queries_file(p)):
        assert qs.texts.tolist() == ["cheap flights", "debian kernel"]
        assert qs.weights.tolist() == [3, 3] and qs.fields["n_searchers"].tolist() == [1, 3]
        assert qs.fields["first_time"].tolist() == ["2006-03-01T10:00:00", "2006-03-01T11:00:00"]
        assert qs.fields["last_time"].tolist() == ["2006-03-02T09:00:00", "2006-03-06T12:00:00"]
        # k = 2: times issued would show both; distinct searchers hide the one-searcher query
        s = screen_queries(qs.texts, qs.weights, 2, qs.fields["n_searchers"])
        assert s.basis == "distinct searchers" and s.hidden.tolist() == [True, False]
        assert not screen_queries(qs.texts, qs.weights, 2).hidden.any()
    from limelight.data.searcherlog import read_searcher_log

    march1 = read_searcher_log(p, since="2006-03-01", until="2006-03-02")
    assert march1.texts.tolist() == ["cheap flights", "debian kernel"]
    assert march1.weights.tolist() == [2, 1] and march1.fields["n_searchers"].tolist() == [1, 1]


def test_a_generic_session_layout_and_the_shared_layout_untouched(tmp_path):
    from limelight.data.loaders import load_query_log
    from limelight.data.searcherlog import log_columns

    p = _log(tmp_path, [("s1", "1700000000", "a b"), ("s2", "1700000100", "a b")],
             header="session\ttimestamp\tquery\n")
    qs = load_query_log(p)
    assert qs.fields["n_searchers"].tolist() == [2] and qs.fields["first_time"].tolist() == ["2023-11-14T22:13:20"]
    shared = _log(tmp_path, [("web", "1", "a b")], header="source\tqid\tquery\n")
    assert log_columns(shared) is None and "n_searchers" not in load_query_log(shared).fields


def test_bad_lines_name_the_file_and_line(tmp_path):
    from limelight.data.searcherlog import read_searcher_log

    for rows, message in [([("1", "a", "2006-03-01 10:00:00"), ("2", "b")], ":3: 2 field(s)"),
                          ([("1", "a", "yesterday")], ":2: unreadable query time 'yesterday'")]:
        p = _log(tmp_path, rows)
        with pytest.raises(LimelightError) as e:
            read_searcher_log(p)
        assert str(e.value) == f"{p}{message}" + (", the header has 5" if "field" in message else "")
    p = _log(tmp_path, [("1", "a")], header="AnonID\tQuery\n")
    with pytest.raises(LimelightError, match="need a time column"):
        read_searcher_log(p, since="2006-01-01")
    assert np.all(read_searcher_log(p).fields["n_searchers"] == 1)


def test_the_store_keeps_distinct_searchers_for_the_portal(tmp_path):
    """A real exposure store over adi from a generated AOL-layout log: the policy's screen counts
    distinct searchers (one searcher issuing a query 3 times stays hidden at k = 2)."""
    from limelight.data import load_dataset
    from limelight.data.ids import IdMap
    from limelight.data.loaders import load_query_log
    from limelight.exposure.compute import compute_exposure
    from limelight.exposure.store import ExposureStore
    from limelight.retrieval.index_dir import build_index, open_retriever
    from limelight.service.policy import Ownership, Policy, Principal

    ds = load_dataset("adi")
    texts = ds.queries.texts.tolist()[:4]
    rows = [(str(s), t, "2006-03-01 10:00:00") for i, t in enumerate(texts) for s in range(i + 1)]
    rows += [("0", texts[0], "2006-03-01 11:00:00")] * 2  # searcher 0: query 0 three times
    log = load_query_log(_log(tmp_path, rows, header="AnonID\tQuery\tQueryTime\n"))
    build_index(ds.collection, tmp_path / "index")
    compute_exposure(open_retriever(tmp_path / "index", "bm25"), log, tmp_path / "store", depth=10)
    store = ExposureStore.open(tmp_path / "store")
    assert store.queries.weights.tolist() == [3, 2, 3, 4]
    assert store.queries.fields["n_searchers"].tolist() == [1, 2, 3, 4]
    ids = IdMap(ds.collection.ids.strings.tolist(), kind="document")
    policy = Policy(Ownership.from_spec("field:src", ids, {"src": np.asarray(["a"] * len(ids), dtype=object)}))
    screen = policy.query_screen(store, Principal("owner", "alice", "a"))
    assert screen.basis == "distinct searchers" and screen.hidden.tolist() == [True, False, False, False]
    assert policy.query_screen(store, Principal("admin", "root")) is None
