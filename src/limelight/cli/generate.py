"""``limelight generate``: CtrlQGen queries for catalog entities, generator training and Click
sets; ``limelight suggest``: broad query suggestions for a query's top entities.

    limelight generate --catalog debian --intent narrow --n 3 0ad vim
    limelight generate train --catalog movies --out models/ctrlqgen --steps 100 --weak ip+un \
        --checkpoint-dir models/ctrlqgen.ckpt --checkpoint-every 50 --budget-min 15   # exit 3: rerun with --resume
    limelight generate dataset --catalog debian --out click/ --n-queries 10000 --heldout-fraction 0.2
    limelight suggest "text editor" --catalog debian --index idx/debian --top-k 5 --n 3

Without ``--generator`` the queries come from WeakLabeling-Un (no model needed: the weak-label
fallback, and the output says so). The commands parse, call ``limelight.querygen`` (``generator``,
``training``, ``suggest``, ``weaklabel``) and print; user errors are one-line messages.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer
from typer.core import TyperGroup

from limelight._io import check_output_dir
from limelight.errors import LimelightError

_SUBCOMMANDS = ("entity", "train", "dataset")


class _DefaultEntityGroup(TyperGroup):
    """``limelight generate ARGS`` runs ``generate entity ARGS`` unless ARGS name a subcommand."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["entity", *args]
        return super().parse_args(ctx, args)


def _catalog(catalog: str):
    from limelight.data.loaders import load_catalog

    return load_catalog(catalog)


def _checked(catalog: str, schema: str | None):
    """The catalog and its schema, checked: a schema field the catalog lacks is an error."""
    from limelight.querygen.serialize import load_schema

    coll = _catalog(catalog)
    sch = load_schema(_schema_for(catalog, schema))
    sch.check_collection(coll)
    return coll, sch


def _backbone_needs_generator(backbone: Path | None, generator: Path | None) -> None:
    if backbone is not None and generator is None:
        raise LimelightError("--backbone is checked against --generator: give both (without "
                             "--generator, queries come from WeakLabeling-Un, no model)")


def _schema_for(catalog: str, schema: str | None) -> str:
    if schema:
        return schema
    from limelight.querygen.serialize import SCHEMA_DIR

    if (SCHEMA_DIR / f"{catalog}.toml").exists():
        return catalog
    raise LimelightError(f"catalog {catalog!r} has no shipped schema: pass --schema FILE.toml")


app = typer.Typer(cls=_DefaultEntityGroup, no_args_is_help=True,
                  help="CtrlQGen: narrow/broad queries for catalog entities "
                       "(default: `generate [OPTIONS] ENTITY_ID...`).")


@app.command("entity")
def entity(
    entity_ids: list[str] = typer.Argument(..., help="entity ids of the catalog"),
    catalog: str = typer.Option(..., help="debian, movies, or a catalog file"),
    intent: str = typer.Option("narrow", help="narrow or broad"),
    n: int = typer.Option(3, help="queries per entity"),
    schema: str = typer.Option(None, help="schema name or TOML file (default: the catalog's)"),
    generator: Path = typer.Option(None, help="a generator saved by `generate train` "
                                              "(default: WeakLabeling-Un, the weak-label fallback)"),
    backbone: Path = typer.Option(None, help="with --generator: the base model it must have been "
                                             "trained from (default: not checked)"),
    seed: int = typer.Option(0),
    json_out: bool = typer.Option(False, "--json", help="print JSON lines"),
) -> None:
    """Generate N queries with INTENT for each ENTITY_ID."""
    from limelight.querygen.generator import generate_queries, generator_source, load_generator
    from limelight.querygen.weaklabel import check_intent

    check_intent(intent)
    _backbone_needs_generator(backbone, generator)
    coll, sch = _checked(catalog, schema)
    gen = None if generator is None else load_generator(generator, sch, backbone)
    qs = generate_queries(coll, sch, intent, n=n, generator=gen, entity_ids=entity_ids, seed=seed,
                          empty="skip" if gen is None else "error")
    source = generator_source(gen)
    if not json_out:
        typer.echo(f"note: queries from {source}", err=True)
    missing = [e for e in entity_ids if e not in set(qs.fields["entity_id"].tolist())]
    for e in missing:
        typer.echo(f"note: entity {e!r} gave no {intent} query (its {intent} fields are empty)",
                   err=True)
    for e, t in zip(qs.fields["entity_id"].tolist(), qs.texts.tolist(), strict=True):
        typer.echo(json.dumps({"entity_id": e, "intent": intent, "query": t, "source": source})
                   if json_out else f"{e}\t{intent}\t{t}")


