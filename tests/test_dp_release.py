"""The optional DP release (issue 54 item 3): per-searcher cap, noisy counts, noisy threshold,
its epsilon and delta those of OpenDP's own privacy map, on a generated searcher log."""

from __future__ import annotations

import numpy as np


def test_the_cap_counts_each_searcher_once_per_query_and_at_most_cap_queries():
    from limelight.service.dprelease import capped_counts

    who = ["a", "a", "a", "a", "b", "b", "c"]
    what = ["x", "x", "y", "z", "x", "z", "z"]
    texts, counts = capped_counts(who, what, cap=2)  # a: x, y (z dropped), b: x, z; c: z
    assert dict(zip(texts.tolist(), counts.tolist(), strict=True)) == {"x": 2, "y": 1, "z": 2}


def test_the_release_states_the_library_accounting():
    import opendp.prelude as dp

    from limelight.service.dprelease import dp_release, measurement

    dp.enable_features("contrib")
    meas, scale, threshold = measurement(cap=3, epsilon=1.0, delta=1e-6)
    eps, delta = meas.map((3, 3, 1))
    assert eps == 1.0 and delta <= 1e-6 and scale == 3.0
    assert measurement(3, 1.0, 1e-6)[2] - 1 < threshold  # the smallest threshold meeting delta
    looser = dp.m.make_laplace_threshold(
        dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int)),
        dp.l01inf_distance(dp.absolute_distance(T=int)), scale=scale, threshold=threshold - 1)
    assert looser.map((3, 3, 1))[1] > 1e-6
    rng = np.random.default_rng(0)
    who = [f"s{i}" for i in range(3000)] + ["lonely"]
    what = ["popular search"] * 3000 + ["jane roe home address"]
    order = rng.permutation(len(who))
    r = dp_release(np.asarray(who)[order], np.asarray(what)[order], epsilon=1.0, delta=1e-6, cap=3)
    assert (r.epsilon, r.delta) == (eps, delta) and r.threshold == threshold
    assert "jane roe home address" not in r.counts  # one searcher: below any threshold meeting delta
    assert abs(r.counts["popular search"] - 3000) < 60  # Laplace(3): off by 60 with p < 1e-8
    assert "epsilon = 1," in r.statement() and f"delta = {delta:.2g} " in r.statement()
