"""Simulated user query variants and their validation (Breuer, Fuhr & Schaer, ECIR 2022).

Term candidates (section 3.1):

- **TTS** (TREC topic searcher): the topic's terms (title, description, narrative
  concatenated), in order of first appearance, stopwords removed.
- **KIS** (known-item searcher): terms ordered by ``P(t|D_rel) = (1 − λ) P_topic(t|D_rel) +
  λ P_background(t)`` with λ = 0.4; ``P_topic`` is the maximum-likelihood model of the topic's
  relevant documents concatenated, ``P_background`` the collection model.

Strategies: ``S1`` single terms; ``S2`` first term fixed, second varies; ``S2'`` two fixed,
third varies; ``S3`` one term, then add one per reformulation; ``S3'`` the same from three
terms. ``S4``, ``S4'``, ``S4''`` (eq. 1, parameters α, β, ε, δ of the paper) score every 3-, 4-
and 5-term combination of a term set by ``Σ_j Θ_j / |q|`` against the previous query (the title
for the first one) and issue the best not yet issued: KIS uses the top terms of ``T_rel``; TTS
uses ``T_topic+rel = (T_topic ∩ T_rel) ∪ (T_rel \\ T_topic)_k`` with k = 4. Where the paper is
silent: a term kept from the previous query that is not a title term scores 0; the removed terms'
``−δ P(t|D_rel)`` is added to the sum before dividing by ``|q|``; idf is ``ln(N / df)``; the
term set is capped at ``max_terms`` (12 topic or KIS terms, plus the k = 4 relevant terms for
TTS) so that the combinations stay enumerable; a query's terms are written in the term set's
order.

Validation (section 3.2): per-topic RMSE of a measure, the paired t-test p-value, Kendall's τ
between the system orderings that real and simulated queries produce, and the Jaccard overlap of
their unique terms. ``simulate_queries`` returns a ``Queries`` set (ids
``<topic>~<source><strategy>~<i>``), which is also a synthetic query log for exposure analyses.

Usage::

    from limelight.querygen.simulation import TermModel, simulate_queries, validate_simulation
    tm = TermModel.build(ds.collection)
    sim = simulate_queries(ds.queries, "S2'", source="KIS", n=10, term_model=tm, qrels=ds.qrels)
    validate_simulation({"bm25": bm25 % 1000, ...}, ds.queries, sim, ds.qrels, position=0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import scipy.sparse as sp

from limelight.analysis import Analyzer
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.queries import Queries
from limelight.errors import LimelightError
from limelight.evaluation.stats import kendall_tau, order_by_values, paired_t
from limelight.querygen.variations import NLTK_STOPWORDS

#: S4 parameter sets (α, β, ε, δ) of section 3.1
S4_PARAMS: dict[str, tuple[float, float, float, float]] = {
    "S4": (2.2, 0.2, 0.05, 0.6),
    "S4'": (2.2, 0.2, 0.25, 0.1),
    "S4''": (0.2, 0.2, 0.025, 0.5),
}
STRATEGIES = ("S1", "S2", "S2'", "S3", "S3'", *S4_PARAMS)
SOURCES = ("TTS", "KIS")
_ALIASES = {"s2p": "S2'", "s3p": "S3'", "s4p": "S4'", "s4pp": "S4''"}


def canonical_strategy(name: str) -> str:
    """``S2p`` → ``S2'``, ``s4pp`` → ``S4''`` (shell-friendly spellings)."""
    key = name.strip()
    key = _ALIASES.get(key.lower(), key.upper().replace("’", "'"))
    if key not in STRATEGIES:
        raise LimelightError(f"unknown strategy {name!r} (one of {', '.join(STRATEGIES)}; S2p = S2')")
    return key


def default_analyzer() -> Analyzer:
    """Lowercase words, NLTK's English stopwords removed, no stemming (terms stay words that a
    user could type)."""
    return Analyzer(stopwords=tuple(sorted(NLTK_STOPWORDS)), stemmer=None)


def topic_terms(text: str, analyzer: Analyzer | None = None) -> list[str]:
    """TTS candidates: the text's terms in order of first appearance, each once."""
    return list(dict.fromkeys((analyzer or default_analyzer()).tokenize(text or "")))


