"""``queries.source = "generated"``: an audit of a catalog that has no query log, under CtrlQGen
queries generated from the catalog itself (WeakLabeling-Un, narrow and broad), on the real movies
catalog (3,201 films; BM25 only: seconds)."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from _audits import audited

from limelight.audit.config import parse_config
from limelight.errors import LimelightError
from limelight.report import run_audit

CONFIG = """
[audit]
name = "movies-generated"
depth = 50
cutoffs = [10, 50]
seed = 3

[collection]
source = "movies"

[queries]
source = "generated"
sample = 400

[[systems]]
name = "bm25"
kind = "bm25"

[stages]
eqi = false
"""


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    return audited(tmp_path_factory, CONFIG, "generated")


def test_generated_queries_are_the_catalogs_ctrlqgen_queries(audit):
    """The exposure queries are WeakLabeling-Un's narrow and broad queries for a seeded sample
    of the catalog's entities (at most as many entities as queries kept), merged by normalised
    text with o_q = the number of times the text was generated, then sampled as the log is."""
    from limelight.data.loaders import load_catalog
    from limelight.querygen.generator import generate_queries

    a, res = audit
    assert res["queries"]["source"] == "generated" and res["queries"]["n_queries"] == 400
    cat = load_catalog("movies")
    counts = Counter()
    for intent in ("narrow", "broad"):
        gen = generate_queries(cat, "movies", intent, n_entities=400, seed=3)
        assert len(gen) > 300 and set(gen.intents) == {intent}
        counts.update(" ".join(t.lower().split()) for t in gen.texts.tolist())
    st = a.store("bm25")
    texts = st.queries.texts.tolist()
    assert len(set(texts)) == len(texts) == 400  # one query per distinct text
    assert all(t in counts for t in texts)
    np.testing.assert_array_equal(st.queries.weights, [counts[t] for t in texts])
    assert res["queries"]["total_weight"] == float(st.queries.weights.sum()) > 400  # repeats merged
    # a query keeps the id of its first occurrence: ENTITY#INTENTj
    assert all(re.fullmatch(r"movie\d+#(narrow|broad)\d+", i) for i in st.queries.ids.strings.tolist())


def test_generated_audit_measures_retrievability_and_says_why_ctrlqgen_is_skipped(audit):
    a, res = audit
    s = res["systems"]["bm25"]
    assert 0 < s["gini_c10"] <= 1 and 0 < s["retrievable_fraction_c50"] <= 1
    assert s["n_pairs"] > 0 and res["collection"]["n_docs"] == 3201
    reason = res["stages"]["ctrlqgen"]["reason"]
    assert res["stages"]["ctrlqgen"]["status"] == "skipped" and "queries.source" in reason
    assert "generated" in a.report_html.read_text()


def test_generated_needs_an_entity_schema(tmp_path):
    """med (Medline abstracts) has no entity schema: a one-line error, and no output folder."""
    text = CONFIG.replace('source = "movies"', 'source = "med"')
    out = tmp_path / "audit"
    with pytest.raises(LimelightError, match=r'queries.source = "generated" needs an entity schema for med'):
        run_audit(parse_config(text), out)
    assert not out.exists()
