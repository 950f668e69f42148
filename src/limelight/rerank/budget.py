"""Time-budget evaluation (paper §5.2): throughput of each model on this machine, the re-ranking
depth a per-query time budget affords, and the effectiveness at that depth.

Throughput is *documents per millisecond of model time* (tensor work only; tokenization and id
lookup excluded, as in the paper, which times the GPU work only). A budget of ``b`` ms per
query affords ``depth = min(N, floor(b · docs_per_ms))`` documents: the first stage's top
``depth`` are re-ranked by the model, the rest follow in first-stage order. Each model scores
the first-stage top ``N`` once; every depth is derived from those scores by pruning on the
first-stage rank, as in the paper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.rerank.ranker import NeuralRanker, PairScorer
from limelight.rerank.vocab import EncodedTexts


def fixed_length_docs(ranker: NeuralRanker, texts: Sequence[str], n: int, length: int = 200,
                      seed: int = 0) -> EncodedTexts:
    """``n`` documents of exactly ``length`` in-vocabulary tokens, made by concatenating real
    texts (cycled); for throughput measurements on full-length documents."""
    enc = ranker.vocab.encode(list(texts), 10_000)
    stream = enc.ids[enc.ids > 1]
    if len(stream) == 0:
        raise LimelightError("no in-vocabulary token in the texts")
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(stream), size=n)
    idx = (starts[:, None] + np.arange(length)[None, :]) % len(stream)
    return EncodedTexts(stream[idx].astype(np.int64), np.full(n, length), ranker.vocab.fingerprint)


def docs_per_ms(ranker: NeuralRanker, queries: EncodedTexts, docs: EncodedTexts,
                batch_size: int = 256, repeats: int = 3, warmup: int = 1) -> float:
    """Median documents per millisecond of model time over ``repeats`` passes, each scoring
    every document of ``docs`` against query row ``i % len(queries)``."""
    scorer = PairScorer(ranker, batch_size)
    q_rows = np.arange(len(docs)) % len(queries)
    d_rows = np.arange(len(docs))
    for _ in range(warmup):
        scorer.score(queries, docs, q_rows[:batch_size], d_rows[:batch_size])
    times = []
    for _ in range(repeats):
        scorer.score(queries, docs, q_rows, d_rows)
        times.append(scorer.last_model_seconds)
    return len(docs) / (1000.0 * float(np.median(times)))


def rerank_at_depth(first: Run, scored: Run, depth: int) -> Run:
    """The first-stage run with its top ``depth`` documents re-ordered by ``scored``'s scores
    (a model's scores for at least those documents) and the rest in first-stage order below."""
    if depth <= 0:
        return first
    ranks = first.ranks()
    key = pd.Series(scored.score, index=pd.MultiIndex.from_arrays(
        [scored.qids.decode(scored.q), scored.docids.decode(scored.d)]))
    top = ranks <= depth
    idx = pd.MultiIndex.from_arrays([first.qids.decode(first.q[top]), first.docids.decode(first.d[top])])
    model_scores = key.reindex(idx).to_numpy()
    if np.isnan(model_scores).any():
        raise LimelightError(f"the model run {scored.name!r} lacks scores for some of the first "
                             f"stage's top {depth} documents")
    s = -ranks.astype(np.float64)
    lo = model_scores.min() if len(model_scores) else 0.0
    s[top] = model_scores - lo + 1.0  # every re-ranked document above every other one
    return Run.from_codes(first.qids, first.docids, first.q, first.d, s, f"{scored.name}@{depth}")


def depth_curve(first: Run, scored: Run, qrels: Qrels, max_depth: int,
                measure: str = "nDCG@10") -> np.ndarray:
    """``measure`` (mean over judged queries) when re-ranking depths 0..``max_depth``."""
    from limelight.evaluation import evaluate

    runs = [rerank_at_depth(first, scored, d) for d in range(max_depth + 1)]
    return np.array([r[measure] for r in evaluate(runs, qrels, measure)])


def budget_table(curves: Mapping[str, np.ndarray], throughput: Mapping[str, float],
                 budgets_ms: Sequence[float], baseline: str = "bm25") -> pd.DataFrame:
    """For each budget and model: the affordable depth and the measure there; ``best`` names
    the model with the highest value at each budget (``baseline`` = depth 0)."""
    if not curves:
        raise LimelightError("no model curve given")
    base_v = float(next(iter(curves.values()))[0])  # depth 0 = the first stage alone
    rows = []
    for b in budgets_ms:
        row: dict = {"budget_ms": float(b), baseline: base_v}
        best, best_v = baseline, base_v
        for name, curve in curves.items():
            depth = int(min(len(curve) - 1, np.floor(b * throughput[name])))
            v = float(curve[depth])
            row[f"{name} depth"], row[name] = depth, v
            if v > best_v + 1e-12:
                best, best_v = name, v
        row["best"] = best
        rows.append(row)
    return pd.DataFrame(rows)


def best_ranges(table: pd.DataFrame) -> list[tuple[str, float, float]]:
    """Contiguous budget ranges ``(model, from_ms, to_ms)`` over which each model is best."""
    out: list[tuple[str, float, float]] = []
    for b, m in zip(table["budget_ms"], table["best"], strict=True):
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1], float(b))
        else:
            out.append((m, float(b), float(b)))
    return out
