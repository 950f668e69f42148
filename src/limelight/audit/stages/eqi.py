"""Stage ``eqi``: exposing-query identification (RELQ) and exact reverse search for the systems
with a local index and exact reverse search."""

from __future__ import annotations

import numpy as np
import pandas as pd

from limelight.audit.stage import Audit, Option, Progress, Stage, StageOptions, SystemView
from limelight.audit.stages.common import (
    able,
    left_out,
    present,
    switched_off,
    uses_vectors,
    write_table,
)
from limelight.retrieval.systems import (
    EXACT_REVERSE,
    LOCAL_INDEX,
)


# ---- EQI ----------------------------------------------------------------------------------------
def _eqi_specs(audit: Audit) -> list[SystemView]:
    """The systems with a local index and exact reverse search (BM25, dense) and an exposure
    store: those EQI covers."""
    return [s for s in able(audit.cfg, LOCAL_INDEX, EXACT_REVERSE) if present(audit, f"exposure-{s.name}")]


def _check(opts: dict, fail, context: dict) -> None:
    """``[eqi]``: counts ≥ 1, learned methods among those limelight trains."""
    for k in ("docs", "steps", "k"):
        if opts.get(k, 1) < 1:
            fail(k, f"eqi.{k} must be ≥ 1, got {opts[k]}")
    from limelight.exposure.eqi.learned import METHODS

    for m in opts.get("methods", []):
        if not isinstance(m, str) or m.lower() not in {x.lower() for x in METHODS}:
            fail("methods", f"eqi.methods: unknown {m!r} (known: {', '.join(METHODS)})")


OPTIONS = StageOptions("eqi", {
    "docs": Option(int, 300, 50, "exposed documents evaluated (a seeded sample)"),
    "steps": Option(int, 300, 30, "training steps of each learned model"),
    "methods": Option(list, ["residual"], help="learned EQI models trained on dense systems"),
    "k": Option(int, 100, help="length of each ranked list of exposing queries"),
}, _check)


def _eqi_skip(audit: Audit) -> str | None:
    if off := switched_off(audit, "eqi"):
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
    dense = [s for s in _eqi_specs(audit) if uses_vectors(s)]
    return tuple(audit.dir.eqi_dir(m if s is dense[0] else f"{m}-{s.name}")
                 for s in dense for m in OPTIONS.values(audit)["methods"])


def _eqi(audit: Audit, bar: Progress) -> dict:
    """EQI (Li et al., WWW 2022) per BM25 / dense system: reverse baselines (BM25-reverse,
    dense-reverse) and a trained Residual model evaluated with RELQ against the exposure store on
    a seeded sample of exposed documents; exact reverse search for the most exposed document.

    One system at a time (:func:`_eqi_system`), whose store, retriever, query vectors and
    methods go before the next one's are read; within a system one method's index at a time
    (the demo's stage: 1.2 GB less at its peak, docs/results-dense.md)."""
    specs, opts = _eqi_specs(audit), OPTIONS.values(audit)
    rows, reverse_rows, summary, models = [], [], {}, {}
    first_dense = next((s for s in specs if uses_vectors(s)), None)
    rng = np.random.default_rng(audit.cfg.seed)  # one draw per system, in the systems' order
    for i, spec in enumerate(specs):
        res, saved, reverse = _eqi_system(audit, spec, rng, opts, spec is first_dense)
        models.update(saved)
        for m, vals in res.items():
            rows.append({"system": spec.name, "method": m, **vals})
        summary[spec.name] = res
        reverse_rows += reverse
        bar.update(i + 1, len(specs))
    write_table(audit, "relq", pd.DataFrame(rows))
    if reverse_rows:
        write_table(audit, "reverse", pd.DataFrame(reverse_rows))
    return {"summary": summary, "models": models}


def _eqi_system(audit: Audit, spec: SystemView, rng: np.random.Generator, opts: dict,
                first_dense: bool) -> tuple[dict, dict, list]:
    """One system's EQI: ``(RELQ per method, the learned models saved, the exact reverse
    search's rows)``. Each method's lists are computed, and a learned model saved, before the
    next method is built (one FAISS index of the query log at a time); the query vectors are
    read once (the retriever is opened without its own copy: EQI searches with none of it)."""
    from limelight.exposure.eqi import ExactReverse, evaluate_lists, method_lists, summarize

    store = audit.dir.store(spec.name)
    n_exp = store.n_exposing()
    exposed = np.flatnonzero(n_exp > 0)
    docs = np.sort(rng.choice(exposed, size=min(int(opts["docs"]), len(exposed)), replace=False))
    retr = audit.retriever(spec, query_vectors=False)
    k, saved = int(opts["k"]), {}
    qv = np.load(audit.dir.query_vectors) if uses_vectors(spec) else None
    lists = {}
    for name, make in _eqi_methods(audit, spec, store, retr, qv, exposed, docs, opts):
        method, texts, emb = make()
        lists[name] = method_lists(method, docs, texts, emb, k)
        if name in opts["methods"] and uses_vectors(spec):
            # DIR/eqi/<method>/ (the first dense system; others <method>-<system>/), where
            # `limelight serve --audit DIR` finds the learned models it shows
            dest = name if first_dense else f"{name}-{spec.name}"
            method.save(audit.dir.eqi_dir(dest))
            saved[dest] = {"method": name, "system": spec.name}
        del method, texts, emb  # (its index of the query log goes before the next one's)
    res = summarize(evaluate_lists(store, docs, lists))
    # (every system here has exact reverse search: _eqi_specs) a stored document's exposing
    # queries are read from the store: the engine is checked against the store but not prepared
    # (no stored list or query index is read)
    ex = ExactReverse.build(store, retr, qv, cache_dir=None, prepare=False)
    docid = store.doc_ids.strings[int(np.argmax(n_exp))]
    reverse = [{"system": spec.name, "docid": docid, **r} for r in ex.query(docid=docid, k=10)]
    return res, saved, reverse


