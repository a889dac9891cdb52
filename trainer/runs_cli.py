"""`millrace runs list`: the training runs under $MILLRACE_HOME with their status and last step (no torch);
`runs tag` / `runs note`: a run's tags and notes in its run.json, which the runs index shows and searches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from millrace.options import home_option, json_option, print_json
from trainer.records import RUN_FILE, RunRecord, last_metrics, observed_run_status, read_run, write_run
from trainer.status import existing_run


def list_runs(home: Home) -> list[dict[str, Any]]:
    """One row per run directory with a run.json; an unreadable run.json is listed as damaged."""
    rows: list[dict[str, Any]] = []
    for run_dir in home.run_dirs(RUN_FILE):
        try:
            run = read_run(run_dir)
        except ArtifactError as exc:
            rows.append({"run": run_dir.name, "status": "damaged", "error": str(exc), "path": str(run_dir)})
            continue
        last = last_metrics(run_dir)
        rows.append(
            {
                "run": run_dir.name,
                "status": observed_run_status(run_dir, run),
                "mixture": run.mixture,
                "revision": run.revision,
                "step": None if last is None else last.step,
                "total_steps": run.total_steps,
                "loss": None if last is None else last.loss,
                "tags": run.tags,
                "notes": run.notes,
                "path": str(run_dir),
            }
        )
    return rows


def print_runs(rows: list[dict[str, Any]], home: Home) -> None:
    if not rows:
        click.echo(f"no runs under {home.runs} (start one with `millrace train CONFIG`)")
        return
    click.echo(f"{'run':<32} {'status':<11} {'mixture/revision':<32} {'step':>13} {'loss':>7}")
    for row in rows:
        step = "-" if row.get("step") is None else f"{row['step']}/{row.get('total_steps')}"
        loss = "-" if row.get("loss") is None else f"{row['loss']:.4f}"
        revision = f"{row.get('mixture')}/{row.get('revision')}" if row.get("mixture") else "-"
        click.echo(f"{row['run']:<32} {row['status']:<11} {revision:<32} {step:>13} {loss:>7}")
    click.echo(f"runs under {home.runs}")


@click.group()
def runs() -> None:
    """List training runs; tag them and note what they are for."""


@runs.command("list")
@json_option
@home_option
def list_command(home: Home, as_json: bool) -> None:
    """Every run under $MILLRACE_HOME/runs: status, mixture/revision, last logged step and loss."""
    rows = list_runs(home)
    if as_json:
        print_json({"runs": rows})
    else:
        print_runs(rows, home)


def checked_tags(tags: Sequence[str]) -> Sequence[str]:
    """`tags`, each refused in one line unless it is one word."""
    for tag in tags:
        if not tag.strip() or any(c.isspace() for c in tag):
            raise ConfigError(f"tag {tag!r}: a tag is one word (no spaces)")
    return tags


def tag_run(home: Home, name: str, add: Sequence[str], remove: Sequence[str] = ()) -> RunRecord:
    """Add and remove tags of run `name` in its run.json (written atomically); returns the record written."""
    run_dir = existing_run(home, name)
    checked_tags([*add, *remove])
    run = read_run(run_dir)
    tags = [t for t in dict.fromkeys([*run.tags, *add]) if t not in set(remove)]
    updated = run.model_copy(update={"tags": tags})
    write_run(run_dir, updated)
    return updated


def note_run(home: Home, name: str, text: str) -> RunRecord:
    """Set the notes of run `name` in its run.json (an empty text clears them)."""
    run_dir = existing_run(home, name)
    updated = read_run(run_dir).model_copy(update={"notes": text.strip()})
    write_run(run_dir, updated)
    return updated


@runs.command("tag")
@click.argument("run")
@click.argument("tags", nargs=-1)
@click.option("--remove", "removed", multiple=True, help="Take this tag off the run (repeatable).")
@json_option
@home_option
def tag_command(home: Home, run: str, tags: tuple[str, ...], removed: tuple[str, ...], as_json: bool) -> None:
    """Add TAGS (words) to RUN's run.json, or take some off with --remove; the runs index shows and searches them."""
    record = tag_run(home, run, tags, removed)
    if as_json:
        print_json({"run": run, "tags": record.tags})
    else:
        click.echo(f"{run}: tags {' '.join(record.tags) or '(none)'}")


@runs.command("note")
@click.argument("run")
@click.argument("text")
@json_option
@home_option
def note_command(home: Home, run: str, text: str, as_json: bool) -> None:
    """Set RUN's notes to TEXT ('' clears them); the runs index shows and searches them."""
    record = note_run(home, run, text)
    if as_json:
        print_json({"run": run, "notes": record.notes})
    else:
        click.echo(f"{run}: notes {record.notes!r}")
