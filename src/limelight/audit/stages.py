"""The stages of an audit, as data (:class:`limelight.audit.stage.Stage`): each one calls the
library capability that owns the computation and records what it produced; a stage whose input
is missing, or that does not apply to the audit's collection or configuration, is skipped with a
reason. :func:`audit_stages` lists them in the order the runner runs them.

Stage keys chain: a stage's key includes the keys of the stages it reads, so a changed setting
reruns exactly the stages that depend on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from limelight._io import atomic_path
from limelight.audit.cache import stable_hash
from limelight.audit.config import AuditConfig, SystemSpec
from limelight.audit.stage import Audit, Progress, Stage, StageSkipped
from limelight.retrieval.systems import (
    CAPABILITIES,
    EXACT_REVERSE,
    FIRST_STAGE,
    LOCAL_INDEX,
    NEW_QUERIES,
    get_kind,
)
from limelight.retrieval.systems import QUERY_VECTORS as USES_QUERY_VECTORS

if TYPE_CHECKING:  # pragma: no cover
    from limelight.audit.inputs import AuditInputs


def audit_stages(cfg: AuditConfig) -> list[Stage]:
    """The stages of an audit of ``cfg``, in the order they run: the index, the shared dense
    query encoding (only when a system is dense or hybrid), exact exposure then retrievability
    per system, the figures, and the optional stages (``[stages]`` switches them off)."""
    out = [INDEX]
    if _dense_settings(cfg) is not None:
        out.append(QUERY_VECTORS)
    out += [exposure_stage(spec, cfg.depth) for spec in cfg.systems]
    out += [retrievability_stage(spec) for spec in cfg.systems]
    return [*out, FIGURES, COMPARE, RERANK, EQI, ROBUSTNESS, CTRLQGEN, INTERVENTION]


def _write_table(audit: Audit, name: str, df: pd.DataFrame) -> str:
    path = audit.dir.table(name)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path.name


def _dense_settings(cfg: AuditConfig) -> dict | None:
    specs = [s for s in cfg.systems if s.uses_dense]
    if not specs:
        return None
    from limelight.retrieval.encoders import ONNX_RUN

    p = specs[0].params
    # ONNX_RUN: vectors of the batch-dependent int8 encoder of before are not reused
    return {"model": p.get("model") or "all-MiniLM-L6-v2", "max_seq_length": p.get("max_seq_length"),
            "onnx_run": ONNX_RUN}


def _able(cfg: AuditConfig, *capabilities: str) -> list[SystemSpec]:
    """The systems of ``cfg`` whose kind has every one of ``capabilities`` (stages ask for
    capabilities, never for kind names)."""
    return [s for s in cfg.systems if all(get_kind(s.kind).has(c) for c in capabilities)]


def _left_out(systems: list[SystemSpec], *capabilities: str) -> str:
    """Which of ``systems`` lack one of ``capabilities`` and why (one line), or ``""``."""
    why = []
    for s in systems:
        lacks = [c for c in capabilities if not get_kind(s.kind).has(c)]
        if lacks:
            why.append(f"{s.name} (a {s.kind} system lacks {lacks[0]}: {CAPABILITIES[lacks[0]]})")
    return ("not run for " + "; ".join(why)) if why else ""


def _none_able(audit: Audit, capability: str, what: str) -> str | None:
    """The skip reason when no system has ``capability`` (needed ``what``), else ``None``."""
    if _able(audit.cfg, capability):
        return None
    return f"no system {CAPABILITIES[capability].split(' (')[0]} {what}: {_left_out(audit.cfg.systems, capability)}"


def _vectors(spec: SystemSpec) -> bool:
    """Whether a system's kind searches with query vectors (dense) rather than terms (BM25)."""
    return get_kind(spec.kind).has(USES_QUERY_VECTORS)


def _switched_off(audit: Audit, name: str) -> str | None:
    return None if audit.cfg.stages.get(name, True) else "switched off in [stages]"


def _no_qrels(audit: Audit, what: str = "relevance judgments") -> str | None:
    inp = audit.inputs
    return f"{inp.dataset.name} has no qrels ({what})" if inp.eval_queries is None else None


def _present(audit: Audit, name: str) -> bool:
    st = audit.status(name)
    return st is not None and st.present


# ---- indexing ---------------------------------------------------------------------------------
def _index(audit: Audit, bar: Progress) -> dict:
    """A ``limelight index`` directory: BM25, plus the dense (FAISS) index when a system needs it;
    document embeddings go through the shared embedding cache."""
    import json

    from limelight.retrieval.index_dir import build_index

    coll = audit.inputs.dataset.collection
    build_index(coll, audit.dir.index_dir)
    out = {"n_docs": len(coll), "built": ["bm25"]}
    if _dense_settings(audit.cfg):
        di = _dense_index(audit, coll, bar)
        di.save(audit.dir.index_dir / "dense")
        meta_p = audit.dir.index_dir / "meta.json"
        meta = json.loads(meta_p.read_text())
        meta["built"] = ["bm25", "dense"]
        with atomic_path(meta_p) as tmp:
            tmp.write_text(json.dumps(meta, indent=1))
        out["built"].append("dense")
        out["dense_dim"] = di.dim
    return out