def _eqi_methods(audit: Audit, spec: SystemView, store, retr, qv: np.ndarray | None,
                 exposed: np.ndarray, docs: np.ndarray, opts: dict) -> list:
    """The EQI methods evaluated for one system, in the order of its results (BM25:
    BM25-reverse; dense: dense-reverse and the trained ``opts["methods"]``), each as ``(name,
    make)``: ``make()`` builds (or trains) it and gives ``(method, document texts, document
    embeddings)``, what it is evaluated on."""
    from limelight.exposure.eqi import BM25Reverse, DenseReverse, train_eqi, validation_docs

    if not uses_vectors(spec):  # a term index: reverse search over the analyzed log
        return [("bm25-reverse", lambda: (BM25Reverse(store.queries, retr.index.analyzer),
                                          audit.inputs.dataset.collection.texts[docs].tolist(), None))]
    doc_emb = np.asarray(retr.index.embeddings, dtype=np.float32)
    out = [("dense-reverse", lambda: (DenseReverse(store.queries, qv), None, doc_emb[docs]))]
    # early-stopping documents, leaving at least half the rest for training
    seed = audit.cfg.seed
    n_val = min(50 if audit.quick else 300, (len(exposed) - len(docs)) // 2)
    val = validation_docs(store, n_val, exclude=docs, seed=seed + 1) if n_val > 0 else None

    def trained(m: str):
        model = train_eqi(m, store, qv, doc_emb, steps=int(opts["steps"]),
                          n_queries=min(50_000, len(store.queries)),
                          n_docs=min(20_000, len(exposed)), exclude_docs=docs,
                          seed=seed, validation_docs=val,
                          eval_every=10, patience=10, encoder=audit.encoder())
        model.meta["system"] = spec.name  # what `limelight serve` offers it for
        return model, None, doc_emb[docs]

    return out + [(m, lambda m=m: trained(m)) for m in opts["methods"]]


def _eqi_not_covered(audit: Audit) -> str:
    """Why EQI leaves out the systems it leaves out (one line), or ``""``."""
    specs = _eqi_specs(audit)
    why = [left_out([s], LOCAL_INDEX, EXACT_REVERSE).removeprefix("not run for ")
           or f"{s.name} (no exposure store)" for s in audit.cfg.systems if s not in specs]
    return ("not run for " + "; ".join(why)) if why else ""


EQI = Stage("eqi", "exposing-query identification (RELQ) and exact reverse search", _eqi,
            # "models saved": audits whose EQI stage ran before the models were saved run it again
            key=lambda a: ([a.key(f"exposure-{s.name}") for s in _eqi_specs(a)], OPTIONS.values(a),
                           a.cfg.seed, a.key("query-vectors"), "models saved"),
            inputs=("index",), outputs=_eqi_model_dirs, skip=_eqi_skip,
            note=_eqi_not_covered,  # shown in the stage table and under the EQI section
            report=lambda d, s: report_section(d, s))


def report_section(audit_dir, stages) -> list:
    """How well each method finds the searches that show a document (RELQ against the exact
    lists of the store), and the searches that show each system's most shown document."""
    from limelight.audit.stage import Table, Text
    from limelight.audit.stages.common import read_table, section_start

    blocks, rec = section_start(stages, "eqi", "Which searches show a document?")
    if rec is None:
        return blocks
    relq = read_table(audit_dir, "relq")
    if relq is not None and len(relq):
        score = [c for c in relq.columns if c.startswith("RELQ")]
        if score:
            best = relq.loc[relq[score[0]].idxmax()]
            blocks.append(Text(f"The best way to list the searches that show a document is "
                               f"{best['method']} on {best['system']}: [[relq|{score[0]}]] "
                               f"{best[score[0]]:.3f} (1 would list them exactly, best first)."))
        blocks.append(Table(relq.rename(columns={"method": "method", "n_docs": "documents evaluated"}),
                            "Mean [[relq]] (Li et al., WWW 2022, equations 1 to 4) of each "
                            "[[eqi|exposing-query identification]] method against the exact lists "
                            "of searches that show each document, on a seeded sample of shown "
                            "documents.", source=str(audit_dir.table("relq"))))
    rev = read_table(audit_dir, "reverse")
    if rev is not None and len(rev):
        rev = rev.rename(columns={"docid": "document", "qid": "search id", "query": "search",
                                  "rank": "rank of the document", "score": "match score"})
        blocks.append(Table(rev, "Exact reverse search: the searches that rank each system's most "
                                 "shown document highest (from the exposure store).",
                            ids=("document", "search id"), raw=("search",),
                            source=str(audit_dir.table("reverse"))))
    return blocks
