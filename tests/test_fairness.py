"""Fair exposure for groups (limelight.exposure.fairness): hand-computed cases for every measure
(two groups, three documents, two queries), properties (exposure exactly at the target scores 0
disparity; swapping the group labels swaps the signs), the vectorized code against a plain
per-query loop, group and merit sources and their one-line errors, and a real judged store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _shared import random_log

from limelight.data import Qrels, load_dataset
from limelight.errors import LimelightError
from limelight.exposure.fairness import (
    NONE_GROUP,
    Groups,
    Merit,
    fairness_from_pairs,
    group_fairness,
    ideal_exposure,
    parse_discount,
)

REPO = Path(__file__).resolve().parents[1]

# ---- the hand case ----------------------------------------------------------------------------
# documents a (X), b (Y), c (X); q1 (o = 1) ranks a, b; q2 (o = 2) ranks b, c, a.
# merit: q1 a = 1, c = 2 (c is not retrieved); q2 b = 1.
Q = np.array([0, 0, 1, 1, 1])
D = np.array([0, 1, 1, 2, 0])
RANK = np.array([1, 2, 1, 2, 3])
W = np.array([1.0, 2.0])
GROUPS = Groups.from_values(["X", "Y", "X"])
MERIT = Merit.from_codes(np.array([0, 0, 1]), np.array([0, 2, 1]), np.array([1, 2, 1]), 2, 3, "hand")


def _fair(target: str = "size", merit: Merit | None = None, groups: Groups = GROUPS, **kw):
    kw.setdefault("browsing", "rbp:0.5")
    kw.setdefault("n_boot", 0)
    return fairness_from_pairs(Q, D, RANK, W, groups, merit, target, doc_ids=np.array(["a", "b", "c"]),
                               **kw)


def test_shares_against_the_size_target():
    # μ = 1, 1/2, 1/4. E(q1) = X 1, Y 1/2; E(q2) = Y 1, X 1/2 + 1/4. Weighted: X = 1 + 2·3/4 =
    # 2.5, Y = 1/2 + 2 = 2.5: shares 1/2, 1/2. Size target 2/3, 1/3: gaps −1/6, +1/6.
    r = _fair("size")
    x, y = r.group("X"), r.group("Y")
    assert x["exposure_share"] == pytest.approx(0.5) and y["exposure_share"] == pytest.approx(0.5)
    assert x["target_share"] == pytest.approx(2 / 3) and y["target_share"] == pytest.approx(1 / 3)
    assert x["gap"] == pytest.approx(-1 / 6) and y["gap"] == pytest.approx(1 / 6)
    assert x["ratio"] == pytest.approx(0.75) and y["ratio"] == pytest.approx(1.5)
    assert r.summary["tvd"]["value"] == pytest.approx(1 / 6)
    assert r.summary["largest_deficit"]["group"] == "X"
    # demographic parity (S&J): exposure per document of the group over that of all documents
    assert x["dp"] == pytest.approx((2.5 / 2) / (5 / 3)) and y["dp"] == pytest.approx(2.5 / (5 / 3))
    assert r.summary["pairwise"]["dp"]["value"] == pytest.approx(0.5)


def test_uniform_target_spreads_each_query_over_what_it_retrieves():
    # q1's 1.5 over a, b: X 0.75, Y 0.75; q2's 1.75 over b, c, a: X 7/6, Y 7/12.
    # Weighted: X = 0.75 + 2·7/6 = 37/12, Y = 0.75 + 2·7/12 = 23/12 (of 5): gap X = 1/2 − 37/60.
    r = _fair("uniform")
    assert r.group("X")["target_share"] == pytest.approx(37 / 60)
    assert r.group("X")["gap"] == pytest.approx(-7 / 60)
    assert r.group("Y")["gap"] == pytest.approx(7 / 60)


def test_merit_target_and_singh_joachims_ratios():
    # merit target: q1's 1.5 all to X (a and c), q2's 1.75 all to Y (b): targets 1.5 / 3.5 of 5.
    r = _fair("merit", MERIT)
    x, y = r.group("X"), r.group("Y")
    assert x["target_share"] == pytest.approx(0.3) and x["gap"] == pytest.approx(0.2)
    assert y["gap"] == pytest.approx(-0.2)
    # U: X = 1·(1 + 2) = 3, Y = 2·1 = 2 (of 5). DTR = (E_g/U_g) / (E/U):
    assert x["dtr"] == pytest.approx((2.5 / 3) / (5 / 5)) and y["dtr"] == pytest.approx(2.5 / 2)
    # C = merit · μ: X = 1·(1·1) (a at rank 1 in q1; c not retrieved), Y = 2·(1·1): total 3.
    # DIR = (C_g/U_g) / (C/U) = (1/3)/(3/5) and (2/2)/(3/5)
    assert x["dir"] == pytest.approx(5 / 9) and y["dir"] == pytest.approx(5 / 3)
    pw = r.summary["pairwise"]
    assert pw["groups"] == ["X", "Y"]
    assert pw["dtr"]["value"] == pytest.approx(2 / 3) and pw["dir"]["value"] == pytest.approx(1 / 3)


def _js(p, t) -> float:
    m = [(a + b) / 2 for a, b in zip(p, t, strict=True)]
    kl = lambda u: sum(a * math.log(a / c) for a, c in zip(u, m, strict=True) if a > 0)  # noqa: E731
    return 0.5 * (kl(p) + kl(t))


def test_awrf_with_the_tracks_attention():
    # attention 1/log2(max(k, 2)): q1 a 1 (X), b 1 (Y) → p = (1/2, 1/2); q2 b 1 (Y), c 1 (X),
    # a 1/log2(3) (X) → X = 1 + 1/log2 3, Y = 1.
    x2 = 1 + 1 / math.log2(3)
    p1, p2 = (0.5, 0.5), (x2 / (x2 + 1), 1 / (x2 + 1))
    size = (2 / 3, 1 / 3)
    r = _fair("size")
    assert r.summary["awrf"]["value"] == pytest.approx(((1 - _js(p1, size)) + 2 * (1 - _js(p2, size))) / 3)
    # the merit target: q1's documents with merit are in X, q2's in Y
    r = _fair("merit", MERIT)
    want = ((1 - _js(p1, (1, 0))) + 2 * (1 - _js(p2, (0, 1)))) / 3
    assert r.summary["awrf"]["value"] == pytest.approx(want)
    # uniform: each query's retrieved documents' groups, (1/2, 1/2) and (2/3, 1/3)
    r = _fair("uniform")
    want = ((1 - _js(p1, (0.5, 0.5))) + 2 * (1 - _js(p2, (2 / 3, 1 / 3)))) / 3
    assert r.summary["awrf"]["value"] == pytest.approx(want)


def test_group_expected_exposure():
    # γ = 0.5. q1: ideal ranks c (merit 2) then a: ε* X = 1 + 1/2, Y = 0; the system exposes the
    # relevant a at rank 1: ε X = 1. EE-D 1, EE-R 1.5, EE-L 0.25. q2: b at rank 1 and ideal:
    # ε = ε* = (0, 1): EE-D 1, EE-R 1, EE-L 0. Weighted means (o = 1, 2):
    ee = _fair("merit", MERIT).summary["expected_exposure"]
    assert ee["EE-D"]["value"] == pytest.approx(1.0)
    assert ee["EE-R"]["value"] == pytest.approx((1.5 + 2) / 3)
    assert ee["EE-L"]["value"] == pytest.approx(0.25 / 3)
    # TREC 2022: the ideal's distribution scaled to a full ranking of 3 positions (1.75)
    ee = _fair("merit", MERIT, ee_target="trec2022", ee_depth=3).summary["expected_exposure"]
    assert ee["EE-R"]["value"] == pytest.approx((1.75 + 2 * 1.75) / 3)
    assert ee["EE-L"]["value"] == pytest.approx((0.75 ** 2 + 2 * 0.75 ** 2) / 3)


def test_contributors_split_the_gap_exactly():
    # size target: every document's target is 5/3; e_a = 1 + 2·1/4 = 1.5, e_b = 2.5, e_c = 1:
    # X's gap −1/6 = (1.5 − 5/3)/5 + (1 − 5/3)/5, c carrying 4/5 of it.
    r = _fair("size", top=5)
    c = r.contributors
    x = c[c["group"] == "X"]
    assert x["docid"].tolist() == ["c", "a"] and set(x["direction"]) == {"deficit"}
    assert x["contribution"].tolist() == pytest.approx([-2 / 15, -1 / 30])
    assert x["fraction_of_gap"].tolist() == pytest.approx([0.8, 0.2])
    assert c[c["group"] == "Y"]["docid"].tolist() == ["b"]


def test_ideal_exposure_shares_ties():
    m = Merit.from_codes(np.array([0, 0, 0, 0]), np.array([0, 1, 2, 3]), np.array([2, 1, 2, 1]), 1, 4,
                         "t").matrix
    e = ideal_exposure(m, parse_discount("rbp:0.5")).toarray()[0]
    # grade 2 at positions 0-1: (1 + 1/2)/2; grade 1 at 2-3: (1/4 + 1/8)/2
    assert e.tolist() == pytest.approx([0.75, 0.1875, 0.75, 0.1875])


@pytest.mark.parametrize("sorted_rows", [False, True])
def test_ideal_exposure_is_the_same_over_any_blocks_of_queries(sorted_rows):
    # ideal_exposure works over blocks of whole queries (its temporaries bounded: issue 53's
    # demo peak); every block size, one query alone included, gives the same figures exactly
    rng = np.random.default_rng(3)
    nq, nd = 40, 25
    key = np.unique(rng.integers(0, nq * nd, size=500))
    key = key[(key // nd) % 7 != 3]  # some queries without merit
    vals = rng.integers(1, 4, size=len(key)).astype(float)  # ties in every query
    m = Merit.from_codes(key // nd, key % nd, vals, nq, nd, "t").matrix
    if sorted_rows:  # the fast path: every query's values already descending
        for i in range(nq):
            m.data[m.indptr[i]:m.indptr[i + 1]] = np.sort(m.data[m.indptr[i]:m.indptr[i + 1]])[::-1]
    else:
        assert any((np.diff(m.data[m.indptr[i]:m.indptr[i + 1]]) > 0).any() for i in range(nq))
    for disc in ("rbp:0.5", "dcg"):
        whole = ideal_exposure(m, parse_discount(disc))
        # a hand check of one query: each merit level's positions share their exposure
        row = m.getrow(0).toarray()[0]
        order = np.sort(row[row > 0])[::-1]
        mu = parse_discount(disc).weights(np.arange(1, len(order) + 1))
        want = {v: mu[order == v].mean() for v in set(order.tolist())}
        got = whole.getrow(0).toarray()[0]
        assert got[row > 0].tolist() == pytest.approx([want[v] for v in row[row > 0]])
        for block in (1, 2, 7, 60, m.nnz, 1 << 20):
            part = ideal_exposure(m, parse_discount(disc), block=block)
            assert np.array_equal(part.data, whole.data) and np.array_equal(part.indices, whole.indices)
            assert np.array_equal(part.indptr, whole.indptr)


def test_merit_figures_do_not_depend_on_the_ranks_integer_type():
    """The store's ranks are int16 (depth < 32767) and the merit pass reads them as they are: the
    figures equal those of int32 and int64 ranks. CPU: numba compiles the merit pass's parallel
    kernels once per rank type (three types) in a fresh venv: 22-25 CPU s in make test, 38-42 in
    test-lowest (older numba), for a log of 30 documents."""
    rng = np.random.default_rng(4)
    q, d, rank, w = _random_log(rng)
    g = Groups.from_labels([[x] for x in rng.choice(list("uvw"), size=30)], "random")
    key = np.unique(rng.integers(0, len(w), size=60) * 30 + rng.integers(0, 30, size=60))
    merit = Merit.from_codes(key // 30, key % 30, rng.integers(1, 4, size=len(key)), len(w), 30, "r")
    runs = [fairness_from_pairs(q, d, np.asarray(rank).astype(t), w, g, merit, "merit", n_boot=20).to_dict()
            for t in (np.int16, np.int32, np.int64)]
    assert runs[0] == runs[1] == runs[2]
    assert runs[0]["summary"]["expected_exposure"]["EE-L"]["value"] > 0


# ---- properties -------------------------------------------------------------------------------


def _latin_log(n_docs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every cyclic shift of the documents as one query: each document at each rank once."""
    q = np.repeat(np.arange(n_docs), n_docs)
    d = (np.arange(n_docs)[None, :] + np.arange(n_docs)[:, None]).ravel() % n_docs
    rank = np.tile(np.arange(1, n_docs + 1), n_docs)
    return q, d, rank


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exposure_at_its_target_scores_zero_disparity(seed):
    rng = np.random.default_rng(seed)
    n = 12
    labels = [list(rng.choice(["p", "q", "r", "s"], size=rng.integers(1, 3), replace=False))
              for _ in range(n)]
    g = Groups.from_labels(labels, "random")
    q, d, rank = _latin_log(n)
    w = np.ones(n)
    merit = Merit.from_codes(q, d, np.ones(len(q)), n, n, "everything equally")
    for target, m in (("size", None), ("uniform", None), ("merit", merit)):
        r = fairness_from_pairs(q, d, rank, w, g, m, target, n_boot=20, awrf_browsing="exhaustive")
        assert np.abs(r.groups["gap"]).max() < 1e-12
        assert r.summary["tvd"]["value"] < 1e-12
        assert r.groups["ratio"].to_numpy() == pytest.approx(1.0)
        assert r.summary["awrf"]["value"] == pytest.approx(1.0)
        if target == "size":
            assert r.groups["dp"].to_numpy() == pytest.approx(1.0)
        if m is not None:
            assert r.groups["dtr"].to_numpy() == pytest.approx(1.0)
            assert r.groups["dir"].to_numpy() == pytest.approx(1.0)
    # a ranking that is the ideal one (distinct merits, no ties) has no expected-exposure loss
    mq = Merit.from_codes(q, d, (n + 1 - rank).astype(float), n, n, "by rank")
    r = fairness_from_pairs(q, d, rank, w, g, mq, "merit", n_boot=0, browsing="rbp:0.5")
    assert r.summary["expected_exposure"]["EE-L"]["value"] == pytest.approx(0.0, abs=1e-12)


