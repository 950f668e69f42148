"""Query variation generators: each output differs from its input only in the way its category
says, on fixed seeds over real queries (cranfield, npl), plus validity rules and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from limelight.data import load_dataset
from limelight.errors import FormatError, LimelightError
from limelight.querygen import variations as V
from limelight.querygen.variations import (
    CATEGORIES,
    NLTK_STOPWORDS,
    QWERTY_NEIGHBOURS,
    TAXONOMY,
    VariationMethod,
    generate_variations,
    get_method,
    read_variations_tsv,
    register,
)

SEEDS = range(3)


@pytest.fixture(scope="module")
def real_queries():
    """Real queries of two collections: long natural-language ones and short keyword ones."""
    cran = load_dataset("cranfield").queries.head(60)
    npl = load_dataset("npl").queries.head(60)
    return [*cran.texts.tolist(), *npl.texts.tolist()]


def _variants(name, queries, seed, **opts):
    m = get_method(name, **opts)
    if m.unavailable():
        pytest.skip(f"{name} unavailable here: {m.unavailable()}")
    m.prepare(queries)
    rng = np.random.default_rng(seed)
    return [(q, m.vary(q, rng)) for q in queries]


def _diff_tokens(a: str, b: str) -> list[int]:
    ta, tb = a.split(), b.split()
    assert len(ta) == len(tb), (a, b)
    return [i for i, (x, y) in enumerate(zip(ta, tb, strict=True)) if x != y]


def _core(tok: str) -> str:
    return V._split_core(tok).core


def _substituted(q: str, v: str | None) -> int:
    """The position of the one character ``v`` changed in ``q`` (same length), in a token that
    is not a stopword."""
    assert v is not None
    pos = [i for i, (a, b) in enumerate(zip(q, v, strict=True)) if a != b]
    assert len(v) == len(q) and len(pos) == 1
    (ti,) = _diff_tokens(q, v)
    assert _core(q.split()[ti]).lower() not in NLTK_STOPWORDS
    return pos[0]


# ---- misspelling ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_neighbour_swap_is_one_adjacent_swap_in_a_non_stopword(real_queries, seed):
    out = _variants("NeighbCharSwap", real_queries, seed)
    assert sum(v is not None for _, v in out) >= len(out) - 2
    for q, v in out:
        if v is None:
            continue
        assert len(v) == len(q)
        pos = [i for i, (a, b) in enumerate(zip(q, v, strict=True)) if a != b]
        assert len(pos) == 2 and pos[1] == pos[0] + 1
        assert q[pos[0]] == v[pos[1]] and q[pos[1]] == v[pos[0]]
        (ti,) = _diff_tokens(q, v)
        assert _core(q.split()[ti]).lower() not in NLTK_STOPWORDS


@pytest.mark.parametrize("seed", SEEDS)
def test_random_char_sub_is_one_ascii_letter_substitution(real_queries, seed):
    for q, v in _variants("RandomCharSub", real_queries, seed):
        p = _substituted(q, v)
        assert v[p].isascii() and v[p].isalpha()


@pytest.mark.parametrize("seed", SEEDS)
def test_qwerty_sub_is_one_key_at_keyboard_distance_one(real_queries, seed):
    for q, v in _variants("QWERTYCharSub", real_queries, seed):
        p = _substituted(q, v)
        assert v[p].lower() in QWERTY_NEIGHBOURS[q[p].lower()]


def test_qwerty_neighbours_are_a_keyboard():
    for a, nb in QWERTY_NEIGHBOURS.items():
        assert a not in nb
        for b in nb:
            assert a in QWERTY_NEIGHBOURS[b]  # symmetric
    assert set(QWERTY_NEIGHBOURS["s"]) == set("weadzx")
    assert set(QWERTY_NEIGHBOURS["q"]) == set("12wa")
    assert set(QWERTY_NEIGHBOURS["m"]) == set("njk")


# ---- naturality, ordering --------------------------------------------------------------------------------
def test_remove_stopwords_removes_exactly_the_stopwords(real_queries):
    out = _variants("RmvStopWords", real_queries, 0)
    n_var = 0
    for q, v in out:
        expected = [t for t in q.split() if _core(t).lower() not in NLTK_STOPWORDS and _core(t)]
        if v is None:  # only when nothing would change or nothing would remain
            assert expected == q.split() or not expected
            continue
        n_var += 1
        assert v.split() == expected
    assert n_var > len(out) // 2


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_order_swap_swaps_exactly_two_words(real_queries, seed):
    out = _variants("RandOrderSwap", real_queries, seed)
    for q, v in out:
        assert v is not None
        i, j = _diff_tokens(q, v)
        tq, tv = q.split(), v.split()
        assert tq[i] == tv[j] and tq[j] == tv[i]
        assert sorted(tq) == sorted(tv)


# ---- paraphrasing -----------------------------------------------------------------------------------------
def _wordnet_or_skip():
    try:
        return V.load_wordnet()
    except LimelightError as e:  # stated reason, shown by -ra; `make wordnet` installs it
        pytest.skip(str(e))


@pytest.mark.parametrize("seed", SEEDS)
def test_wordnet_swap_replaces_one_word_by_a_synonym(real_queries, seed):
    wn = _wordnet_or_skip()
    out = _variants("WNetSynSwap", real_queries, seed)
    assert sum(v is not None for _, v in out) > len(out) // 2
    for q, v in out:
        if v is None:
            continue
        tq, tv = q.split(), v.split()
        # one token replaced by one or more words: common prefix and suffix around it
        k = next(i for i, (a, b) in enumerate(zip(tq, tv, strict=False)) if a != b)
        tail = len(tq) - k - 1
        assert tq[:k] == tv[:k] and tq[k + 1:] == tv[len(tv) - tail:]
        word = _core(tq[k])
        assert word.lower() not in NLTK_STOPWORDS
        syn = V.WNetSynSwap().replacement(word)
        assert " ".join(tv[k:len(tv) - tail]).lower() == tq[k].replace(word, syn).lower()
        lemmas = {n.lower().replace("_", " ") for s in wn.synsets(word.lower()) for n in s.lemma_names()}
        assert syn.lower() in lemmas and syn.lower() != word.lower()


def test_wordnet_first_synonym_and_inflections():
    _wordnet_or_skip()
    m = V.WNetSynSwap()
    assert m.replacement("causes") not in (None, "cause")  # an inflection is not a synonym
    assert m.replacement("durable") == "lasting"  # WordNet order: durable.a.01 → lasting
    assert m.vary("what is it", np.random.default_rng(0)) is None  # only stopwords


@pytest.mark.parametrize("seed", SEEDS)
def test_embedding_swap_replaces_one_word_by_a_near_neighbour(real_queries, seed):
    out = _variants("WEmbedSynSwap", real_queries, seed)
    words, emb = V._glove()
    index = {w: i for i, w in enumerate(words.tolist())}
    for q, v in out:
        if v is None:
            continue
        (ti,) = _diff_tokens(q, v)
        a, b = _core(q.split()[ti]).lower(), _core(v.split()[ti]).lower()
        assert a not in NLTK_STOPWORDS and b not in NLTK_STOPWORDS and a != b
        x, y = emb[index[a]], emb[index[b]]
        assert float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) >= 0.5


# ---- validity rules and bad input ----------------------------------------------------------------------
def test_validity_rules_and_bad_input():
    rng = np.random.default_rng(0)
    for name in ("NeighbCharSwap", "RandomCharSub", "QWERTYCharSub"):
        assert get_method(name).vary("how is it being you", rng) is None  # stopwords only
    for name in ("NeighbCharSwap", "RandomCharSub", "QWERTYCharSub", "RmvStopWords", "RandOrderSwap",
                 "WEmbedSynSwap"):
        assert get_method(name).vary("", rng) is None
        assert get_method(name).vary("   ", rng) is None
    assert get_method("RandOrderSwap").vary("zinc", rng) is None  # one word: no ordering variant
    assert get_method("RandOrderSwap").vary("zinc zinc", rng) is None  # identical output is invalid
    assert get_method("RmvStopWords").vary("zinc wilson disease", rng) is None  # nothing to remove
    assert get_method("NeighbCharSwap").vary("aa", rng) is None  # a swap would change nothing


def test_non_ascii_text_is_edited_at_ascii_keys_only():
    q = "Über straße café naïve"
    for seed in range(20):
        v = get_method("QWERTYCharSub").vary(q, np.random.default_rng(seed))
        (i,) = [i for i, (a, b) in enumerate(zip(q, v, strict=True)) if a != b]
        assert q[i].lower() in QWERTY_NEIGHBOURS
        v = get_method("NeighbCharSwap").vary(q, np.random.default_rng(seed))
        assert sorted(v) == sorted(q) and v != q
        v = get_method("RandOrderSwap").vary(q, np.random.default_rng(seed))
        assert sorted(v.split()) == sorted(q.split())


def test_generation_is_seeded_and_independent_of_other_queries():
    qs = {"a": "effects of compressibility on boundary layer flow", "b": "right pelvic pain causes"}
    v1 = generate_variations(qs, "NeighbCharSwap,RandOrderSwap,RandomCharSub", n=2, seed=7)
    v2 = generate_variations(qs, "NeighbCharSwap,RandOrderSwap,RandomCharSub", n=2, seed=7)
    v3 = generate_variations({"a": qs["a"]}, "RandOrderSwap,NeighbCharSwap", n=2, seed=7)
    assert v1.frame.equals(v2.frame)
    sub = v1.frame[(v1.frame.qid == "a") & v1.frame.method.isin(["RandOrderSwap", "NeighbCharSwap"])]
    assert sorted(sub.text) == sorted(v3.frame.text)
    v4 = generate_variations(qs, "NeighbCharSwap,RandOrderSwap,RandomCharSub", n=2, seed=8)
    assert not v1.frame.text.equals(v4.frame.text)
    assert (v1.frame.groupby(["qid", "method"]).size() == 2).all()  # n distinct variants


def test_taxonomy_and_registry():
    assert len(TAXONOMY) == 6
    assert {c.name for c in TAXONOMY if c.changes == "syntax"} == {
        "misspelling", "naturality", "ordering", "paraphrasing"}
    for name in V.PAPER_METHODS:
        assert CATEGORIES[get_method(name).category].changes == "syntax"

    class Shout(VariationMethod):
        name = "ShoutTest"
        category = "naturality"

        def vary(self, query, rng):
            return query.upper()

    register(Shout)
    try:
        v = generate_variations({"q": "zinc wilson"}, "all", seed=0)
        assert "ShoutTest" in v.methods
        assert v.frame.loc[v.frame.method == "ShoutTest", "text"].tolist() == ["ZINC WILSON"]
        with pytest.raises(LimelightError, match="already registered"):
            register(Shout)
    finally:
        V.METHODS.pop("ShoutTest")
    with pytest.raises(LimelightError, match="unknown variation method"):
        generate_variations({"q": "x"}, "NoSuchMethod")


def test_model_methods_without_checkpoint_are_skipped_not_faked():
    v = generate_variations({"q": "what is durable medical equipment"}, "T5QQP,BackTransl,T5DescToTitle,RandOrderSwap")
    assert set(v.skipped) == {"T5QQP", "BackTransl", "T5DescToTitle"}
    assert "checkpoint" in v.skipped["T5QQP"]
    assert set(v.frame.method) == {"RandOrderSwap"}
    with pytest.raises(LimelightError, match="checkpoint"):
        generate_variations({"q": "x y"}, "T5QQP", skip_unavailable=False)


def test_model_methods_run_a_local_checkpoint(tmp_path):
    """A tiny T5 created here (no seq2seq checkpoint ships offline) drives the code path."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    words = ("<pad> </s> <unk> paraphrase: translate english to german: what is durable medical "
             "equipment consist of right pelvic pain causes").split()
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(tmp_path)
    torch.manual_seed(0)
    T5ForConditionalGeneration(T5Config(vocab_size=len(words), d_model=16, d_ff=32, num_layers=1,
                                        num_decoder_layers=1, num_heads=2, d_kv=8, pad_token_id=0,
                                        eos_token_id=1, decoder_start_token_id=0)).save_pretrained(tmp_path)
    torch.set_num_threads(1)  # a tiny model: threads only add contention
    qs = {"a": "what is durable medical equipment consist of", "b": "right pelvic pain causes", "c": ""}
    models_ = dict.fromkeys(V.MODEL_METHODS, tmp_path)
    v1 = generate_variations(qs, list(V.MODEL_METHODS), n=1, models=models_)
    v2 = generate_variations(qs, list(V.MODEL_METHODS), n=1, models=models_)
    assert not v1.skipped and v1.frame.equals(v2.frame)  # beam search: deterministic
    assert "c" not in set(v1.frame.qid)  # an empty query gets no variant
    assert (v1.frame.text != v1.frame.original).all()  # identical outputs are invalid
    assert set(v1.frame.category) <= {"naturality", "paraphrasing"}


