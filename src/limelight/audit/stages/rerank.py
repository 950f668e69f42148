"""Stage ``rerank``: TK re-ranking of the first system that can be a first stage, trained here
under a step budget (or a given checkpoint) and tested on held-out judged queries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from limelight.audit.stage import (
    Audit,
    Option,
    Progress,
    Stage,
    StageOptions,
    StageSkipped,
    SystemView,
)
from limelight.audit.stages.common import (
    able,
    eval_qids,
    no_qrels,
    none_able,
    switched_off,
    write_table,
)
from limelight.retrieval.systems import (
    FIRST_STAGE,
)

#: [rerank] budgets in optimizer steps (issue 25: never a wall-clock cap, which makes the step
#: count depend on the machine's load). Measured on med (batch 32, one CPU thread, the training
#: half's 333 positives): a TK-1 step 0.22 s, a TK-2 step 0.43 s. Quick: 30 steps (about 3
#: epochs of med's training queries, the old default's 3 epochs; ~7 s with TK-1, where the
#: old one-epoch run took ~3 s, so the quick audit stays within a few seconds of before). Full:
#: 1000 steps (≤ ~7 min with TK-2, the old 300 s cap's order); from-scratch TK-2 on cranfield
#: peaks on validation at steps 100-500 and stops early (patience 5) by 350-600
#: (experiments/rerank/results/cranfield/tk2-scratch-s0-f*.log.jsonl).
RERANK_STEPS_QUICK, RERANK_STEPS_FULL = 30, 1000


def _check(opts: dict, fail, context: dict) -> None:
    """``[rerank]``: budgets ≥ 1, ``patience`` ≥ 0; a ``checkpoint`` resolved against the
    configuration's folder (as a reranked system's), loadable, its content hash added to the
    options (the stage key)."""
    from limelight._io import file_sha256
    from limelight.errors import LimelightError

    for k in ("max_steps", "eval_every", "layers", "depth", "patience"):
        least = 0 if k == "patience" else 1
        if opts.get(k, 1) < least:
            fail(k, f"rerank.{k} must be ≥ {least}, got {opts[k]}")
    raw = opts.get("checkpoint")
    if raw is None:
        return
    path = Path(raw).expanduser()
    path = (path if path.is_absolute() else context["base"] / path).resolve()
    if not path.is_file():
        fail("checkpoint", f"rerank.checkpoint {raw!r}: no such file ({path})")
    from limelight.rerank.ranker import NeuralRanker

    try:
        NeuralRanker.load(path)
    except LimelightError as e:
        msg = str(e)
        msg = msg[len(str(path)) + 2:] if msg.startswith(f"{path}: ") else msg
        fail("checkpoint", f"rerank.checkpoint {raw!r} is not a loadable TK/KNRM checkpoint ({msg})")
    opts["checkpoint"] = str(path)
    opts["checkpoint_sha256"] = file_sha256(path)


OPTIONS = StageOptions("rerank", {
    "max_steps": Option(int, RERANK_STEPS_FULL, RERANK_STEPS_QUICK, "optimizer-step budget"),
    "eval_every": Option(int, 50, 10, "validate every N steps"),
    "patience": Option(int, 5, help="validations without improvement before stopping (0: never)"),
    "layers": Option(int, 2, help="TK layers"),
    "depth": Option(int, 100, help="first-stage candidates re-ranked"),
    "checkpoint": Option(str, help="a trained TK/KNRM checkpoint to evaluate instead of training "
                                   "(relative to the configuration's folder)"),
}, _check, removed={
    "epochs": "rerank.epochs was removed: the budget is in optimizer steps, set max_steps = N",
    "max_seconds": "rerank.max_seconds was removed: a time cap makes the step count depend on the "
                   "machine's load; set max_steps = N (optimizer steps) instead",
})


def _rerank_opts(audit: Audit) -> dict:
    """``[rerank]`` with defaults (:data:`OPTIONS`); a ``checkpoint`` comes resolved, with its
    ``checkpoint_sha256``."""
    return OPTIONS.values(audit)


def _rerank_key(audit: Audit) -> tuple:
    """The stage key: the options with the checkpoint's content hash, not its path (a moved
    config with the same checkpoint bytes reuses the stage, as for a reranked system)."""
    opts = {k: v for k, v in _rerank_opts(audit).items() if k != "checkpoint"}
    return (audit.key("index"), _rerank_base(audit).settings(), opts, audit.cfg.measures,
            audit.cfg.seed, eval_qids(audit), "test-half qrels", "fit")


def _rerank_base(audit: Audit) -> SystemView:
    """The first system that can be a first stage (a reranked system always names one)."""
    return able(audit.cfg, FIRST_STAGE)[0]


def _rerank_dir(audit: Audit):
    """Where the stage trains: ``DIR/rerank/tk.pt`` (best model) and ``fit``'s state, log, curve."""
    return audit.dir.path / "rerank"