@app.command("dataset")
def dataset(
    catalog: str = typer.Option(..., help="debian, movies, or a catalog file"),
    out: Path = typer.Option(..., help="folder for {split}.queries.tsv and {split}.qrels.txt"),
    schema: str = typer.Option(None, help="schema name or TOML file"),
    n_queries: int = typer.Option(10_000, help="queries in train+val+test"),
    p_narrow: float = typer.Option(0.75, help="fraction of narrow queries"),
    n_broad_test: int = typer.Option(500, help="queries of the broad-only test set"),
    heldout_fraction: float = typer.Option(None, help="hold out this fraction of the entities "
                                           "(seeded): test and broad_test are for them only and go "
                                           "to OUT/heldout/ with entities.txt; train and val never "
                                           "name a held-out entity or a held-out query"),
    seed: int = typer.Option(0),
) -> None:
    """A WeakLabeling-Un "Click" set (75% narrow / 25% broad; the source entity relevant)."""
    from limelight.querygen.weaklabel import click_dataset, heldout_entities

    check_output_dir(out, "query dataset")
    coll, sch = _checked(catalog, schema)
    held = None if heldout_fraction is None else heldout_entities(len(coll), heldout_fraction, seed)
    cs = click_dataset(coll, sch, n_queries, p_narrow, n_broad_test=n_broad_test, seed=seed,
                       heldout=held)
    cs.write(out, coll)
    counts = {s: len(q) for s, q in cs.queries.items()}
    if held is not None:
        counts["heldout_entities"] = len(held)
    typer.echo(json.dumps(counts))


@app.command("train")
def train(
    catalog: str = typer.Option(..., help="debian, movies, or a catalog file"),
    out: Path = typer.Option(..., help="folder to save the generator to"),
    schema: str = typer.Option(None, help="schema name or TOML file"),
    kind: str = typer.Option("ctrlqgen", help="ctrlqgen or qgen"),
    backbone: Path = typer.Option(None, help="a local HF causal or seq2seq model folder "
                                             "(default: SmolLM2-135M-Instruct)"),
    weak: str = typer.Option("un", help="training pairs: un (WeakLabeling-Un) or ip+un "
                                        "(WeakLabeling-IP on a Click set + WeakLabeling-Un, half each)"),
    click: Path = typer.Option(None, help="--weak ip+un: a Click set folder (`generate dataset`; "
                                          "its train split; its heldout/ is kept out of training). "
                                          "Default: one drawn here"),
    n_queries: int = typer.Option(2000, help="training pairs"),
    p_narrow: float = typer.Option(0.5, help="--weak un: fraction of narrow training queries"),
    steps: int = typer.Option(100), batch_size: int = typer.Option(8),
    train_layers: int = typer.Option(4, help="top transformer blocks trained (-1: all)"),
    lr: float = typer.Option(5e-5), seed: int = typer.Option(0),
    serialize: bool = typer.Option(None, "--serialize/--no-serialize",
                                   help="entity as s(e) or plain values (default: by kind)"),
    checkpoint_dir: Path = typer.Option(None, help="save the training state here (resumable)"),
    checkpoint_every: int = typer.Option(0, help="checkpoint every N steps (0: only when stopped)"),
    budget_min: float = typer.Option(None, help="stop at a checkpoint after M minutes: exit status "
                                                "3, rerun with --resume to continue"),
    resume: bool = typer.Option(False, "--resume", help="continue the run stopped in "
                                                        "--checkpoint-dir (same options)"),
) -> None:
    """Fine-tune a generator on weak (entity, intent, query) triplets and save it. Interrupted
    (Ctrl-C) or out of --budget-min, it checkpoints; --resume continues it exactly."""
    import time

    from limelight.cli.console import progress_bar
    from limelight.querygen.training import train_generator, weak_pairs

    if (budget_min is not None or resume or checkpoint_every) and checkpoint_dir is None:
        raise LimelightError("--budget-min, --checkpoint-every and --resume need --checkpoint-dir")
    if budget_min is not None and budget_min < 0:
        raise LimelightError(f"--budget-min must be ≥ 0, got {budget_min}")
    if steps < 1 or checkpoint_every < 0:
        raise LimelightError(f"--steps must be ≥ 1 and --checkpoint-every ≥ 0, got {steps} and "
                             f"{checkpoint_every}")
    check_output_dir(out, "query generator")
    coll, sch = _checked(catalog, schema)
    settings = {"catalog": catalog, "schema": sch.name, "weak": weak, "n_queries": n_queries,
                "p_narrow": p_narrow if weak == "un" else None, "seed": seed,
                "click": None if click is None else str(click)}
    deadline = None if budget_min is None else time.monotonic() + 60 * budget_min
    with _interrupt_flag(checkpoint_dir is not None) as interrupted, \
            progress_bar(f"training {kind} generator", steps) as update:
        st = train_generator(
            coll, sch, out, lambda: weak_pairs(coll, sch, weak, n_queries, p_narrow, seed, click),
            kind=kind, backbone=backbone, steps=steps, batch_size=batch_size, lr=lr,
            train_layers=None if train_layers < 0 else train_layers, seed=seed,
            serialize=serialize, checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
            resume=resume, progress=lambda step, loss: update(step),
            stop=lambda step: interrupted() or (deadline is not None and time.monotonic() > deadline),
            settings=settings)
    if not st.completed:
        why = "interrupted" if interrupted() else f"budget of {budget_min} min spent"
        typer.echo(f"stopped ({why}) at step {len(st.losses)}/{steps}; checkpoint in "
                   f"{checkpoint_dir}; rerun with --resume to continue", err=True)
        raise typer.Exit(130 if interrupted() else 3)
    typer.echo(json.dumps({"out": str(out), "steps": st.steps, "examples": st.examples,
                           "seconds": round(st.seconds, 1), "weak": weak,
                           "resumed_from": st.resumed_from,
                           "loss_first": st.losses[0], "loss_last": st.losses[-1]}))


