"""`millrace report`: build the static site, or watch a run's page live."""

from __future__ import annotations

import logging
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from millrace.errors import ConfigError
from millrace.home import Home
from millrace.names import PLAIN_NAME, STORE_NAME
from millrace.options import home_option, json_option, print_json, run_option
from millrace.progress import on_terminal
from reports.site import build_pages, find_runs, find_store_versions
from reports.watch import WatchEvent, WatchOptions
from reports.watch import watch as follow

log = logging.getLogger(__name__)


@click.group()
def report() -> None:
    """Build and watch the static report site (opens from file://, no network)."""


@report.command(short_help="Build the site: store composition pages, run pages and an index.")
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Site directory (default: $MILLRACE_HOME/site).",
)
@click.option(
    "--store",
    "stores",
    type=STORE_NAME,
    multiple=True,
    metavar="NAME[/VERSION]",
    help="Only these store versions (repeatable; default: every store under --home).",
)
@click.option(
    "--mixture",
    "mixtures",
    type=PLAIN_NAME,
    multiple=True,
    metavar="MIXTURE",
    help="Only embed revisions of these mixtures (repeatable; default: every built mixture).",
)
@click.option(
    "--run",
    "runs",
    type=PLAIN_NAME,
    multiple=True,
    metavar="RUN",
    help="Only these training runs (repeatable; default: all).",
)
@click.option("--no-runs", is_flag=True, help="Build no training-run pages.")
@json_option
@home_option
def build(
    home: Home,
    out: Path | None,
    stores: tuple[str, ...],
    mixtures: tuple[str, ...],
    runs: tuple[str, ...],
    no_runs: bool,
    as_json: bool,
) -> None:
    """Write SITE/<store>/<version>/index.html, SITE/runs/<run>/index.html and SITE/index.html."""
    run_selection = [] if no_runs else (list(runs) or None)
    total = len(find_store_versions(home, stores)) + len(find_runs(home, run_selection))
    with Progress(
        TextColumn("building pages"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=as_json or not on_terminal(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("pages", total=total)
        pages = build_pages(
            home, out, stores=stores, mixtures=mixtures, runs=run_selection, progress=lambda: bar.advance(task)
        )
    if as_json:
        print_json(pages.as_json())
        return
    click.echo(f"site: {pages.index}")
    for path in [
        *pages.stores,
        *pages.runs,
        *pages.ladders,
        *pages.searches,
    ]:  # the compare page's address is logged by `build_pages`
        click.echo(f"  {path}  ({path.stat().st_size / 1024:,.0f} KiB)")


@report.command(short_help="Follow a run live: rewrite its page data as its metrics stream grows.")
@click.argument("run_argument", metavar="[RUN]", required=False, type=PLAIN_NAME)
@run_option("The run to follow (RUN as the first argument is the old spelling, still accepted).", default=None)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Site directory (default: $MILLRACE_HOME/site).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Seconds between polls of the stream.",
)
@click.option(
    "--until-finished/--forever",
    default=True,
    show_default=True,
    help="Stop once run.json's status says the run is over (or keep watching until Ctrl-C / --timeout).",
)
@click.option("--timeout", type=click.FloatRange(min=0), default=None, help="Stop after this many seconds.")
@click.option(
    "--refresh",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Seconds between the open page's polls for new data (it updates in place, keeping its view).",
)
@click.option("--wait", is_flag=True, help="Wait for the run to start (its run.json to appear) instead of failing.")
@json_option
@home_option
def watch(
    home: Home,
    run_argument: str | None,
    run_name: str | None,
    out: Path | None,
    interval: float,
    until_finished: bool,
    timeout: float | None,
    refresh: int,
    wait: bool,
    as_json: bool,
) -> None:
    """Rewrite RUN's page data as its metrics stream grows; an open page polls it and updates in place."""
    if bool(run_argument) == bool(run_name):
        raise ConfigError("--run: name the run to follow once (`millrace report watch --run NAME`)")
    run = run_name or run_argument
    if not run or (run_name and run_argument):
        raise ConfigError("--run: name the run to follow once (`millrace report watch --run NAME`)")

    if not as_json:
        click.echo(f"watching run {run}; open {(out or home.site) / 'runs' / run / 'index.html'} (Ctrl-C stops)")
    with Progress(
        TextColumn("run {task.fields[run]}: step"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}, {task.fields[rebuilds]} rebuilds"),
        TimeElapsedColumn(),
        disable=as_json or not on_terminal(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("watch", total=None, run=run, status="starting", rebuilds=0)

        def show(event: WatchEvent) -> None:
            bar.update(
                task, total=event.total_steps, completed=event.step or 0, status=event.status, rebuilds=event.rebuilds
            )

        options = WatchOptions(interval, until_finished, timeout, refresh, wait)
        result = follow(home, run, out, options, on_build=show)
    if as_json:
        print_json(
            {"page": str(result.page), "rebuilds": result.rebuilds, "status": result.status, "stopped": result.reason}
        )
    else:
        why = {
            "finished": f"the run is over, status {result.status!r}",
            "timeout": "--timeout reached",
            "interrupted": "interrupted",
            "stopped": "stopped",
        }[result.reason]
        click.echo(f"done watching ({why}) after {result.rebuilds} rebuilds: {result.page}")
