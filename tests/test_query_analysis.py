"""The compiled query encoder (``QueryLexicon``, issue 20 item 2) gives the term ids of the
Python ``Analyzer`` + vocabulary lookup (``BM25._encode_reference``) exactly: on the whole shared
query log, over real vocabularies, with stemming and stopwords on and off, and on unicode edge
cases (final sigma, ``İ``, combining marks, other digits, lone surrogates, NUL)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from limelight.analysis import N_CODE_POINTS, Analyzer, word_char_table
from limelight.data import load_catalog, load_dataset, load_query_log
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.retrieval import bm25 as bm25_mod
from limelight.retrieval.bm25 import BM25, BM25Index, QueryLexicon

# each line is a query and a document: the vocabulary then holds these words
UNICODE = [
    "İstanbul İİ Kİ ıi", "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ Σ ΑΣ,Β ΑΣ' ΑΣ\u0301 Σ1 ΑΣ_", "ὈΔΥΣΣΕΎΣ ᾼ ᾈ",
    "naïve nai\u0308ve café cafe\u0301 e\u0301e\u0301", "x_y __ _a a_ ___", "½² ¹²³ x² 10½",
    "٣٤ ٣ ١٢٣٤ ۱۲ १२३ ๑๒ ௧௨ 12.5 3,000 007", "東京 日本語の文 한국어 ไทยภาษา",
    "\ud800abc de\udfff zz\ud83d\ude00", "a\x00bc \x00\x00 d\x00ef", "ǅungla ǈ ǋ ﬀ ﬁle ß STRASSE ẞ",
    "ǰ ŉ Ω Å K K", "tab\tsep\nline\r\nret\u2028ls\u00a0nbsp\u200bzw", "Ⅻ ⅻ ⅰⅱ Ⅳ ①② ⑴",
    "ＡＢＣ ａｂｃ １２３", "𝐀𝐁𝐂 𝔄𝔅 𝟘𝟙", "Ꭰꭰ ᏸ Ᏸ", "ŁÓDŹ ÆØÅ œuvre ĲSSEL",
    "the of and THE The running RUNS runners", "a b c 1 2 ab cd", "",
]


@pytest.fixture(scope="module")
def log_texts():
    """Every line of the shared log as written (149,104 queries, case and spacing kept), then
    the unicode cases."""
    return load_query_log(distinct=False).texts.tolist() + UNICODE + [None]


@pytest.fixture(scope="module")
def mixed_collection():
    """scifact's documents, every fifth line of the log as a document (most log words are in the
    vocabulary, the others are not) and the unicode cases."""
    sci = load_dataset("scifact").collection
    raw = load_query_log(distinct=False).texts.tolist()[::5]
    texts = sci.texts.tolist() + raw + UNICODE
    ids = sci.ids.strings.tolist() + [f"log{i}" for i in range(len(raw))] + \
        [f"u{i}" for i in range(len(UNICODE))]
    return Collection(IdMap(ids, kind="document"), np.asarray(texts, dtype=object), name="mixed")


def _same(retriever: BM25, texts, threads: int = 2) -> None:
    qptr, qterms, qw = retriever._encode_reference(texts)
    got_ptr, got_terms = retriever.index.lexicon().encode(texts, threads)
    assert got_ptr.dtype == np.int64 and got_terms.dtype == np.int32
    assert np.array_equal(got_ptr, qptr)
    assert np.array_equal(got_terms, qterms)


ANALYZERS = [  # stemming × stopwords, another stopword list, no lowercasing
    Analyzer(),
    Analyzer(stopwords="none"),
    Analyzer(stemmer="english"),
    Analyzer(stemmer="english", stopwords="none"),
    Analyzer(stopwords="en_plus", lowercase=False),
]


@pytest.mark.parametrize("analyzer", ANALYZERS, ids=lambda a: f"{a.stopwords}-{a.stemmer}-"
                         f"{'lower' if a.lowercase else 'case'}")
def test_whole_log_term_ids_equal_reference(mixed_collection, log_texts, analyzer):
    index = BM25Index.build(mixed_collection, analyzer)
    r = BM25(index)
    _same(r, log_texts, threads=2)
    # a second call (stemming: the lexicon now caches every word) and one thread
    _same(r, log_texts[::-13], threads=1)
    _same(r, UNICODE, threads=1)
    _same(r, [], threads=1)
    _same(r, [""], threads=1)
    # search_batch takes the compiled path once the lexicon exists: same top-k as the reference
    d, s = r.search_batch(log_texts[:3000], 20)
    d_ref, s_ref = r._search(*r._encode_reference(log_texts[:3000]), 20)
    assert np.array_equal(d, d_ref) and np.array_equal(s, s_ref)


def test_debian_catalog_whole_log():
    """The benchmark's setting: the Debian catalog's vocabulary, the default analyzer, the
    distinct queries of the log."""
    index = BM25Index.build(load_catalog("debian"))
    r = BM25(index, threads=2)
    assert index._lexicon is None
    _same(r, load_query_log().texts.tolist())
    assert len(index.lexicon()) == index.n_terms  # complete: the vocabulary, nothing else


def test_stemming_cache_reset(monkeypatch, mixed_collection, log_texts):
    """A stemming lexicon emptied when full still gives the same ids."""
    monkeypatch.setattr(bm25_mod, "_LEXICON_MAX_WORDS", 5000)
    index = BM25Index.build(load_dataset("adi").collection, Analyzer(stemmer="english"))
    r = BM25(index)
    for lo in range(0, 40000, 8000):
        _same(r, log_texts[lo:lo + 8000])
        assert len(index.lexicon()) <= 5000 + 8000 * 20


def test_word_char_table_is_re_word():
    table = word_char_table()
    assert table.shape == (N_CODE_POINTS,) and not table.flags.writeable
    word = re.compile(r"(?u)\w")
    expected = np.fromiter((word.match(chr(c)) is not None for c in range(N_CODE_POINTS)),
                           dtype=np.uint8, count=N_CODE_POINTS)
    assert np.array_equal(table, expected)


def test_code_points_layout():
    an = Analyzer()
    buf, starts, ends = an.code_points(["İA", None, "bΣ x", "", "ΑΣ"])
    text = buf.tobytes().decode("utf-32-le")
    got = [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    assert got == ["i̇a", "", "bς x", "", "ας"]
    assert all(text[e] == "\x00" for e in ends[:-1].tolist())
    buf, starts, ends = Analyzer(lowercase=False).code_points(["Ab", "\ud800"])
    assert buf.tolist() == [ord("A"), ord("b"), 0, 0xD800]
    assert starts.tolist() == [0, 3] and ends.tolist() == [2, 4]


def test_small_batches_use_reference_until_lexicon_exists():
    index = BM25Index.build(load_dataset("adi").collection)
    r = BM25(index)
    r.search_batch(["information retrieval"], 5)
    assert index._lexicon is None
    assert isinstance(index.lexicon(), QueryLexicon)
    d, s = r.search_batch(["information retrieval"], 5)
    d_ref, s_ref = r._search(*r._encode_reference(["information retrieval"]), 5)
    assert np.array_equal(d, d_ref) and np.array_equal(s, s_ref)