def _random_log(rng, n_docs=30, n_queries=40, depth=8):
    """``(q, d, rank, weights)``: a random log of up to ``depth`` documents a query (maybe none)."""
    return (*random_log(rng, n_docs, n_queries, depth), rng.integers(1, 5, size=n_queries).astype(float))


@pytest.mark.parametrize("seed", [0, 1])
def test_swapping_group_labels_swaps_the_signs(seed):
    rng = np.random.default_rng(seed)
    q, d, rank, w = _random_log(rng)
    lab = rng.integers(0, 2, size=30)
    merit = Merit.from_codes(q, d, rng.integers(0, 3, size=len(q)), len(w), 30, "random")
    a = Groups.from_values(np.where(lab == 0, "A", "B"))
    b = Groups.from_values(np.where(lab == 0, "B", "A"))
    for target in ("size", "uniform", "merit"):
        ra = fairness_from_pairs(q, d, rank, w, a, merit, target, n_boot=50, seed=3)
        rb = fairness_from_pairs(q, d, rank, w, b, merit, target, n_boot=50, seed=3)
        ga, gb = ra.group("A"), rb.group("A")
        assert ga["gap"] == pytest.approx(-gb["gap"]) and ga["gap"] != 0
        assert ga["gap_lo"] == pytest.approx(-gb["gap_hi"]) and ga["gap_hi"] == pytest.approx(-gb["gap_lo"])
        for k in ("dp", "dtr", "dir"):
            pa, pb = ra.summary["pairwise"][k], rb.summary["pairwise"][k]
            assert math.log(pa["value"]) == pytest.approx(-math.log(pb["value"]))
            assert pa["lo"] == pytest.approx(1 / pb["hi"]) and pa["hi"] == pytest.approx(1 / pb["lo"])
        # the label-free figures do not move
        for k in ("tvd", "awrf"):
            assert ra.summary[k]["value"] == pytest.approx(rb.summary[k]["value"])
        assert ra.summary["expected_exposure"]["EE-L"] == pytest.approx(rb.summary["expected_exposure"]["EE-L"])


