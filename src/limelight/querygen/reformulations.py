"""Real query variants in a query log: reformulation pairs and groups found by term overlap
(issue 23 item 4; the real side of Breuer, Fuhr & Schaer's comparison, ECIR 2022).

The shared query log has no session, user or time fields (and its ids are not in time order:
neighbouring ids are no more alike than random pairs), so reformulations cannot be read from
sessions. They are found by term overlap instead, with this rule (``ReformulationRule``):

1. Every query is normalised (lowercase, ``\\w+`` tokens joined by one space); queries with the
   same normalised text are one query (its first occurrence).
2. Its *terms* are its normalised tokens minus NLTK's English stopwords, Snowball-stemmed
   (``reformulation_analyzer``; one-letter tokens are kept: *u s* and *g a* differ).
3. Two queries are a *reformulation pair* when their term sets share at least ``min_shared``
   (2) terms and their Jaccard similarity is at least ``min_jaccard`` (2/3): the same terms in
   another order or with other stopwords or inflections (1.0), two terms plus one added (2/3),
   three plus one (3/4), four of five with one substituted (2/3), and so on.

A pair is not proof of one information need: the rule also joins specialisations that another
user would call another need (*topeka ks* / *capitol federal topeka ks*), and it misses
reformulations that share fewer terms (most paraphrases, misspellings of short queries). Pairs
are exhaustive under the rule (prefix filtering on rarest-first terms, then exact verification).

``reformulation_groups`` turns pairs into disjoint groups (a *seed* and its partners), the unit
of the session-level comparison: greedily, the query with the most partners first (ties: lower
index), its partners not yet in a group with it (most similar first), at most ``max_size``
queries per group.

Usage::

    from limelight.querygen.reformulations import find_reformulations, reformulation_groups
    log = read_query_log()                      # the shared log's web-search sources
    pairs = find_reformulations(log["query"])   # one row per pair (indices into the deduplicated list)
    groups = reformulation_groups(pairs, max_size=10)
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from limelight._io import open_text
from limelight.analysis import Analyzer
from limelight.errors import LimelightError
from limelight.querygen.variations import NLTK_STOPWORDS

#: sources of the shared log that are web-search logs (commercial search log, web log, Bing):
#: TREC Million Query 2007/2008, TREC 2005 Terabyte efficiency, MS MARCO and the TREC DL topics
#: drawn from it. Question sets written for QA or BEIR topics are left out.
WEB_SOURCES: tuple[str, ...] = ("trec-mq", "trec-tb", "msmarco", "trec-dl")

_WORD = re.compile(r"\w+")


def normalize(text: str) -> str:
    """Lowercase ``\\w+`` tokens joined by one space (the key that deduplicates the log)."""
    return " ".join(_WORD.findall((text or "").lower()))


def reformulation_analyzer() -> Analyzer:
    """Terms of the rule: ``\\w+`` tokens (one-letter ones kept), NLTK stopwords removed,
    Snowball English stemming."""
    return Analyzer(pattern=r"(?u)\b\w+\b", stopwords=tuple(sorted(NLTK_STOPWORDS)), stemmer="english")


def default_log_path() -> Path:
    """``$LIMELIGHT_QUERYLOG``, else ``querylogs/queries.tsv.gz`` in the shared data folder
    (``limelight.data.loaders.data_root``: ``$LIMELIGHT_DATA`` or ``../shared/data``)."""
    from limelight.data.loaders import data_root

    env = os.environ.get("LIMELIGHT_QUERYLOG")
    if env:
        return Path(env)
    try:
        root = data_root()
    except LimelightError:
        root = Path(__file__).resolve().parents[3].parent / "shared" / "data"
    return root / "querylogs" / "queries.tsv.gz"


def read_query_log(path: str | os.PathLike | None = None,
                   sources: Sequence[str] | None = WEB_SOURCES) -> pd.DataFrame:
    """The shared log (``source qid query``, header line) as a frame, keeping the rows whose
    source starts with one of ``sources`` (all rows with ``sources=None``)."""
    path = Path(path) if path is not None else default_log_path()
    if not path.exists():
        raise LimelightError(f"{path}: query log not found")
    with open_text(path) as fh:
        header = fh.readline().rstrip("\n").split("\t")
        if header != ["source", "qid", "query"]:
            raise LimelightError(f"{path}: expected the header source<TAB>qid<TAB>query, found {header}")
        rows = [ln.rstrip("\n").split("\t", 2) for ln in fh if ln.strip()]
    frame = pd.DataFrame(rows, columns=["source", "qid", "query"])
    if sources is not None:
        frame = frame[frame["source"].str.startswith(tuple(sources))].reset_index(drop=True)
    return frame


@dataclass(frozen=True)
class ReformulationRule:
    """Two queries are reformulations of each other when their term sets share at least
    ``min_shared`` terms and have a Jaccard similarity of at least ``min_jaccard``."""

    min_shared: int = 2
    min_jaccard: float = 2 / 3

    def __post_init__(self):
        if self.min_shared < 1 or not 0.0 < self.min_jaccard <= 1.0:
            raise LimelightError(f"invalid rule: min_shared={self.min_shared}, min_jaccard={self.min_jaccard}")

    def holds(self, a: frozenset, b: frozenset) -> bool:
        """Whether the rule joins two term sets (the verification step of ``find_reformulations``)."""
        shared = len(a & b)
        union = len(a | b)
        return shared >= self.min_shared and union > 0 and shared / union >= self.min_jaccard - 1e-12


def deduplicate(texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """Distinct normalised texts (first occurrence wins, empty ones dropped) and, for each, the
    position of its first occurrence in ``texts``."""
    seen: dict[str, int] = {}
    for i, t in enumerate(texts):
        key = normalize(t if isinstance(t, str) else "")
        if key and key not in seen:
            seen[key] = i
    return list(seen), list(seen.values())


def find_reformulations(texts: Sequence[str], rule: ReformulationRule | None = None,
                        analyzer: Analyzer | None = None) -> pd.DataFrame:
    """Every reformulation pair of ``texts`` under ``rule`` (see the module docstring).

    Returns one row per pair with ``a < b`` (indices into the deduplicated list, whose texts are
    in ``frame.attrs["texts"]`` and whose positions in ``texts`` are in ``frame.attrs["first"]``),
    ``text_a``, ``text_b`` (the original texts), ``shared``, ``only_a``, ``only_b`` (term counts)
    and ``jaccard``; sorted by ``(a, b)``.
    """
    rule = rule or ReformulationRule()
    an = analyzer or reformulation_analyzer()
    keys, first = deduplicate(texts)
    terms = [frozenset(an.tokenize(k)) for k in keys]
    df: dict[str, int] = defaultdict(int)
    for ts in terms:
        for t in ts:
            df[t] += 1
    ordered = [sorted(ts, key=lambda t: (df[t], t)) for ts in terms]  # rarest first
    index: dict[str, list[int]] = defaultdict(list)
    rows: list[tuple] = []
    order = sorted(range(len(keys)), key=lambda i: (len(terms[i]), i))  # by size: candidates are never larger
    for i in order:
        ts = terms[i]
        s = len(ts)
        if s < rule.min_shared:
            continue
        # prefix filter: two sets with Jaccard ≥ t share a term among the first s − ⌈t·s⌉ + 1
        # rarest terms of each (the indexed sets are not larger than this one)
        p = s - math.ceil(rule.min_jaccard * s - 1e-12) + 1
        cands: set[int] = set()
        for t in ordered[i][:p]:
            cands.update(index[t])
        for j in cands:
            if len(terms[j]) < rule.min_jaccard * s - 1e-12:
                continue
            if rule.holds(ts, terms[j]):
                a, b = (i, j) if i < j else (j, i)
                sh = len(terms[a] & terms[b])
                rows.append((a, b, sh, len(terms[a]) - sh, len(terms[b]) - sh,
                             sh / len(terms[a] | terms[b])))
        for t in ordered[i][:p]:
            index[t].append(i)
    frame = pd.DataFrame(rows, columns=["a", "b", "shared", "only_a", "only_b", "jaccard"])
    frame = frame.sort_values(["a", "b"], kind="stable").reset_index(drop=True)
    src = list(texts)
    frame.insert(2, "text_a", [src[first[a]] for a in frame["a"]])
    frame.insert(3, "text_b", [src[first[b]] for b in frame["b"]])
    frame.attrs["texts"] = keys
    frame.attrs["first"] = first
    frame.attrs["rule"] = {"min_shared": rule.min_shared, "min_jaccard": rule.min_jaccard}
    return frame


def reformulation_groups(pairs: pd.DataFrame, max_size: int = 10) -> list[list[int]]:
    """Disjoint groups ``[seed, partner, ...]`` (indices of ``pairs``' deduplicated list): the
    query with the most partners is the first seed (ties: lower index); its partners not yet
    grouped join it, most similar first (ties: lower index), up to ``max_size`` queries; then the
    next ungrouped query with the most partners, and so on. Groups of one are dropped."""
    if max_size < 2:
        raise LimelightError(f"a group holds at least 2 queries, got max_size={max_size}")
    nbrs: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for a, b, j in zip(pairs["a"].tolist(), pairs["b"].tolist(), pairs["jaccard"].tolist(), strict=True):
        nbrs[a].append((j, b))
        nbrs[b].append((j, a))
    done: set[int] = set()
    groups: list[list[int]] = []
    for seed in sorted(nbrs, key=lambda q: (-len(nbrs[q]), q)):
        if seed in done:
            continue
        free = sorted(((-j, q) for j, q in nbrs[seed] if q not in done))
        group = [seed] + [q for _, q in free[: max_size - 1]]
        done.update(group)
        if len(group) >= 2:
            groups.append(group)
    return groups


def variant_profile(seed: str, variants: Sequence[str], analyzer: Analyzer | None = None) -> pd.DataFrame:
    """One row per variant of ``seed``: ``terms`` (its number of terms), ``kept`` (terms it shares
    with the seed), ``added`` (terms the seed lacks), ``removed`` (seed terms it lacks) and
    ``jaccard`` with the seed, on the rule's terms."""
    an = analyzer or reformulation_analyzer()
    s = set(an.tokenize(seed))
    rows = []
    for v in variants:
        t = set(an.tokenize(v))
        u = len(s | t)
        rows.append({"terms": len(t), "kept": len(s & t), "added": len(t - s), "removed": len(s - t),
                     "jaccard": len(s & t) / u if u else 1.0})
    return pd.DataFrame(rows, columns=["terms", "kept", "added", "removed", "jaccard"])


def term_jaccard(a: Sequence[str], b: Sequence[str], analyzer: Analyzer | None = None) -> float:
    """Jaccard similarity of the unique terms of two sets of queries (the session-level
    measure of Breuer et al., Fig. 2 right), on the rule's terms; 1.0 when both are empty."""
    an = analyzer or reformulation_analyzer()
    x = {t for q in a for t in an.tokenize(q)}
    y = {t for q in b for t in an.tokenize(q)}
    return len(x & y) / len(x | y) if (x or y) else 1.0


def coverage(seed: str, variants: Sequence[str], analyzer: Analyzer | None = None) -> float:
    """Share of the variants' unique terms that occur in ``seed``: the most a simulator that only
    reads the seed's terms (TTS S1–S3′) can reproduce; 1.0 when the variants have no term."""
    an = analyzer or reformulation_analyzer()
    s = set(an.tokenize(seed))
    v = {t for q in variants for t in an.tokenize(q)}
    return len(v & s) / len(v) if v else 1.0


def group_frame(pairs: pd.DataFrame, groups: list[list[int]], texts: Sequence[str]) -> pd.DataFrame:
    """Groups as rows: ``group`` (0-based), ``position`` (0 = seed), ``index`` (into the
    deduplicated list) and ``text`` (the original text, ``texts`` being what ``pairs`` was
    built from)."""
    first = pairs.attrs["first"]
    src = list(texts)
    rows = [(g, k, i, src[first[i]]) for g, members in enumerate(groups) for k, i in enumerate(members)]
    return pd.DataFrame(rows, columns=["group", "position", "index", "text"])


def describe_pairs(pairs: pd.DataFrame) -> dict:
    """Counts of pairs by kind: ``same_terms`` (Jaccard 1: order, stopwords, inflection),
    ``added`` (one set inside the other) and ``substituted`` (each has a term the other lacks)."""
    same = pairs["jaccard"] >= 1.0 - 1e-12
    nested = ~same & ((pairs["only_a"] == 0) | (pairs["only_b"] == 0))
    return {"pairs": len(pairs), "same_terms": int(same.sum()), "added": int(nested.sum()),
            "substituted": int((~same & ~nested).sum()),
            "jaccard_mean": float(pairs["jaccard"].mean()) if len(pairs) else float("nan"),
            "queries_in_pairs": int(len(np.union1d(pairs["a"], pairs["b"])))}
