"""Quality by group of queries (limelight.evaluation.searchers): length bins of both kinds, the
Kruskal-Wallis test by hand, Bonferroni, the omitted (none) group, lexirecall preferences per
group, and TSV groups."""

from __future__ import annotations

import numpy as np
import pytest

from limelight.errors import LimelightError
from limelight.evaluation.searchers import (
    bonferroni,
    compare_groups,
    groups_from_tsv,
    kruskal,
    length_bins,
)


def test_equal_width_and_equal_count_bins_differ_on_skewed_lengths():
    # lengths 1,1,1,1,1,1,2,2,3,9 words
    texts = ["a"] * 6 + ["a b"] * 2 + ["a b c"] + [" ".join("x" * 9)]
    w = length_bins(texts, 2, "width")  # [1, 6) and [6, 10)
    assert w.tolist() == ["1-3 words"] * 9 + ["9 words"]
    c = length_bins(texts, 2, "count")  # the median length (1) closes the first bin
    assert c.tolist() == ["1 word"] * 6 + ["2-9 words"] * 4
    with pytest.raises(LimelightError, match="unknown binning"):
        length_bins(texts, 2, "log")


def test_kruskal_wallis_by_hand():
    # ranks 1-3 and 4-6: H = 12/(6·7) (6²/3 + 15²/3) − 3·7 = 27/7; one degree of freedom
    v = np.array([1.0, 2, 3, 4, 5, 6, 100])
    lab = np.array(["a", "a", "a", "b", "b", "b", "(none)"], dtype=object)
    h, p, k = kruskal(v, lab)
    assert h == pytest.approx(27 / 7) and k == 2
    from math import erfc, sqrt

    assert p == pytest.approx(erfc(sqrt(27 / 7 / 2)))  # χ²(1) tail
    assert kruskal(np.ones(7), lab)[:2] == (0.0, 1.0)
    assert bonferroni([0.01, 0.2, float("nan"), 0.6]).tolist()[:2] == pytest.approx([0.03, 0.6])
    assert bonferroni([0.6, 0.5])[0] == 1.0


def test_compare_groups_names_the_worst_off_group_and_prefers_per_group():
    lab = np.array(["short", "short", "long", "long", "(none)"], dtype=object)
    vals = {"A": np.array([0.9, 0.8, 0.1, 0.2, 0.0]), "B": np.array([0.5, 0.5, 0.5, 0.5, 0.0])}
    # one relevant document per query: A ranks it 1st on short queries and 3rd on long ones
    pos = {"A": np.array([[1], [1], [3], [3], [5]]), "B": np.array([[2], [2], [2], [2], [5]])}
    r = compare_groups(vals, lab, "nDCG@10", pos, n_boot=200)
    t = r.tests.set_index("system")
    assert t.loc["A", "worst_group"] == "long" and t.loc["A", "groups"] == 2
    g = r.groups[(r.groups["system"] == "A")].set_index("group")
    assert g.loc["short", "mean"] == pytest.approx(0.85) and g.loc["(none)", "n"] == 1
    p = r.preferences.set_index("group")
    assert p.loc["short", "a_preferred"] == 1.0 and p.loc["long", "b_preferred"] == 1.0
    assert p.loc["(none)", "tie"] == 1.0


def test_groups_from_a_tsv(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_text("q1\tnavigational\nq3\tinformational\n")
    assert groups_from_tsv(p, ["q1", "q2", "q3"]).tolist() == ["navigational", "(none)", "informational"]
    p.write_text("q1\tx\nq9\ty\n")
    with pytest.raises(LimelightError, match=r"1 query id\(s\) not in the query set \(first: 'q9'\)"):
        groups_from_tsv(p, ["q1"])


def test_no_worst_off_group_among_equals():
    lab = np.array(["a", "a", "b", "b"], dtype=object)
    r = compare_groups({"S": np.ones(4)}, lab, "any result", n_boot=10)
    t = r.tests.iloc[0]
    assert t["worst_group"] is None and t["H"] == 0.0 and t["p"] == 1.0