INDEX = Stage("index", "BM25 (and dense) index of the collection", _index,
              key=lambda a: (a.inputs.collection_fp, _dense_settings(a.cfg)),
              outputs=lambda a: (a.dir.index_dir,))

CHUNK_DOCS = 8192


def _dense_index(audit: Audit, coll, bar: Progress):
    """The dense index of ``coll``. Large collections are encoded in chunks of ``CHUNK_DOCS``
    documents, each through the embedding cache, so that an interrupted encoding (the demo's
    dominant cost) resumes at the last finished chunk."""
    from limelight.data.collection import Collection
    from limelight.data.ids import IdMap
    from limelight.retrieval.dense import DenseIndex, collection_fingerprint

    enc, cache = audit.encoder(), audit.cfg.embedding_cache
    n = len(coll)
    if n <= 2 * CHUNK_DOCS:
        return DenseIndex.build(coll, enc, cache_dir=cache)
    emb = np.zeros((n, enc.dim), dtype=np.float32)
    ids = coll.ids.strings
    bar.update(0, n)
    for s in range(0, n, CHUNK_DOCS):
        e = min(n, s + CHUNK_DOCS)
        part = Collection(IdMap(ids[s:e].tolist(), kind="document"), coll.texts[s:e],
                          name=f"{coll.name}-docs{s:07d}-{e:07d}")
        emb[s:e] = enc.encode_collection(part, cache_dir=cache)
        bar.update(e, n)
    meta = {"encoder": enc.identity(), "collection": coll.name, "n_docs": n,
            "collection_fingerprint": collection_fingerprint(coll)}
    return DenseIndex.from_embeddings(coll.ids, emb, meta)


def _query_vectors(audit: Audit, bar: Progress) -> dict:
    """Encode the audit's queries once for every dense and hybrid system."""
    texts = audit.inputs.queries.texts.tolist()
    enc = audit.encoder()
    n = len(texts)
    vec = np.zeros((n, enc.dim), dtype=np.float32)
    step = 4096
    for s in range(0, n, step):
        vec[s:s + step] = enc.encode(texts[s:s + step], show_progress=False)
        bar.update(min(n, s + step), n)
    with atomic_path(audit.dir.query_vectors) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, vec)
    return {"n_queries": n, "dim": int(enc.dim)}


QUERY_VECTORS = Stage("query-vectors", "dense query encoding (shared by dense and hybrid)",
                      _query_vectors,
                      key=lambda a: (a.inputs.queries_fp, _dense_settings(a.cfg)),
                      outputs=lambda a: (a.dir.query_vectors,))


# ---- exposure and retrievability --------------------------------------------------------------
def _exposure_deps(audit: Audit, spec: SystemSpec) -> list:
    return [audit.key("index")] + ([audit.key("query-vectors")] if spec.needs_dense else [])


def exposure_stage(spec: SystemSpec, depth: int) -> Stage:
    """Exact exposure of every query's top ``depth`` under one system (resumable)."""

    def body(audit: Audit, bar: Progress) -> dict:
        from limelight.exposure.compute import compute_exposure

        cfg = audit.cfg
        retr = audit.retriever(spec)
        st = compute_exposure(retr, audit.inputs.queries, audit.dir.store_dir(spec.name),
                              depth=cfg.depth, shard_size=cfg.shard_size,
                              fingerprint=stable_key(_exposure_deps(audit, spec), spec),
                              settings=spec.settings(), progress=bar.update)
        q, _, _, _ = st.pair_arrays()
        out = {"n_pairs": int(len(q)), "n_queries": len(st.queries), "n_docs": len(st.doc_ids),
               "timings": st.manifest.get("timings", {})}
        if callable(getattr(retr, "coverage", None)):  # results of a file or a service: which queries have any
            out["coverage"] = retr.coverage()
        return out

    return Stage(f"exposure-{spec.name}", f"exact exposure under {spec.name} (top {depth})", body,
                 key=lambda a: (_exposure_deps(a, spec), spec.settings(), a.inputs.queries_fp,
                                a.cfg.depth, a.cfg.shard_size),
                 inputs=("index",), outputs=lambda a: (a.dir.store_dir(spec.name),))


def stable_key(deps: list, spec) -> str:
    return stable_hash("retriever", deps, spec.settings())


