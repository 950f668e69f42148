"""``diff_stores`` (limelight.exposure.diff) on real stores: cranfield × a slice of the query log
under BM25 with two settings, checked against a per-document recomputation through each store's
DuckDB database; mismatched stores give one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from limelight.data import load_dataset, load_query_log
from limelight.errors import LimelightError
from limelight.exposure import compute_exposure
from limelight.exposure.diff import diff_stores, plot_diff


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds = load_dataset("cranfield")
    idx = BM25Index.build(ds.collection)
    log = load_query_log().head(4000)
    root = tmp_path_factory.mktemp("diff")
    a = compute_exposure(BM25(idx), log, root / "a", depth=50, shard_size=1500)
    b = compute_exposure(BM25(idx, k1=1.5, b=0.9), log, root / "b", depth=50, shard_size=1500)
    other_q = compute_exposure(BM25(idx), log.head(3000), root / "q", depth=50)
    adi = load_dataset("adi")
    other_d = compute_exposure(BM25(BM25Index.build(adi.collection)), log, root / "d", depth=50)
    return ds, a, b, other_q, other_d


def _recompute(store, docid: str, c: int, gamma: float = 0.8) -> tuple[float, int, float]:
    """r, exposing queries within c and mean RBP exposure of one document, from the database."""
    w = dict(zip(store.queries.ids.strings.tolist(), store.queries.weights.tolist(), strict=True))
    r = n = ex = 0.0
    for row in store.exposing_queries(docid):
        if row["rank"] <= c:
            r += w[row["qid"]]
            n += 1
        ex += w[row["qid"]] * gamma ** (row["rank"] - 1)
    return r, int(n), ex / sum(w.values())


def test_diff_against_per_document_recomputation(stores):
    ds, a, b, _, _ = stores
    diff = diff_stores(a, b, c=20, names=("k1=0.9", "k1=1.5"))
    d = diff.docs
    assert len(d) == len(ds.collection) and list(d["docid"]) == ds.collection.ids.strings.tolist()
    rng = np.random.default_rng(0)
    exposed = np.flatnonzero((d["n_a"] > 0) | (d["n_b"] > 0))
    picks = list(rng.choice(exposed, size=12, replace=False)) + [int(d["delta_r"].idxmax()),
                                                                 int(d["delta_r"].idxmin())]
    for i in picks:
        docid = d["docid"].iloc[i]
        for st, side in ((a, "a"), (b, "b")):
            r, n, ex = _recompute(st, docid, 20)
            assert d[f"r_{side}"].iloc[i] == pytest.approx(r)
            assert d[f"n_{side}"].iloc[i] == n
            assert d[f"exposure_{side}"].iloc[i] == pytest.approx(ex)
        assert d["delta_r"].iloc[i] == pytest.approx(d["r_b"].iloc[i] - d["r_a"].iloc[i])
    # r(d) equals each store's own retrievability; the summary counts add up
    np.testing.assert_allclose(d["r_a"], a.retrievability(c=20).r)
    np.testing.assert_allclose(d["r_b"], b.retrievability(c=20).r)
    s = diff.summary
    assert s["n_gain"] + s["n_lose"] + s["n_same"] == len(d)
    assert s["gini_a"] == pytest.approx(a.retrievability(c=20).gini)
    assert s["newly_retrievable"] == len(diff.newly_retrievable)
    assert s["newly_irretrievable"] == len(diff.newly_irretrievable)
    assert (diff.newly_retrievable["r_a"] == 0).all() and (diff.newly_retrievable["r_b"] > 0).all()
    w, lo = diff.winners(5), diff.losers(5)
    assert (w["delta_r"] > 0).all() and w["delta_r"].is_monotonic_decreasing
    assert (lo["delta_r"] < 0).all() and lo["delta_r"].is_monotonic_increasing
    json.dumps(diff.to_dict())  # JSON-ready


def test_diff_groups_and_plot(stores, tmp_path):
    ds, a, b, _, _ = stores
    # groups: the first letter of each document id (a real partition of the collection)
    values = np.array([s[:1] for s in ds.collection.ids.strings.tolist()], dtype=object)
    diff = diff_stores(a, b, c=10, group_values=values)
    g = diff.groups
    assert g["n_docs"].sum() == len(ds.collection)
    assert g["r_a"].sum() == pytest.approx(diff.docs["r_a"].sum())
    assert g["delta_share"].sum() == pytest.approx(0.0, abs=1e-9)
    paths = plot_diff(diff, tmp_path / "diff.png")
    assert all(p.stat().st_size > 1000 for p in paths)


def test_mismatched_stores_name_the_difference(stores):
    _, a, _, other_q, other_d = stores
    with pytest.raises(LimelightError, match=r"different query sets \(4,000 vs 3,000 queries\)") as e:
        diff_stores(a, other_q)
    assert "\n" not in str(e.value)
    with pytest.raises(LimelightError, match=r"different collections \(1,400 vs 82 documents\)"):
        diff_stores(a, other_d)
    with pytest.raises(LimelightError, match="cutoff"):
        diff_stores(a, a, c=51)


# ---- the CLI: limelight exposure diff ------------------------------------------------------------


def test_cli_diff_json_plot_and_errors(stores, tmp_path):
    import subprocess
    import sys

    from typer.testing import CliRunner

    from limelight.cli import app

    _, a, b, other_q, _ = stores
    r = CliRunner().invoke(app, ["exposure", "diff", str(a.path), str(b.path), "--c", "20", "--json",
                                 "--top", "3", "--plot", str(tmp_path / "d.png"),
                                 "--out", str(tmp_path / "d.tsv")])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    lib = diff_stores(a, b, c=20)
    assert got["summary"] == json.loads(json.dumps(lib.summary))
    assert [w["docid"] for w in got["winners"]] == lib.winners(3)["docid"].tolist()
    assert (tmp_path / "d.png").exists() and (tmp_path / "d.tsv").read_text().count("\n") == 1401
    r = CliRunner().invoke(app, ["exposure", "diff", str(a.path), str(b.path), "--c", "20"])
    assert r.exit_code == 0 and "winners" in r.output and "newly_retrievable" in r.output
    # a mismatch through the real entry point: one line on stderr, non-zero exit, no traceback
    p = subprocess.run([sys.executable, "-m", "limelight.cli", "exposure", "diff", str(a.path),
                        str(other_q.path)], capture_output=True, text=True)
    assert p.returncode != 0 and "different query sets (4,000 vs 3,000 queries)" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    # --group-field needs an index: these stores were computed from a retriever, not `limelight index`
    r = CliRunner().invoke(app, ["exposure", "diff", str(a.path), str(b.path), "--group-field", "x"])
    assert r.exit_code != 0 and "does not record its index" in str(r.exception)


def test_default_cutoff_is_the_stores_depth_below_100(stores):
    """Issue 42: two stores of depth 50 (20 in the report) failed with ``cutoff c=100 must lie
    in 1..50`` unless ``--c`` was given; the default is min(100, the stores' depth)."""
    from typer.testing import CliRunner

    from limelight.cli import app

    _, a, b, _, _ = stores
    assert a.depth == b.depth == 50
    r = CliRunner().invoke(app, ["exposure", "diff", str(a.path), str(b.path), "--json", "--top", "3"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["summary"]["c"] == 50
    assert got["summary"] == json.loads(json.dumps(diff_stores(a, b, c=50).summary))
    assert diff_stores(a, b).summary["c"] == 50  # the library's default too


def test_retrievability_of_a_shallow_store_defaults_to_its_depth(stores):
    """The same default for ``limelight retrievability --store`` (it failed at c=100 too)."""
    from typer.testing import CliRunner

    from limelight.cli import app

    _, a, _, _, _ = stores
    r = CliRunner().invoke(app, ["retrievability", "--store", str(a.path), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["gini"] == a.retrievability(c=50).gini
