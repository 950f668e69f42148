"""The shared Analyzer: tokenization, stopword lists, stemming, config round trip."""

from __future__ import annotations

import pytest
from bm25s import stopwords as bm25s_stopwords

from limelight.analysis import Analyzer, stopword_list
from limelight.data import load_dataset
from limelight.errors import IndexMismatchError, LimelightError


def test_default_is_bm25s_english_list():
    """The default reproduces the README's reference figures: bm25s's 33-word English list."""
    an = Analyzer()
    assert an.stopwords == "en" and an.stemmer is None
    assert stopword_list("en") == frozenset(bm25s_stopwords.STOPWORDS_EN)
    assert len(stopword_list("en")) == 33
    assert stopword_list("en_plus") == frozenset(bm25s_stopwords.STOPWORDS_EN_PLUS)
    assert stopword_list("none") == frozenset() == stopword_list(None)


def test_tokenize_lowercase_pattern_stopwords():
    an = Analyzer()
    # one-character tokens are dropped by the pattern; "the", "of", "is" are stopwords
    assert an.tokenize("The Theory of X-rays: is it a 3D model?") == ["theory", "rays", "3d", "model"]
    assert an.tokenize("") == []
    assert Analyzer(stopwords="none").tokenize("The cat") == ["the", "cat"]
    # en_plus also drops pronouns and auxiliaries that "en" keeps
    assert Analyzer().tokenize("what do you have") == ["what", "do", "you", "have"]
    assert Analyzer(stopwords="en_plus").tokenize("what do you have") == []
    assert Analyzer(stopwords=["cat"]).tokenize("The Cat sat") == ["the", "sat"]
    assert Analyzer(lowercase=False, stopwords="none").tokenize("The Cat") == ["The", "Cat"]
    # unicode word characters
    assert Analyzer().tokenize("Éléphant naïve 東京") == ["éléphant", "naïve", "東京"]


def test_stemming():
    an = Analyzer(stemmer="english")
    assert an.tokenize("Running runners ran flows flowing") == ["run", "runner", "ran", "flow", "flow"]
    # stopwords are removed before stemming
    assert an.tokenize("this is the running") == ["run"]
    with pytest.raises(LimelightError, match="unknown stemmer language 'klingon'"):
        Analyzer(stemmer="klingon")


def test_tokenize_many_equals_tokenize_on_real_text():
    texts = load_dataset("adi").collection.texts.tolist()
    for an in (Analyzer(), Analyzer(stemmer="english"), Analyzer(stopwords="en_plus")):
        assert an.tokenize_many(texts) == [an.tokenize(t) for t in texts]


def test_config_round_trip_and_mismatch():
    for an in (Analyzer(), Analyzer(stemmer="english", stopwords="en_plus"),
               Analyzer(stopwords=["foo", "bar"]), Analyzer(lowercase=False, pattern=r"\w+")):
        cfg = an.config()
        back = Analyzer.from_config(cfg)
        assert back.config() == cfg
        assert back.tokenize("Foo the Bar running a b") == an.tokenize("Foo the Bar running a b")
        an.check_same(cfg, "idx")
    with pytest.raises(IndexMismatchError, match=r"^idx was built with another analyzer: stemmer"):
        Analyzer(stemmer="english").check_same(Analyzer().config(), "idx")
    with pytest.raises(LimelightError, match="unknown stopword list 'fr'"):
        Analyzer(stopwords="fr")