@dataclass
class TermModel:
    """Term statistics of a collection for KIS: a (documents × terms) count matrix."""

    vocabulary: IdMap
    doc_ids: IdMap
    counts: sp.csr_matrix  # (n_docs, V) float64 term counts
    analyzer: Analyzer

    @classmethod
    def build(cls, collection: Collection, analyzer: Analyzer | None = None) -> TermModel:
        """Count every document's terms (one pass, vectorized)."""
        from limelight.retrieval.bm25 import analyze_flat

        analyzer = analyzer or default_analyzer()
        rows, codes, terms = analyze_flat(analyzer, collection.texts.tolist())
        m = sp.csr_matrix((np.ones(len(codes)), (rows, codes)), shape=(len(collection), len(terms)))
        m.sum_duplicates()
        return cls(IdMap(terms, kind="term"), collection.ids, m, analyzer)

    @property
    def background(self) -> np.ndarray:
        cf = np.asarray(self.counts.sum(axis=0)).ravel()
        return cf / max(cf.sum(), 1.0)

    @property
    def idf(self) -> np.ndarray:
        df = np.diff(self.counts.tocsc().indptr).astype(np.float64)
        return np.log(self.counts.shape[0] / np.maximum(df, 1.0))

    def relevance_models(self, qrels: Qrels, qids: Sequence[str], lam: float = 0.4,
                         threshold: int = 1) -> np.ndarray:
        """``P(t|D_rel)`` for each topic (rows aligned with ``qids``; dense ``(n, V)``). A topic
        without a relevant document gets the background model."""
        if not 0.0 <= lam <= 1.0:
            raise LimelightError(f"lambda must be in [0, 1], got {lam}")
        qmap = IdMap(list(qids), kind="query")
        keep = qrels.rel >= threshold
        qcode = qmap.encode(qrels.qids.decode(qrels.q[keep]), missing=-1)
        dcode = self.doc_ids.encode(qrels.docids.decode(qrels.d[keep]), missing=-1)
        ok = (qcode >= 0) & (dcode >= 0)
        R = sp.csr_matrix((np.ones(int(ok.sum())), (qcode[ok], dcode[ok])),
                          shape=(len(qmap), self.counts.shape[0]))
        R.data[:] = 1.0
        tf = (R @ self.counts).toarray()
        length = tf.sum(axis=1, keepdims=True)
        ptopic = np.divide(tf, length, out=np.zeros_like(tf), where=length > 0)
        bg = self.background[None, :]
        p = (1.0 - lam) * ptopic + lam * bg
        p[length.ravel() == 0] = bg
        return p


def kis_candidates(p_rel: np.ndarray, vocabulary: IdMap, n: int) -> list[str]:
    """The ``n`` terms of highest ``P(t|D_rel)`` (ties: vocabulary order)."""
    n = min(n, len(p_rel))
    top = np.argpartition(-p_rel, n - 1)[:n] if n < len(p_rel) else np.arange(len(p_rel))
    top = top[np.lexsort((top, -p_rel[top]))]
    return [vocabulary.strings[i] for i in top.tolist()]


def strategy_queries(terms: Sequence[str], strategy: str, n: int) -> list[list[str]]:
    """Up to ``n`` queries (term lists) of the conventional strategies S1, S2, S2', S3, S3'."""
    t = list(terms)
    s = canonical_strategy(strategy)
    if s == "S1":
        out = [[x] for x in t]
    elif s == "S2":
        out = [[t[0], x] for x in t[1:]]
    elif s == "S2'":
        out = [[t[0], t[1], x] for x in t[2:]]
    elif s == "S3":
        out = [t[:i] for i in range(1, len(t) + 1)]
    elif s == "S3'":
        out = [t[:i] for i in range(3, len(t) + 1)]
    else:
        raise LimelightError(f"{s} is scored, not enumerated: use simulate_topic")
    return out[:n]