# ---- the vectorized code against a per-query loop ----------------------------------------------


def _loop(q, d, rank, w, labels, merit, target, gamma=0.5):
    """Every figure with plain loops over queries and documents (dcg shares, trec attention,
    rbp(γ) group EE with the ideal target)."""
    groups = sorted({g for x in labels for g in x})
    A = [{g: 1 / len(x) for g in x} for x in labels]
    n = len(labels)
    E, T, U, C = ({g: 0.0 for g in groups} for _ in range(4))
    awrf_num = awrf_den = 0.0
    ee = {"EE-D": 0.0, "EE-R": 0.0, "EE-L": 0.0}
    pop = 0.0
    for i in range(len(w)):
        rows = [(int(dd), int(k)) for qq, dd, k in zip(q, d, rank, strict=True) if qq == i]
        mer = merit.get(i, {})
        if merit and not mer:
            continue
        pop += w[i]
        mu = {dd: 1 / math.log2(k + 1) for dd, k in rows}
        etot = sum(mu.values())
        for dd, v in mu.items():
            for g, a in A[dd].items():
                E[g] += w[i] * a * v
                if target == "uniform":
                    T[g] += w[i] * a * etot / len(rows)
                C[g] += w[i] * a * mer.get(dd, 0) * v
        for dd, v in mer.items():
            for g, a in A[dd].items():
                U[g] += w[i] * a * v
                if target == "merit":
                    T[g] += w[i] * a * etot * v / sum(mer.values())
        att = {g: 0.0 for g in groups}
        for dd, k in rows:
            for g, a in A[dd].items():
                att[g] += a / math.log2(max(k, 2))
        if target == "size":
            tau = {g: sum(x.get(g, 0) for x in A) / n for g in groups}
        elif target == "uniform":
            tau = {g: sum(A[dd].get(g, 0) for dd, _ in rows) for g in groups}
        else:
            tau = {g: sum(A[dd].get(g, 0) * v for dd, v in mer.items()) for g in groups}
        if rows and sum(tau.values()) > 0:
            s, t = sum(att.values()), sum(tau.values())
            awrf_num += w[i] * (1 - _js([att[g] / s for g in groups], [tau[g] / t for g in groups]))
            awrf_den += w[i]
        if mer:
            order = sorted(mer.items(), key=lambda kv: -kv[1])
            star_d, pos = {}, 0
            for v in sorted(set(mer.values()), reverse=True):
                tied = [dd for dd, vv in order if vv == v]
                e = sum(gamma ** j for j in range(pos, pos + len(tied))) / len(tied)
                star_d.update({dd: e for dd in tied})
                pos += len(tied)
            eps = {g: 0.0 for g in groups}
            star = {g: 0.0 for g in groups}
            for dd, k in rows:
                if dd in mer:
                    for g, a in A[dd].items():
                        eps[g] += a * gamma ** (k - 1)
            for dd, e in star_d.items():
                for g, a in A[dd].items():
                    star[g] += a * e
            ee["EE-D"] += w[i] * sum(v * v for v in eps.values())
            ee["EE-R"] += w[i] * sum(eps[g] * star[g] for g in groups)
            ee["EE-L"] += w[i] * sum((eps[g] - star[g]) ** 2 for g in groups)
    tot = sum(E.values())
    share = {g: E[g] / tot for g in groups}
    size = {g: sum(x.get(g, 0) for x in A) / n for g in groups}
    tshare = size if target == "size" else {g: T[g] / sum(T.values()) for g in groups}
    out = {"share": share, "gap": {g: share[g] - tshare[g] for g in groups},
           "awrf": awrf_num / awrf_den}
    if merit:
        ut, ct = sum(U.values()), sum(C.values())
        out["dtr"] = {g: (E[g] / U[g]) / (tot / ut) if U[g] else np.inf for g in groups}
        out["dir"] = {g: (C[g] / U[g]) / (ct / ut) if U[g] else np.nan for g in groups}
        out.update({k: v / pop for k, v in ee.items()})
    return out


