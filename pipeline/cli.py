"""`millrace pipeline`: run a pipeline config into a token store; write a starter config."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from millrace.artifacts import atomic_write_text
from millrace.errors import ConfigError, Interrupted, Terminated
from millrace.home import Home
from millrace.options import home_option, json_option, print_json
from millrace.progress import on_terminal
from millrace.signals import TerminateSignal

if TYPE_CHECKING:  # the config and starter modules load when a command runs
    from pipeline.config import PipelineConfig
    from pipeline.starter import StarterFound


@click.group()
def pipeline() -> None:
    """Run the corpus pipeline into a token store."""


@pipeline.command("run")
@click.argument("config_path", metavar="CONFIG.toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--executor",
    type=click.Choice(["local", "ray", "slurm"]),
    default=None,
    help="datatrove executor (default: the config's [executor] kind, else local). slurm submits one "
    "job per phase, each depending on the one before, and returns.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Tasks run at once (default: the config's [executor] workers).",
)
@click.option(
    "--restart",
    is_flag=True,
    help="Start the run's work directory afresh (needed when its input files changed since it started).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Slurm executor: write each phase's sbatch script and chain.json for review; submit nothing.",
)
@home_option
@json_option
def run(
    config_path: Path,
    executor: str | None,
    workers: int | None,
    restart: bool,
    dry_run: bool,
    home: Home,
    as_json: bool,
) -> None:
    """Run CONFIG.toml: read, filter, dedup, tokenize into $MILLRACE_HOME/stores/<name>/<version>."""
    from pipeline.config import load_pipeline_config  # lazy: command body: `millrace --help` stays light
    from pipeline.runner import PHASE_LABELS, run_pipeline  # lazy: command body: `millrace --help` loads no datatrove
    from pipeline.store.cli import print_summary, store_summary  # lazy: command body: `millrace --help` stays light

    config = load_pipeline_config(config_path)
    if (executor or config.executor.kind) == "slurm":
        return _run_on_slurm(config, home, restart, dry_run, as_json)
    if dry_run:
        raise ConfigError('--dry-run writes Slurm scripts: use it with --executor slurm or [executor] kind = "slurm"')
    labels = list(PHASE_LABELS)
    bar = on_terminal() and not as_json
    current = {"phase": "starting"}
    with Progress(
        SpinnerColumn(),
        TextColumn("pipeline: {task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        disable=not bar,
        console=Console(stderr=True),
    ) as progress:
        task = progress.add_task("starting", total=len(labels))

        def on_phase(label: str) -> None:
            current["phase"] = label
            progress.update(task, description=label, completed=labels.index(label))

        try:
            path = run_pipeline(
                config,
                home,
                executor=executor,
                workers=workers,
                on_phase=on_phase,
                progress_lines=not bar,
                restart=restart,
            )
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (`millrace.signals`): the same clean stop
            stopped = Terminated if isinstance(exc, TerminateSignal) else Interrupted
            raise stopped(
                f"pipeline stopped in phase {current['phase']}; finished tasks are kept, continue "
                f"with: millrace pipeline run {config_path}"
            ) from None
        progress.update(task, description="done", completed=len(labels))
    summary = store_summary(path)
    if as_json:
        print_json(summary)
    else:
        print_summary(summary)


def _run_on_slurm(config: PipelineConfig, home: Home, restart: bool, dry_run: bool, as_json: bool) -> None:
    from pipeline import slurm  # lazy: command body: `millrace --help` loads no datatrove
    from pipeline.stages.read.fields import check_text_fields  # lazy: command body: `millrace --help` stays light

    check_text_fields(config)  # before any job is written or submitted, as `run_pipeline` does

    if dry_run:
        chain = slurm.dry_run(config, home, restart=restart)
        if as_json:
            return print_json({"submitted": False, "jobs": chain})
        for job in chain:
            after = f", after {job['after']}" if job["after"] else ""
            click.echo(f"{job['phase']}: {job['script']} (array of {job['array']}{after})")
        return None
    submitted = slurm.submit(config, home, restart=restart)
    if as_json:
        return print_json({"submitted": True, **submitted})
    if submitted["cancelled"]:
        click.echo(f"cancelled the earlier chain's pending jobs: {' '.join(submitted['cancelled'])}")
    for submitted_job in submitted["jobs"]:
        job_id = submitted_job["job_id"]
        click.echo(f"{submitted_job['phase']}: " + ("already complete" if job_id == -1 else f"job {job_id}"))
    click.echo("follow it with: millrace pipeline status <config>")
    return None


@pipeline.command("status")
@click.argument("config_path", metavar="CONFIG.toml", type=click.Path(dir_okay=False, path_type=Path))
@home_option
@json_option
def status(config_path: Path, home: Home, as_json: bool) -> None:
    """Where CONFIG.toml's run stands: per phase, the tasks done (completion markers in the work directory,
    on the disk or at work_url; any executor) and, for a Slurm chain, its jobs' states (squeue, then sacct).
    Reads only."""
    # lazy: command body: `millrace --help` stays light
    from rich.table import Table

    # lazy: command body: `millrace --help` stays light
    from millrace.tables import print_table
    from pipeline.chain_status import chain_status, status_rows
    from pipeline.config import load_pipeline_config

    found = chain_status(load_pipeline_config(config_path), home)
    if as_json:
        return print_json(found)
    state = "built" if found["built"] else ("started" if found["started"] else "not started")
    click.echo(f"store {found['store']} ({found['executor']}): {state}; work directory {found['work']}")
    table = Table("phase", "tasks done", "jobs")
    for row in status_rows(found):
        table.add_row(*row)
    print_table(table)
    return None


@pipeline.command("init")
@click.argument("corpus_dir", metavar="CORPUS_DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the starter config (TOML).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option(
    "--text-key",
    "text_keys",
    multiple=True,
    metavar="SOURCE=FIELD",
    help="The field holding a source's text, where its records have no `text` field and no one long string "
    "field (repeatable). Without it, init asks on a terminal and stops with the list of columns elsewhere.",
)
@home_option
@json_option
def init(corpus_dir: Path, out_path: Path, force: bool, text_keys: tuple[str, ...], home: Home, as_json: bool) -> None:
    """Write a commented starter config with one source per source found in CORPUS_DIR; print the sources,
    their formats and fields, and the files no source reads."""
    if out_path.exists() and not force:
        raise ConfigError(f"{out_path}: already exists (use --force to overwrite)")
    text, found = _starter(corpus_dir, _pairs(text_keys), ask=on_terminal() and not as_json)
    atomic_write_text(out_path, text)
    if as_json:
        print_json(
            {
                "config": str(out_path),
                "corpus": str(corpus_dir),
                "sources": found["sources"],
                "not_read": [entry.model_dump() for entry in found["not_read"]],
                "next": f"millrace pipeline run {out_path}",
            }
        )
        return
    for source in found["sources"]:
        fields = f"text {source['text_key']!r}, id {source['id_key']!r}"
        click.echo(f"source {source['name']}: {source['format']} ({fields}) from {', '.join(source['paths'])}")
    for entry in found["not_read"]:
        click.echo(entry.describe())
    click.echo(f"wrote {out_path}; run it with: millrace pipeline run {out_path}")


def _pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        source, sep, field = pair.partition("=")
        if not sep or not source or not field:
            raise ConfigError(f"--text-key {pair!r}: expected SOURCE=FIELD")
        found[source] = field
    return found


def _starter(corpus_dir: Path, text_keys: dict[str, str], ask: bool) -> tuple[str, StarterFound]:
    """The starter text and what was found; on a terminal, a source whose text field is unclear is asked for."""
    # lazy: command body: `millrace --help` stays light
    from pipeline.stages.read.fields import UnknownTextField
    from pipeline.starter import init_starter

    while True:
        try:
            return init_starter(corpus_dir, text_keys)
        except UnknownTextField as unknown:
            if not ask:
                raise
            choice = click.prompt(
                f"{unknown.where}: which field holds source {unknown.source}'s text?",
                type=click.Choice(unknown.columns),
                err=True,
            )
            text_keys = {**text_keys, unknown.source: choice}