def retrievability_stage(spec: SystemSpec) -> Stage:
    """r(d) at each cutoff over every document, Gini (overall and per group), Lorenz data."""

    def body(audit: Audit, bar: Progress) -> dict:
        from limelight.exposure.retrievability import gini, group_retrievability

        cfg, coll = audit.cfg, audit.inputs.dataset.collection
        st = audit.dir.store(spec.name)
        cols: dict[str, Any] = {"doc_id": st.doc_ids.strings.astype(str)}
        cutoffs = {}
        for i, c in enumerate(cfg.cutoffs):
            rv = st.retrievability(c=c)
            cols[f"r_c{c}"] = rv.r
            cutoffs[str(c)] = rv.to_dict()
            bar.update(i + 1, len(cfg.cutoffs) + 1)
        n_exp = st.n_exposing()
        cols["n_exposing"] = n_exp
        g = cfg.group_field
        if g:
            cols[g] = [str(v) for v in coll.fields[g].tolist()]
        df = pd.DataFrame(cols)
        with atomic_path(audit.dir.retrievability_path(spec.name)) as tmp:
            df.to_parquet(tmp, index=False)
        c_main = 100 if 100 in cfg.cutoffs else max(cfg.cutoffs)
        r = cols[f"r_c{c_main}"]
        out: dict[str, Any] = {"cutoffs": cutoffs, "c_main": c_main,
                               "mean_exposing_queries": float(n_exp.mean())}
        if g:
            grp = group_retrievability(r, coll.fields[g])
            # Gini within each group (documents counted in each of their groups)
            from limelight.exposure.retrievability import _as_labels

            labels = [_as_labels(v) for v in coll.fields[g].tolist()]
            lens = np.fromiter((len(x) for x in labels), dtype=np.int64, count=len(labels))
            doc = np.repeat(np.arange(len(r)), lens)
            flat = pd.DataFrame({"group": [x for lab in labels for x in lab], "r": r[doc]})
            ginis = {k: gini(v.to_numpy()) for k, v in flat.groupby("group", sort=False)["r"]}
            grp["gini"] = grp["group"].map(ginis)
            grp.insert(0, "system", spec.name)
            out["groups_table"] = _write_table(audit, f"groups_{spec.name}", grp)
            out["n_groups"] = int(len(grp))
        bar.update(len(cfg.cutoffs) + 1, len(cfg.cutoffs) + 1)
        return out

    exposure = f"exposure-{spec.name}"
    return Stage(f"retrievability-{spec.name}", f"retrievability, Gini and Lorenz under {spec.name}",
                 body, key=lambda a: (a.key(exposure), a.cfg.cutoffs, a.cfg.group_field),
                 inputs=(exposure,), outputs=lambda a: (a.dir.retrievability_path(spec.name),))


def _with_retrievability(audit: Audit) -> list[str]:
    return [s.name for s in audit.cfg.systems if _present(audit, f"retrievability-{s.name}")]


def _figures(audit: Audit, bar: Progress) -> dict:
    """Lorenz curves, rank-size plot, per-group bars, and the systems summary table."""
    from limelight.exposure.plots import plot_lorenz, plot_rank_size

    cfg, names = audit.cfg, _with_retrievability(audit)
    figs = audit.dir.figures_dir
    frames = {n: pd.read_parquet(audit.dir.retrievability_path(n)) for n in names}
    c = 100 if 100 in cfg.cutoffs else max(cfg.cutoffs)
    made = []
    for cc in cfg.cutoffs:
        plot_lorenz({n: f[f"r_c{cc}"].to_numpy() for n, f in frames.items()}, figs / f"lorenz_c{cc}",
                    title=f"Lorenz curves of r(d), c={cc}")
        made.append(f"lorenz_c{cc}.png")
    plot_rank_size({n: f["n_exposing"].to_numpy() for n, f in frames.items()}, figs / "rank_size")
    made.append("rank_size.png")
    bar.update(1, 2)
    rows = []
    for n in names:
        res = audit.status(f"retrievability-{n}").result
        for cc, d in res["cutoffs"].items():
            rows.append({"system": n, "c": int(cc), "gini": d["gini"],
                         "gini_retrieved_only": d["gini_retrieved_only"],
                         "retrievable_fraction": d["retrievable_fraction"],
                         "mean_exposing_queries": res["mean_exposing_queries"]})
    _write_table(audit, "systems", pd.DataFrame(rows))
    if cfg.group_field:
        grp = pd.concat([pd.read_parquet(audit.dir.table(f"groups_{n}")) for n in names])
        _write_table(audit, "groups", grp)
        made.append(_group_figure(grp, figs / "groups.png", cfg.group_field, c))
    made += _system_diffs(audit, names, max(cfg.cutoffs))
    bar.update(2, 2)
    return {"figures": made}


FIGURES = Stage("figures", "figures and summary tables", _figures,
                key=lambda a: ([a.key(f"retrievability-{n}") for n in _with_retrievability(a)],),
                skip=lambda a: None if _with_retrievability(a) else "no system has retrievability figures")


def _system_diffs(audit: Audit, names: list[str], c: int) -> list[str]:
    """``limelight exposure diff`` from the first system to each other one: a summary table
    (``diff``), the biggest winners and losers (``diff_movers``) and one figure per pair."""
    from limelight.exposure.diff import diff_stores, field_values, plot_diff

    if len(names) < 2:
        return []
    first = audit.dir.store(names[0])
    groups = (field_values(first, audit.cfg.group_field, audit.dir.index_dir)
              if audit.cfg.group_field else None)
    rows, movers, made = [], [], []
    for n in names[1:]:
        d = diff_stores(first, audit.dir.store(n), c=c, group_values=groups, names=(names[0], n))
        rows.append({"from": names[0], "to": n, **d.summary})
        for kind, df in (("winner", d.winners(10)), ("loser", d.losers(10))):
            movers.append(df[["docid", "r_a", "r_b", "delta_r", "n_a", "n_b"]]
                          .assign(**{"from": names[0], "to": n, "kind": kind}))
        made += [p.name for p in plot_diff(d, audit.dir.figures_dir / f"diff_{names[0]}_{n}")
                 if p.suffix == ".png"]
    _write_table(audit, "diff", pd.DataFrame(rows))
    _write_table(audit, "diff_movers", pd.concat(movers, ignore_index=True))
    return made