def test_tsv_round_trip_and_errors(tmp_path):
    qs = load_dataset("adi").queries
    v = generate_variations(qs, "RandOrderSwap,QWERTYCharSub", seed=1)
    p = v.write_tsv(tmp_path / "v.tsv")
    assert p.read_text().splitlines()[0] == "qid\tvariant_id\ttext\tmethod\tcategory"
    back = read_variations_tsv(p, qs)
    assert back.frame[list(back.COLUMNS)].equals(v.frame[list(v.COLUMNS)].reset_index(drop=True))
    vq = back.queries("QWERTYCharSub")
    assert list(vq.ids.strings) == list(qs.ids.strings) and vq.fields["valid"].sum() == v.n_valid("QWERTYCharSub")
    bad = tmp_path / "bad.tsv"
    bad.write_text("qid\tvariant_id\ttext\tmethod\tcategory\n1\t1~x~0\tfoo\tX\tmisspelling\n1\t1~x~1\tbar\tX\n")
    with pytest.raises(FormatError, match=r"bad.tsv:3"):
        read_variations_tsv(bad)
    bad.write_text("qid\tvariant_id\ttext\tmethod\tcategory\n1\t1~x~0\tfoo\tX\tmisspeling\n")
    with pytest.raises(FormatError, match=r"bad.tsv:2: unknown category"):
        read_variations_tsv(bad)
