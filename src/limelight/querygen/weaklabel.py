"""Weak labeling for CtrlQGen (Penha et al., WWW 2023, §3.1.2 and appendix A).

**WeakLabeling-Un** (unsupervised) turns an entity into (query, intent) pairs:

- *narrow*: words sampled (``sample_words``, word fraction P with probabilities Pr) from a random
  non-empty combination of the narrow fields (Debian: ``name``, ``summary``, or both);
- *broad*: one or two category values of the broad fields (Debian: ``section``, debtags such as
  ``use::editing`` → ``editing``), or a short query from a free-text broad field, made either by
  IDF-prioritised word sampling or by extractive keyphrase extraction (YAKE, standing in for the
  paper's T5 one-line summarizer, which does not ship offline);
- then, stochastically, the appendix A query variations: ``qv_ordering`` (swap two words),
  ``qv_misspelling`` (remove or replace one character) and ``qv_prefix_query`` (cut a suffix).

Readings where the paper is silent: ``sample_words`` keeps the sampled words in their original
order (the ordering variation is applied separately, as appendix A.2) and samples at least one
word; the variation probabilities (``p_ordering=0.1``, ``p_misspelling=0.1``, ``p_prefix=0.1``)
and the P/Pr defaults are ours; each variation is applied at most once.

**WeakLabeling-IP** (intent prediction) labels an existing (query, entity) pair: *narrow* when the
query's cosine similarity (all-MiniLM-L6-v2) to the entity's narrow-field values is higher than to
its broad-field values (broad and broad free text), else *broad*.

**Click sets** (``click_dataset``): the paper's Books protocol — WeakLabeling-Un queries for a
random sample of entities, 75% narrow and 25% broad, the source entity relevant, split into
train/validation/test, plus a broad-only test set.

All randomness takes a seed (``numpy.random.Generator``); equal seeds give equal queries.
"""

from __future__ import annotations

import os
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np

from limelight.analysis import Analyzer
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.errors import LimelightError, UnknownIdError
from limelight.querygen.serialize import Schema, field_values, load_schema

INTENTS = ("narrow", "broad")
HELDOUT_SPLITS = ("test", "broad_test")  # the held-out side of an entity-disjoint Click set
HELDOUT_DIR = "heldout"  # where ClickSet.write puts it


def check_intent(intent: str) -> str:
    """``intent`` if it is ``narrow`` or ``broad``, else a clear error."""
    if intent not in INTENTS:
        raise LimelightError(f"unknown intent {intent!r} (expected narrow or broad)")
    return intent


def tokenize(text: str) -> list[str]:
    """The appendix's ``tokenize``: whitespace words (pure punctuation dropped)."""
    return [w for w in text.split() if any(ch.isalnum() for ch in w)]


def acceptable_query(q: str | None) -> bool:
    """A generated query worth keeping: at least 2 characters and not a lone stop word."""
    global _STOPWORDS
    if _STOPWORDS is None:
        from limelight.analysis import stopword_list

        _STOPWORDS = stopword_list("en")
    q = (q or "").strip()
    return len(q) >= 2 and q.lower() not in _STOPWORDS


_STOPWORDS: frozenset[str] | None = None


# ---- appendix A -------------------------------------------------------------------------------


def sample_words(words: Sequence[str], P: Sequence[float], Pr: Sequence[float],
                 rng: np.random.Generator) -> list[str]:
    """A.1: a fraction p ~ (P, Pr) of the words, drawn without replacement (at least one word),
    kept in their original order."""
    if not words:
        return []
    p = float(rng.choice(np.asarray(P, dtype=np.float64), p=np.asarray(Pr, dtype=np.float64)))
    n = min(len(words), max(1, int(len(words) * p)))
    idx = np.sort(rng.choice(len(words), n, replace=False))
    return [words[i] for i in idx.tolist()]


def qv_ordering(q: str, rng: np.random.Generator) -> str:
    """A.2: swap two random words (queries of one word are returned unchanged)."""
    words = tokenize(q)
    if len(words) < 2:
        return q
    p1, p2 = rng.choice(len(words), 2, replace=False)
    words[p1], words[p2] = words[p2], words[p1]
    return " ".join(words)


def qv_misspelling(q: str, P: Sequence[float], rng: np.random.Generator) -> str:
    """A.3: remove (``rem``) or replace (``mdf``) one random character, with probabilities P."""
    if len(q) < 2:
        return q
    t = rng.choice(["rem", "mdf"], p=np.asarray(P, dtype=np.float64))
    i = int(rng.integers(len(q)))
    if t == "rem":
        return q[:i] + q[i + 1:]
    letters = string.ascii_letters
    return q[:i] + letters[int(rng.integers(len(letters)))] + q[i + 1:]