@pytest.mark.parametrize("seed,multi", [(0, False), (1, True), (2, True)])
def test_vectorized_equals_a_per_query_loop(seed, multi):
    rng = np.random.default_rng(seed)
    q, d, rank, w = _random_log(rng)
    labels = [list(rng.choice(list("uvwxyz"), size=int(rng.integers(1, 4 if multi else 2)), replace=False))
              for _ in range(30)]
    g = Groups.from_labels(labels, "random")
    mq = rng.integers(0, len(w), size=60)
    md = rng.integers(0, 30, size=60)
    key = np.unique(mq * 30 + md)
    mv = rng.integers(1, 4, size=len(key))
    merit = Merit.from_codes(key // 30, key % 30, mv, len(w), 30, "random")
    mdict: dict[int, dict[int, int]] = {}
    for k, v in zip(key.tolist(), mv.tolist(), strict=True):
        mdict.setdefault(k // 30, {})[k % 30] = v
    for target, m, md_ in (("size", None, {}), ("uniform", None, {}), ("merit", merit, mdict),
                           ("size", merit, mdict)):
        r = fairness_from_pairs(q, d, rank, w, g, m, target, browsing="dcg", n_boot=0)
        want = _loop(q, d, rank, w, labels, md_, target)
        for name, row in zip(r.groups["group"], r.groups.to_dict("records"), strict=True):
            assert row["exposure_share"] == pytest.approx(want["share"][name], abs=1e-12)
            assert row["gap"] == pytest.approx(want["gap"][name], abs=1e-12)
            if m is not None:
                assert row["dtr"] == pytest.approx(want["dtr"][name], nan_ok=True)
                assert row["dir"] == pytest.approx(want["dir"][name], nan_ok=True)
        assert r.summary["awrf"]["value"] == pytest.approx(want["awrf"], abs=1e-12)
        if m is not None:
            for k in ("EE-D", "EE-R", "EE-L"):
                assert r.summary["expected_exposure"][k]["value"] == pytest.approx(want[k], abs=1e-12)


def test_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(5)
    q, d, rank, w = _random_log(rng, n_queries=200)
    g = Groups.from_values(rng.choice(["A", "B", "C"], size=30))
    a = fairness_from_pairs(q, d, rank, w, g, None, "size", n_boot=300, seed=7)
    b = fairness_from_pairs(q, d, rank, w, g, None, "size", n_boot=300, seed=7)
    c = fairness_from_pairs(q, d, rank, w, g, None, "size", n_boot=300, seed=8)
    assert a.groups.equals(b.groups) and not a.groups.equals(c.groups)
    t = a.groups
    assert ((t["exposure_share_lo"] <= t["exposure_share"]) & (t["exposure_share"] <= t["exposure_share_hi"])).all()
    assert (t["exposure_share_hi"] - t["exposure_share_lo"] > 0).all()
    s = a.summary["tvd"]
    assert s["lo"] < s["value"] < s["hi"]


# ---- groups and merit sources -----------------------------------------------------------------


def test_groups_split_multi_valued_fields_equally():
    g = Groups.from_values(['["use::editing", "role::program"]', ["role::program"], None, "x"], "tags")
    assert g.names == ["role::program", "use::editing", "x", NONE_GROUP]
    assert g.multi_valued and "split" not in g.source and "share it equally" in g.source
    m = g.matrix.toarray()
    assert m.tolist() == [[0.5, 0.5, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]
    assert g.sizes().tolist() == [1.5, 0.5, 1, 1]


def test_groups_from_a_tsv(tmp_path):
    from limelight.data import IdMap

    ids = IdMap(["a", "b", "c"], kind="document")
    p = tmp_path / "g.tsv"
    p.write_text("# doc\tgroup\na\tX\na\tY\nc\tX\n\n")
    g = Groups.from_tsv(p, ids)
    assert g.names == ["X", "Y", NONE_GROUP] and g.matrix.toarray().tolist() == [
        [0.5, 0.5, 0], [0, 0, 1], [1, 0, 0]]
    p.write_text("a\tX\nzz\tY\nyy\tY\nzz\tX\n")
    with pytest.raises(LimelightError, match=r"2 document\(s\) not in the collection \(first: 'zz', 'yy'\)"):
        Groups.from_tsv(p, ids)
    p.write_text("a X\n")
    with pytest.raises(LimelightError, match=r"g.tsv:1: expected 'docid<TAB>group'"):
        Groups.from_tsv(p, ids)


def test_settings_are_checked():
    with pytest.raises(LimelightError, match="needs a merit source"):
        _fair("merit", None)
    with pytest.raises(LimelightError, match="unknown target 'fair'"):
        _fair("fair")
    with pytest.raises(LimelightError, match="unknown expected-exposure target"):
        _fair("size", MERIT, ee_target="best")


# ---- a real judged store -----------------------------------------------------------------------


def test_a_judged_store_with_qrels_merit(cranfield_store):
    ds, store = cranfield_store
    # groups: the document id modulo 3 (an arbitrary partition of a real collection)
    g = Groups.from_values([f"d{int(x) % 3}" for x in ds.collection.ids.strings], "id mod 3")
    merit = Merit.from_qrels(ds.qrels, store, "cranfield qrels")
    r = group_fairness(store, g, merit, "merit", n_boot=100, top=3)
    s = r.summary
    assert s["n_queries_used"] == int((ds.qrels.n_relevant() > 0).sum()) == merit.info["matched_queries"]
    assert r.groups["exposure_share"].sum() == pytest.approx(1.0)
    assert r.groups["target_share"].sum() == pytest.approx(1.0)
    assert r.groups["gap"].sum() == pytest.approx(0.0, abs=1e-12)
    for k in ("EE-D", "EE-R", "EE-L"):
        e = s["expected_exposure"][k]
        assert e["lo"] <= e["value"] <= e["hi"]
    # the contributors of a group add up to at most its whole gap, in its direction
    for name, sub in r.contributors.groupby("group"):
        gap = r.group(name)["gap"]
        assert (np.sign(sub["contribution"]) == np.sign(gap)).all()
    # one group: nothing to be unfair about
    one = Groups.from_values(["all"] * len(ds.collection))
    r1 = group_fairness(store, one, merit, "merit", n_boot=0, top=0)
    assert r1.summary["tvd"]["value"] == pytest.approx(0.0, abs=1e-12)
    assert r1.groups["dp"].tolist() == pytest.approx([1.0]) and r1.groups["dtr"].tolist() == pytest.approx([1.0])


def test_merit_sources_refuse_what_does_not_match(cranfield_store):
    ds, store = cranfield_store
    import pandas as pd

    # the CtrlQGen Click test set of the movies catalog: judged films, not Cranfield abstracts
    click = pd.read_parquet(REPO / "experiments/ctrlqgen/results/movies/weaklabels/click_test.parquet")
    other = Qrels.from_arrays(click["query_id"], click["entity_id"], [1] * len(click))
    with pytest.raises(LimelightError, match=r"judged documents are not in the store's collection "
                                             r"\(first: 'movie\d+'.*another collection"):
        Merit.from_qrels(other, store, "movies click test")
    q = Qrels.from_dict({"no-such-query": {ds.collection.ids[0]: 1}})
    with pytest.raises(LimelightError, match="none of its 1 judged queries is in the store's query set.*no overlap"):
        Merit.from_qrels(q, store, "stray qrels")


def test_a_reference_system_as_merit(cranfield_store, tmp_path):
    from limelight.data import load_query_log
    from limelight.exposure import compute_exposure
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds, store = cranfield_store
    ref = compute_exposure(BM25(BM25Index.build(ds.collection), k1=1.5, b=0.9), ds.queries,
                           tmp_path / "ref", depth=30)
    m = Merit.from_reference(ref, store, "bm25-k1.5")
    assert "assumed, not judged" in m.assumption and "bm25-k1.5" in m.assumption
    q, d, rank, score = ref.pair_arrays()
    assert m.matrix.nnz == int((score > 0).sum())
    r = group_fairness(store, Groups.from_values([f"d{int(x) % 2}" for x in ds.collection.ids.strings]),
                       m, "merit", n_boot=20)
    assert r.summary["assumptions"] == [m.assumption] and r.summary["merit"] == "reference:bm25-k1.5"
    adi = load_dataset("adi")
    other = compute_exposure(BM25(BM25Index.build(adi.collection)), ds.queries, tmp_path / "adi", depth=10)
    with pytest.raises(LimelightError, match=r"reference store adi is over another collection \(82 documents vs 1,400\)"):
        Merit.from_reference(other, store, "adi")
    logq = compute_exposure(BM25(BM25Index.build(ds.collection)), load_query_log().head(50),
                            tmp_path / "log", depth=10)
    with pytest.raises(LimelightError, match="shares no query with .*: no overlap"):
        Merit.from_reference(logq, store, "log")


def test_policy_curve_starts_at_the_ranker(cranfield_store):
    from limelight.evaluation import evaluate
    from limelight.exposure.fairness import policy_curve
    from limelight.retrieval.base import run_from_topk
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds, store = cranfield_store
    g = Groups.from_values([f"d{int(x) % 3}" for x in ds.collection.ids.strings], "id mod 3")
    merit = Merit.from_qrels(ds.qrels, store, "cranfield qrels")
    curve = policy_curve(store, g, merit, [0, 1.0, float("inf")], n_samples=16, seed=1)
    again = policy_curve(store, g, merit, [1.0], n_samples=16, seed=1)
    assert again.iloc[0].equals(curve.iloc[1])
    t0 = curve.iloc[0]
    # T = 0 is the ranker: its shares are group_fairness's, its nDCG@10 and R@100 evaluate's
    det = group_fairness(store, g, merit, "merit", n_boot=0, top=0)
    assert t0["largest_deficit"] == pytest.approx(det.groups["gap"].min(), abs=1e-12)
    assert t0["tvd"] == pytest.approx(det.summary["tvd"]["value"], abs=1e-12)
    docs, scores = BM25(BM25Index.build(ds.collection)).search_batch(ds.queries.texts.tolist(), 50)
    ev = evaluate(run_from_topk(ds.queries.ids, ds.collection.ids, docs, scores, "bm25"), ds.qrels,
                  "nDCG@10 R@100")
    assert t0["ndcg@10"] == pytest.approx(ev["nDCG@10"], abs=1e-9)
    assert t0["r@100"] == pytest.approx(ev["R@100"], abs=1e-9)
    # the uniform shuffle of the top 50 keeps R@100 (every document stays within 100) and loses nDCG
    inf = curve.iloc[2]
    assert inf["r@100"] == pytest.approx(t0["r@100"], abs=1e-12) and inf["ndcg@10"] < t0["ndcg@10"]


def test_bootstrap_path_agrees_with_the_point_path():
    # a log of one query repeated: every resample is the log itself up to a common factor, so
    # each interval (computed from the per-query blocks) collapses onto the point figure
    # (computed from the per-document sums)
    rng = np.random.default_rng(3)
    d, rank = rng.choice(30, size=8, replace=False), np.arange(1, 9)
    reps = 25
    qq = np.repeat(np.arange(reps), len(d))
    dd, rr = np.tile(d, reps), np.tile(rank, reps)
    g = Groups.from_labels([list(rng.choice(list("xyz"), size=int(rng.integers(1, 3)), replace=False))
                            for _ in range(30)], "random")
    mk = np.unique(d)[:3]
    merit = Merit.from_codes(np.repeat(np.arange(reps), 3), np.tile(mk, reps), np.tile([1, 2, 1], reps),
                             reps, 30, "m")
    for target, m in (("size", None), ("uniform", None), ("merit", merit)):
        r = fairness_from_pairs(qq, dd, rr, np.ones(reps), g, m, target, n_boot=20, seed=1)
        for k in ("exposure_share", "target_share", "gap"):
            t = r.groups
            assert np.allclose(t[f"{k}_lo"], t[k], atol=1e-12) and np.allclose(t[f"{k}_hi"], t[k], atol=1e-12)
        for k in ("tvd", "awrf"):
            s = r.summary[k]
            assert s["lo"] == pytest.approx(s["value"], abs=1e-12) == s["hi"]
        if m is not None:
            for k in ("EE-D", "EE-R", "EE-L"):
                s = r.summary["expected_exposure"][k]
                assert s["lo"] == pytest.approx(s["value"], abs=1e-12) == s["hi"]


def test_fairness_table_is_one_tidy_row_per_group(cranfield_store):
    from limelight.exposure.fairness import fairness_table

    ds, store = cranfield_store
    g = Groups.from_values([f"d{int(x) % 3}" for x in ds.collection.ids.strings], "id mod 3")
    merit = Merit.from_qrels(ds.qrels, store, "cranfield qrels")
    t = fairness_table(store, g, merit, "merit", n_boot=50, top=3)
    full = group_fairness(store, g, merit, "merit", n_boot=50, top=3)
    assert t["group"].tolist() == g.names
    assert {"gap_lo", "gap_hi", "exposure_share_lo", "dtr_hi", "direction"} <= set(t.columns)
    for row in t.to_dict("records"):
        assert row["direction"] == ("deficit" if row["gap"] < 0 else "surplus")
        c = full.contributors[full.contributors["group"] == row["group"]].sort_values("rank")
        assert row["top_docids"] == c["docid"].tolist() and len(row["top_docids"]) == 3
        assert row["top_contributions"] == c["contribution"].tolist()
        # the documents pull in the gap's direction
        assert all(np.sign(x) == np.sign(row["gap"]) for x in row["top_contributions"])
    assert t.attrs["summary"]["merit"] == "cranfield qrels"
