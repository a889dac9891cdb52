"""`millrace loader`: look inside the deterministic batch stream."""

from __future__ import annotations

import click
from rich.table import Table

from loader.peek import HeldDocument
from loader.peek import peek as peek_step
from loader.stream import MixtureStream
from millrace.home import Home
from millrace.names import PLAIN_NAME
from millrace.options import home_option, json_option, print_json, revision_option
from millrace.tables import print_table
from mixtures.manifest import find_manifest


@click.group()
def loader() -> None:
    """Look inside the deterministic batch stream of a built mixture."""


def _held(documents: list[HeldDocument] | None) -> str:
    if not documents:
        return ""
    held = "; ".join(f"{d['id']} ({d['origin']}:{d['position']})" for d in documents[:3])
    return f"\n  from {held}" + (f" and {len(documents) - 3} more" if len(documents) > 3 else "")


@loader.command()
@click.argument("mixture", type=PLAIN_NAME)
@revision_option("Revision name of the built mixture.", required=True)
@click.option("--step", type=click.IntRange(min=0), required=True, help="Training step to look at (0-based).")
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True, help="Data-parallel rank.")
@click.option(
    "--world",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Number of data-parallel ranks (the global batch is split into contiguous slices).",
)
@click.option(
    "--decode",
    is_flag=True,
    help="Print the first characters of each sample's text and the documents it holds (source, id, origin).",
)
@json_option
@home_option
def peek(
    mixture: str, revision: str, step: int, rank: int, world: int, decode: bool, as_json: bool, home: Home
) -> None:
    """What was (or will be) in STEP's batch: position, cell, sequence, epoch and token digest per sample."""
    stream = MixtureStream(find_manifest(home, mixture, revision), rank=rank, world=world, prefetch=0)
    report = peek_step(stream, step, decode=decode)
    if as_json:
        print_json(report)
        return
    title = f"{mixture} / {revision}  step {step}  phase {report['phase']}  rank {rank}/{world}" + (
        "  (index-only)" if report["index_only"] else ""
    )
    table = Table(title=title)
    for column in ("position", "cell", "sequence", "epoch", "digest") + (("text",) if decode else ()):
        table.add_column(column, justify="right" if column in ("position", "sequence", "epoch") else "left")
    for sample in report["samples"]:
        row = [
            str(sample["position"]),
            sample["cell"],
            str(sample["sequence"]),
            str(sample["epoch"]),
            sample["digest"] or "-",
        ]
        if decode:
            row.append(repr(sample["text"]) + _held(sample["documents"]))
        table.add_row(*row)
    print_table(table)
