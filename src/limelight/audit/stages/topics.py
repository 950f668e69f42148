"""Stage ``topics``: topic-aware retrievability (T-Retrievability, issue 56) and topics as groups
of documents in the fairness module.

The log's searches are clustered into K topics (``limelight.exposure.topics``: K-means over their
TF-IDF, or over the audit's query vectors), the same topics for every system; per system, the
rank-weighted r_i(d) within each topic, a Gini per topic beside the collection's, each
document's standing within its topics, and group fairness with the topics as groups (each
document split over the topics whose searches retrieve it, under the first system's assignment,
so that the systems are compared on one grouping). Tables: ``topics`` (a row per system and
topic), ``topic_standings_<system>`` (a row per document and topic of its population) and
``topic_fairness`` (a row per system and topic group).
"""

from __future__ import annotations

import pandas as pd

from limelight.audit.stage import Audit, Option, Progress, Stage, StageOptions
from limelight.audit.stages.common import present, switched_off, write_table

MODELS = ("tfidf", "vectors")


def _check(opts: dict, fail, context: dict) -> None:
    """``[topics]``: ``k`` ≥ 1, ``model`` tfidf or vectors, ``fairness`` a boolean."""
    if opts.get("k", 1) < 1:
        fail("k", f"topics.k must be ≥ 1, got {opts['k']}")
    if opts.get("model", "tfidf") not in MODELS:
        fail("model", f"topics.model must be \"tfidf\" or \"vectors\", not {opts['model']!r}")


OPTIONS = StageOptions("topics", {
    "k": Option(int, 20, help="number of topics K the searches are clustered into (K-means, seeded by "
                              "audit.seed)"),
    "model": Option(str, "tfidf", help="tfidf (the searches' words, LSA-reduced) or vectors (the audit's "
                                       "dense query vectors; needs a dense or hybrid system)"),
    "fairness": Option(bool, True, help="group fairness with the topics as groups of documents"),
}, _check)


def _with_exposure(audit: Audit) -> list[str]:
    return [s.name for s in audit.cfg.systems if present(audit, f"exposure-{s.name}")]


def _opts(audit: Audit) -> dict:
    return OPTIONS.values(audit)


def _c(audit: Audit) -> int:
    return 100 if 100 in audit.cfg.cutoffs else max(audit.cfg.cutoffs)


def _skip(audit: Audit) -> str | None:
    if off := switched_off(audit, "topics"):
        return off
    if not _with_exposure(audit):
        return "no system has an exposure store"
    if _opts(audit)["model"] == "vectors" and not audit.dir.query_vectors.exists():
        return "topics.model = \"vectors\" needs the audit's query vectors (a dense or hybrid system)"
    return None


def _topics(audit: Audit, bar: Progress) -> dict:
    """Topics of the searches, T-Retrievability per system, standings, topic-group fairness."""
    import numpy as np

    from limelight.exposure.fairness import group_fairness
    from limelight.exposure.topics import (
        store_topic_retrievability,
        topics_from_texts,
        topics_from_vectors,
    )

    cfg, names, opts = audit.cfg, _with_exposure(audit), _opts(audit)
    c = _c(audit)
    first = audit.dir.store(names[0])
    k = min(int(opts["k"]), len(first.query_weights))
    texts = first.queries_table().column("text")
    if opts["model"] == "vectors":
        topics = topics_from_vectors(np.load(audit.dir.query_vectors), k, cfg.seed, texts.to_pylist())
    else:
        topics = topics_from_texts(texts, k, cfg.seed)
    steps = len(names) * (2 if opts["fairness"] else 1)
    rows, fair, out, groups = [], [], {}, None
    for i, n in enumerate(names):
        st = audit.dir.store(n)
        res = store_topic_retrievability(st, topics, c)
        rows.append(res.table.assign(system=n))
        write_table(audit, f"topic_standings_{n}", res.standings())
        s = res.summary
        out[n] = {key: s[key] for key in ("gini_same_weighting", "topic_gini_min", "topic_gini_mean",
                                            "topic_gini_max", "topic_gini_mean_weighted",
                                            "n_topics_with_documents")}
        out[n]["gini"] = st.retrievability(c=c).gini
        if groups is None:
            groups = res.groups("share")  # the first system's assignment, for every system
        bar.update(i + 1, steps)
    if opts["fairness"]:
        for i, n in enumerate(names):
            g = group_fairness(audit.dir.store(n), groups, None, "size", n_boot=50 if audit.quick else 200,
                               seed=cfg.seed, top=3)
            fair.append(g.groups.assign(system=n))
            out[n]["topic_fairness_tvd"] = g.summary["tvd"]
            bar.update(len(names) + i + 1, steps)
        write_table(audit, "topic_fairness", pd.concat(fair, ignore_index=True))
    write_table(audit, "topics", pd.concat(rows, ignore_index=True))
    return {"c": c, "k": topics.k, "model": topics.method, "seed": cfg.seed, "weighting": "log",
            "population": "retrieved", "groups_from": names[0], "systems": out,
            "n_queries": int(len(topics.labels))}


TOPICS = Stage("topics", "topic-aware retrievability and topics as groups", _topics,
               key=lambda a: ([a.key(f"exposure-{n}") for n in _with_exposure(a)], _opts(a), a.cfg.seed,
                              _c(a), a.quick),
               skip=_skip, report=lambda d, s: report_section(d, s))


# ---- report ---------------------------------------------------------------------------------------
def _order(systems: dict, key: str) -> list[str]:
    return sorted(systems, key=lambda n: systems[n][key])