def s4_queries(term_set: Sequence[str], p: np.ndarray, title: np.ndarray, topic: np.ndarray,
               idf: np.ndarray, params: tuple[float, float, float, float], n: int,
               sizes: Sequence[int] = (3, 4, 5)) -> list[list[str]]:
    """S4-style session: ``n`` queries chosen greedily by eq. (1) among all ``sizes``-term
    combinations of ``term_set`` (``p``, ``title``, ``topic``, ``idf`` are per-term arrays)."""
    T = len(term_set)
    combos = [c for k in sizes if k <= T for c in combinations(range(T), k)]
    if not combos:
        return [list(term_set)] if T else []
    C = np.zeros((len(combos), T))
    for i, c in enumerate(combos):
        C[i, list(c)] = 1.0
    size = C.sum(axis=1)
    alpha, beta, eps, delta = params
    p = np.asarray(p, dtype=np.float64)
    title = np.asarray(title, dtype=bool)
    topic = np.asarray(topic, dtype=bool)
    prev = title.copy()  # the first query is compared with the topic title
    issued = np.zeros(len(combos), dtype=bool)
    out: list[list[str]] = []
    for _ in range(min(n, len(combos))):
        theta = np.where(title, alpha * (1.0 - p),
                         np.where(~prev, np.where(topic, 1.0 - beta * p, eps * idf), 0.0))
        removed = -delta * ((prev * p).sum() - C @ (prev * p))
        score = (C @ theta + removed) / size
        score[issued] = -np.inf
        best = int(np.argmax(score))
        issued[best] = True
        out.append([term_set[j] for j in range(T) if C[best, j]])
        prev = C[best].astype(bool)
    return out


def simulate_queries(topics: Queries, strategy: str, source: str = "TTS", n: int = 10, *,
                     term_model: TermModel | None = None, qrels: Qrels | None = None,
                     lam: float = 0.4, k: int = 4, max_terms: int = 12,
                     topic_texts: Mapping[str, str] | None = None) -> Queries:
    """``n`` simulated queries per topic (a session of reformulations, in order).

    ``topics``: the topics (their text is the title; ``topic_texts`` may give a longer
    title + description + narrative per topic id for TTS). KIS and S4 need ``term_model`` and
    ``qrels``. Returns ``Queries`` with ids ``<topic>~<source><strategy>~<i>`` and fields
    ``topic``, ``source``, ``strategy``, ``position`` (0-based).
    """
    s = canonical_strategy(strategy)
    src = source.upper()
    if src not in SOURCES:
        raise LimelightError(f"source must be TTS or KIS, got {source!r}")
    if n < 1:
        raise LimelightError(f"n must be ≥ 1, got {n}")
    needs_rel = src == "KIS" or s in S4_PARAMS
    if needs_rel and (term_model is None or qrels is None):
        raise LimelightError(f"{src} {s} needs a term model of the collection and qrels")
    analyzer = term_model.analyzer if term_model is not None else default_analyzer()
    qids = list(topics.ids.strings)
    titles = ["" if not isinstance(t, str) else t for t in topics.texts.tolist()]
    full = [topic_texts.get(q, t) if topic_texts else t for q, t in zip(qids, titles, strict=True)]
    P = term_model.relevance_models(qrels, qids, lam) if needs_rel else None
    idf = term_model.idf if term_model is not None else None
    vocab = term_model.vocabulary if term_model is not None else None
    ids, texts, f_topic, f_pos = [], [], [], []
    for i, qid in enumerate(qids):
        ttopic = topic_terms(full[i], analyzer)
        if s in S4_PARAMS:
            p_row = P[i]
            kis = kis_candidates(p_row, vocab, max(max_terms, k) + len(ttopic))
            if src == "KIS":
                tset = kis[:max_terms]
            else:
                known = [t for t in ttopic if t in vocab]
                known.sort(key=lambda t: -p_row[vocab.lookup(t)])
                inter = known[:max_terms]
                tset = inter + [t for t in kis if t not in set(ttopic)][:k]
                order = {t: j for j, t in enumerate(ttopic)}
                tset.sort(key=lambda t: (t not in order, order.get(t, 0)))
            if not tset:
                continue
            codes = np.array([vocab.lookup(t) for t in tset])
            title_set = set(topic_terms(titles[i], analyzer))
            qs = s4_queries(tset, p_row[codes], np.array([t in title_set for t in tset]),
                            np.array([t in set(ttopic) for t in tset]), idf[codes], S4_PARAMS[s], n)
        else:
            cands = kis_candidates(P[i], vocab, n + 3) if src == "KIS" else ttopic
            qs = strategy_queries(cands, s, n) if len(cands) >= {"S1": 1, "S2": 2, "S2'": 3, "S3": 1, "S3'": 3}[s] else []
        for j, terms in enumerate(qs):
            ids.append(f"{qid}~{src}{s}~{j}")
            texts.append(" ".join(terms))
            f_topic.append(qid)
            f_pos.append(j)
    return Queries(IdMap(ids, kind="query"), np.asarray(texts, dtype=object),
                   fields={"topic": np.asarray(f_topic, dtype=object),
                           "source": np.asarray([src] * len(ids), dtype=object),
                           "strategy": np.asarray([s] * len(ids), dtype=object),
                           "position": np.asarray(f_pos, dtype=np.int64)},
                   name=f"{topics.name}:{src}{s}")