def _group_figure(grp: pd.DataFrame, path, field: str, c: int) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    big = grp[grp["n_docs"] >= 20] if (grp["n_docs"] >= 20).any() else grp
    first = big["system"].iloc[0]
    order = big[big["system"] == first].sort_values("r_mean", ascending=False)["group"]
    keep = list(order.head(12)) + [g for g in order.tail(8) if g not in set(order.head(12))]
    piv = big.pivot_table(index="group", columns="system", values="r_mean").reindex(keep)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    piv.plot.barh(ax=ax, width=0.8)
    ax.invert_yaxis()
    ax.set_xlabel(f"mean r(d), c={c}")
    ax.set_ylabel(field)
    ax.set_title(f"Retrievability by {field}: most and least retrievable groups (≥20 documents)")
    ax.legend(fontsize=8)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    plt.close(fig)
    return path.name



# ---- stages that need qrels -------------------------------------------------------------------
def _eval_runs(audit: Audit, k: int = 1000) -> dict:
    out = {}
    for spec in _able(audit.cfg, NEW_QUERIES):
        retr = audit.retriever(spec, query_vectors=False)
        out[spec.name] = retr.retrieve(audit.inputs.eval_queries, k).rename(spec.name)
    return out


def _eval_qids(audit: Audit) -> list[str]:
    return audit.inputs.eval_queries.ids.strings.tolist()


def _compare(audit: Audit, bar: Progress) -> dict:
    """System comparison: standard measures (tests against the first system) and all-pairs
    LexiRecall preferences with sign tests and the MC4 order."""
    from limelight.evaluation.compare import compare_runs, evaluate_runs

    inp = audit.inputs
    runs = _eval_runs(audit)
    bar.update(1, 3)
    table = evaluate_runs(list(runs.values()), inp.dataset.qrels, audit.cfg.measures)
    agg = table.aggregate()
    rows = []
    for i, n in enumerate(table.names):
        row = {"system": n, **agg[n]}
        for m in table.measures:
            p = table.p_vs_first[m][i]
            row[f"p_{m}"] = None if np.isnan(p) else float(p)
        rows.append(row)
    _write_table(audit, "evaluation", pd.DataFrame(rows))
    bar.update(2, 3)
    summary: dict[str, Any] = {"n_queries": len(inp.eval_queries), "measures": agg}
    if len(runs) > 1:
        cmp = compare_runs(list(runs.values()), inp.dataset.qrels, audit.cfg.preference)
        d = cmp.to_dict()
        _write_table(audit, "preferences", pd.DataFrame(d["pairs"]))
        summary["preference"] = {"measure": d["preference"], "mc4": d["mc4"],
                                 "discriminative_power": d["discriminative_power"]}
    bar.update(3, 3)
    return {"summary": summary}


COMPARE = Stage("compare", "system comparison: standard measures and lexirecall", _compare,
                key=lambda a: ([a.key("index")], [s.settings() for s in _able(a.cfg, NEW_QUERIES)],
                               a.cfg.measures, a.cfg.preference, _eval_qids(a)),
                inputs=("index",),
                skip=lambda a: (_switched_off(a, "compare") or _no_qrels(a)
                                or _none_able(a, NEW_QUERIES, "to retrieve the judged queries")),
                note=lambda a: _left_out(a.cfg.systems, NEW_QUERIES))


#: [rerank] budgets in optimizer steps (issue 25: never a wall-clock cap, which makes the step
#: count depend on the machine's load). Measured on med (batch 32, one CPU thread, the training
#: half's 333 positives): a TK-1 step 0.22 s, a TK-2 step 0.43 s. Quick: 30 steps (about 3
#: epochs of med's training queries, the old default's 3 epochs; ~7 s with TK-1, where the
#: old one-epoch run took ~3 s, so the quick audit stays within a few seconds of before). Full:
#: 1000 steps (≤ ~7 min with TK-2, the old 300 s cap's order); from-scratch TK-2 on cranfield
#: peaks on validation at steps 100-500 and stops early (patience 5) by 350-600
#: (experiments/rerank/results/cranfield/tk2-scratch-s0-f*.log.jsonl).
RERANK_STEPS_QUICK, RERANK_STEPS_FULL = 30, 1000


def _rerank_opts(audit: Audit) -> dict:
    """``[rerank]`` with defaults: ``max_steps`` (optimizer-step budget: 30 quick, 1000 full),
    ``eval_every`` (validate every N steps: 10 quick, 50 full), ``patience`` (validations without
    improvement before stopping early, 0 = never), ``layers`` (TK layers), ``depth`` (first-stage
    candidates re-ranked), ``checkpoint`` (a trained model to evaluate instead; resolved by the
    config, with its ``checkpoint_sha256``)."""
    return {"max_steps": RERANK_STEPS_QUICK if audit.quick else RERANK_STEPS_FULL,
            "eval_every": 10 if audit.quick else 50, "patience": 5, "layers": 2, "depth": 100,
            **audit.cfg.options.get("rerank", {})}


def _rerank_key(audit: Audit) -> tuple:
    """The stage key: the options with the checkpoint's content hash, not its path (a moved
    config with the same checkpoint bytes reuses the stage, as for a reranked system)."""
    opts = {k: v for k, v in _rerank_opts(audit).items() if k != "checkpoint"}
    return (audit.key("index"), _rerank_base(audit).settings(), opts, audit.cfg.measures,
            audit.cfg.seed, _eval_qids(audit), "test-half qrels", "fit")


