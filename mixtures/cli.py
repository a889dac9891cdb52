"""`millrace mix`: write, validate, build, list, plan and diff mixture revisions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import pydantic

from millrace.errors import ConfigError, first_validation_error
from millrace.home import Home
from millrace.names import PLAIN_NAME, STORE_NAME, known
from millrace.options import home_option, json_option, print_json, revision_option
from millrace.tables import print_table
from mixtures import api
from mixtures.new import STRATEGY_CHOICES, NewRevision, option_name
from mixtures.resolve import store_names
from mixtures.strategies import STRATEGIES, parse_factors
from pipeline.store.labels import labelled

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

F = TypeVar("F", bound=Callable[..., object])
CELL_WIDTH = 40  # a cell with its domain label, cut to this in tables


def show(table: RenderableType) -> None:
    """Rich is imported only when a table is printed: `--json` runs start faster."""
    print_table(table)


def new_table(title: str) -> Table:
    from rich.table import Table  # lazy: heavy (rich): only when a table or bar is drawn

    return Table(title=title)


def fmt_tokens(value: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


@click.group()
def mix() -> None:
    """Mixture revisions: named, immutable per-phase weights over a store's cells."""


def only_store(home: Home) -> str:
    """The store `mix new` reads when `--store` is not given: the only one there is."""
    names = store_names(home)
    if len(names) != 1:
        raise ConfigError(
            f"--store: {'several stores' if names else 'no store'} under {home.stores}; name one"
            + known("stores", names)
        )
    return names[0]


def strategy_options(command: F) -> F:
    """One `mix new` option per strategy option in the registry (`--temperature`, `--tilt`, ...), read as text
    and parsed by the registry's `parse`; the command gets them as `options`."""
    for strategy in reversed(STRATEGIES.values()):
        for option in reversed(strategy.options):
            flag = "--" + option.name.replace("_", "-")
            command = click.option(
                flag, option.name, default=None, metavar=option.metavar, help=f"For {strategy.name}: {option.help}."
            )(command)
    return command


def strategy_values(given: dict[str, str | None]) -> dict[str, object]:
    """The strategy options given on the command line, parsed."""
    parse = {option.name: option.parse for strategy in STRATEGIES.values() for option in strategy.options}
    return {name: parse[name](text) for name, text in given.items() if text is not None}