def _rerank_checkpoint(audit: Audit, path: str, qids: list[str]) -> tuple[Any, list[str], dict]:
    """``(ranker, test query ids, summary)`` of a trained checkpoint: its vocabulary must be the
    one ``rerank train`` builds on this collection (else the one-line
    :class:`~limelight.rerank.vocab.VocabularyMismatchError`); the judged queries it was trained
    or validated on (``meta`` ``train_queries`` / ``val_queries``) are left out, so a weakly
    supervised checkpoint (none) is tested on every judged query."""
    from limelight.analysis import Analyzer
    from limelight.rerank.ranker import NeuralRanker
    from limelight.rerank.vocab import Vocabulary

    ranker = NeuralRanker.load(path)
    own = ranker.vocab
    here = Vocabulary.build(audit.inputs.dataset.collection.texts.tolist(), own.min_cf,
                            Analyzer.from_config(own.analyzer_config))
    here.check_same(own, where=f"[rerank] checkpoint {path} (for {audit.inputs.dataset.name})")
    seen = set(ranker.meta.get("train_queries") or []) | set(ranker.meta.get("val_queries") or [])
    test = [q for q in qids if q not in seen]
    if not test:
        raise StageSkipped(f"every judged query was a training or validation query of {path}")
    return ranker, test, {"source": path, "steps": ranker.meta.get("best_step"), "stopped": None,
                          "weak": ranker.meta.get("weak"), "excluded_queries": len(qids) - len(test)}


def _rerank_train(audit: Audit, first, qids: list[str], opts: dict) -> tuple[Any, list[str], dict]:
    """``(ranker, test query ids, summary)`` of a TK trained here with :func:`fit`: half of the
    judged queries (seeded) are the test set; the other half is split again (``fold_split``,
    seeded, 20 % validation) so that early stopping never sees a test query. ``opts["max_steps"]``
    optimizer steps at most, validation every ``eval_every`` steps, ``patience``; the model
    evaluated is the best on validation, written to ``DIR/rerank/tk.pt`` with its query split in
    ``meta`` (as ``limelight rerank train`` writes it). Resumable: an interrupted stage continues
    from ``DIR/rerank/tk.state.pt``."""
    import torch

    from limelight.rerank.models import TKConfig
    from limelight.rerank.ranker import NeuralRanker
    from limelight.rerank.train import FitConfig, TripleSet, Validation, fit, fold_split
    from limelight.rerank.vocab import Vocabulary

    inp, seed = audit.inputs, audit.cfg.seed
    ds = inp.dataset
    if len(qids) < 4:
        raise StageSkipped(f"only {len(qids)} judged queries (need ≥ 4 for a train/test split)")
    perm = np.random.default_rng(seed).permutation(len(qids))
    half = len(qids) // 2
    tr, te = [qids[i] for i in perm[:half]], [qids[i] for i in perm[half:]]
    tr, val, _ = fold_split(tr, folds=1, fold=None, val_share=0.2, seed=seed)
    vocab = Vocabulary.build(ds.collection.texts.tolist(), 2)
    ranker = NeuralRanker.create(TKConfig(n_layers=int(opts["layers"])), vocab, seed)
    # as `limelight rerank train` records them: DIR/rerank/tk.pt can be a [rerank] checkpoint
    ranker.meta.update({"collection": ds.name, "train_queries": tr, "val_queries": val,
                        "test_queries": te, "weak": None, "seed": seed})
    data = TripleSet.from_qrels(inp.eval_queries, ds.qrels, first, ds.collection, tr,
                                depth=int(opts["depth"]))
    validation = (Validation(ds.collection, inp.eval_queries, first, ds.qrels, val, int(opts["depth"]))
                  if val else None)
    every = int(opts["eval_every"])
    config = FitConfig(max_steps=int(opts["max_steps"]), eval_every=every, checkpoint_every=every,
                       patience=int(opts["patience"]), seed=seed, threads=1)
    out = _rerank_dir(audit)
    out.mkdir(parents=True, exist_ok=True)
    n_threads = torch.get_num_threads()  # training sets its own; later stages keep theirs
    try:
        res = fit(ranker, data, config, out / "tk.pt", validation, resume=True)
    finally:
        torch.set_num_threads(n_threads)
    if res.stopped == "interrupted":  # Ctrl-C: state saved; the stage stays "running" and resumes
        raise KeyboardInterrupt
    return ranker, te, {"source": "trained here", "steps": res.steps, "stopped": res.stopped,
                        "best_step": res.best_step, "max_steps": config.max_steps,
                        "train_queries": len(tr), "val_queries": len(val),
                        "seconds_training": res.seconds}