def session_query(simulated: Queries, position: int = 0) -> Queries:
    """The ``position``-th simulated query of every topic, keyed by the topic id (topics with a
    shorter session fall back to their last query)."""
    topic = simulated.fields["topic"]
    pos = simulated.fields["position"]
    chosen: dict[str, str] = {}
    for t, p, text in zip(topic.tolist(), pos.tolist(), simulated.texts.tolist(), strict=True):
        if p <= position:
            chosen[t] = text
    ids = list(chosen)
    return Queries(IdMap(ids, kind="query"), np.asarray([chosen[i] for i in ids], dtype=object),
                   name=f"{simulated.name}@{position}")


# ---- validation ------------------------------------------------------------------------------------


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    """Root mean square error between two per-topic score vectors."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise LimelightError(f"per-topic scores differ in length: {a.shape} vs {b.shape}")
    return float(np.sqrt(np.mean((a - b) ** 2))) if a.size else 0.0


def jaccard(queries_a: Sequence[str], queries_b: Sequence[str], analyzer: Analyzer | None = None) -> float:
    """Jaccard similarity of the unique (normalized) terms of two sets of query strings."""
    an = analyzer or default_analyzer()
    a = {t for q in queries_a for t in an.tokenize(q)}
    b = {t for q in queries_b for t in an.tokenize(q)}
    return len(a & b) / len(a | b) if (a or b) else 1.0


def system_order_tau(real: np.ndarray, simulated: np.ndarray) -> float:
    """Kendall's τ between the system orderings (by mean score) of two ``(systems, topics)``
    score arrays."""
    return kendall_tau(order_by_values(real), order_by_values(simulated))


@dataclass
class SimulationValidation:
    """Validation of simulated against real queries: ``rmse`` and ``p_value`` (paired t-test) of
    the reference system's per-topic scores, ``tau`` (system orderings), ``jaccard`` (mean over
    topics), and the mean score per system for both query sets."""

    measure: str
    rmse: float
    p_value: float
    tau: float
    jaccard: float
    real_means: dict[str, float]
    simulated_means: dict[str, float]
    n_topics: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def validate_simulation(systems: Mapping, real: Queries, simulated: Queries, qrels: Qrels,
                        measure: str = "nDCG@10", position: int = 0,
                        analyzer: Analyzer | None = None) -> SimulationValidation:
    """Compare the ``position``-th simulated query of each topic with the real query (the
    first system is the reference for RMSE and the t-test); topics are those with a simulated
    query and a relevant document."""
    from limelight.evaluation.evaluate import Evaluator
    from limelight.evaluation.measures import parse_measure

    if not systems:
        raise LimelightError("no system given")
    sim = session_query(simulated, position) if "topic" in simulated.fields else simulated
    common = [q for q in real.ids.strings if q in sim.ids]
    if not common:
        raise LimelightError("the simulated queries share no topic with the real ones")
    keep = np.array([real.ids.lookup(q) for q in common])
    real_q = real.take(keep)
    sim_q = sim.take(np.array([sim.ids.lookup(q) for q in common]))
    m = parse_measure(measure)
    ev = Evaluator(qrels, [m])
    topics = [q for q in ev.qids.strings if q in set(common)]
    tidx = np.array([ev.qids.lookup(q) for q in topics], dtype=np.int64)
    R, S = [], []
    for stage in systems.values():
        R.append(ev.evaluate(stage.transform(real_q), warn=False).per_query[m][tidx])
        S.append(ev.evaluate(stage.transform(sim_q), warn=False).per_query[m][tidx])
    R, S = np.vstack(R), np.vstack(S)
    an = analyzer or default_analyzer()
    jac = [jaccard([real_q[q]], [sim_q[q]], an) for q in topics]
    names = list(systems)
    return SimulationValidation(str(m), rmse(R[0], S[0]), paired_t(S[0], R[0]),
                                system_order_tau(R, S) if len(names) > 1 else 1.0,
                                float(np.mean(jac)) if jac else 0.0,
                                dict(zip(names, R.mean(axis=1).tolist(), strict=True)),
                                dict(zip(names, S.mean(axis=1).tolist(), strict=True)), len(topics))