def _rerank_base(audit: Audit) -> SystemSpec:
    """The first system that can be a first stage (a reranked system always names one)."""
    return _able(audit.cfg, FIRST_STAGE)[0]


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
    _write_table(audit, "rerank", pd.DataFrame(rows))
    bar.update(3, 3)
    return {"summary": {"base": base.name, "model": rr.name, **info, "test_queries": len(te),
                        "measures": agg},
            "seconds_training": seconds}


RERANK = Stage("rerank", "TK re-ranking (trained here under a step budget, or a checkpoint; "
               "tested on held-out judged queries)",
               _rerank, key=_rerank_key, inputs=("index",),
               outputs=lambda a: (_rerank_dir(a), a.dir.table("rerank")),
               skip=lambda a: (_switched_off(a, "rerank") or _no_qrels(a, "TK needs relevance judgments")
                               or _none_able(a, FIRST_STAGE, "to re-rank")))


# ---- EQI ----------------------------------------------------------------------------------------
def _eqi_specs(audit: Audit) -> list[SystemSpec]:
    """The systems with a local index and exact reverse search (BM25, dense) and an exposure
    store: those EQI covers."""
    return [s for s in _able(audit.cfg, LOCAL_INDEX, EXACT_REVERSE) if _present(audit, f"exposure-{s.name}")]


def _eqi_opts(audit: Audit) -> dict:
    return {"docs": 50 if audit.quick else 300, "steps": 30 if audit.quick else 300,
            "methods": ["residual"], "k": 100, **audit.cfg.options.get("eqi", {})}


def _eqi_skip(audit: Audit) -> str | None:
    if off := _switched_off(audit, "eqi"):
        return off
    if _eqi_specs(audit):
        return None
    not_covered = _eqi_not_covered(audit)
    return ("no system with a local index, exact reverse search and an exposure store (BM25, dense)"
            + (f"; {not_covered}" if not_covered else ""))


def _eqi_model_dirs(audit: Audit) -> tuple:
    """Where the stage saves its learned models: ``DIR/eqi/<method>/`` for the first dense
    system, ``<method>-<system>/`` for the others (``limelight serve --audit DIR`` finds them
    there); only these are the stage's outputs (eqi/ may hold other models)."""
    dense = [s for s in _eqi_specs(audit) if _vectors(s)]
    return tuple(audit.dir.eqi_dir(m if s is dense[0] else f"{m}-{s.name}")
                 for s in dense for m in _eqi_opts(audit)["methods"])


def _eqi(audit: Audit, bar: Progress) -> dict:
    """EQI (Li et al., WWW 2022) per BM25 / dense system: reverse baselines (BM25-reverse,
    dense-reverse) and a trained Residual model evaluated with RELQ against the exposure store on
    a seeded sample of exposed documents; exact reverse search for the most exposed document."""
    from limelight.exposure.eqi import ExactReverse, evaluate_eqi

    specs, opts, seed = _eqi_specs(audit), _eqi_opts(audit), audit.cfg.seed
    rows, reverse_rows, summary, models = [], [], {}, {}
    first_dense = next((s for s in specs if _vectors(s)), None)
    rng = np.random.default_rng(seed)
    for i, spec in enumerate(specs):
        store = audit.dir.store(spec.name)
        n_exp = store.n_exposing()
        exposed = np.flatnonzero(n_exp > 0)
        docs = np.sort(rng.choice(exposed, size=min(int(opts["docs"]), len(exposed)), replace=False))
        retr = audit.retriever(spec)
        methods, texts, emb = _eqi_methods(audit, spec, store, retr, exposed, docs, opts)
        res = evaluate_eqi(store, methods, docs, texts=texts, embeddings=emb, k=int(opts["k"]))
        for m in opts["methods"] if _vectors(spec) else ():
            # DIR/eqi/<method>/ (the first dense system; others <method>-<system>/), where
            # `limelight serve --audit DIR` finds the learned models it shows
            name = m if spec is first_dense else f"{m}-{spec.name}"
            methods[m].save(audit.dir.eqi_dir(name))
            models[name] = {"method": m, "system": spec.name}
        for m, vals in res.items():
            rows.append({"system": spec.name, "method": m, **vals})
        summary[spec.name] = res
        if get_kind(spec.kind).has(EXACT_REVERSE):
            top = int(np.argmax(n_exp))
            ex = ExactReverse.build(store, retr, np.load(audit.dir.query_vectors)
                                    if _vectors(spec) else None, cache_dir=None)
            docid = store.doc_ids.strings[top]
            for r in ex.query(docid=docid, k=10):
                reverse_rows.append({"system": spec.name, "docid": docid, **r})
        bar.update(i + 1, len(specs))
    _write_table(audit, "relq", pd.DataFrame(rows))
    if reverse_rows:
        _write_table(audit, "reverse", pd.DataFrame(reverse_rows))
    return {"summary": summary, "models": models}


