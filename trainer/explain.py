"""What happened at one training step: `millrace train explain RUN --step N [--json]`.

Three answers, from the run's own files (torch-free, so it runs beside a live run or long after it):
- the batch: the loader rebuilds step N's global batch from the manifest the run trained on (a pure function
  of manifest and step), so its cells, sources and, with the store's trace, its documents are known exactly;
- the loss per cell at N against its running mean over the logged steps before (a bad batch shows as one cell
  whose loss jumps; the median cell's move, the trend every cell shares early in training, is taken out);
- which parameter groups moved: each group's norm change at N against its typical change per logged step, the
  router bias (updated by a rule, not by gradients) apart from the gradient-trained groups. The reference run's
  step-500 norm spike was the router bias while the gradient norm stayed flat;
- what changed in the schedule around N: the learning rate's change against its typical change, the end of the
  warm-up and the start of a decay, a new mixture phase or revision, and settings changed on a resume. Every
  cell jumps after a 100x learning rate: the cells are then not the cause, and the explanation says so.

Metrics steps count optimizer steps from 1 (the record of step N follows the N-th update); the loader's batch
for that update is its step N - 1.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from loader.peek import peek
from loader.stream import MixtureStream
from millrace.artifacts import atomic_write_text
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from mixtures.manifest import find_manifest
from trainer.config import MetricsConfig, ScheduleConfig
from trainer.param_groups import ROUTER_BIAS
from trainer.records import EXPLANATIONS_FILE, Alerts, Explanations, MetricsRecord, RunRecord, read_metrics, read_run
from trainer.status import existing_run

if TYPE_CHECKING:  # the loader's stream loads when a batch is rebuilt
    from loader.stream import MixtureStream

WINDOW = 20  # logged steps before N that make the running mean
MOVED_RATIO = 5.0  # a group moved when its norm change is this many times its typical change
JUMP_SIGMAS = 4.0  # a cell's loss jumped when it rose this many standard deviations more than the median cell
MIN_JUMP = 0.1  # ... and at least this many nats
OUTLIER_FACTOR = 5.0  # a notable step's jump is this many times the 99th percentile of the run's other jumps
NEAR = 3  # schedule changes are named when they fall within this many logged steps before the step
LR_CHANGE = math.log(1.05)  # a learning-rate change smaller than 5% is never named


class ScheduleChange(TypedDict):
    """One thing the schedule changed near the step (`schedule_changes`)."""

    step: int
    what: str


class Running(TypedDict):
    """A figure at the step against the running mean and spread of the logged steps before it."""

    value: float | None
    mean: float | None
    std: float | None
    jump: float | None
    sigmas: float | None


class LrChange(TypedDict):
    """The learning rate at the step against the previous logged step's (`lr_change`)."""

    value: float | None
    previous: float | None
    ratio: float | None
    typical_ratio: float | None
    changed: bool


def running(values: list[float], value: float | None) -> Running:
    """`value` against the mean and spread of the `values` before it."""
    if value is None or not values:
        return {"value": value, "mean": None, "std": None, "jump": None, "sigmas": None}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    jump = value - mean
    return {"value": value, "mean": mean, "std": std, "jump": jump, "sigmas": jump / max(std, 1e-3 * abs(mean), 1e-12)}


def group_norms(record: MetricsRecord) -> dict[str, float]:
    """Norms per group in one record: gradient-trained groups, then the router bias per MoE layer."""
    norms = {group: v for group, v in record.param_norm_per_group.items() if v is not None}
    if not norms and record.param_norm is not None:
        norms["gradient-trained (all)"] = record.param_norm  # a record from before the per-group norms
    for entry in record.router_bias:
        if entry.norm is not None:
            norms[f"{ROUTER_BIAS}/layer {entry.layer}"] = entry.norm
    return norms