def qv_prefix_query(q: str, P: Sequence[float], Pr: Sequence[float],
                    rng: np.random.Generator) -> str:
    """A.4: drop a fraction ``rem`` ~ (P, Pr) of the query's characters from its end (never all)."""
    rem = float(rng.choice(np.asarray(P, dtype=np.float64), p=np.asarray(Pr, dtype=np.float64)))
    return q[:max(1, int((1 - rem) * len(q)))].rstrip()


def keyphrase(text: str, n: int = 1, max_words: int = 3) -> list[str]:
    """A.5 stand-in: the ``n`` best extractive keyphrases of a free text (YAKE, ≤ ``max_words``
    words each), best first."""
    if not text or not text.strip():
        return []
    import yake

    kw = yake.KeywordExtractor(lan="en", n=max_words, top=n, dedupLim=0.7)
    return [k for k, _ in kw.extract_keywords(text)]


# ---- WeakLabeling-Un --------------------------------------------------------------------------


@dataclass
class WeakLabelingUn:
    """Unsupervised weak labels: ``(query, intent)`` pairs for catalog entities.

    ``fit(collection)`` computes the IDF of free-text words once; ``generate`` then draws queries.
    """

    schema: Schema
    P: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    Pr: tuple[float, ...] = (0.3, 0.3, 0.2, 0.2)
    p_ordering: float = 0.1
    p_misspelling: float = 0.1
    p_prefix: float = 0.1
    P_misspelling: tuple[float, float] = (0.5, 0.5)
    P_prefix: tuple[float, ...] = (0.25, 0.5)
    Pr_prefix: tuple[float, ...] = (0.5, 0.5)
    ft_words: tuple[int, ...] = (1, 2, 3)
    use_keyphrases: bool = True
    max_tries: int = 20
    analyzer: Analyzer = field(default_factory=Analyzer)
    _collection: Collection | None = field(default=None, repr=False)
    _idf: dict[str, float] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.schema = load_schema(self.schema)
        for name, p in (("Pr", self.Pr), ("P_misspelling", self.P_misspelling),
                        ("Pr_prefix", self.Pr_prefix)):
            if abs(sum(p) - 1.0) > 1e-9 or min(p) < 0:
                raise LimelightError(f"{name} must be probabilities summing to 1, got {p}")

    def fit(self, collection: Collection) -> WeakLabelingUn:
        """Check the schema against the catalog and compute IDF over its free-text fields."""
        from limelight.retrieval.bm25 import analyze_flat

        self.schema.check_collection(collection)
        self._collection = collection
        self._idf = {}
        for f in self.schema.broad_ft:
            texts = ["" if not isinstance(t, str) else t for t in collection.fields[f].tolist()]
            rows, codes, terms = analyze_flat(self.analyzer, texts)
            pairs = np.unique(rows * (len(terms) + 1) + codes)
            df = np.bincount(pairs % (len(terms) + 1), minlength=len(terms))
            idf = np.log((len(texts) + 1) / (df + 0.5))
            self._idf.update(zip(terms, idf.tolist(), strict=True))
        return self

    # -- pieces --
    def _vary(self, q: str, rng: np.random.Generator) -> str:
        u = rng.random(3)
        if u[0] < self.p_ordering:
            q = qv_ordering(q, rng)
        if u[1] < self.p_misspelling:
            q = qv_misspelling(q, self.P_misspelling, rng)
        if u[2] < self.p_prefix:
            q = qv_prefix_query(q, self.P_prefix, self.Pr_prefix, rng)
        return q

    def _values(self, entity: dict, names: Sequence[str]) -> dict[str, list[str]]:
        out = {}
        for n in names:
            v = field_values(self.schema.spec(n), entity.get(n), for_query=True)
            if v:
                out[n] = v
        return out

    def narrow_query(self, entity: dict, rng: np.random.Generator) -> str | None:
        """Words sampled from a random combination of the entity's non-empty narrow fields."""
        vals = self._values(entity, self.schema.narrow)
        if not vals:
            return None
        names = list(vals)
        combos = [c for r in range(1, len(names) + 1) for c in combinations(names, r)]
        combo = combos[int(rng.integers(len(combos)))]
        words: list[str] = []
        for n in combo:
            words.extend(tokenize(" ".join(vals[n])))
        return " ".join(sample_words(words, self.P, self.Pr, rng)) or None

    def ft_query(self, text: str, rng: np.random.Generator) -> str | None:
        """IDF-prioritised sampling of 1-3 distinct words of a free text, kept in text order."""
        toks = [t for t in self.analyzer.tokenize(text) if not t.isdigit()]
        if not toks:
            return None
        uniq, first = np.unique(np.asarray(toks, dtype=object), return_index=True)
        w = np.asarray([max(self._idf.get(t, 1.0), 1e-3) for t in uniq.tolist()])
        n = min(len(uniq), int(rng.choice(self.ft_words)))
        pick = rng.choice(len(uniq), n, replace=False, p=w / w.sum())
        return " ".join(uniq[pick[np.argsort(first[pick])]].tolist())

    def broad_query(self, entity: dict, rng: np.random.Generator) -> str | None:
        """A category value (one or two) of a broad field, or a short query from free text."""
        cats = self._values(entity, self.schema.broad)
        fts = [t for n in self.schema.broad_ft
               for t in field_values(self.schema.spec(n), entity.get(n))]
        ft = " ".join(fts)
        sources = (["cat"] if cats else []) + (["idf"] if ft else []) + \
                  (["kp"] if ft and self.use_keyphrases else [])
        if not sources:
            return None
        src = sources[int(rng.integers(len(sources)))]
        if src == "cat":
            pool = list(dict.fromkeys(v for vs in cats.values() for v in vs))
            n = min(len(pool), 1 + int(rng.random() < 0.3))
            pick = np.sort(rng.choice(len(pool), n, replace=False))
            return " ".join(pool[i] for i in pick.tolist()).lower()
        if src == "idf":
            return self.ft_query(ft, rng)
        kps = keyphrase(ft, n=3)
        return kps[int(rng.integers(len(kps)))].lower() if kps else self.ft_query(ft, rng)

    def query(self, entity: dict, intent: str, rng: np.random.Generator) -> str | None:
        """One weak-label query of ``intent`` for an entity (None when its fields cannot give
        one). A draw shorter than 2 characters or equal to a stop word (a prefix cut can leave
        ``r``) is rejected and drawn again, up to ``max_tries`` times."""
        check_intent(intent)
        for _ in range(self.max_tries):
            q = self.narrow_query(entity, rng) if intent == "narrow" else self.broad_query(entity, rng)
            if not q:
                return None
            q = self._vary(q.lower(), rng).strip()
            if acceptable_query(q):
                return q
        return None

    # -- batches --
    def _entity(self, i: int) -> dict:
        coll = self._require()
        return {n: coll.fields[n][i] for n in self.schema.names}

    def _require(self) -> Collection:
        if self._collection is None:
            raise LimelightError("WeakLabelingUn: call fit(collection) first")
        return self._collection

    def generate(self, idx: Sequence[int] | np.ndarray, intents: Sequence[str] | str,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Queries for the entities at ``idx`` (one per entry) with the given intents.

        Returns ``(entity_index, intent, query)`` arrays for the entries that gave a query
        (entities whose fields of that role are empty are left out).
        """
        coll = self._require()
        idx = np.asarray(idx, dtype=np.int64)
        intents_a = np.full(len(idx), intents, dtype=object) if isinstance(intents, str) \
            else np.asarray(intents, dtype=object)
        for it in set(intents_a.tolist()):
            check_intent(it)
        rng = np.random.default_rng(seed)
        ids = coll.ids.strings
        out_i, out_t, out_q = [], [], []
        for i, it in zip(idx.tolist(), intents_a.tolist(), strict=True):
            ent = self._entity(i)
            ent["id"] = ids[i]
            q = self.query(ent, it, rng)
            if q:
                out_i.append(i)
                out_t.append(it)
                out_q.append(q)
        return (np.asarray(out_i, dtype=np.int64), np.asarray(out_t, dtype=object),
                np.asarray(out_q, dtype=object))


# ---- WeakLabeling-IP --------------------------------------------------------------------------


def role_texts(collection: Collection, schema: Schema, idx: np.ndarray) -> tuple[list[str], list[str]]:
    """For each entity at ``idx``: its narrow-field values and its broad-field values as texts."""
    schema.check_collection(collection)
    narrow, broad = [], []
    for i in np.asarray(idx).tolist():
        nv = [v for n in schema.narrow for v in field_values(schema.spec(n), collection.fields[n][i])]
        bv = [v for n in schema.broad for v in field_values(schema.spec(n), collection.fields[n][i], True)]
        bv += [v for n in schema.broad_ft for v in field_values(schema.spec(n), collection.fields[n][i])]
        narrow.append(", ".join(nv))
        broad.append(", ".join(bv))
    return narrow, broad


def weaklabel_ip(queries: Sequence[str], collection: Collection, schema: Schema | str,
                 entity_idx: Sequence[int] | np.ndarray, encoder=None,
                 return_scores: bool = False):
    """WeakLabeling-IP: the intent of each (query, entity) pair.

    ``narrow`` when cos(q, narrow values) > cos(q, broad values) under the encoder (default
    all-MiniLM-L6-v2), else ``broad``; an entity with no broad values gives ``narrow``, one with no
    narrow values ``broad``. With ``return_scores``, also returns the two similarity arrays.
    """
    from limelight.retrieval.dense import Encoder

    schema = load_schema(schema)
    idx = np.asarray(entity_idx, dtype=np.int64)
    if len(idx) != len(queries):
        raise LimelightError(f"{len(queries)} queries but {len(idx)} entities")
    enc = encoder if encoder is not None else Encoder()
    narrow, broad = role_texts(collection, schema, idx)
    uniq_e, inv = np.unique(idx, return_inverse=True)
    first = np.zeros(len(uniq_e), dtype=np.int64)
    first[inv[::-1]] = np.arange(len(idx))[::-1]
    qv = enc.encode(list(queries))
    nv = enc.encode([narrow[j] for j in first.tolist()])[inv]
    bv = enc.encode([broad[j] for j in first.tolist()])[inv]
    sn = np.einsum("ij,ij->i", qv, nv)
    sb = np.einsum("ij,ij->i", qv, bv)
    has_n = np.asarray([bool(t) for t in narrow])
    has_b = np.asarray([bool(t) for t in broad])
    sn = np.where(has_n, sn, -np.inf)
    sb = np.where(has_b, sb, -np.inf)
    labels = np.where(sn > sb, "narrow", "broad").astype(object)
    return (labels, sn, sb) if return_scores else labels


# ---- generator training pairs ------------------------------------------------------------------


@dataclass
class WeakPairs:
    """(entity, query, intent) pairs to train a generator on, with where each came from.

    ``source`` is ``"ip"`` (a Click pair whose intent WeakLabeling-IP predicted) or ``"un"``
    (a WeakLabeling-Un pair); ``wl_intent`` is the intent the pair was drawn with (for IP pairs,
    the Click set's own label, ``""`` when it has none). ``agreement`` is, per intent, how often
    WeakLabeling-IP agrees with the Click set's labels; ``info`` counts what was dropped."""

    entity_idx: np.ndarray  # int64 entity indices of the catalog
    queries: np.ndarray  # object array of str
    intents: np.ndarray  # object array: narrow | broad
    source: np.ndarray  # object array: ip | un
    wl_intent: np.ndarray  # object array
    agreement: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.queries)

    def to_frame(self, collection: Collection):
        """The pairs as a DataFrame: entity, entity_id, text, intent, source, wl_intent."""
        import pandas as pd

        return pd.DataFrame({"entity": self.entity_idx.astype(np.int64),
                             "entity_id": collection.ids.strings[self.entity_idx],
                             "text": self.queries.astype(str).astype(object),
                             "intent": self.intents.astype(str).astype(object),
                             "source": self.source.astype(object),
                             "wl_intent": self.wl_intent.astype(str).astype(object)})


def _pool(n: int, exclude: np.ndarray | None) -> np.ndarray | None:
    if exclude is None or not len(exclude):
        return None
    pool = np.setdiff1d(np.arange(n), np.asarray(exclude, dtype=np.int64))
    if not len(pool):
        raise LimelightError(f"every one of the {n} entities is excluded (held out)")
    return pool


def _drop_texts(ei, it, qs, exclude_texts) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    if not exclude_texts:
        return ei, it, qs, 0
    keep = np.asarray([normalize_query(q) not in exclude_texts for q in qs.tolist()], dtype=bool)
    return ei[keep], it[keep], qs[keep], int((~keep).sum())


def un_pairs(collection: Collection, schema: Schema | str, n: int, p_narrow: float = 0.5,
             seed: int = 0, labeler: WeakLabelingUn | None = None,
             exclude_entities: np.ndarray | None = None,
             exclude_texts: set[str] | None = None) -> WeakPairs:
    """``n`` WeakLabeling-Un pairs for entities drawn uniformly (with replacement, seeded), each
    narrow with probability ``p_narrow``: what ``limelight generate train --weak un`` trains on.
    ``exclude_entities`` are never drawn; queries whose normalized text is in ``exclude_texts``
    are dropped (held-out test data)."""
    if not 0 <= p_narrow <= 1:
        raise LimelightError(f"p_narrow must be in [0, 1], got {p_narrow}")
    lab = labeler or WeakLabelingUn(load_schema(schema))
    if lab._collection is not collection:
        lab.fit(collection)
    rng = np.random.default_rng(seed)
    pool = _pool(len(collection), exclude_entities)
    ent = rng.choice(len(collection), n) if pool is None else rng.choice(pool, n)
    intents = np.where(rng.random(n) < p_narrow, "narrow", "broad")
    ei, it, qs = lab.generate(ent, intents, seed=seed + 1)
    ei, it, qs, dropped = _drop_texts(ei, it, qs, exclude_texts)
    return WeakPairs(ei, qs, it.astype(object), np.full(len(qs), "un", dtype=object),
                     it.astype(object), info={"un_generated": len(qs) + dropped,
                                              "un_dropped_test_text": dropped})


def ip_un_pairs(collection: Collection, schema: Schema | str, click_queries: Sequence[str],
                click_entities: Sequence[int] | np.ndarray,
                click_intents: Sequence[str] | None = None, n_ip: int = 5000, n_un: int = 5000,
                seed: int = 0, labeler: WeakLabelingUn | None = None, encoder=None,
                exclude_entities: np.ndarray | None = None,
                exclude_texts: set[str] | None = None) -> WeakPairs:
    """CtrlQGen's training set (the paper's 2a + 2b): the first ``n_ip`` Click pairs with
    their intents predicted by WeakLabeling-IP, then ``n_un`` WeakLabeling-Un pairs (intents
    alternating narrow, broad) for entities drawn uniformly (seeded, with replacement) outside
    ``exclude_entities``; Un queries whose normalized text is in ``exclude_texts`` are dropped.

    ``encoder`` defaults to all-MiniLM-L6-v2 (torch, float32, 64 tokens). With
    ``click_intents`` (a WeakLabeling-Un Click set's labels), ``agreement`` holds, per intent,
    the share of IP predictions equal to them. The issue-26 study builds its 5,000 + 5,000
    pairs with this call."""
    from limelight.retrieval.dense import Encoder

    if len(click_queries) < n_ip:
        raise LimelightError(f"the Click set has {len(click_queries)} pairs, WeakLabeling-IP "
                             f"needs {n_ip}")
    q_ip = list(click_queries)[:n_ip]
    e_ip = np.asarray(click_entities, dtype=np.int64)[:n_ip]
    enc = encoder if encoder is not None else Encoder(max_seq_length=64, variant="torch-fp32")
    ip = weaklabel_ip(q_ip, collection, schema, e_ip, enc)
    wl = np.full(n_ip, "", dtype=object) if click_intents is None \
        else np.asarray(list(click_intents)[:n_ip], dtype=object)
    agree = {} if click_intents is None else {
        it: {"n": int((wl == it).sum()), "agreement": float((ip[wl == it] == it).mean())}
        for it in INTENTS}
    lab = labeler or WeakLabelingUn(load_schema(schema))
    if lab._collection is not collection:
        lab.fit(collection)
    rng = np.random.default_rng(seed)
    pool = _pool(len(collection), exclude_entities)
    ue = rng.choice(np.arange(len(collection)) if pool is None else pool, n_un)
    ui = np.where(np.arange(n_un) % 2 == 0, "narrow", "broad")
    e2, i2, q2 = lab.generate(ue, ui, seed=seed + 1)
    e2, i2, q2, dropped = _drop_texts(e2, i2, q2, exclude_texts)
    return WeakPairs(np.concatenate([e_ip, e2]), np.asarray(q_ip + q2.tolist(), dtype=object),
                     np.concatenate([ip.astype(str).astype(object), i2.astype(object)]),
                     np.asarray(["ip"] * n_ip + ["un"] * len(q2), dtype=object),
                     np.concatenate([wl, i2.astype(object)]), agree,
                     {"un_generated": len(q2) + dropped, "un_dropped_test_text": dropped})


def heldout_entities(n: int, fraction: float, seed: int = 0) -> np.ndarray:
    """A seeded ``fraction`` of ``n`` entities to hold out (sorted indices): the first
    round(fraction × n) of a seeded permutation."""
    if not 0 < fraction < 1:
        raise LimelightError(f"the held-out fraction must be in (0, 1), got {fraction}")
    k = int(round(fraction * n))
    if k < 1 or k >= n:
        raise LimelightError(f"a held-out fraction of {fraction} of {n} entities holds out {k}: "
                             "choose a fraction that keeps some entities on each side")
    return np.sort(np.random.default_rng(seed).permutation(n)[:k])


# ---- Click sets -------------------------------------------------------------------------------


@dataclass
class ClickSet:
    """A WeakLabeling-Un "Click" set: queries (with intents) and qrels per split."""

    queries: dict[str, Queries]
    qrels: dict[str, Qrels]
    entity_idx: dict[str, np.ndarray]
    heldout: np.ndarray | None = None  # entities reserved for the test side (see click_dataset)

    def pairs(self, split: str) -> tuple[list[str], np.ndarray]:
        """(query texts, source-entity indices) of a split, for bi-encoder training."""
        return self.queries[split].texts.tolist(), self.entity_idx[split]

    def write(self, out: str | os.PathLike, collection: Collection) -> Path:
        """Write ``{split}.queries.tsv``, ``{split}.qrels.txt`` and ``{split}.intents.tsv`` per
        split into ``out`` (atomically). With held-out entities, the held-out splits (``test``,
        ``broad_test``) and ``entities.txt`` (the held-out entity ids) go to ``out/heldout/``
        and only the training splits (``train``, ``val``) to ``out``; ``check_heldout`` runs
        first."""
        from limelight._io import atomic_dir
        from limelight.data.formats import write_queries_tsv, write_trec_qrels

        if self.heldout is not None:
            self.check_heldout(collection)
        with atomic_dir(out, "query dataset") as tmp:
            for split, qs in self.queries.items():
                d = tmp / HELDOUT_DIR if self.heldout is not None and split in HELDOUT_SPLITS else tmp
                d.mkdir(exist_ok=True)
                write_queries_tsv(qs, d / f"{split}.queries.tsv")
                write_trec_qrels(self.qrels[split], d / f"{split}.qrels.txt")
                (d / f"{split}.intents.tsv").write_text("".join(
                    f"{q}\t{i}\n" for q, i in zip(qs.ids.strings.tolist(), qs.intents.tolist(), strict=True)))
            if self.heldout is not None:
                (tmp / HELDOUT_DIR / "entities.txt").write_text(
                    "".join(f"{e}\n" for e in collection.ids.strings[self.heldout].tolist()))
        return Path(out)

    def check_heldout(self, collection: Collection) -> None:
        """One-line ``LimelightError`` unless the training splits (train, val) are disjoint from
        the held-out side: no pair for a held-out entity, no held-out query text
        (``assert_no_leakage``)."""
        train = {s: self.pairs(s) for s in self.queries if s not in HELDOUT_SPLITS}
        test = {s: self.pairs(s) for s in self.queries if s in HELDOUT_SPLITS}
        if self.heldout is not None:
            test["held-out entities"] = ([], self.heldout)
        assert_no_leakage(train, test, collection.ids.strings)


def click_dataset(collection: Collection, schema: Schema | str, n_queries: int = 10_000,
                  p_narrow: float = 0.75, splits: tuple[float, float, float] = (0.8, 0.1, 0.1),
                  n_broad_test: int = 500, seed: int = 0,
                  labeler: WeakLabelingUn | None = None,
                  entity_weights: np.ndarray | None = None,
                  heldout: np.ndarray | None = None) -> ClickSet:
    """The paper's Books-style Click set: ``n_queries`` WeakLabeling-Un queries, a fraction
    ``p_narrow`` narrow and the rest broad, for entities drawn at random (with probability
    ∝ ``entity_weights`` when given: a popularity proxy such as vote counts), the source entity
    relevant (grade 1); split train/val/test; plus ``broad_test``, broad queries for other
    entities. Duplicate (query text, entity) pairs are dropped.

    ``heldout`` (entity indices) makes the split entity-disjoint, for studies that must not leak
    test items into training: train and val queries are drawn for the other entities only, test
    and broad_test queries for the held-out ones only (broad_test without replacement), and a
    test or broad_test query whose normalized text (``normalize_query``) is also a train or val
    query is dropped. Split sizes are the ``splits`` fractions of ``n_queries`` before
    de-duplication and that filter."""
    if not 0 <= p_narrow <= 1:
        raise LimelightError(f"p_narrow must be in [0, 1], got {p_narrow}")
    if abs(sum(splits) - 1) > 1e-9:
        raise LimelightError(f"splits must sum to 1, got {splits}")
    lab = labeler or WeakLabelingUn(load_schema(schema))
    if lab._collection is not collection:
        lab.fit(collection)
    if heldout is not None:
        return _click_heldout(collection, lab, n_queries, p_narrow, splits, n_broad_test, seed,
                              entity_weights, heldout)
    rng = np.random.default_rng(seed)
    n = len(collection)
    p = None
    if entity_weights is not None:
        w = np.asarray(entity_weights, dtype=np.float64)
        p = w / w.sum()
    ent = rng.choice(n, n_queries, replace=True, p=p)
    intents = np.where(rng.random(n_queries) < p_narrow, "narrow", "broad").astype(object)
    ei, it, qs = lab.generate(ent, intents, seed=seed + 1)
    ei, it, qs = _dedup(ei, it, qs)
    perm = rng.permutation(len(qs))
    cuts = (np.cumsum(splits)[:-1] * len(qs)).astype(int)
    parts = dict(zip(("train", "val", "test"), np.split(perm, cuts), strict=True))
    bent = rng.choice(n, n_broad_test, replace=False) if n_broad_test <= n else rng.choice(n, n_broad_test)
    bi, bt, bq = _dedup(*lab.generate(bent, "broad", seed=seed + 2))
    return _click_parts(collection, {**{k: (ei[v], it[v], qs[v]) for k, v in parts.items()},
                                     "broad_test": (bi, bt, bq)})


def _click_parts(collection: Collection, parts: dict) -> ClickSet:
    """The ``ClickSet`` of ``{split: (entity indices, intents, query texts)}``."""
    out_q, out_r, out_e = {}, {}, {}
    for name, (a, b, c) in parts.items():
        qids = [f"{name}-{j}" for j in range(len(c))]
        out_q[name] = Queries(IdMap(qids, kind="query"), c, None, b, name=f"click-{name}")
        out_r[name] = Qrels.from_arrays(qids, collection.ids.strings[a].tolist(), [1] * len(qids),
                                        f"click-{name}")
        out_e[name] = a
    return ClickSet(out_q, out_r, out_e)


def _click_heldout(collection: Collection, lab: WeakLabelingUn, n_queries: int, p_narrow: float,
                   splits: tuple[float, float, float], n_broad_test: int, seed: int,
                   entity_weights: np.ndarray | None, heldout: np.ndarray) -> ClickSet:
    """``click_dataset`` with an entity-disjoint split (see its docstring)."""
    n = len(collection)
    held = np.unique(np.asarray(heldout, dtype=np.int64))
    if len(held) == 0 or held[0] < 0 or held[-1] >= n or len(held) == n:
        raise LimelightError(f"heldout must name some, not all, of the {n} entities")
    pool = np.setdiff1d(np.arange(n), held)
    w = np.ones(n) if entity_weights is None else np.asarray(entity_weights, dtype=np.float64)
    rng = np.random.default_rng(seed)
    n_tr = int(splits[0] * n_queries)
    n_va = int(splits[1] * n_queries)
    n_te = n_queries - n_tr - n_va

    def draw(ents: np.ndarray, k: int, s: int):
        e = rng.choice(ents, k, replace=True, p=w[ents] / w[ents].sum())
        it = np.where(rng.random(k) < p_narrow, "narrow", "broad").astype(object)
        return _dedup(*lab.generate(e, it, seed=s))

    ei, it, qs = draw(pool, n_tr + n_va, seed + 1)
    perm = rng.permutation(len(qs))
    cut = int(round(len(qs) * n_tr / max(1, n_tr + n_va)))
    tr, va = np.sort(perm[:cut]), np.sort(perm[cut:])
    seen = {normalize_query(q) for q in qs.tolist()}

    def unseen(ei, it, qs):
        keep = np.asarray([normalize_query(q) not in seen for q in qs.tolist()], dtype=bool)
        return ei[keep], it[keep], qs[keep]

    test = unseen(*draw(held, n_te, seed + 3))
    k = min(n_broad_test, len(held))
    bent = rng.choice(held, k, replace=False)
    broad = unseen(*_dedup(*lab.generate(bent, "broad", seed=seed + 2)))
    cs = _click_parts(collection, {"train": (ei[tr], it[tr], qs[tr]), "val": (ei[va], it[va], qs[va]),
                                   "test": test, "broad_test": broad})
    cs.heldout = held
    cs.check_heldout(collection)  # disjoint by construction; checked all the same
    return cs


def read_click_split(folder: str | os.PathLike, split: str, collection: Collection
                     ) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """One split of a Click set written by ``ClickSet.write`` (or any ``queries.tsv`` +
    ``qrels.txt`` pair named ``{split}.*``): (query texts, entity indices of the first
    relevant entity of each query, intents or None). Queries without a relevant entity are
    left out; a judged entity missing from ``collection`` is a one-line error."""
    from limelight.data.formats import read_queries_tsv, read_trec_qrels

    d = Path(folder)
    qp, rp = d / f"{split}.queries.tsv", d / f"{split}.qrels.txt"
    for f in (qp, rp):
        if not f.exists():
            raise LimelightError(f"{folder}: no {f.name} (a Click set folder written by "
                                 "`limelight generate dataset`)")
    qs = read_queries_tsv(qp)
    qrels = read_trec_qrels(rp, doc_map=collection.ids, strict_docs=True)
    first: dict[str, int] = {}
    for q, dcode, rel in zip(qrels.qids.decode(qrels.q).tolist(), qrels.d.tolist(),
                             qrels.rel.tolist(), strict=True):
        if rel > 0 and q not in first:
            first[q] = int(dcode)
    keep = [i for i, q in enumerate(qs.ids.strings.tolist()) if q in first]
    intents = None
    ip = d / f"{split}.intents.tsv"
    if ip.exists():
        lab = dict(line.split("\t", 1) for line in ip.read_text(encoding="utf-8").splitlines() if line)
        intents = np.asarray([lab.get(qs.ids.strings[i], "") for i in keep], dtype=object)
    return ([qs.texts[i] for i in keep],
            np.asarray([first[qs.ids.strings[i]] for i in keep], dtype=np.int64), intents)


def read_heldout(folder: str | os.PathLike, collection: Collection) -> tuple[np.ndarray, set[str]]:
    """The held-out side of a Click set folder (``ClickSet.write`` with held-out entities):
    (held-out entity indices, normalized texts of its queries); empty when it has none."""
    d = Path(folder) / HELDOUT_DIR
    if not (d / "entities.txt").exists():
        return np.zeros(0, dtype=np.int64), set()
    ids = [x for x in (d / "entities.txt").read_text(encoding="utf-8").split("\n") if x]
    out = []
    for e in ids:
        try:
            out.append(collection.ids.lookup(e))
        except (KeyError, LimelightError):
            raise UnknownIdError("entity", e, f"{collection.name} ({d / 'entities.txt'})") from None
    texts = set()
    for split in HELDOUT_SPLITS:
        if (d / f"{split}.queries.tsv").exists():
            from limelight.data.formats import read_queries_tsv

            texts |= {normalize_query(t) for t in read_queries_tsv(d / f"{split}.queries.tsv").texts}
    return np.unique(np.asarray(out, dtype=np.int64)), texts


def normalize_query(text: str) -> str:
    """The form in which two query texts count as the same query: lowercased, whitespace
    collapsed."""
    return " ".join(str(text).lower().split())


def find_leaks(train: dict[str, tuple[Sequence[str], Sequence[int] | np.ndarray]],
               test: dict[str, tuple[Sequence[str], Sequence[int] | np.ndarray]],
               entity_names: Sequence[str] | np.ndarray | None = None) -> list[str]:
    """Every way a test set leaks into a training set: a test entity that is the relevant entity
    of a training pair, or a test query whose normalized text is a training query. Sets are
    ``name -> (query texts, entity indices)``; returns one line per (training set, test set,
    kind) with the count and a first example, empty when nothing leaks."""
    out = []
    for tname, (tq, te) in test.items():
        t_ents = set(np.asarray(te, dtype=np.int64).tolist())
        t_texts = {normalize_query(q) for q in tq}
        for name, (q, e) in train.items():
            ents = [x for x in np.asarray(e, dtype=np.int64).tolist() if x in t_ents]
            if ents:
                who = entity_names[ents[0]] if entity_names is not None else ents[0]
                out.append(f"{len(ents)} pair(s) of training set {name!r} are for entities of "
                           f"test set {tname!r} (first: {who!r})")
            texts = [x for x in q if normalize_query(x) in t_texts]
            if texts:
                out.append(f"{len(texts)} quer(ies) of training set {name!r} are queries of test "
                           f"set {tname!r} (first: {texts[0]!r})")
    return out


def assert_no_leakage(train: dict, test: dict, entity_names: Sequence[str] | None = None) -> None:
    """Raise a one-line ``LimelightError`` when ``find_leaks`` finds anything."""
    leaks = find_leaks(train, test, entity_names)
    if leaks:
        more = f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else ""
        raise LimelightError(f"test data leaks into training: {leaks[0]}{more}")


def _dedup(ei: np.ndarray, it: np.ndarray, qs: np.ndarray):
    key = np.asarray([f"{q}\x00{e}" for q, e in zip(qs.tolist(), ei.tolist(), strict=True)], dtype=object)
    _, first = np.unique(key, return_index=True)
    first = np.sort(first)
    return ei[first], it[first], qs[first]
