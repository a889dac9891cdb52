"""What the training page shows beyond the metrics stream: held-out evaluations, completions, alerts.

Reads the trainer's `eval.jsonl` and `samples.jsonl` through `trainer.records` (a torn last line is left for the
next read), and the alert events that `metrics.jsonl` records carry under `alerts`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypedDict

from reports.numbers import finite
from trainer.records import EVAL_GROUPS, Alerts, EvalFigures, EvalRecord, MetricsRecord, SampleRecord, read_samples
from trainer.records import read_eval as read_eval_records

METRICS: tuple[Literal["loss"], Literal["bpb"]] = ("loss", "bpb")
EvalGroups = dict[str, dict[str, list[float | None]]]  # group ("average", then EVAL_GROUPS) -> name -> series


class Coverage(TypedDict):
    macro_cells: int  # cells in the latest evaluation's macro average
    without_held_out: list[str]  # cells drawn that have no held-out data


class EvalView(TypedDict):
    """The held-out evaluations as the pages draw them: one series per metric, group and name."""

    steps: list[int]
    tokens: list[int | None]
    seconds: list[float | None]
    loss: EvalGroups
    bpb: EvalGroups
    coverage: Coverage


def eval_view(records: list[EvalRecord]) -> EvalView:
    """Per metric (loss, bpb) and group: one series per name over the evaluations, plus macro/micro."""
    kept: dict[int, EvalRecord] = {}
    for record in records:
        kept[record.step] = record
    ordered = [kept[step] for step in sorted(kept)]
    latest = ordered[-1] if ordered else None
    return {
        "steps": [r.step for r in ordered],
        "tokens": [r.tokens for r in ordered],
        "seconds": [finite(r.seconds) for r in ordered],
        "loss": _groups([r.loss for r in ordered]),
        "bpb": _groups([r.bpb for r in ordered]),
        "coverage": {
            "macro_cells": len(latest.loss.cell) if latest is not None else 0,
            "without_held_out": list(latest.without_held_out) if latest is not None else [],
        },
    }


def _groups(figures: list[EvalFigures]) -> EvalGroups:
    """One metric's series: macro and micro averages, then one per name of each group."""
    groups: EvalGroups = {
        "average": {name: [finite(getattr(f, name)) for f in figures] for name in ("macro", "micro")}
    }
    for group in EVAL_GROUPS:
        names = sorted({name for f in figures for name in getattr(f, group)})
        groups[group] = {name: [finite(getattr(f, group).get(name)) for f in figures] for name in names}
    return groups


def samples_view(records: list[SampleRecord]) -> dict[str, object]:
    """Completions by step and prompt, the prompts in first-seen order, and where the prompts came from
    (a file's path, or the held-out documents)."""
    prompts: dict[str, str] = {}
    sources: dict[str, None] = {}
    by_step: dict[int, dict[str, list[dict[str, object]]]] = {}
    for record in records:
        prompts.setdefault(record.prompt_id, record.prompt)
        sources.setdefault(record.prompt_source or "not recorded (samples written before it was)")
        by_step.setdefault(record.step, {}).setdefault(record.prompt_id, []).append(
            {
                "temperature": finite(record.temperature),
                "completion": record.completion,
                "mean_logprob": finite(record.mean_logprob),
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
        self.events: list[dict[str, object]] = []
        self.started: dict[str, dict[str, object]] = {}
        self.bands: list[dict[str, object]] = []
        self.open_bands: dict[str, dict[str, object]] = {}
        self.last: MetricsRecord | None = None

    def add(self, record: MetricsRecord) -> None:
        alerts = record.alerts or Alerts()
        for alert in alerts.started:
            self.started[alert.name] = {**alert.dump(), "since_step": record.step}
            self.events.append({"step": record.step, "event": "start", "name": alert.name, "message": alert.message})
            held = alert.held_since
            band = {
                "name": alert.name,
                "from": held if isinstance(held, int) else record.step,
                "started": record.step,
                "to": None,
                "message": alert.message,
            }
            self.bands.append(band)
            self.open_bands[alert.name] = band
        for name in alerts.ended:
            self.events.append({"step": record.step, "event": "end", "name": name, "message": ""})
            if name in self.open_bands:
                self.open_bands.pop(name)["to"] = record.step
        self.last = record

    def view(self) -> dict[str, object]:
        last = self.last
        bands = [dict(band) for band in self.bands]
        for band in bands:
            if band["to"] is None:
                band["to"] = last.step if last is not None else None  # still active: to the last logged step
        alerts = last.alerts if last is not None and last.alerts is not None else Alerts()
        active = [
            {**self.started.get(name, {"name": name, "since_step": None}), "value_now": alerts.values.get(name)}
            for name in alerts.active
        ]
        return {
            "events": self.events,
            "active": active,
            "bands": bands,
            "skipped_steps": (last.skipped_steps or 0) if last is not None else 0,
        }


def read_eval(run_dir: Path) -> EvalView:
    """The held-out evaluations of a run, as `eval_view` lays them out."""
    return eval_view(read_eval_records(run_dir))


def observations(run_dir: Path, alerts: dict[str, object]) -> dict[str, object]:
    """The evaluations and completions read from the run's files, beside the alerts' view (`AlertEvents`)."""
    return {
        "eval": read_eval(run_dir),
        "samples": samples_view(read_samples(run_dir)),
        "alerts": alerts,
    }
