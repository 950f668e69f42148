"""Generated test data at scale: a corpus of N documents and a log of M queries with the
statistics of the shared data (issue 44, item 1). Seeded: the same arguments write the same bytes.

    .venv/bin/python benchmarks/scale_data.py --docs 1000000 --queries 10000000 --out DIR [--seed 0]

writes ``DIR/docs.jsonl`` (``{"id": "g00000000", "text": "..."}`` per line; ``limelight index
--collection DIR/docs.jsonl``) and ``DIR/queries.tsv.gz`` (the shared log's format: header
``source qid query``; ``load_query_log(path)``), and prints the generated statistics beside
those of the shared data. The model, fitted to the shared data at run time (``fit``; kept in
limelight's cache once fitted, ``fitted``):

* **document length** (tokens of the default pattern ``\\w\\w+``, stopwords included): drawn
  from the Debian catalog's lengths (its empirical distribution: median 58, mean 68, a long tail);
* **terms**: each token is, with probability ``copy``, a repeat of an earlier token of the same
  document (burstiness: Debian's documents repeat words, 0.69 distinct words per token); else a
  fresh word: with probability ``p_new`` a word of a synthetic tail, else a Debian word by its
  frequency in the catalog. The tail continues the catalog's rank-frequency curve past its last
  word: ranks ``r ≥ V`` (V the catalog's vocabulary) with ``P(r) ∝ r^-(1/β)``, β being the
  catalog's Heaps exponent (0.55: its vocabulary grows as tokens^β), as words ``qz…`` that no
  real text holds. ``copy`` is fitted so that the mean term frequency of the analyzed postings
  (stopwords removed) equals Debian's, and ``p_new`` so that a Debian-sized corpus has Debian's
  vocabulary size; beyond that size the vocabulary keeps growing through the tail as the
  catalog's does, so scale runs meet new rare terms as real corpora do;
* **queries**: a pool of distinct queries, each with a length drawn from the shared log's query
  lengths and words drawn from the log's word frequencies (with the log's own unseen-word mass
  from the corpus's tail); the M log lines pick pool entries by Zipfian popularity
  (``P(rank r) ∝ r^-s``, ``--zipf`` s = 0.8 by default, web logs' 0.6-0.9, over a pool of M
  queries), so that popular queries repeat, as on a search platform (the most popular query
  is about 1 % of the lines, and about a third of 10M lines are distinct).

Documents are independent draws, not copies: no two share their text by construction (ties in
BM25 scores are as rare as in real text, unlike a catalog repeated to reach the size).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

WORD = re.compile(r"(?u)\b\w\w+\b")
CHUNK = 50_000  # documents (or queries) generated and written at a time


@dataclass
class Model:
    """The statistics a generation draws from (see the module docstring)."""

    doc_lens: np.ndarray  # int64: every Debian document's token count
    words: list[str]  # the real words: Debian's first, then the log's words Debian lacks
    doc_cum: np.ndarray  # float64 cumulative word distribution of the catalog (over ``words``)
    query_lens: np.ndarray  # int64: every log query's token count
    query_cum: np.ndarray  # float64 cumulative word distribution of the log (over ``words``)
    p_new_query: float  # log: probability that a fresh query word is a tail word
    zipf_tail: float  # exponent of the tail words' ranks: 1 / the catalog's Heaps exponent
    p_new: float = 0.01  # catalog: probability that a fresh word is a tail word
    copy: float = 0.3  # probability that a token repeats one of its document's earlier tokens
    stop: np.ndarray | None = None  # bool over ``words``: a stopword of the default analyzer
    target_tf: float = 0.0  # Debian's mean tf per analyzed posting (what ``copy`` is fitted to)
    target_vocab: int = 0  # Debian's vocabulary size (what ``zipf_tail`` is fitted to)


def _tokens(texts: list[str]) -> list[list[str]]:
    return [WORD.findall(t.lower()) for t in texts]


def fit(seed: int = 0) -> Model:
    """The model's distributions from the Debian catalog and the shared query log, and its two
    free parameters fitted on a Debian-sized sample."""
    from limelight.data import load_catalog
    from limelight.data.loaders import load_queries

    docs = _tokens(load_catalog("debian").texts.tolist())
    log = _tokens(load_queries(Path(_data_root()) / "querylogs" / "queries.tsv.gz").texts.tolist())
    dc = Counter(w for d in docs for w in d)
    qc = Counter(w for q in log for w in q)
    words = list(dc) + [w for w in qc if w not in dc]
    pos = {w: i for i, w in enumerate(words)}
    dfreq = np.zeros(len(words))
    dfreq[[pos[w] for w in dc]] = list(dc.values())
    qfreq = np.zeros(len(words))
    qfreq[[pos[w] for w in qc]] = list(qc.values())
    # the log's unseen-word mass: its Good-Turing estimate (hapax tokens / tokens)
    m = Model(np.array([len(d) for d in docs], dtype=np.int64), words,
              np.cumsum(dfreq) / dfreq.sum(), np.array([len(q) for q in log], dtype=np.int64),
              np.cumsum(qfreq) / qfreq.sum(),
              sum(1 for v in qc.values() if v == 1) / sum(qc.values()),
              1.0 / heaps_exponent(docs, seed), target_vocab=len(dc))
    from limelight.analysis import Analyzer

    stop = Analyzer()._stop
    m.stop = np.array([w in stop for w in words])
    content = [[w for w in d if w not in stop] for d in docs]
    m.target_tf = sum(map(len, content)) / sum(len(set(d)) for d in content)
    _fit_free(m, len(docs), seed)
    return m


def fitted(seed: int = 0) -> Model:
    """``fit(seed)``, fitted once and kept: ``<cache>/scale-data/model-KEY.npz`` (``<cache>``:
    limelight's cache root, ``$LIMELIGHT_CACHE`` or ``./.cache``), KEY a hash of what the fit
    reads (this file's source, the seed, the Debian catalog's and the query log's files by
    size and time of change, the catalog's text fields, the analyzer's stopwords, numpy's
    version). The fit takes ~15 CPU s; scale_curve.py, a rerun and the tests read it back in
    well under a second. A second process asking for the same fit waits for the first's (a
    file lock) instead of fitting it again."""
    import fcntl

    from limelight._io import cache_root

    folder = cache_root() / "scale-data"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"model-{_fit_key(seed)}.npz"
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return load_model(path)
        m = fit(seed)
        save_model(m, path)
        return m


def _fit_key(seed: int) -> str:
    from limelight.analysis import Analyzer
    from limelight.data.loaders import CATALOG_SCHEMAS, _catalog_path

    files = [_catalog_path("debian"), Path(_data_root()) / "querylogs" / "queries.tsv.gz"]
    parts = [hashlib.sha256(Path(__file__).read_bytes()).hexdigest(), seed, np.__version__,
             [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files],
             list(CATALOG_SCHEMAS["debian"]["text"]), sorted(Analyzer()._stop)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


_ARRAYS = ("doc_lens", "doc_cum", "query_lens", "query_cum", "stop")
_SCALARS = ("p_new_query", "zipf_tail", "p_new", "copy", "target_tf", "target_vocab")


def save_model(m: Model, path: Path) -> None:
    """``m`` as one ``.npz`` file (arrays; the words and the scalars as UTF-8 bytes, no pickle),
    written atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **{k: getattr(m, k) for k in _ARRAYS},
                 words=np.frombuffer("\n".join(m.words).encode(), dtype=np.uint8),
                 scalars=np.frombuffer(json.dumps({k: getattr(m, k) for k in _SCALARS}).encode(),
                                       dtype=np.uint8))
    tmp.replace(path)


