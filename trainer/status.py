"""A run's state for a person, a cron job or a Slurm script: `millrace train status RUN [--json]`.

Reads only the run's files (run.json, metrics.jsonl, eval.jsonl), so it works while the run
goes on and after it ended. The last metrics record says which alerts are active
(`trainer.health`); each one is described by the record where it started.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from millrace.errors import ArtifactError
from millrace.home import Home
from millrace.names import known
from trainer.records import RUN_FILE, MetricsRecord, observed_run_status, read_eval, read_metrics, read_run
from trainer.run_url import pushing

ALERT_EXIT_CODE = 3


def active_alerts(records: list[MetricsRecord]) -> list[dict[str, JsonValue]]:
    """The alerts active after the last record, each with the step and details of its start and its value
    now (`value_now`: at the last record where its condition held)."""
    last = records[-1].alerts if records else None
    if last is None:
        return []
    now = _current_values(records, last.active)
    found: dict[str, dict[str, JsonValue]] = {}
    for record in reversed(records):
        for alert in record.alerts.started if record.alerts is not None else []:
            if alert.name in last.active and alert.name not in found:
                found[alert.name] = {**alert.dump(), "since_step": record.step}
        if len(found) == len(last.active):
            break
    return [found.get(name, {"name": name, "since_step": None}) | now.get(name, {}) for name in last.active]


def _current_values(records: list[MetricsRecord], active: list[str]) -> dict[str, dict[str, JsonValue]]:
    """Each active alert's latest recorded value and its step (records written before values were kept
    have none: then the start value is all there is)."""
    found: dict[str, dict[str, JsonValue]] = {}
    for record in reversed(records):
        for name, value in (record.alerts.values if record.alerts is not None else {}).items():
            if name in active and name not in found:
                found[name] = {"value_now": value, "value_step": record.step}
        if len(found) == len(active):
            break
    return found


def existing_run(home: Home, name: str) -> Path:
    """The directory of run `name`; a miss lists the runs there are."""
    run_dir = home.run(name)
    if not (run_dir / RUN_FILE).exists():
        names = (p.name for p in home.run_dirs(RUN_FILE))
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
            "macro_cells": len(latest.loss.cell),
            "without_held_out": list(latest.without_held_out),
        },
        "alerts": active_alerts(records),
        "pushing": _push(run_dir),
    }


def _push(run_dir: Path) -> dict[str, Any] | None:
    """The push of the run's records to its URL under way, with how long it has taken; None when none is."""
    found = pushing(run_dir)
    if found is None:
        return None
    return {"url": found.get("url"), "seconds": round(max(0.0, time.time() - found["since"]), 1)}


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
        lines.append(f"  {macro_over(latest['macro_cells'], latest['without_held_out'])}")
    else:
        lines.append("  no evaluation yet")
    if status.get("pushing"):
        push = status["pushing"]
        lines.append(f"  pushing its records to {push['url']} for {push['seconds']:g}s")
    if status["alerts"]:
        lines.append(f"  {len(status['alerts'])} active alert(s):")
        for alert in status["alerts"]:
            lines.append(f"    {alert['name']} since step {alert['since_step']}: {_alert_now(alert)}")
    else:
        lines.append("  no active alert")
    return "\n".join(lines)


def macro_over(cells: int, without: list[str]) -> str:
    """What the macro average is over, and the trained cells it leaves out for want of held-out data."""
    line = f"macro averages over {cells} cell{'s' if cells != 1 else ''} with held-out data"
    if without:
        line += f" of {cells + len(without)} trained; no held-out data: {', '.join(without)}"
    return line


def _alert_now(alert: dict[str, Any]) -> str:
    """The alert's value now against its threshold, then the message of its start."""
    value, threshold = alert.get("value_now", alert.get("value")), alert.get("threshold")
    if not isinstance(value, (int, float)):
        return str(alert.get("message", ""))
    step = alert.get("value_step", alert.get("since_step"))
    against = f" (threshold {threshold:.4g})" if isinstance(threshold, (int, float)) else ""
    return f"{value:.4g} at step {step}{against}; at its start: {alert.get('message', '')}"
