"""``limelight generate``: CtrlQGen queries for catalog entities, generator training and Click sets.

    limelight generate --catalog debian --intent narrow --n 3 0ad vim
    limelight generate train --catalog movies --out models/ctrlqgen --steps 100
    limelight generate dataset --catalog debian --out click/ --n-queries 10000

Without ``--generator`` the queries come from WeakLabeling-Un (no model needed).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.core import TyperGroup

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
                                              "(default: WeakLabeling-Un)"),
    seed: int = typer.Option(0),
    json_out: bool = typer.Option(False, "--json", help="print JSON lines"),
) -> None:
    """Generate N queries with INTENT for each ENTITY_ID."""
    from limelight.querygen.generator import generate_queries
    from limelight.querygen.weaklabel import check_intent

    check_intent(intent)
    coll = _catalog(catalog)
    qs = generate_queries(coll, _schema_for(catalog, schema), intent, n=n,
                          generator=generator, entity_ids=entity_ids, seed=seed)
    missing = [e for e in entity_ids if e not in set(qs.fields["entity_id"].tolist())]
    for e in missing:
        typer.echo(f"note: entity {e!r} gave no {intent} query (its {intent} fields are empty)",
                   err=True)
    for e, t in zip(qs.fields["entity_id"].tolist(), qs.texts.tolist(), strict=True):
        typer.echo(json.dumps({"entity_id": e, "intent": intent, "query": t})
                   if json_out else f"{e}\t{intent}\t{t}")


@app.command("dataset")
def dataset(
    catalog: str = typer.Option(..., help="debian, movies, or a catalog file"),
    out: Path = typer.Option(..., help="folder for {split}.queries.tsv and {split}.qrels.txt"),
    schema: str = typer.Option(None, help="schema name or TOML file"),
    n_queries: int = typer.Option(10_000, help="queries in train+val+test"),
    p_narrow: float = typer.Option(0.75, help="fraction of narrow queries"),
    n_broad_test: int = typer.Option(500, help="queries of the broad-only test set"),
    seed: int = typer.Option(0),
) -> None:
    """A WeakLabeling-Un "Click" set (75% narrow / 25% broad; the source entity relevant)."""
    from limelight._io import atomic_dir
    from limelight.data.formats import write_queries_tsv, write_trec_qrels
    from limelight.querygen.weaklabel import click_dataset

    coll = _catalog(catalog)
    cs = click_dataset(coll, _schema_for(catalog, schema), n_queries, p_narrow,
                       n_broad_test=n_broad_test, seed=seed)
    with atomic_dir(out) as tmp:
        for split, qs in cs.queries.items():
            write_queries_tsv(qs, tmp / f"{split}.queries.tsv")
            write_trec_qrels(cs.qrels[split], tmp / f"{split}.qrels.txt")
            (tmp / f"{split}.intents.tsv").write_text(
                "".join(f"{q}\t{i}\n" for q, i in zip(qs.ids.strings.tolist(),
                                                      qs.intents.tolist(), strict=True)))
    typer.echo(json.dumps({s: len(q) for s, q in cs.queries.items()}))


@app.command("train")
def train(
    catalog: str = typer.Option(..., help="debian, movies, or a catalog file"),
    out: Path = typer.Option(..., help="folder to save the generator to"),
    schema: str = typer.Option(None, help="schema name or TOML file"),
    kind: str = typer.Option("ctrlqgen", help="ctrlqgen or qgen"),
    backbone: Path = typer.Option(None, help="a local HF causal or seq2seq model folder "
                                             "(default: SmolLM2-135M-Instruct)"),
    n_queries: int = typer.Option(2000, help="WeakLabeling-Un training pairs"),
    p_narrow: float = typer.Option(0.5, help="fraction of narrow training queries"),
    steps: int = typer.Option(100), batch_size: int = typer.Option(8),
    train_layers: int = typer.Option(4, help="top transformer blocks trained (-1: all)"),
    lr: float = typer.Option(5e-5), seed: int = typer.Option(0),
    serialize: bool = typer.Option(None, "--serialize/--no-serialize",
                                   help="entity as s(e) or plain values (default: by kind)"),
) -> None:
    """Fine-tune a generator on WeakLabeling-Un (entity, intent, query) triplets and save it."""
    import numpy as np

    from limelight.querygen.generator import QueryGenerator, training_pairs
    from limelight.querygen.weaklabel import WeakLabelingUn

    coll = _catalog(catalog)
    sname = _schema_for(catalog, schema)
    lab = WeakLabelingUn(sname).fit(coll)
    rng = np.random.default_rng(seed)
    ent = rng.choice(len(coll), n_queries)
    intents = np.where(rng.random(n_queries) < p_narrow, "narrow", "broad")
    ei, it, qs = lab.generate(ent, intents, seed=seed + 1)
    g = QueryGenerator(backbone, kind=kind, schema=sname, serialize=serialize)
    prompts, targets = training_pairs(g, coll, ei, qs.tolist(),
                                      it.tolist() if kind == "ctrlqgen" else None)
    st = g.fit(prompts, targets, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
               train_layers=None if train_layers < 0 else train_layers)
    g.save(out)
    typer.echo(json.dumps({"out": str(out), "steps": st.steps, "examples": st.examples,
                           "seconds": round(st.seconds, 1),
                           "loss_first": st.losses[0], "loss_last": st.losses[-1]}))