def _eqi_methods(audit: Audit, spec: SystemSpec, store, retr, exposed: np.ndarray,
                 docs: np.ndarray, opts: dict) -> tuple[dict, list | None, np.ndarray | None]:
    """The EQI methods evaluated for one system (BM25: BM25-reverse; dense: dense-reverse and the
    trained ``opts["methods"]``) and the document texts or embeddings they are evaluated on."""
    from limelight.exposure.eqi import BM25Reverse, DenseReverse, train_eqi, validation_docs

    if not _vectors(spec):  # a term index: reverse search over the analyzed log
        return ({"bm25-reverse": BM25Reverse(store.queries, retr.index.analyzer)},
                audit.inputs.dataset.collection.texts[docs].tolist(), None)
    qv = np.load(audit.dir.query_vectors)
    doc_emb = np.asarray(retr.index.embeddings, dtype=np.float32)
    methods = {"dense-reverse": DenseReverse(store.queries, qv)}
    # early-stopping documents, leaving at least half the rest for training
    seed = audit.cfg.seed
    n_val = min(50 if audit.quick else 300, (len(exposed) - len(docs)) // 2)
    val = validation_docs(store, n_val, exclude=docs, seed=seed + 1) if n_val > 0 else None
    for m in opts["methods"]:
        methods[m] = train_eqi(m, store, qv, doc_emb, steps=int(opts["steps"]),
                               n_queries=min(50_000, len(store.queries)),
                               n_docs=min(20_000, len(exposed)), exclude_docs=docs,
                               seed=seed, validation_docs=val,
                               eval_every=10, patience=10, encoder=audit.encoder())
        methods[m].meta["system"] = spec.name  # what `limelight serve` offers it for
    return methods, None, doc_emb[docs]


def _eqi_not_covered(audit: Audit) -> str:
    """Why EQI leaves out the systems it leaves out (one line), or ``""``."""
    specs = _eqi_specs(audit)
    why = [_left_out([s], LOCAL_INDEX, EXACT_REVERSE).removeprefix("not run for ")
           or f"{s.name} (no exposure store)" for s in audit.cfg.systems if s not in specs]
    return ("not run for " + "; ".join(why)) if why else ""


EQI = Stage("eqi", "exposing-query identification (RELQ) and exact reverse search", _eqi,
            # "models saved": audits whose EQI stage ran before the models were saved run it again
            key=lambda a: ([a.key(f"exposure-{s.name}") for s in _eqi_specs(a)], _eqi_opts(a),
                           a.cfg.seed, a.key("query-vectors"), "models saved"),
            inputs=("index",), outputs=_eqi_model_dirs, skip=_eqi_skip,
            note=_eqi_not_covered)  # shown in the stage table and under the EQI section


# ---- query variations and generated queries ---------------------------------------------------
def _robustness_opts(audit: Audit) -> dict:
    cfg = audit.cfg
    return {"methods": "all", "measure": cfg.measures[0] if cfg.measures else "nDCG@10",
            "mode": "full", **cfg.options.get("robustness", {})}


def _robustness(audit: Audit, bar: Progress) -> dict:
    """Query-variation robustness (where qrels exist)."""
    from limelight.querygen.robustness import robustness_report

    cfg, inp, opts = audit.cfg, audit.inputs, _robustness_opts(audit)
    pipes = {s.name: audit.retriever(s, query_vectors=False) % 1000 for s in _able(cfg, NEW_QUERIES)}
    rep = robustness_report(pipes, inp.eval_queries, inp.dataset.qrels, opts["methods"],
                            opts["measure"], mode=opts["mode"], seed=cfg.seed,
                            dataset=inp.dataset.name)
    _write_table(audit, "robustness", rep.to_pandas())
    figs = []
    if len(rep.rows):
        rep.plot(audit.dir.figures_dir / "robustness.png")
        figs.append("robustness.png")
    bar.update(1, 1)
    return {"summary": {"measure": rep.measure, "methods": rep.methods, "skipped_methods": rep.skipped,
                        "n_queries": len(rep.qids), "notes": rep.notes}, "figures": figs}


ROBUSTNESS = Stage("robustness", "query-variation robustness", _robustness,
                   key=lambda a: (a.key("index"), [s.settings() for s in _able(a.cfg, NEW_QUERIES)],
                                  _robustness_opts(a), a.cfg.seed, _eval_qids(a)),
                   inputs=("index",),
                   skip=lambda a: (_switched_off(a, "robustness") or _no_qrels(a)
                                   or _none_able(a, NEW_QUERIES, "to retrieve query variations")),
                   note=lambda a: _left_out(a.cfg.systems, NEW_QUERIES))


def _ctrlqgen_system(cfg: AuditConfig) -> SystemSpec:
    """The system the generated queries run on: the first that answers new queries (the first
    system of the config when none does: the stage then says why it cannot run)."""
    able = _able(cfg, NEW_QUERIES)
    return able[0] if able else cfg.systems[0]


def _ctrlqgen_opts(audit: Audit) -> dict:
    """``[ctrlqgen]`` with defaults; the default schema is the one shipped for the collection's
    name (``debian``, ``movies``) or None: a collection's name is never opened as a path."""
    from limelight.querygen.serialize import shipped_schema_name

    return {"schema": shipped_schema_name(audit.inputs.dataset.name),
            "intents": ["narrow", "broad"], "n": 1,
            "n_entities": 500 if audit.quick else 5000, "generator": None,
            **audit.cfg.options.get("ctrlqgen", {})}


def _ctrlqgen_skip(audit: Audit) -> str | None:
    from limelight.errors import LimelightError
    from limelight.querygen.serialize import load_schema

    if off := _switched_off(audit, "ctrlqgen"):
        return off
    if audit.cfg.query_source == "generated":
        return ("the audit's own queries are generated (queries.source = \"generated\"): the "
                "systems' retrievability above is already under CtrlQGen queries")
    spec, inp = _ctrlqgen_system(audit.cfg), audit.inputs
    if none := _none_able(audit, NEW_QUERIES, "to run the generated queries"):
        return none
    if not _present(audit, f"retrievability-{spec.name}"):
        return f"needs the retrievability of {spec.name}"
    schema = _ctrlqgen_opts(audit)["schema"]
    if schema is None:
        return (f"{inp.dataset.name} has no CtrlQGen entity schema (narrow/broad fields): none is "
                f"shipped for that name (debian, movies); set [ctrlqgen] schema = \"FILE.toml\"")
    try:
        load_schema(schema).check_collection(inp.dataset.collection)
    except LimelightError as e:
        return f"{inp.dataset.name} has no CtrlQGen entity schema (narrow/broad fields): {e}"
    return None


def _ctrlqgen(audit: Audit, bar: Progress) -> dict:
    """CtrlQGen (Penha et al., WWW 2023) synthetic queries of each intent (WeakLabeling-Un unless
    ``[ctrlqgen] generator`` names a trained model) for a seeded sample of entities, their exact
    exposure under the first system, and the effect on retrievability: r(d) and Gini under the
    log, under the generated queries, and under both (r is additive over queries)."""
    from limelight.exposure.compute import compute_exposure
    from limelight.exposure.retrievability import gini, retrievable_fraction
    from limelight.querygen.generator import generate_queries, generator_source, load_generator
    from limelight.querygen.serialize import load_schema

    cfg, coll, opts = audit.cfg, audit.inputs.dataset.collection, _ctrlqgen_opts(audit)
    spec = _ctrlqgen_system(cfg)
    schema = load_schema(opts["schema"])
    generator = None if not opts["generator"] else load_generator(
        opts["generator"], schema, opts.get("backbone"), what="[ctrlqgen] generator")
    base = pd.read_parquet(audit.dir.retrievability_path(spec.name))
    rows, n_gen = [], {}
    intents = list(opts["intents"])
    for i, intent in enumerate(intents):
        gen = generate_queries(coll, schema, intent, n=int(opts["n"]), generator=generator,
                               n_entities=min(int(opts["n_entities"]), len(coll)), seed=cfg.seed)
        n_gen[intent] = len(gen)
        st = compute_exposure(audit.retriever(spec, query_vectors=False), gen,
                              audit.dir.path / "ctrlqgen" / intent, depth=cfg.depth,
                              shard_size=cfg.shard_size)
        sample = pd.DataFrame({"intent": intent, "entity_id": gen.fields["entity_id"][:20],
                               "query": gen.texts[:20]})
        _write_table(audit, f"ctrlqgen_sample_{intent}", sample)
        for c in cfg.cutoffs:
            r_log = base[f"r_c{c}"].to_numpy()
            r_gen = st.retrievability(c=c).r
            for label, r in (("log", r_log), (f"generated ({intent})", r_gen),
                             (f"log + generated ({intent})", r_log + r_gen)):
                if label == "log" and i > 0:
                    continue
                rows.append({"system": spec.name, "queries": label, "c": c, "gini": gini(r),
                             "retrievable_fraction": retrievable_fraction(r)})
        bar.update(i + 1, len(intents))
    df = pd.DataFrame(rows).sort_values(["c", "queries"], kind="stable", ignore_index=True)
    _write_table(audit, "ctrlqgen", df)
    return {"summary": {"system": spec.name, "n_generated": n_gen,
                        "generator": opts["generator"] or "WeakLabeling-Un",
                        "source": generator_source(generator)}}


def _ctrlqgen_note(audit: Audit) -> str:
    """Where the stage's queries came from (shown under the CtrlQGen section of the report)."""
    from limelight.querygen.generator import generator_source

    gen = _ctrlqgen_opts(audit)["generator"]
    return f"Generated queries: {generator_source(gen)}."


CTRLQGEN = Stage("ctrlqgen", "CtrlQGen synthetic queries and their retrievability effect", _ctrlqgen,
                 key=lambda a: (a.key(f"retrievability-{_ctrlqgen_system(a.cfg).name}"),
                                dict(_ctrlqgen_opts(a)), a.cfg.seed),
                 outputs=lambda a: (a.dir.path / "ctrlqgen",), skip=_ctrlqgen_skip,
                 note=_ctrlqgen_note)


# ---- intervention: stochastic (Plackett-Luce) policies over each system ------------------------
def _with_exposure(audit: Audit) -> list[str]:
    return [s.name for s in audit.cfg.systems if _present(audit, f"exposure-{s.name}")]


def _intervention_opts(audit: Audit) -> tuple[list[float], int, int]:
    """The temperatures (T = 0 always among them), samples per query and cutoff c."""
    cfg = audit.cfg
    opts = cfg.options.get("intervention", {})
    temps = [float(t) for t in opts.get("temperatures", [0, 0.1, 0.2, 0.5, 1, 2])]
    if 0.0 not in temps:
        temps = [0.0, *temps]
    c = int(opts.get("c", 10 if 10 in cfg.cutoffs else min(cfg.cutoffs)))
    return temps, int(opts.get("samples", 16)), c


def _intervention_skip(audit: Audit) -> str | None:
    if off := _switched_off(audit, "intervention"):
        return off
    if audit.cfg.options.get("intervention") is None:
        return "no [intervention] table in the configuration"
    return None if _with_exposure(audit) else "no system has an exposure store"


def _intervention(audit: Audit, bar: Progress) -> dict:
    """Expected r(d), its Gini and retrievable fraction under a Plackett-Luce policy over each
    system's stored top-n, for the temperatures of ``[intervention]`` (issue 21)."""
    from limelight.exposure.stochastic import stochastic_store_exposure

    cfg, inp, names = audit.cfg, audit.inputs, _with_exposure(audit)
    temps, samples, c = _intervention_opts(audit)
    judged = inp.eval_queries is not None
    specs = {s.name: s for s in cfg.systems}
    rows = []
    total = len(names) * len(temps)
    for i, n in enumerate(names):
        st = audit.dir.store(n)
        # with judgments, the same policy over the judged queries' top-n: its relevance price
        run = (audit.retriever(specs[n], query_vectors=False).retrieve(inp.eval_queries, cfg.depth)
               if judged else None)
        for j, t in enumerate(sorted(temps)):
            sx = stochastic_store_exposure(st, t, c=c, n_samples=samples, seed=cfg.seed)
            d = sx.to_dict()
            rows.append({"system": n, "temperature": t, "c": c, "samples": samples,
                         "gini": d["gini"], "retrievable_fraction": d["retrievable_fraction"],
                         **(_policy_relevance(run, inp, t, samples, cfg.seed) if judged else {})})
            bar.update(i * len(temps) + j + 1, total)
    df = pd.DataFrame(rows)
    base = df[df["temperature"] == 0].set_index("system")["gini"]
    df["gini_change"] = df["gini"] / df["system"].map(base) - 1.0
    table = _write_table(audit, "intervention", df)
    fig = _intervention_figure(df, audit.dir.figures_dir / "intervention.png", c)
    summary = {n: {f"T={t:g}": g for t, g in zip(df[df.system == n]["temperature"],
                                                 df[df.system == n]["gini"], strict=True)}
               for n in names}
    return {"table": table, "figure": fig, "summary": summary}


INTERVENTION = Stage("intervention", "stochastic rankings: expected retrievability per temperature",
                     _intervention,
                     key=lambda a: ([a.key(f"exposure-{n}") for n in _with_exposure(a)],
                                    *_intervention_opts(a), a.cfg.seed),
                     skip=_intervention_skip)


def _policy_relevance(run, inp: AuditInputs, t: float, samples: int, seed: int,
                      gamma: float = 0.5) -> dict:
    """Expected nDCG@10 and EE-L/EE-D/EE-R (γ = ``gamma``) over the judged queries of the
    Plackett-Luce policy at temperature ``t`` over ``run``'s top-n."""
    from limelight.evaluation.expected_exposure import evaluate_exposure, expected_ndcg
    from limelight.exposure.stochastic import policy_expectations

    n_docs = len(inp.dataset.collection)
    pol = policy_expectations(run, t, k=int(run.depths().max()) if len(run) else 1, gamma=gamma,
                              n_samples=max(samples, 32), seed=seed)
    _, ndcg = expected_ndcg(pol.dcg, inp.dataset.qrels, 10, n_docs=n_docs)
    ee = evaluate_exposure(pol.exposure, inp.dataset.qrels,
                           f"EE-L(gamma={gamma}) EE-D(gamma={gamma}) EE-R(gamma={gamma})",
                           n_docs=n_docs)
    return {"ndcg10": float(ndcg.mean()), **{m.name: float(v) for m, v in ee.aggregate.items()}}


def _intervention_figure(df: pd.DataFrame, path, c: int) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    judged = "ndcg10" in df.columns
    fig, axes = plt.subplots(1, 2 if judged else 1, figsize=(11 if judged else 5.5, 4), dpi=110)
    ax = axes[0] if judged else axes
    if judged:  # the trade-off: relevance against the spread of exposure, T along each curve
        tr = axes[1]
        for n, g in df.groupby("system", sort=False):
            tr.plot(g["gini"], g["ndcg10"], "-o", ms=3, label=n)
            for x, y, t in zip(g["gini"], g["ndcg10"], g["temperature"], strict=True):
                tr.annotate(f"{t:g}", (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        tr.set_xlabel(f"Gini of expected r(d), c = {c}")
        tr.set_ylabel("expected nDCG@10 (judged queries)")
        tr.set_title("trade-off (labels: T)", fontsize=9)
        tr.legend(fontsize=8)
    for n, g in df.groupby("system", sort=False):
        x = g["temperature"].to_numpy()
        ax.plot(np.where(x > 0, x, np.nan), g["gini"], "-o", ms=3, label=n)
        ax.axhline(g["gini"].iloc[0], color=ax.lines[-1].get_color(), lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("temperature T (relative to each query's score spread; dotted: T = 0)")
    ax.set_ylabel(f"Gini of expected r(d), c = {c}")
    ax.legend(fontsize=8)
    ax.set_title("Plackett-Luce policies over each system's top-n", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path.name
