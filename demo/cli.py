"""`millrace demo`: the command; what it runs is `demo.run`."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console

from demo.run import DEFAULT_MAX_BYTES, MICRO_LADDER, MICRO_SEARCH, print_done, run_demo
from millrace.home import Home
from millrace.options import home_option, json_option, print_json


@click.command()
@click.option(
    "--max-bytes",
    type=click.IntRange(min=100_000),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Size cap of the embedded corpus, spread across its sources.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="Training steps (default: the whole uniform-sampling schedule).",
)
@click.option(
    "--ladder",
    "ladder_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=MICRO_LADDER,
    show_default=True,
    help="The micro-ladder to train, fit and check against its next rung up.",
)
@click.option("--no-ladder", is_flag=True, help="Skip the ladder step.")
@click.option(
    "--search",
    "search_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=MICRO_SEARCH,
    show_default=True,
    help="The small mixture search to run: proxies, a fitted surrogate, a proposed revision.",
)
@click.option("--no-search", is_flag=True, help="Skip the mixture search step.")
@home_option
@json_option
def demo(
    home: Home,
    max_bytes: int,
    steps: int | None,
    ladder_file: Path,
    no_ladder: bool,
    search_file: Path,
    no_search: bool,
    as_json: bool,
) -> None:
    """Run the main job end to end on the embedded default corpus, reusing what is already built."""
    console = Console(stderr=as_json, soft_wrap=True)  # a URL or a path is never broken across lines
    started = time.perf_counter()
    report = run_demo(
        home, max_bytes, steps, console, None if no_ladder else ladder_file, None if no_search else search_file
    )
    report.seconds["total"] = time.perf_counter() - started
    if as_json:
        print_json(report.as_json())
        return
    print_done(console, home, report)