def moved_groups(before: list[MetricsRecord], record: MetricsRecord) -> list[dict[str, Any]]:
    """Per group: its norm, the change since the previous logged step, and that change over the typical one."""
    history = [group_norms(r) for r in before] + [group_norms(record)]
    rows = []
    for group, norm in history[-1].items():
        series = [h.get(group) for h in history]
        steps = [b - a for a, b in itertools.pairwise(series) if a is not None and b is not None]
        if not steps:
            continue
        change, typical = steps[-1], [abs(d) for d in steps[:-1]]
        scale = sum(typical) / len(typical) if typical else None
        ratio = abs(change) / max(scale, 1e-12) if scale is not None else None
        rows.append(
            {
                "group": group,
                "rule_updated": group.startswith(ROUTER_BIAS),
                "norm": norm,
                "change": change,
                "typical_change": scale,
                "ratio": ratio,
                "moved": ratio is not None and ratio >= MOVED_RATIO and abs(change) > 1e-9,
            }
        )
    return sorted(rows, key=lambda r: -(r["ratio"] or 0.0))


def cell_losses(before: list[MetricsRecord], record: MetricsRecord) -> list[dict[str, Any]]:
    """Each cell in the step's batch: its loss at the step against its running mean (largest jump first)."""
    rows: list[dict[str, Any]] = []
    for cell, value in record.loss_per_cell.items():
        history = [loss for r in before if (loss := r.loss_per_cell.get(cell)) is not None]
        rows.append({"cell": cell, **running(history, value)})
    jumps = sorted(r["jump"] for r in rows if r["jump"] is not None)
    common = jumps[len(jumps) // 2] if len(jumps) > 2 else 0.0  # the median cell's move: the trend all share
    for row in rows:
        row["excess"] = None if row["jump"] is None else row["jump"] - common
        row["jumped"] = bool(
            row["excess"] is not None
            and row["excess"] >= MIN_JUMP
            and row["excess"] >= JUMP_SIGMAS * max(row["std"], 1e-12)
        )
    return sorted(rows, key=lambda r: -(r["excess"] if r["excess"] is not None else -math.inf))


def lr_change(before: list[MetricsRecord], record: MetricsRecord) -> LrChange:
    """The learning rate at the step against the previous logged step's: its ratio, and the change (in log lr)
    against its typical change over the window (a warm-up changes it at every step; a jump stands out)."""
    rates = [float(r.lr) for r in [*before, record] if r.lr is not None and r.lr > 0]
    if len(rates) < 2 or record.lr is None:
        return {"value": record.lr, "previous": None, "ratio": None, "typical_ratio": None, "changed": False}
    logs = [math.log(rate) for rate in rates]
    steps = [abs(b - a) for a, b in itertools.pairwise(logs)]
    change, typical = steps[-1], steps[:-1]
    scale = sum(typical) / len(typical) if typical else 0.0
    return {
        "value": rates[-1],
        "previous": rates[-2],
        "ratio": rates[-1] / rates[-2],
        "typical_ratio": math.exp(scale),
        "changed": change > LR_CHANGE and change >= MOVED_RATIO * scale,
    }


def schedule_changes(
    run: RunRecord | None, before: list[MetricsRecord], record: MetricsRecord
) -> list[ScheduleChange]:
    """What the schedule changed in the last `NEAR` logged intervals up to the step: the warm-up's end, a wsd
    decay's start, a new mixture phase or revision, settings changed on a resume."""
    before = before[-NEAR:]
    step, first = record.step, before[0].step if before else 0
    run = run if run is not None else RunRecord()
    schedule = run.config.schedule if run.config is not None else ScheduleConfig()
    total = run.total_steps or 0
    warmup = min(schedule.warmup_steps, max(total - 1, 0)) if total else None
    events: list[ScheduleChange] = []
    if warmup and first < warmup + 1 <= step:
        events.append({"step": warmup + 1, "what": f"warm-up ended (after {warmup} steps); the decay begins"})
    if schedule.kind == "wsd" and total:
        decay = max(total - max(round(total * schedule.decay_fraction), 1), warmup or 0)
        if first < decay + 1 <= step:
            events.append({"step": decay + 1, "what": f"wsd decay began (steps {decay + 1}..{total})"})
    for previous, current in itertools.pairwise([*before, record]):
        if previous.phase != current.phase and current.phase is not None:
            events.append({"step": current.step, "what": f"mixture phase {previous.phase} -> {current.phase}"})
    for span in run.revisions:
        if span.start_step > 0 and first < span.start_step + 1 <= step:
            events.append({"step": span.start_step + 1, "what": f"revision {span.revision} took over"})
    for change in run.config_changes:
        if change.step is not None and first < change.step + 1 <= step:
            what = f"resumed with {change.field} {change.checkpoint} -> {change.now}"
            events.append({"step": change.step + 1, "what": what})
    return sorted(events, key=lambda e: e["step"])


def step_figures(before: list[MetricsRecord], record: MetricsRecord) -> dict[str, Running]:
    keys = ("loss", "grad_norm", "param_norm", "param_norm_with_router_bias")
    return {
        key: running(
            [value for r in before if (value := getattr(r, key)) is not None],
            getattr(record, key),
        )
        for key in keys
    }


def manifest_for_step(home: Home, run: RunRecord, step: int) -> tuple[Path, str | None]:
    """The built manifest the run trained on at loader step `step`, and the hash the run pinned for it."""
    covering = next((r for r in run.revisions if r.start_step <= step < r.stop_step), None)
    revision = covering.revision if covering is not None else run.revision
    pinned = covering.manifest_hash if covering is not None else run.manifest_hash
    recorded = Path(run.manifest_path) if run.manifest_path else None
    if recorded is not None and recorded.exists() and revision == run.revision:
        return recorded, pinned
    return find_manifest(home, str(run.mixture), str(revision)), pinned


def open_stream(manifest_path: Path, pinned: str | None) -> MixtureStream:
    """The loader's stream over the manifest the run trained on; a rebuilt revision (another hash) is refused."""
    stream = MixtureStream(manifest_path, prefetch=0)
    if pinned is not None and stream.manifest_hash != pinned:
        raise ArtifactError(
            f"{manifest_path}: hash {stream.manifest_hash[:12]} is not the {pinned[:12]} the run "
            "trained on (the revision was rebuilt); the batch cannot be rebuilt"
        )
    return stream


def batch_contents(stream: MixtureStream, loader_step: int, decode: bool) -> dict[str, Any]:
    """Step `loader_step`'s global batch as the loader gives it: per cell its sequences, tokens per source."""
    seen = peek(stream, loader_step, decode=decode)
    cells: dict[str, dict[str, Any]] = {}
    for sample in seen["samples"]:
        cells.setdefault(sample["cell"], {"cell": sample["cell"], "sequences": 0, "sources": {}})["sequences"] += 1
    if not stream.index_only and stream.has_sources:
        batch = stream.batch(loader_step)
        token_sources = batch.token_sources()
        assert token_sources is not None  # the stream has sources
        for row, cell in enumerate(batch.cells):
            ids, counts = np.unique(token_sources[row], return_counts=True)
            sources = cells[cell]["sources"]
            for source, count in zip(ids.tolist(), counts.tolist()):
                name = stream.source_names[source]
                sources[name] = sources.get(name, 0) + int(count)
    return {
        "manifest": str(stream.path),
        "mixture": seen["mixture"],
        "revision": seen["revision"],
        "phase": seen["phase"],
        "loader_step": loader_step,
        "sequences": len(seen["samples"]),
        "cells": sorted(cells.values(), key=lambda c: (-c["sequences"], c["cell"])),
        "samples": seen["samples"],
    }


def explain_record(
    records: list[MetricsRecord], at: int, window: int = WINDOW, run: RunRecord | None = None
) -> dict[str, Any]:
    """What the metrics (and the run's record of its schedule) say about `records[at]` against the `window`
    records before it."""
    record, before = records[at], records[max(0, at - window) : at]
    cells = cell_losses(before, record)
    groups = moved_groups(before, record)
    alerts = record.alerts or Alerts()
    common = [c["jump"] - c["excess"] for c in cells if c["jump"] is not None and c["excess"] is not None]
    spread = [c["std"] for c in cells if c["std"] is not None]
    every_cell = bool(
        common and spread and common[0] >= MIN_JUMP and common[0] >= JUMP_SIGMAS * sorted(spread)[len(spread) // 2]
    )
    return {
        "lr": lr_change(before, record),
        "schedule_changes": schedule_changes(run, before, record),
        "every_cell_jumped": every_cell,
        "step": record.step,
        "previous_step": before[-1].step if before else None,
        "window": len(before),
        "figures": step_figures(before, record),
        "cells": cells,
        "jumped_cells": [c["cell"] for c in cells if c["jumped"]],
        "groups": groups,
        "moved_groups": [g["group"] for g in groups if g["moved"]],
        "alerts": {
            "started": [a.name for a in alerts.started],
            "active": list(alerts.active),
        },
    }


def read_run_files(home: Home, run_name: str) -> tuple[RunRecord, list[MetricsRecord]]:
    run_dir = existing_run(home, run_name)
    return read_run(run_dir), read_metrics(run_dir)


def explain(home: Home, run_name: str, step: int, decode: bool = False, window: int = WINDOW) -> dict[str, Any]:
    """Everything `train explain` says about metrics step `step` of `run_name`, JSON-ready."""
    run, records = read_run_files(home, run_name)
    at = next((i for i, r in enumerate(records) if r.step == step), None)
    if at is None:
        logged = f"logged steps {records[0].step}..{records[-1].step}" if records else "no steps logged yet"
        every = (run.config.metrics if run.config is not None else MetricsConfig()).log_every
        raise ConfigError(
            f"--step {step}: no metrics record for that step in {home.run(run_name) / 'metrics.jsonl'} "
            f"({logged}, every {every} steps)"
        )
    path, pinned = manifest_for_step(home, run, step - 1)
    found = explain_record(records, at, window, run)
    return {
        "run": run.run or run_name,
        **found,
        "batch": batch_contents(open_stream(path, pinned), step - 1, decode),
    }


def explain_steps(
    home: Home, run: RunRecord, records: list[MetricsRecord], steps: list[int], window: int = WINDOW
) -> dict[int, dict[str, Any]]:
    """`explain` for several steps of one run (its run.json and metrics records, already read; each manifest
    opened once), without the per-sample rows; a batch the loader cannot rebuild (manifest gone or rebuilt)
    says why under `batch.error`."""
    where = {r.step: i for i, r in enumerate(records)}
    streams: dict[Path, MixtureStream] = {}
    found = {}
    for step in steps:
        if step not in where:
            continue
        entry = explain_record(records, where[step], window, run)
        try:
            path, pinned = manifest_for_step(home, run, step - 1)
            if path not in streams:
                streams[path] = open_stream(path, pinned)
            batch = batch_contents(streams[path], step - 1, decode=False)
            batch.pop("samples")
        except (ArtifactError, ConfigError) as exc:
            batch = {"error": str(exc), "loader_step": step - 1, "cells": []}
        found[step] = {**entry, "batch": batch}
    return found


def jump_scores(values: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """Per point, how many standard deviations it lies above the mean of the `window` points before it (NaN where
    fewer than three finite points precede it); vectorised, so a 100,000-step run costs milliseconds."""
    padded = np.concatenate([np.full(window, np.nan), values])
    prior = np.lib.stride_tricks.sliding_window_view(padded[:-1], window)
    counts = np.isfinite(prior).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nansum(prior, axis=1) / counts
        spread = np.sqrt(np.nansum((prior - mean[:, None]) ** 2, axis=1) / counts)
        scores: np.ndarray = (values - mean) / np.maximum(spread, 1e-12)
    scores[counts < 3] = np.nan
    return scores


def notable_steps(records: list[MetricsRecord], limit: int = 12, window: int = WINDOW) -> list[int]:
    """The steps worth explaining on a run page: where an alert started, then the largest loss, gradient-norm
    and parameter-norm (router bias included) jumps against their running means."""
    chosen = [r.step for r in records if r.alerts is not None and r.alerts.started]
    steps = np.array([r.step for r in records])
    for key in ("loss", "grad_norm", "param_norm_with_router_bias"):
        values = np.array([np.nan if (v := getattr(r, key)) is None else v for r in records], dtype=np.float64)
        if key == "param_norm_with_router_bias":
            values = np.abs(np.diff(values, prepend=np.nan))  # the norm drifts: its steps are what jump
        scores = np.nan_to_num(jump_scores(values, window), nan=-np.inf)
        top = np.argsort(-scores, kind="stable")[:3]
        rest = np.delete(scores, top)
        rest = rest[np.isfinite(rest)]
        # an outlier among the run's other jumps: with a 20-step window, noise alone reaches 4 to 8 sigmas
        bar = max(JUMP_SIGMAS, OUTLIER_FACTOR * float(np.percentile(rest, 99)) if rest.size else JUMP_SIGMAS)
        chosen += [int(steps[i]) for i in top if scores[i] >= bar]
    return sorted(list(dict.fromkeys(chosen))[:limit])


def _lr_line(lr: LrChange) -> str:
    if lr["ratio"] is None:
        return f"  learning rate {_num(lr['value'])}"
    mark = "  <- changed" if lr["changed"] else ""
    return (
        f"  learning rate {_num(lr['value'])}: x{_num(lr['ratio'], 3)} from the previous logged step "
        f"(typical x{_num(lr['typical_ratio'], 3)}){mark}"
    )


def _num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def format_explain(found: dict[str, Any]) -> str:
    """The explanation for a person: the verdict first, then the batch, the cells and the groups."""
    batch, figures = found["batch"], found["figures"]
    loss = figures["loss"]
    lines = [
        (
            f"run {found['run']}, step {found['step']} (loader step {batch['loader_step']}, phase {batch['phase']} "
            f"of {batch['mixture']}/{batch['revision']}), against the mean of {found['window']} logged steps before"
        ),
        (
            f"  loss {_num(loss['value'])} (mean {_num(loss['mean'])}, {_num(loss['jump'], 3)} from it); "
            f"grad norm {_num(figures['grad_norm']['value'])} (mean {_num(figures['grad_norm']['mean'])})"
        ),
    ]
    moved = ", ".join(found["moved_groups"]) or "none beyond their usual change"
    jumped = ", ".join(found["jumped_cells"]) or "none"
    if found["every_cell_jumped"]:
        jumped = "every cell (a change shared by all cells, not one batch's)" + (
            f"; most: {jumped}" if found["jumped_cells"] else ""
        )
    lines += [_lr_line(found["lr"]), f"  groups that moved: {moved}", f"  cells whose loss jumped: {jumped}"]
    for event in found["schedule_changes"]:
        lines.append(f"  schedule at step {event['step']}: {event['what']}")
    if found["alerts"]["started"]:
        lines.append(f"  alerts that started here: {', '.join(found['alerts']['started'])}")
    lines.append(f"batch: {batch['sequences']} sequences from {len(batch['cells'])} cells")
    for cell in batch["cells"]:
        sources = ", ".join(f"{s} {n:,}" for s, n in sorted(cell["sources"].items(), key=lambda kv: -kv[1]))
        lines.append(
            f"  {cell['cell']:<12} {cell['sequences']:>4} seq  {('tokens by source: ' + sources) if sources else ''}"
        )
    lines.append("loss per cell (largest jump first): value, running mean, jump, jump beyond the median cell's")
    for row in found["cells"]:
        mark = "  <- jumped" if row["jumped"] else ""
        lines.append(
            f"  {row['cell']:<12} {_num(row['value']):>8} {_num(row['mean']):>8} {_num(row['jump'], 3):>8} "
            f"{_num(row['excess'], 3):>8}{mark}"
        )
    lines.append("parameter groups (largest change over typical first): norm, change, typical change, ratio")
    for row in found["groups"]:
        kind = "rule" if row["rule_updated"] else "grad"
        mark = "  <- moved" if row["moved"] else ""
        lines.append(
            f"  {row['group']:<24} {kind} {_num(row['norm']):>9} {_num(row['change'], 3):>10} "
            f"{_num(row['typical_change'], 3):>10} {_num(row['ratio'], 3):>8}{mark}"
        )
    for sample in batch["samples"]:
        if "text" in sample:
            documents = ", ".join(f"{d['source']}:{d['id']}" for d in sample.get("documents") or [])
            lines.append(f"  [{sample['position']}] {sample['cell']} {sample['text']!r} {documents}")
    return "\n".join(lines)


def write_explanations(home: Home, run_name: str) -> Path | None:
    """`explain` for the run's notable steps, written beside its metrics when a training call ends, so that the
    run's pages show them without the reports importing the loader (`trainer.records.read_explanations`)."""
    run, records = read_run_files(home, run_name)
    found = explain_steps(home, run, records, notable_steps(records))
    explained = {str(k): v for k, v in found.items()}  # as `train explain --json` prints them: through JSON
    payload = Explanations.model_validate_json(
        json.dumps({"run": run_name, "steps": sorted(found), "explained": explained})
    )
    out = home.run(run_name) / EXPLANATIONS_FILE
    atomic_write_text(out, payload.model_dump_json() + "\n")
    return out