@mix.command("new")
@click.argument("mixture", type=PLAIN_NAME)
@revision_option("Name of the new revision (immutable once built).", required=True)
@click.option(
    "--store",
    "store",
    type=STORE_NAME,
    default=None,
    help="Store to read stats from: NAME/VERSION, or NAME for its newest version "
    "(default: with --continues the parent's, else the only store under --home; an error naming "
    "them when there are several).",
)
@click.option(
    "--continues",
    "continues",
    type=PLAIN_NAME,
    default=None,
    metavar="PARENT",
    help="Continue revision PARENT of the same mixture: steps before --at-step are the parent's.",
)
@click.option(
    "--at-step",
    "at_step",
    type=click.IntRange(min=1),
    default=None,
    help="With --continues: the first step drawn from this revision's weights (a step of the parent's schedule).",
)
@click.option(
    "--strategy",
    type=click.Choice(STRATEGY_CHOICES),
    default="natural",
    show_default=True,
    help="Strategy for phases that name none: "
    + "; ".join(f"{s.name}: {s.summary}" for s in STRATEGIES.values())
    + "; explicit: the --weight options.",
)
@click.option(
    "--phase",
    "phases",
    multiple=True,
    metavar="NAME:TOKENS[:STRATEGY[@PATTERNS]]",
    help="A phase (repeatable, in order), e.g. main:15T and cooldown:3.75T:uniform@c*q3,c*q4. "
    "Default: one phase 'main' of the store's total tokens (with --continues: of the parent's "
    "tokens after --at-step). With --continues, phases count from --at-step.",
)
@click.option(
    "--epoch-cap",
    type=float,
    default=None,
    help="Most epochs of any cell, across phases (and the parent's draws). Default: the parent's, else 8.",
)
@click.option(
    "--seq-len", type=int, default=None, help="Tokens per training sequence. Default: the parent's, else 256."
)
@click.option(
    "--global-batch",
    type=int,
    default=None,
    help="Sequences per step, all ranks together. Default: the parent's, else 16.",
)
@click.option(
    "--seed", type=int, default=None, help="Seed of the loader's permutations. Default: the parent's, else 1234."
)
@strategy_options
@click.option(
    "--weight",
    "weights",
    multiple=True,
    metavar="CELL_OR_PATTERN=W",
    help="A weight for the explicit strategy (repeatable), e.g. 'c*q4=0.5'.",
)
@click.option(
    "--symbolic", is_flag=True, help="Keep strategies in the file (resolved at build) instead of pinned weights."
)
@click.option("--description", default="", help="A line saying what the revision is for.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where to write (default: $MILLRACE_HOME/mixtures/MIXTURE/NAME.toml).",
)
@json_option
@home_option
def new_command(
    home: Home,
    mixture: str,
    revision: str,
    store: str | None,
    continues: str | None,
    at_step: int | None,
    strategy: str,
    phases: tuple[str, ...],
    epoch_cap: float | None,
    seq_len: int | None,
    global_batch: int | None,
    seed: int | None,
    weights: tuple[str, ...],
    symbolic: bool,
    description: str,
    out: str | None,
    as_json: bool,
    **options: str | None,
) -> None:
    """Write a revision file for MIXTURE from a store's stats with a strategy, or continuing a parent revision."""
    try:
        request = NewRevision(
            mixture=mixture,
            revision=revision,
            store=store or (None if continues else only_store(home)),
            strategy=strategy,
            phases=list(phases),
            epoch_cap=epoch_cap,
            seq_len=seq_len,
            global_batch=global_batch,
            seed=seed,
            options=strategy_values(options),
            weights=parse_factors(",".join(weights), "--weight") or None,
            out=Path(out) if out is not None else None,
            symbolic=symbolic,
            description=description,
            continues=continues,
            at_step=at_step,
        )
    except pydantic.ValidationError as exc:
        raise ConfigError(first_validation_error(exc, option_name)) from None
    path = api.new_revision(home, request)
    summary = api.validate_file(home, path)
    if as_json:
        print_json(summary)
    else:
        lineage = f", continues {continues} at step {at_step}" if continues else ""
        count = len(summary["phases"])
        click.echo(
            f"wrote {path} ({count} phase{'' if count == 1 else 's'}, {summary['cells']} cells, "
            f"{summary['total_steps']} steps{lineage})"
        )


@mix.command("validate")
@click.argument("file", type=click.Path(dir_okay=False))
@json_option
@home_option
def validate_command(home: Home, file: str, as_json: bool) -> None:
    """Check a revision FILE against its store: everything a build checks, nothing written."""
    summary = api.validate_file(home, Path(file))
    if as_json:
        print_json(summary)
        return
    store = summary["store"]
    phases = ", ".join(f"{p['name']} {p['steps']} steps over {p['cells']} cells" for p in summary["phases"])
    parent = summary["continues"]
    lineage = f" (continues {parent['revision']} at step {parent['at_step']})" if parent else ""
    click.echo(
        f"ok: {summary['mixture']}/{summary['revision']} on {store['name']}/{store['version']}{lineage}: {phases}"
    )


@mix.command("build")
@click.argument("mixture", type=PLAIN_NAME)
@revision_option("Revision name (found under $MILLRACE_HOME/mixtures or shipped).", required=True)
@click.option(
    "--file",
    "file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Build this revision file instead of looking the name up.",
)
@json_option
@home_option
def build_command(home: Home, mixture: str, revision: str, file: str | None, as_json: bool) -> None:
    """Resolve a revision into an immutable manifest next to its store (copies no tokens)."""
    result = api.build_result(home, mixture, revision, file)
    manifest = result.manifest
    payload = {
        "manifest": str(result.path),
        "manifest_hash": result.manifest_hash,
        "written": result.written,
        "revision_file": str(result.revision_file),
        "store": manifest.store.model_dump(mode="json"),
        "total_steps": manifest.total_steps,
        "total_sequences": manifest.total_sequences,
        "cells": len(manifest.cells),
        "phases": [p.name for p in manifest.phases],
    }
    if as_json:
        print_json(payload)
        return
    state = "built" if result.written else "already built"
    click.echo(
        f"{state}: {mixture}/{revision} on {manifest.store.name}/{manifest.store.version}, "
        f"{manifest.total_steps} steps, {len(manifest.cells)} cells"
    )
    click.echo(f"  {result.path}")
    click.echo(f"  {result.manifest_hash}")