def load_model(path: Path) -> Model:
    """The model :func:`save_model` wrote."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in _ARRAYS}
        words = z["words"].tobytes().decode().split("\n")
        scalars = json.loads(z["scalars"].tobytes().decode())
    return Model(words=words, **arrays, **scalars)


def _data_root() -> str:
    from limelight.data.loaders import data_root

    return str(data_root())


def heaps_exponent(docs: list[list[str]], seed: int = 0) -> float:
    """β of Heaps' law (vocabulary ∝ tokens^β) over the last doubling of a random order of
    ``docs`` (the growth a larger corpus continues)."""
    order = np.random.default_rng(seed).permutation(len(docs))
    seen: set[str] = set()
    half = len(docs) // 2
    n_tok = v_half = n_half = 0
    for i, j in enumerate(order.tolist(), 1):
        seen.update(docs[j])
        n_tok += len(docs[j])
        if i == half:
            v_half, n_half = len(seen), n_tok
    return float(np.log(len(seen) / v_half) / np.log(n_tok / n_half))


def _fit_free(m: Model, n_docs: int, seed: int) -> None:
    """``copy`` (bisection on the mean tf of the analyzed postings of 5,000 documents) then
    ``p_new`` (bisection on the vocabulary of ``n_docs`` documents). Each step of a bisection
    draws from the same seed, so its catalog words (``_fresh``) are the same: looked up once
    (``memo``), the other draws made anew."""
    lo, hi = 0.0, 0.9
    memo: dict = {}
    for _ in range(12):
        m.copy = (lo + hi) / 2
        ids, ptr = _draw_docs(m, 5000, np.random.default_rng(seed + 1), memo)
        doc = np.repeat(np.arange(5000), np.diff(ptr))
        keep = (ids < 0) | ~m.stop[np.maximum(ids, 0)]
        n_post = _n_distinct(doc[keep], ids[keep])
        lo, hi = (lo, m.copy) if keep.sum() / n_post > m.target_tf else (m.copy, hi)
    lo, hi = 0.0, 0.1
    memo = {}
    for _ in range(10):
        m.p_new = (lo + hi) / 2
        ids, _ = _draw_docs(m, n_docs, np.random.default_rng(seed + 2), memo)
        vocab = _n_distinct_words(ids, len(m.words))
        lo, hi = (lo, m.p_new) if vocab > m.target_vocab else (m.p_new, hi)


def _n_distinct(doc: np.ndarray, ids: np.ndarray) -> int:
    """The number of distinct ``(doc, id)`` pairs (``len(np.unique(np.stack([doc, ids]),
    axis=1)[0])``), from one int64 key per pair: ids lie in [-2**40, 2**40) (tail ranks are
    capped at 2**40) and ``doc`` is below 2**22."""
    assert len(doc) == 0 or int(doc.max()) < 2**22
    return len(np.unique(doc.astype(np.int64) * 2**41 + (ids + 2**40)))


def _n_distinct_words(ids: np.ndarray, n_words: int) -> int:
    """``len(np.unique(ids))``: the real words (``0 .. n_words - 1``) counted with a bincount,
    only the tail words (negative) sorted."""
    real = ids >= 0
    return int(np.count_nonzero(np.bincount(ids[real], minlength=n_words))) + \
        len(np.unique(ids[~real]))


@njit(cache=True)
def _burst(fresh, ptr, u, v, copy):
    """Token ids of every document: token ``j`` of a document repeats an earlier token
    (chosen by ``v``) when ``u < copy``, else takes the fresh word drawn for it."""
    out = np.empty_like(fresh)
    for d in range(len(ptr) - 1):
        s = ptr[d]
        for j in range(ptr[d + 1] - s):
            if j > 0 and u[s + j] < copy:
                out[s + j] = out[s + int(v[s + j] * j)]
            else:
                out[s + j] = fresh[s + j]
    return out


def _fresh(m: Model, cum: np.ndarray, p_new: float, n: int, rng: np.random.Generator,
           memo: dict | None = None) -> np.ndarray:
    """``n`` fresh words: real words ``0 .. len(words) - 1`` by ``cum``, tail words as
    ``-rank`` (rank ≥ 1). ``memo``: the real words of a draw whose random numbers are those of
    the draw that filled it (the same seed and sizes), kept there by the first."""
    u = rng.random(n)
    if memo is not None and "ids" in memo:
        ids = memo["ids"].copy()
    else:
        ids = np.searchsorted(cum, u, side="right").astype(np.int64)
        np.minimum(ids, len(cum) - 1, out=ids)
        if memo is not None:
            memo["ids"] = ids.copy()
    tail = rng.random(n) < p_new
    # Pareto ranks r ≥ V with density ∝ r^-a: the catalog's curve past its last word
    u = rng.random(int(tail.sum()))
    ranks = m.target_vocab * (1.0 - u) ** (-1.0 / (m.zipf_tail - 1.0))
    ids[tail] = -np.minimum(ranks, 2.0 ** 40).astype(np.int64)
    return ids


def _draw_docs(m: Model, n: int, rng: np.random.Generator,
               memo: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` documents as ``(word ids, offsets)``; tail words are negative (``-rank``);
    ``memo``: see ``_fresh``."""
    lens = m.doc_lens[rng.integers(0, len(m.doc_lens), n)]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    total = int(ptr[-1])
    fresh = _fresh(m, m.doc_cum, m.p_new, total, rng, memo)
    return _burst(fresh, ptr, rng.random(total), rng.random(total), m.copy), ptr