@contextlib.contextmanager
def _interrupt_flag(active: bool):
    """Yield ``interrupted()``; while ``active``, Ctrl-C is deferred (``progress.deferred_interrupt``,
    as every long command defers it: a second Ctrl-C stops at once) and sets it instead of raising
    (training then stops at its next step, with a checkpoint). ``interrupted()`` keeps its answer
    after the block (the deferral's flag is cleared when it ends)."""
    from limelight.progress import deferred_interrupt, interrupt_requested

    hit: list[int] = []

    def interrupted() -> bool:
        if not hit and active and interrupt_requested():
            hit.append(1)
        return bool(hit)

    if not active:
        yield interrupted
        return
    with deferred_interrupt():
        try:
            yield interrupted
        finally:
            interrupted()  # (seen before the flag is cleared)


def suggest_cmd(
    query: str = typer.Argument(..., help="the user's query"),
    catalog: str = typer.Option(..., help="debian, movies, or a catalog file"),
    index: Path = typer.Option(..., help="index directory of the catalog (`limelight index`)"),
    generator: Path = typer.Option(None, help="a generator saved by `generate train` "
                                              "(default: WeakLabeling-Un, the weak-label fallback)"),
    backbone: Path = typer.Option(None, help="with --generator: the base model it must have been "
                                             "trained from (default: not checked)"),
    schema: str = typer.Option(None, help="schema name or TOML file (default: the catalog's)"),
    top_k: int = typer.Option(5, help="entities retrieved (BM25)"),
    n: int = typer.Option(3, help="broad suggestions per entity"),
    seed: int = typer.Option(0),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Broad query suggestions: the query's top-k entities (BM25), N broad CtrlQGen queries for
    each, deduplicated (Penha et al., WWW 2023, Figure 4)."""
    from limelight.cli.common import check_k
    from limelight.data.queries import check_query_text
    from limelight.querygen.suggest import suggest
    from limelight.retrieval.index_dir import index_size
    from limelight.retrieval.spec import System

    query = check_query_text(query)
    _backbone_needs_generator(backbone, generator)
    if n < 1:
        raise LimelightError(f"--n must be ≥ 1, got {n}")
    top_k = check_k(top_k, "--top-k", index_size(index))
    retriever = System.of("bm25").open(index)
    coll, sch = _checked(catalog, schema)
    res = suggest(query, retriever, coll, sch, top_k=top_k, n=n, generator=generator,
                  backbone=backbone, seed=seed)
    if json_out:
        typer.echo(json.dumps(res.to_dict(), ensure_ascii=False))
        return
    from limelight.cli.console import print_table

    typer.echo(f"note: suggestions from {res.source}", err=True)
    rows = [{"rank": i, "suggestion": t, "from entity": e}
            for i, (t, e) in enumerate(res.suggestions, 1)]
    print_table(rows, f"broad suggestions for {query!r}", empty="no suggestions")