def _rerank(audit: Audit, bar: Progress) -> dict:
    """TK re-ranking of the first (not re-ranked) system's top ``depth``, evaluated against the
    first stage on held-out judged queries: a TK trained here under a step budget
    (:func:`_rerank_train`), or the trained ``checkpoint`` of ``[rerank]``
    (:func:`_rerank_checkpoint`; no training)."""
    from limelight.data.qrels import Qrels
    from limelight.evaluation.compare import evaluate_runs
    from limelight.rerank.ranker import KernelReranker

    inp, opts = audit.inputs, _rerank_opts(audit)
    ds, depth = inp.dataset, int(opts["depth"])
    base = _rerank_base(audit)
    first = audit.retriever(base, query_vectors=False).retrieve(inp.eval_queries, depth).rename(base.name)
    judged = set(ds.qrels.qids.decode(ds.qrels.q[ds.qrels.rel >= 1]).tolist())
    qids = [q for q in inp.eval_queries.ids.strings.tolist() if q in judged]
    bar.update(1, 3)
    if opts.get("checkpoint"):
        ranker, te, info = _rerank_checkpoint(audit, opts["checkpoint"], qids)
    else:
        ranker, te, info = _rerank_train(audit, first, qids, opts)
    seconds = info.pop("seconds_training", 0.0)
    bar.update(2, 3)
    test_q = inp.eval_queries.take(inp.eval_queries.ids.encode(np.asarray(te, dtype=object)))
    first_te = audit.retriever(base, query_vectors=False).retrieve(test_q, depth).rename(base.name)
    rr = KernelReranker(ranker, ds.collection).transform(test_q, first_te)
    rr = rr.rename(f"{ranker.name.upper()}({base.name})")
    # evaluated over the test queries' judgments only: qrels of the training half would count
    # as queries with no results (zeros), halving every figure
    qdf = ds.qrels.to_pandas()
    test_qrels = Qrels.from_pandas(qdf[qdf["query_id"].isin(te)], name=getattr(ds.qrels, "name", "qrels"))
    table = evaluate_runs([first_te, rr], test_qrels, audit.cfg.measures)
    agg = table.aggregate()
    rows = [{"system": n, **agg[n], **{f"p_{m}": (None if np.isnan(table.p_vs_first[m][i])
                                                   else float(table.p_vs_first[m][i]))
                                       for m in table.measures}}
            for i, n in enumerate(table.names)]
    write_table(audit, "rerank", pd.DataFrame(rows))
    bar.update(3, 3)
    return {"summary": {"base": base.name, "model": rr.name, **info, "test_queries": len(te),
                        "measures": agg},
            "seconds_training": seconds}


RERANK = Stage("rerank", "TK re-ranking (trained here under a step budget, or a checkpoint; "
               "tested on held-out judged queries)",
               _rerank, key=_rerank_key, inputs=("index",),
               outputs=lambda a: (_rerank_dir(a), a.dir.table("rerank")),
               skip=lambda a: (switched_off(a, "rerank") or no_qrels(a, "TK needs relevance judgments")
                               or none_able(a, FIRST_STAGE, "to re-rank")),
               report=lambda d, s: report_section(d, s))


def _rerank_caption(rec: dict | None) -> str:
    """The re-ranking table's caption: which model (trained here: steps, why it stopped, its
    training/validation queries; or the checkpoint) and on how many held-out queries."""
    summ = ((rec or {}).get("result") or {}).get("summary") or {}
    src = summ.get("source")
    if src == "trained here":
        model = (f"trained here: {summ.get('steps')} of {summ.get('max_steps')} optimizer steps "
                 f"(stopped: {summ.get('stopped')}; best validation at step {summ.get('best_step')}) "
                 f"on {summ.get('train_queries')} judged queries, {summ.get('val_queries')} for "
                 "validation")
    elif src:
        about = [f"{summ['steps']} training steps" if summ.get("steps") is not None else "",
                 f"weakly supervised: {summ['weak']}" if summ.get("weak") else "",
                 f"{summ.get('excluded_queries', 0)} judged queries left out as its training or "
                 "validation queries"]
        model = f"checkpoint {src} ({'; '.join(x for x in about if x)})"
    else:
        return "First stage against TK re-ranked on held-out queries."
    return (f"First stage against {summ.get('model', 'TK')} re-ranked on {summ.get('test_queries')} "
            f"held-out judged queries; model {model}.")


def report_section(audit_dir, stages) -> list:
    """The first stage against its TK re-ranking on held-out judged queries."""
    from limelight.audit.stage import Table
    from limelight.audit.stages.common import read_table, section_start
    from limelight.audit.stages.compare import measure_words

    blocks, rec = section_start(stages, "rerank", "Does a neural re-ranker (TK) help?")
    df = read_table(audit_dir, "rerank") if rec is not None else None
    if df is not None:
        df, fmt = measure_words(df)
        blocks.append(Table(df, _rerank_caption(rec), formats=fmt, source=str(audit_dir.table("rerank"))))
    return blocks