@mix.command("list")
@json_option
@home_option
def list_command(home: Home, as_json: bool) -> None:
    """List mixtures and their revisions, and where each is built."""
    listing = api.list_revisions(home)
    if as_json:
        print_json(listing)
        return
    # plain columns, the file last and whole: a rich table would wrap a long path at the terminal's width
    rows = [("mixture", "revision", "origin", "built on", "file")]
    for mixture, info in listing["mixtures"].items():
        for revision, entry in info["revisions"].items():
            built = ", ".join(f"{b['store']}/{b['version']}" if "store" in b else "damaged" for b in entry["built"])
            rows.append((mixture, revision, entry["origin"], built or "-", entry["file"]))
    widths = [max(len(row[k]) for row in rows) for k in range(4)]
    for row in rows:
        click.echo("  ".join(f"{value:<{widths[k]}}" for k, value in enumerate(row[:4])) + "  " + row[4])


@mix.command("plan")
@click.argument("mixture", type=PLAIN_NAME)
@revision_option("Revision name.", required=True)
@click.option("--file", "file", type=click.Path(dir_okay=False), default=None, help="Plan this revision file instead.")
@json_option
@home_option
def plan_command(home: Home, mixture: str, revision: str, file: str | None, as_json: bool) -> None:
    """Per cell: available tokens, tokens drawn per phase, epochs, weight declared vs realised."""
    result = api.plan(home, mixture, revision, file=file)
    if as_json:
        print_json(result)
        return
    print_plan(result)


def print_plan(result: dict[str, Any]) -> None:
    store = result["store"]
    table = new_table(
        f"{result['mixture']}/{result['revision']} on {store['name']}/{store['version']}: "
        f"{result['total_steps']} steps, {fmt_tokens(result['total_tokens'])} tokens, "
        f"max {result['max_epochs']:.3g} epochs (cap {result['epoch_cap']:g})"
    )
    table.add_column("cell")
    table.add_column("available", justify="right")
    for phase in result["phases"]:
        table.add_column(f"{phase['name']}\ntokens", justify="right")
        table.add_column("weight\ndeclared", justify="right")
        table.add_column("weight\nrealised", justify="right")
    switch = result["at_step"]
    if switch is not None:
        table.add_column(f"sequences\nbefore step {switch:,}", justify="right")
        table.add_column("sequences\nfrom it on", justify="right")
    table.add_column("epochs", justify="right")
    for cell, info in result["cells"].items():
        row = [labelled(cell, result.get("labels", {}), CELL_WIDTH), fmt_tokens(info["available_tokens"])]
        for phase in result["phases"]:
            cp = info["phases"][phase["name"]]
            row += [fmt_tokens(cp["tokens"]), f"{cp['declared_weight']:.3%}", f"{cp['realised_weight']:.3%}"]
        if switch is not None:
            row += [f"{info['before_switch']:,}", f"{info['after_switch']:,}"]
        row.append(f"{info['epochs']:.3f}")
        table.add_row(*row)
    if switch is not None:
        click.echo(
            "lineage: "
            + ", then ".join(
                f"{r['revision']} steps {r['start_step']:,}..{r['stop_step'] - 1:,}" for r in result["lineage"]
            )
        )
    show(table)


@mix.command("diff")
@click.argument("mixture", type=PLAIN_NAME)
@click.argument("a", type=PLAIN_NAME)
@click.argument("b", type=PLAIN_NAME)
@click.option("--all", "show_all", is_flag=True, help="Show unchanged cells too.")
@json_option
@home_option
def diff_command(home: Home, mixture: str, a: str, b: str, show_all: bool, as_json: bool) -> None:
    """Per-cell weight and epoch changes from revision A to revision B."""
    result = api.diff(home, mixture, a, b)
    if as_json:
        print_json(result)
        return
    lineage = " (b continues a)" if result["lineage"]["b_continues_a"] else ""
    table = new_table(f"{mixture}: {a} -> {b}{lineage} ({result['changed_cells']} cells changed)")
    table.add_column("cell")
    for name in result["phases"]:
        table.add_column(f"{name} weight", justify="right")
    table.add_column("epochs", justify="right")
    for cell, info in result["cells"].items():
        if not (info["changed"] or show_all):
            continue
        row = [cell]
        for name in result["phases"]:
            p = info["phases"][name]
            row.append(f"{p['weight_a']:.3%} -> {p['weight_b']:.3%} ({p['weight_change']:+.3%})")
        row.append(f"{info['epochs_a']:.3f} -> {info['epochs_b']:.3f} ({info['epochs_change']:+.3f})")
        table.add_row(*row)
    show(table)
