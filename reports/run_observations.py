"""What the training page shows beyond the metrics stream: held-out evaluations, completions, alerts.

Reads the trainer's `eval.jsonl` and `samples.jsonl` (`trainer.records`: a torn last line is left for the next
read), and the alert events that `metrics.jsonl` records carry under `alerts`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.numbers import finite
from trainer.records import EVAL_GROUPS, read_samples
from trainer.records import read_eval as read_eval_records


def alerts_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with a metrics record's `alerts` (a hand-edited or foreign record), or None."""
    alerts = record.get("alerts")
    if alerts is None:
        return None
    if not isinstance(alerts, dict):
        return "'alerts' is not an object"
    for key in ("started", "ended", "active"):
        if not isinstance(alerts.get(key, []), list):
            return f"'alerts.{key}' is not a list"
    if not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in alerts.get("started", [])):
        return "an 'alerts.started' entry is not an object with a 'name'"
    if not all(isinstance(n, str) for key in ("ended", "active") for n in alerts.get(key, [])):
        return "'alerts.ended' or 'alerts.active' holds something other than a name"
    return None


def eval_view(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric (loss, bpb) and group: one series per name over the evaluations, plus macro/micro."""
    kept: dict[int, dict[str, Any]] = {}
    for record in records:
        kept[record["step"]] = record
    ordered = [kept[step] for step in sorted(kept)]
    view: dict[str, Any] = {
        "steps": [r["step"] for r in ordered],
        "tokens": [r.get("tokens") for r in ordered],
        "seconds": [finite(r.get("seconds")) for r in ordered],
    }
    for metric in ("loss", "bpb"):
        groups: dict[str, dict[str, list[float | None]]] = {
            "average": {
                name: [finite((r.get(metric) or {}).get(name)) for r in ordered] for name in ("macro", "micro")
            }
        }
        for group in EVAL_GROUPS:
            names = sorted({name for r in ordered for name in ((r.get(metric) or {}).get(group) or {})})
            groups[group] = {
                name: [finite(((r.get(metric) or {}).get(group) or {}).get(name)) for r in ordered] for name in names
            }
        view[metric] = groups
    latest = ordered[-1] if ordered else {}
    view["coverage"] = {
        "macro_cells": len((latest.get("loss") or {}).get("cell") or {}),
        "without_held_out": [str(c) for c in latest.get("without_held_out") or []],
    }
    return view


def samples_view(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Completions by step and prompt, the prompts in first-seen order, and where the prompts came from
    (a file's path, or the held-out documents)."""
    prompts: dict[str, str] = {}
    sources: dict[str, None] = {}
    by_step: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for record in records:
        pid = str(record.get("prompt_id"))
        prompts.setdefault(pid, str(record.get("prompt", "")))
        sources.setdefault(str(record.get("prompt_source") or "not recorded (samples written before it was)"))
        by_step.setdefault(record["step"], {}).setdefault(pid, []).append(
            {
                "temperature": finite(record.get("temperature")),
                "completion": str(record.get("completion", "")),
                "mean_logprob": finite(record.get("mean_logprob")),
            }
        )
    return {
        "steps": sorted(by_step),
        "prompts": [{"id": k, "prompt": v} for k, v in prompts.items()],
        "sources": list(sources),
        "by_step": {str(step): by_step[step] for step in sorted(by_step)},
    }


class AlertEvents:
    """Every alert start and end (step, name, message), the alerts active after the last record, and one band
    per alert: from the first step its condition held (`held_since`, the trainer's hysteresis) to its end.
    Fed one record at a time; what it keeps grows with the alerts, not the records."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.started: dict[str, dict[str, Any]] = {}
        self.bands: list[dict[str, Any]] = []
        self.open_bands: dict[str, dict[str, Any]] = {}
        self.last: dict[str, Any] | None = None

    def add(self, record: dict[str, Any]) -> None:
        alerts = record.get("alerts") or {}
        for alert in alerts.get("started") or []:
            self.started[alert["name"]] = {**alert, "since_step": record["step"]}
            self.events.append(
                {"step": record["step"], "event": "start", "name": alert["name"], "message": alert.get("message", "")}
            )
            held = alert.get("held_since")
            band = {
                "name": alert["name"],
                "from": held if isinstance(held, int) else record["step"],
                "started": record["step"],
                "to": None,
                "message": alert.get("message", ""),
            }
            self.bands.append(band)
            self.open_bands[alert["name"]] = band
        for name in alerts.get("ended") or []:
            self.events.append({"step": record["step"], "event": "end", "name": name, "message": ""})
            if name in self.open_bands:
                self.open_bands.pop(name)["to"] = record["step"]
        self.last = record

    def view(self) -> dict[str, Any]:
        last = self.last
        bands = [dict(band) for band in self.bands]
        for band in bands:
            if band["to"] is None:
                band["to"] = last["step"] if last else None  # still active: the band reaches the last logged step
        alerts = (last.get("alerts") or {}) if last else {}
        values: dict[str, Any] = alerts["values"] if isinstance(alerts.get("values"), dict) else {}
        active = [
            {**self.started.get(name, {"name": name, "since_step": None}), "value_now": values.get(name)}
            for name in alerts.get("active", [])
        ]
        return {
            "events": self.events,
            "active": active,
            "bands": bands,
            "skipped_steps": (last.get("skipped_steps") or 0) if last else 0,
        }


def alerts_view(records: list[dict[str, Any]]) -> dict[str, Any]:
    """`AlertEvents` over a list of records."""
    events = AlertEvents()
    for record in records:
        events.add(record)
    return events.view()


def read_eval(run_dir: Path) -> dict[str, Any]:
    """The held-out evaluations of a run, as `eval_view` lays them out."""
    return eval_view(read_eval_records(run_dir))


def observations(run_dir: Path, alerts: dict[str, Any]) -> dict[str, Any]:
    """The evaluations and completions read from the run's files, beside the alerts' view (`AlertEvents`)."""
    return {
        "eval": read_eval(run_dir),
        "samples": samples_view(read_samples(run_dir)),
        "alerts": alerts,
    }
