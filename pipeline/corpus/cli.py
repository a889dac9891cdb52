"""`millrace corpus`: build corpora from what is on this machine."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from millrace.home import Home
from millrace.options import home_option, json_option, print_json
from millrace.progress import on_terminal


@click.group()
def corpus() -> None:
    """Build corpora (the embedded default corpus from this machine)."""


@corpus.command("local")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write one sub-directory of jsonl.zst shards per source into.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Cap on the total text, shared between sources (default: everything).",
)
@home_option
@json_option
def local(out_dir: Path, max_bytes: int | None, home: Home, as_json: bool) -> None:
    """Build the embedded default corpus: Python sources and docs, man pages, package docs, licences."""
    from pipeline.corpus.builder import build_local_corpus  # lazy: command body: `millrace --help` stays light

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        transient=True,
        disable=as_json or not on_terminal(),
        console=Console(stderr=True),
    ) as progress:
        task = progress.add_task("corpus", total=None)
        summary = build_local_corpus(out_dir, max_bytes, progress=lambda s: progress.update(task, description=s))
    if as_json:
        print_json(summary.to_json())
        return
    for notice in summary.notices:
        click.echo(f"notice: {notice}")
    for source in summary.sources:
        click.echo(
            f"{source.name:<16} {source.documents:>7,} documents {source.bytes:>13,} bytes "
            f"{len(source.files):>4} files"
        )
    click.echo(f"{'total':<16} {summary.documents:>7,} documents {summary.bytes:>13,} bytes -> {out_dir}")
