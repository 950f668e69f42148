"""``limelight fairness``: exposure of groups of documents against a target, over a store's log;
``limelight distfair``: attention against merit over the log in its order, query-aware and
query-agnostic (``limelight.exposure.distfair``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from limelight.cli.console import print_table
from limelight.errors import LimelightError, plural


def _merit(spec: str | None, store):
    """``qrels:FILE`` or ``reference:STORE_DIR`` → a ``Merit`` (None without ``--merit``)."""
    from limelight.exposure.fairness import Merit
    from limelight.exposure.store import ExposureStore

    if spec is None:
        return None
    kind, _, arg = spec.partition(":")
    if kind == "qrels" and arg:
        from limelight.data.formats import read_trec_qrels

        path = Path(arg)
        if not path.is_file():
            raise LimelightError(f"--merit qrels:{arg}: no such file")
        return Merit.from_qrels(read_trec_qrels(path), store, f"qrels:{arg}")
    if kind == "reference" and arg:
        ref = ExposureStore.open(arg)
        return Merit.from_reference(ref, store, Path(arg).as_posix())
    raise LimelightError(f"--merit {spec!r}: expected qrels:FILE or reference:STORE_DIR")


def _groups(store, group_field: str | None, groups_file: Path | None, index: Path | None):
    from limelight.exposure.fairness import Groups

    if (group_field is None) == (groups_file is None):
        raise LimelightError("give one of --group-field FIELD or --groups FILE.tsv")
    if groups_file is not None:
        if not groups_file.is_file():
            raise LimelightError(f"--groups {groups_file}: no such file")
        return Groups.from_tsv(groups_file, store.doc_ids)
    return Groups.from_field(store, group_field, index)


def _fmt(x: dict) -> str:
    """A value with its bootstrap interval when it has one: ``0.1234 [0.1000, 0.1500]``."""
    return f"{x['value']:.4f}" + (f" [{x['lo']:.4f}, {x['hi']:.4f}]" if "lo" in x else "")


def _print(res, top: int) -> None:
    s = res.summary
    typer.echo(f"{s['store']}: {plural(s['n_groups'], 'group')} of {s['groups_source']}, target {s['target']}, "
               f"browsing {s['browsing']}, {s['n_queries_used']:,} of {s['n_queries']:,} queries")
    for a in s["assumptions"]:
        typer.echo(f"assumption: {a}")

    typer.echo(f"total variation distance: {_fmt(s['tvd'])}; AWRF: {_fmt(s['awrf'])}")
    if "expected_exposure" in s:
        ee = s["expected_exposure"]
        typer.echo("group expected exposure: " + ", ".join(f"{k} {_fmt(ee[k])}" for k in ("EE-L", "EE-D", "EE-R")))
    cols = [c for c in ("group", "n_docs", "exposure_share", "target_share", "gap", "gap_lo", "gap_hi",
                        "dp", "dtr", "dir") if c in res.groups]
    g = res.groups.sort_values("gap")[cols].copy()
    n = g["n_docs"].to_numpy(dtype=float)
    # a count of documents (a list-valued field splits a document among its groups: a fraction)
    g["n_docs"] = [int(x) if x == int(x) else round(x, 2) for x in n.tolist()]
    print_table(_rows(g.head(top)), "largest deficits", decimals=3)
    print_table(_rows(g.tail(top).iloc[::-1]), "largest surpluses", decimals=3)
    c = res.contributors
    for key in ("largest_deficit", "largest_surplus"):
        name = (s.get(key) or {}).get("group")
        rows = c[c["group"] == name] if len(c) else c
        if len(rows):
            typer.echo(f"documents behind the {key.replace('_', ' ')} ({name}): " + ", ".join(
                f"{r.docid} ({100 * r.fraction_of_gap:.1f} %)" for r in rows.itertuples()))


def _rows(g) -> list[dict]:
    """The table's rows, read at a glance in 80 columns: headers in words (``exposure share``,
    ``gap low``), the number of documents as a count, the rest to three decimals (``--json``
    gives every digit)."""
    names = {"n_docs": "docs", "gap_lo": "gap low", "gap_hi": "gap high"}
    return [{names.get(k, k.replace("_", " ")): v if k in ("group", "n_docs") else float(v)
             for k, v in r.items()} for r in g.to_dict("records")]


def fairness_cmd(
    store: Path = typer.Option(..., help="exposure store directory (limelight exposure compute)"),
    group_field: str = typer.Option(None, help="document field to group by (section, tags…; "
                                               "lists split a document equally)"),
    groups: Path = typer.Option(None, "--groups", help="TSV of docid<TAB>group lines instead of a field"),
    index: Path = typer.Option(None, help="index directory to read --group-field from "
                                          "(default: the one the store records)"),
    merit: str = typer.Option(None, help="qrels:FILE (judgments) or reference:STORE_DIR (a "
                                         "reference system's scores, stated as an assumption)"),
    target: str = typer.Option("size", help="uniform (each query's retrieved documents), size "
                                            "(the collection's group sizes) or merit"),
    browsing: str = typer.Option("dcg", help="browsing model of the shares (rbp:γ, dcg, trec, …)"),
    boot: int = typer.Option(200, "--boot", help="bootstrap resamples of the queries (0: no intervals)"),
    seed: int = typer.Option(0, help="seed of the bootstrap"),
    top: int = typer.Option(5, help="groups shown, and contributing documents per group"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Fair exposure for groups of documents over the whole log: each group's share of the
    exposure against a target, Singh & Joachims' parity ratios, AWRF, group expected exposure
    (with --merit), bootstrap intervals over queries, and the documents behind each gap."""
    from limelight.exposure.browsing import parse_browsing_model
    from limelight.exposure.fairness import TARGETS, group_fairness
    from limelight.exposure.store import ExposureStore

    if target not in TARGETS:
        raise LimelightError(f"--target {target!r}: expected {', '.join(TARGETS)}")
    try:
        parse_browsing_model(browsing)
    except LimelightError as e:  # before the store is read, named by the option
        raise LimelightError(f"--browsing {browsing!r}: {e}") from None
    st = ExposureStore.open(store)
    grp = _groups(st, group_field, groups, index)
    m = _merit(merit, st)
    res = group_fairness(st, grp, m, target, browsing=browsing, n_boot=boot, seed=seed, top=top)
    if json_out:
        typer.echo(json.dumps(res.to_dict(), ensure_ascii=False))
        return
    _print(res, top)


