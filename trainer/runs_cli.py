"""`millrace runs list`: the training runs under $MILLRACE_HOME with their status and last step (no torch)."""

from __future__ import annotations

from typing import Any

import click

from millrace.errors import ArtifactError
from millrace.home import Home
from millrace.options import home_option, json_option, print_json
from trainer.records import RUN_FILE, last_metrics, observed_run_status, read_run


def list_runs(home: Home) -> list[dict[str, Any]]:
    """One row per run directory with a run.json; an unreadable run.json is listed as damaged."""
    rows: list[dict[str, Any]] = []
    for path in sorted(home.runs.glob(f"*/{RUN_FILE}")):
        run_dir = path.parent
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
    """List training runs."""


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