def report_section(audit_dir, stages) -> list:
    """The collection's Gini beside the per-topic Ginis per system, whether the systems' order
    changes, the most unequal topics, and how fairly the topics share the attention."""
    from limelight.audit.stage import Table, Text
    from limelight.audit.stages.common import read_table, section_start

    blocks, rec = section_start(stages, "topics", "Inequality within the topics of the searches")
    if rec is None:
        return blocks
    res = rec.get("result") or {}
    systems, c = res.get("systems") or {}, res.get("c")
    table = read_table(audit_dir, "topics")
    if not systems or table is None:
        return blocks
    blocks.append(Text(
        f"A collection-wide [[gini|inequality]] mixes two things: how unequally a system shows "
        f"documents, and how unequally the searches ask about them. Here the "
        f"{res.get('n_queries', 0):,} searches are grouped into {res['k']} topics "
        f"{'by their dense vectors' if 'vectors' in str(res.get('model')) else 'by their words'} "
        f"(K-means), and inequality is measured within each topic, over the documents its "
        f"searches find, each result weighted by 1 / ln(1 + rank) (Chang, Meng & Ganguly, CIKM 2025)."))
    for n, s in systems.items():
        t = table[table["system"] == n].dropna(subset=["gini"])
        worst = t.iloc[0] if len(t) else None
        blocks.append(Text(
            f"Under {n}, the collection's inequality is {s['gini']:.3f} (top {c}); within topics it "
            f"ranges from {s['topic_gini_min']:.3f} to {s['topic_gini_max']:.3f} (mean "
            f"{s['topic_gini_mean']:.3f})"
            + (f"; the most unequal topic is “{worst['name']}” ({int(worst['n_queries']):,} searches, "
               f"inequality {worst['gini']:.3f})." if worst is not None else ".")))
    if len(systems) > 1:
        a, b = _order(systems, "gini"), _order(systems, "topic_gini_mean")
        blocks.append(Text(
            f"From most even to least: {', '.join(a)} by the collection's inequality; "
            f"{', '.join(b)} by the mean inequality within topics"
            + (" — the same order." if a == b else " — the order changes: part of the difference "
               "between the systems is in which topics the searches ask about.")))
    summ = pd.DataFrame([{"system": n, "gini": s["gini"], "gini_same_weighting": s["gini_same_weighting"],
                          "topic_gini_min": s["topic_gini_min"], "topic_gini_mean": s["topic_gini_mean"],
                          "topic_gini_max": s["topic_gini_max"],
                          "topic_gini_mean_weighted": s["topic_gini_mean_weighted"]}
                         for n, s in systems.items()])
    blocks.append(Table(summ.rename(columns={
        "system": "system", "gini": f"inequality of the collection (top {c})",
        "gini_same_weighting": "the same, rank-weighted, documents found",
        "topic_gini_min": "within topics: lowest", "topic_gini_mean": "within topics: mean",
        "topic_gini_max": "within topics: highest",
        "topic_gini_mean_weighted": "within topics: mean weighted by searches"}),
        "Per system: the collection's [[gini|inequality]] beside the inequality within each topic "
        "of the searches (lowest, mean over topics, highest, and the mean weighted by how often "
        "each topic's searches were issued)."))
    top = table.dropna(subset=["gini"]).groupby("system", sort=False).head(5)
    blocks.append(Table(top[["system", "name", "n_queries", "weight", "n_docs", "gini"]].rename(columns={
        "system": "system", "name": "topic (its heaviest words)", "n_queries": "searches",
        "weight": "times issued", "n_docs": "documents found", "gini": "inequality within the topic"}),
        "The five most unequal topics of each system. Each document's standing within its topics "
        "(its rank, the share of the topic's documents below it) is in the audit's tables and on "
        "the web app's topics page.",
        formats={"times issued": "int"}, raw=("topic (its heaviest words)",),
        source=str(audit_dir.table("topics"))))
    return blocks + _fairness_blocks(audit_dir, res)


def _fairness_blocks(audit_dir, res: dict) -> list:
    """Topics as groups: per system the topic with the largest deficit, and the largest gaps."""
    from limelight.audit.stage import Table, Text
    from limelight.audit.stages.common import pct, read_table

    fair = read_table(audit_dir, "topic_fairness")
    blocks: list = []
    systems = res.get("systems") or {}
    if fair is not None and len(fair):
        lo = fair.loc[fair.groupby("system", sort=False)["gap"].idxmin()]
        for _, r in lo.iterrows():
            tvd = (systems.get(r["system"]) or {}).get("topic_fairness_tvd") or {}
            blocks.append(Text(
                f"Topics as groups under {r['system']}: “{r['group']}” holds {pct(r['size_share'])} of "
                f"the documents but gets {pct(r['exposure_share'])} of the attention, the largest "
                f"deficit" + (f"; {pct(tvd['value'])} of the attention would have to move to give "
                              f"every topic its share of documents." if tvd.get("value") is not None
                              else ".")))
        shown = fair.assign(order=fair["gap"].abs()).sort_values(["system", "order"], ascending=[True, False])
        shown = shown.groupby("system", sort=False).head(8)
        blocks.append(Table(shown[["system", "group", "n_docs", "size_share", "exposure_share", "gap"]].rename(
            columns={"system": "system", "group": "topic", "n_docs": "documents",
                     "size_share": "share of documents", "exposure_share": "share of attention",
                     "gap": "attention gap"}),
            f"Topics as groups of documents (each document split over the topics whose searches "
            f"find it, as under {res.get('groups_from')}): each topic's share of the searchers' "
            f"attention against its share of documents, largest gaps first.",
            formats={"share of documents": "percent", "share of attention": "percent",
                     "attention gap": "points"}, raw=("topic",), source=str(audit_dir.table("topic_fairness"))))
    return blocks
