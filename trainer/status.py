"""A run's state for a person, a cron job or a Slurm script: `millrace train status RUN [--json]`.

Reads only the run's files (run.json, metrics.jsonl, eval.jsonl), so it works while the run
goes on and after it ended. The last metrics record says which alerts are active
(`trainer.health`); each one is described by the record where it started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import JsonValue

from millrace.errors import ArtifactError
from millrace.home import Home
from millrace.names import known
from trainer.records import RUN_FILE, MetricsRecord, observed_run_status, read_eval, read_metrics, read_run

ALERT_EXIT_CODE = 3


def active_alerts(records: list[MetricsRecord]) -> list[dict[str, JsonValue]]:
    """The alerts active after the last record, each with the step and details of its start."""
    last = records[-1].alerts if records else None
    if last is None:
        return []
    found: dict[str, dict[str, JsonValue]] = {}
    for record in reversed(records):
        for alert in record.alerts.started if record.alerts is not None else []:
            if alert.name in last.active and alert.name not in found:
                found[alert.name] = {**alert.dump(), "since_step": record.step}
        if len(found) == len(last.active):
            break
    return [found.get(name, {"name": name, "since_step": None}) for name in last.active]


def existing_run(home: Home, name: str) -> Path:
    """The directory of run `name`; a miss lists the runs there are."""
    run_dir = home.run(name)
    if not (run_dir / RUN_FILE).exists():
        names = (p.parent.name for p in home.runs.glob(f"*/{RUN_FILE}"))
        raise ArtifactError(f"run {name!r}: no {RUN_FILE} in {run_dir}" + known("runs", names))
    return run_dir


def run_status(run_dir: Path) -> dict[str, Any]:
    """What `train status --json` prints."""
    run = read_run(run_dir)
    records = read_metrics(run_dir)
    last = records[-1] if records else None
    evals = read_eval(run_dir)
    latest = evals[-1] if evals else None
    return {
        "run": run.run,
        "run_dir": str(run_dir),
        "state": observed_run_status(run_dir, run),
        "last_step": None if last is None else last.step,
        "total_steps": run.total_steps,
        "tokens": None if last is None else last.tokens,
        "loss": None if last is None else last.loss,
        "skipped_steps": (last.skipped_steps if last is not None else None) or 0,
        "latest_eval": None
        if latest is None
        else {
            "step": latest.step,
            "tokens": latest.tokens,
            "loss_macro": latest.loss.macro,
            "loss_micro": latest.loss.micro,
            "bpb_macro": latest.bpb.macro,
            "bpb_micro": latest.bpb.micro,
        },
        "alerts": active_alerts(records),
    }


def format_status(status: dict[str, Any]) -> str:
    lines = [
        f"run {status['run']}: {status['state']}, step {status['last_step']} of {status['total_steps']}"
        f" ({status['tokens'] or 0:,} tokens)"
    ]
    if isinstance(status["loss"], float):
        lines.append(f"  training loss {status['loss']:.4f}; skipped steps {status['skipped_steps']}")
    latest = status["latest_eval"]
    if latest:
        lines.append(
            f"  held-out at step {latest['step']}: loss macro {latest['loss_macro']:.4f} micro "
            f"{latest['loss_micro']:.4f}; bits/byte macro {latest['bpb_macro']:.4f} micro {latest['bpb_micro']:.4f}"
        )
    else:
        lines.append("  no evaluation yet")
    if status["alerts"]:
        lines.append(f"  {len(status['alerts'])} active alert(s):")
        for alert in status["alerts"]:
            lines.append(f"    {alert['name']} since step {alert['since_step']}: {alert.get('message', '')}")
    else:
        lines.append("  no active alert")
    return "\n".join(lines)