def _print_distfair(res, top: int) -> None:
    s = res.summary
    groups = (f"{plural(s['n_groups'], 'group')} of {s['groups_source']}" if s["groups_given"]
              else "none given (--group-field or --groups)")
    typer.echo(f"{s['store']}: attention ({s['browsing']}) against merit ({s['merit']}) over "
               f"{s['n_queries_used']:,} of {s['n_queries']:,} queries in {s['order']}; groups: {groups}")
    for a in s["assumptions"]:
        typer.echo(f"assumption: {a}")

    typer.echo(f"divergence: {s['divergence']}")
    for lvl in ("individual", "group"):
        typer.echo(f"{lvl}: query-aware {_fmt(s[f'{lvl}_aware'])}, query-agnostic "
                   f"{_fmt(s[f'{lvl}_agnostic'])}, hidden by ignoring the queries (fairwashing) "
                   f"{_fmt(s['fairwashing'][lvl])}")
    b = s["bound"]
    typer.echo("group ≤ individual: " + ", ".join(
        f"{k.split('_')[-1]} {'holds' if v['holds'] else 'FAILS'}" for k, v in b.items()
        if k.startswith("group_le")))
    print_table([{k.replace("_", " "): v for k, v in r.items()} for r in res.sequence.to_dict("records")],
                f"over the log, in {s['order']}", decimals=4)
    g = res.groups.head(top)[["group", "n_docs", "attention_share", "merit_share", "gap", "hidden"]].copy()
    g["n_docs"] = [int(x) if x == int(x) else round(x, 2) for x in g["n_docs"].tolist()]  # a count
    print_table(_rows(g),
                "groups with the least attention for their merit", decimals=3)
    d = res.documents.sort_values("hidden", ascending=False).head(top)
    print_table([{k.replace("_", " "): v for k, v in r.items()} for r in
                 d[["docid", "attention_share", "merit_share", "aware", "agnostic", "hidden"]].to_dict("records")],
                "documents whose unfairness the query-agnostic view hides most", decimals=4)


def distfair_cmd(
    store: Path = typer.Option(..., help="exposure store directory (limelight exposure compute)"),
    merit: str = typer.Option(..., help="qrels:FILE (judgments) or reference:STORE_DIR (a "
                                        "reference system's scores, stated as an assumption)"),
    group_field: str = typer.Option(None, help="document field to group by (default: one group)"),
    groups: Path = typer.Option(None, "--groups", help="TSV of docid<TAB>group lines instead of a field"),
    index: Path = typer.Option(None, help="index directory to read --group-field from "
                                          "(default: the one the store records)"),
    browsing: str = typer.Option("dcg", help="browsing model of the attention (rbp:γ, dcg, trec, …)"),
    boot: int = typer.Option(200, "--boot", help="bootstrap resamples of the queries (0: no intervals)"),
    seed: int = typer.Option(0, help="seed of the bootstrap"),
    checkpoints: int = typer.Option(10, help="points of the log (in its order) the values are shown at"),
    log: Path = typer.Option(None, "--log", help="the query log the store was computed from: with a "
                                                 "time column, the log is walked in time order "
                                                 "(default: file order)"),
    top: int = typer.Option(5, help="groups and documents shown"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Attention against merit accumulated over the log in its order (after DistFaiR): the total
    variation distance between the two, per document and per group, query-aware and
    query-agnostic (the difference: unfairness the query-agnostic view hides), the group ≤
    individual bound checked, bootstrap intervals over queries. The log's order is the file's,
    or its time order with --log FILE where FILE has a time column; the output names it."""
    from limelight.exposure.distfair import distfair
    from limelight.exposure.store import ExposureStore

    st = ExposureStore.open(store)
    grp = _groups(st, group_field, groups, index) if (group_field or groups) else None
    res = distfair(st, _merit(merit, st), grp, browsing, n_boot=boot, seed=seed, checkpoints=checkpoints,
                   log=log)
    if json_out:
        typer.echo(json.dumps(res.to_dict(top), ensure_ascii=False, default=float))
        return
    _print_distfair(res, top)