def _draw_queries(m: Model, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` distinct-pool queries as ``(word ids, offsets)`` (no bursts: queries are short)."""
    lens = m.query_lens[rng.integers(0, len(m.query_lens), n)]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    return _fresh(m, m.query_cum, m.p_new_query, int(ptr[-1]), rng), ptr


_LETTERS = "bcdfghjklmnpqrstvwxz"


def tail_word(rank: int) -> str:
    """The synthetic word of tail rank ``rank`` (≥ 1): ``qz`` and the rank in base 20 over
    consonants (no real word of the shared data has this shape, and none is a stopword)."""
    s = []
    while rank:
        rank, r = divmod(rank, 20)
        s.append(_LETTERS[r])
    return "qz" + "".join(reversed(s))


def _texts(m: Model, ids: np.ndarray, ptr: np.ndarray) -> list[str]:
    """Each document's (or query's) text: its words joined by spaces."""
    words = np.asarray(m.words, dtype=object)
    tail = ids < 0
    out = np.empty(len(ids), dtype=object)
    out[~tail] = words[ids[~tail]]
    if tail.any():
        uniq, inv = np.unique(-ids[tail], return_inverse=True)
        out[tail] = np.asarray([tail_word(int(r)) for r in uniq], dtype=object)[inv]
    toks = out.tolist()
    p = ptr.tolist()
    # a text without a token (as some log queries are: "?", "a") is one letter, never empty
    return [" ".join(toks[p[i]:p[i + 1]]) or "x" for i in range(len(p) - 1)]


def write_docs(m: Model, n: int, path: Path, seed: int = 0) -> dict:
    """Write ``n`` documents as JSONL; returns their statistics (tokens, vocabulary)."""
    rng = np.random.default_rng([seed, 1])
    vocab: set[int] = set()
    n_tok = 0
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for s in range(0, n, CHUNK):
            c = min(CHUNK, n - s)
            ids, ptr = _draw_docs(m, c, rng)
            n_tok += len(ids)
            vocab.update(np.unique(ids).tolist())
            f.writelines(f'{{"id": "g{s + i:08d}", "text": "{t}"}}\n'
                         for i, t in enumerate(_texts(m, ids, ptr)))
    tmp.replace(path)
    return {"docs": n, "tokens": n_tok, "tokens_per_doc": n_tok / max(n, 1), "vocabulary": len(vocab)}


def zipf_ranks(n: int, pool: int, s: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` ranks in ``0 .. pool - 1`` with ``P(r) ∝ (r + 1)^-s`` (continuous inverse CDF,
    floored: exact in the limit, and within a few per cent at rank 1)."""
    u = rng.random(n)
    if abs(s - 1.0) < 1e-9:
        x = np.exp(u * np.log(pool + 1.0))
    else:
        a = 1.0 - s
        x = (1.0 + u * ((pool + 1.0) ** a - 1.0)) ** (1.0 / a)
    return np.minimum(np.floor(x).astype(np.int64) - 1, pool - 1)


def write_queries(m: Model, n: int, path: Path, seed: int = 0, s: float = 0.8,
                  pool: int | None = None) -> dict:
    """Write a log of ``n`` query lines (pool entries drawn by Zipfian popularity); returns its
    statistics (distinct queries, the most repeated query's count)."""
    rng = np.random.default_rng([seed, 2])
    pool = pool or n
    ranks = zipf_ranks(n, pool, s, rng)
    uniq, inv = np.unique(ranks, return_inverse=True)  # only drawn pool entries are made
    ids, ptr = _draw_queries(m, len(uniq), rng)
    texts = np.asarray(_texts(m, ids, ptr), dtype=object)
    tmp = path.with_name(f".{path.name}.tmp")
    # (a gzip header records the time of writing: mtime 0, so that a seed gives the same bytes)
    with open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8") as f:
        f.write("source\tqid\tquery\n")
        for s0 in range(0, n, CHUNK * 4):
            part = texts[inv[s0:s0 + CHUNK * 4]].tolist()
            f.writelines(f"gen\t{s0 + i}\t{t}\n" for i, t in enumerate(part))
    tmp.replace(path)
    counts = np.bincount(inv)
    return {"lines": n, "distinct_pool_entries": len(uniq), "top_count": int(counts.max()),
            "tokens_per_query": len(ids) / max(len(uniq), 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zipf", type=float, default=0.8, help="query popularity exponent s")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    m = fitted(a.seed)
    print(f"model in {time.perf_counter() - t:.1f} s (fitted once, then read back): copy {m.copy:.3f}, tail exponent "
          f"{m.zipf_tail:.3f}, p_new {m.p_new:.4f} (catalog) / {m.p_new_query:.4f} (log)")
    if a.docs:
        t = time.perf_counter()
        st = write_docs(m, a.docs, a.out / "docs.jsonl", a.seed)
        print(f"{a.docs:,} documents in {time.perf_counter() - t:.1f} s: {st['tokens_per_doc']:.1f} "
              f"tokens/doc (Debian {m.doc_lens.mean():.1f}), vocabulary {st['vocabulary']:,} "
              f"(Debian {m.target_vocab:,} at 63,666 documents)")
    if a.queries:
        t = time.perf_counter()
        st = write_queries(m, a.queries, a.out / "queries.tsv.gz", a.seed, a.zipf)
        print(f"{a.queries:,} log lines in {time.perf_counter() - t:.1f} s: "
              f"{st['distinct_pool_entries']:,} distinct, the most popular {st['top_count']:,} times, "
              f"{st['tokens_per_query']:.2f} tokens/query (log {m.query_lens.mean():.2f})")


if __name__ == "__main__":
    main()
