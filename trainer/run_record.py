"""A run's own record: run.json written at start and at each status change, the revision history a resume
continues, the records a branched run adopts, and the step explanations written at the end."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from loader import MixtureStream
from millrace.artifacts import atomic_write_text
from millrace.errors import ArtifactError, ConfigError
from millrace.jsonl import read_stream
from mixtures.manifest import lineage_of
from trainer.explain import write_explanations
from trainer.flops import count_params, flops_per_token
from trainer.records import (
    EVAL_FILE,
    METRICS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    RecordedTrainConfig,
    RunRecord,
    RunStatus,
    RunStore,
    TrainedRange,
    read_metrics,
    read_run,
    write_run,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from trainer.loop import RunPlan, Training


def planned_tokens_per_cell(stream: MixtureStream) -> dict[str, int]:
    """The manifest's per-cell plan in tokens (whole phases: exact)."""
    manifest = stream.manifest
    return {cell: int(sequences) * manifest.seq_len for cell, sequences in sorted(manifest.cell_plan().items())}


def check_resumable(run_dir: Path, start: int) -> None:
    """Every record a resume continues, read whole before any stream is cut back to the checkpoint: a damaged
    one is refused in one line with nothing changed. A damaged `run.json` is refused too: rewritten, it would
    lose which revision trained which steps."""
    if start == 0:
        return
    for name in (METRICS_FILE, EVAL_FILE, SAMPLES_FILE):
        read_stream(run_dir / name)
    if (run_dir / RUN_FILE).exists():
        try:
            read_run(run_dir)
        except ArtifactError as exc:
            raise ArtifactError(
                f"{exc}; a resume would lose which revision trained which steps: restore it (from a backup or "
                "the run's [run] url), or train under a new --run"
            ) from None


def revision_history(plan: RunPlan, start: int) -> list[TrainedRange]:
    """Which revision (and manifest, and run directory) this run trained on over which steps: the earlier
    record's ranges before `start`, then this invocation's [start, stop). A resume onto a mixture switch
    adds a range."""
    previous: list[TrainedRange] = []
    if start > 0:
        try:
            record = read_run(plan.run_dir)
        except ArtifactError:
            record = RunRecord()
        previous = record.revisions or (
            [TrainedRange(revision=record.revision, manifest_hash=record.manifest_hash, start_step=0, stop_step=start)]
            if record.revision is not None and record.manifest_hash is not None
            else []
        )
    ranges = [r.model_copy(update={"stop_step": min(r.stop_step, start)}) for r in previous if r.start_step < start]
    if ranges and ranges[-1].manifest_hash == plan.stream.manifest_hash:
        ranges[-1] = ranges[-1].model_copy(update={"stop_step": plan.stop})
    else:
        ranges.append(
            TrainedRange(
                revision=plan.revision,
                manifest_hash=plan.stream.manifest_hash,
                run=plan.run,
                start_step=start,
                stop_step=plan.stop,
            )
        )
    return ranges


def adopt_history(plan: RunPlan, source: str, step: int) -> None:
    """A run started from another run's checkpoint takes that run's record up to `step`: its revisions
    per step range (into this run.json) and its metrics lines, so the curves show the whole run."""
    if plan.runtime.rank != 0:
        return
    before = plan.home.run(source)
    write_run(plan.run_dir, read_run(before).model_copy(update={"run": plan.run}))
    lines = [record for record in read_metrics(before) if record.step <= step]
    atomic_write_text(
        plan.run_dir / METRICS_FILE,
        "".join(json.dumps(record.dump(), separators=(",", ":")) + "\n" for record in lines),
    )


def write_run_record(training: Training, peak: float, peak_source: str) -> None:
    """`run.json` at start (rank 0): what runs, on what data, at what size."""
    plan, config = training.plan, training.plan.config
    before = _recorded(plan.run_dir)
    tags, notes = plan.labels.applied(before)  # `train --tag/--note`, `runs tag/note`: kept across resumes
    changes = list(before.config_changes if before else []) + [
        change.model_copy(update={"step": training.start}) for change in training.state.config_changes
    ]
    write_run(
        plan.run_dir,
        RunRecord(
            run=plan.run,
            config=RecordedTrainConfig.of(config, plan.config_path),
            mixture=plan.mixture,
            revision=plan.revision,
            manifest_hash=plan.stream.manifest_hash,
            manifest_path=str(plan.manifest_path),
            revisions=revision_history(plan, training.start),
            lineage=lineage_of(plan.stream.manifest, plan.stream.manifest_hash),
            store=RunStore(name=plan.store.name, version=plan.store.version),
            planned_tokens_per_cell=planned_tokens_per_cell(plan.stream),
            total_steps=plan.horizon,
            stop_step=plan.stop,
            start_step=training.start,
            status="running",
            world_size=plan.runtime.world,
            layout={
                "data_parallel": plan.runtime.layout.data_parallel,
                "expert_parallel": plan.runtime.layout.expert_parallel,
            },
            params=count_params(config).as_dict(),
            flops_per_token=flops_per_token(config, plan.stream.seq_len),
            peak_flops_per_device=peak,
            peak_flops_source=peak_source,
            config_changes=changes,  # settings changed on resume with --allow-config-change
            tags=tags,
            notes=notes,
        ),
    )


def _recorded(run_dir: Path) -> RunRecord | None:
    """The run.json an earlier invocation wrote, if any (and readable)."""
    try:
        return read_run(run_dir)
    except ArtifactError:
        return None


def set_status(run_dir: Path, status: RunStatus) -> None:
    """Record `status` in run.json; on a full disk say so and go on (the error that brought us here counts)."""
    try:
        record = read_run(run_dir)
    except ArtifactError:
        return
    try:
        write_run(run_dir, record.model_copy(update={"status": status}))
    except OSError as exc:
        log.error("could not record status %r in %s: %s", status, run_dir / "run.json", exc.strerror or exc)


def write_step_explanations(plan: RunPlan) -> None:
    """`train explain` for the notable steps, for the run's pages; a batch the loader cannot rebuild is said
    inside the file, and any other failure costs only the explanations, never the finished run."""
    try:
        write_explanations(plan.home, plan.run)
    except (ArtifactError, ConfigError, OSError, ValueError) as exc:
        log.warning("run %s: no step explanations written (%s)", plan.run, exc)
