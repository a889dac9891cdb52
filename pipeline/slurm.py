"""The pipeline as a chain of Slurm jobs: datatrove's `SlurmPipelineExecutor`, one job per phase (two
driver phases, tokenizer and models, run inside the dedup job).

    filter    array of executor.tasks   the filter pipeline, built at submission
    dedup     one task (driver_cpus)    duplicate finding (its component rounds on the local
                                        executor inside the job), the tokenizer, the post-dedup models
    tokenize  array of executor.tasks   the tokenize pipeline, built in the task (it needs the tokenizer
                                        and the models the dedup job made)
    decontaminate  one task             the held-out cutoffs from tokenize's runs, then the n-gram
                                        containment run (local executor inside the job) and its decision
    split     array of executor.tasks   held-out split, built in the task (the cutoffs recomputed from the
                                        runs, the documents given back read from the saved decision)
    assemble  one task                  `run_pipeline` on the local executor: every phase is complete
                                        (same logging directories, same completion markers), so it only
                                        runs the driver steps and assembles the store

Each job depends on the one before (`depends=`: `sbatch --dependency=afterok:<id>`); the
whole chain is submitted at once from a login node. Without `[executor] work_url` it needs a filesystem
that the login and compute nodes share (the work directory and $MILLRACE_HOME); with it, the work
directory is on the URL as on Ray: each array task is a `StagedTask` (its own scratch directory), each
driver job pulls the small files it reads into its node's copy and uploads what it wrote, and the
executors' markers, logs and pickles are on the URL (the jobs inherit the URL's storage options through
the environment sbatch exports, `FSSPEC_<PROTOCOL>`, never through a file). Phases use the local run's
logging directories, so a failed chain is resumed by submitting it again, or finished with
`--executor local`, and yields the same store. The chain's job ids are recorded in the work directory
(`pipeline.slurm_queue`): a resubmission cancels the earlier chain's jobs still pending (after a failed
task they would wait forever, `DependencyNeverSatisfied`), and `millrace pipeline status` shows them.

`dry_run` writes each job's sbatch script and `chain.json` (phases under "phase", array sizes, dependencies)
for review and submits nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from datatrove.data import DocumentsPipeline
from datatrove.io import DataFolder
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_write_text
from millrace.errors import ConfigError
from millrace.home import Home
from pipeline.config import PipelineConfig
from pipeline.remote_work import DRIVER_READS, RemoteWork, StagedTask
from pipeline.runner import (
    Executors,
    decontaminate,
    ensure_tokenizer,
    filter_pipeline,
    post_dedup_steps,
    remote_work,
    run_dedup,
    run_pipeline,
    split_pipeline,
    store_version,
    stored_config_hash,
    tokenize_pipeline,
)
from pipeline.slurm_queue import JobIds, SlurmCommandError, cancel_stale, read_chain, write_chain
from pipeline.steps.held_out.contamination import load_decision
from pipeline.steps.in_place import reading_in_place
from pipeline.steps.tokenize.cell_shards import held_out_cutoffs
from pipeline.work import WorkLayout, prepare_work

if TYPE_CHECKING:
    from datatrove.executor import SlurmPipelineExecutor

DRIVER_PHASES = ("dedup", "decontaminate", "assemble")
CUTOFFS = "cutoffs.json"  # under the work's contamination/: the decontaminate job's cutoffs, read by split tasks


@dataclass(frozen=True)
class PhaseJob:
    """One phase of the chain: its name, its pipeline, how many tasks, where it logs on the submitting
    machine's disk (`logging_dir`) and where its executor keeps its markers (`folder`: the URL with
    `work_url`)."""

    name: str
    pipeline: list[PipelineStep]
    tasks: int
    logging_dir: Path
    folder: Path | DataFolder


class PhaseInTask(PipelineStep):
    """Builds a phase's pipeline inside the task and runs it: `tokenize` and `split` need files
    that earlier jobs write (the tokenizer, the fitted models, the held-out cutoffs). It keeps the work
    layout as a path, so that a staged task moves it to its scratch directory."""

    name = "⛓️ phase"

    def __init__(self, phase: str, config: PipelineConfig, layout: WorkLayout):
        super().__init__()
        self.phase, self.config, self.layout = phase, config, layout

    def steps(self) -> list[PipelineStep]:
        layout = self.layout
        if self.phase == "split":
            return split_pipeline(self.config, layout, read_cutoffs(layout), _given_back(layout))
        if not self.config.fits_cells:
            return tokenize_pipeline(self.config, layout, [])
        from pipeline.steps.tokenize.cell_steps import CellSteps  # lazy: heavy (sklearn)

        cells = CellSteps(self.config.quality, self.config.domains, layout.models)  # fitted by the dedup job
        return tokenize_pipeline(self.config, layout, cells.steps())

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for step in self.steps():
            data = step(data, rank, world_size)
        if data is not None:
            yield from data


def read_cutoffs(layout: WorkLayout) -> dict[str, list[int] | None]:
    """The held-out cutoffs the decontaminate job saved (a split task has only its own token runs)."""
    cutoffs: dict[str, list[int] | None] = json.loads((layout.contamination / CUTOFFS).read_text())
    return cutoffs


class DriverJob(PipelineStep):
    """The driver's work as a one-task job: `dedup` (duplicate finding, tokenizer, post-dedup models),
    `decontaminate` (held-out cutoffs, the containment run, its decision) or `assemble` (the rest of
    `run_pipeline`, whose executor runs are all complete by then). With `work_url`, the job's node keeps
    only its own copy of the small files it reads, as the driver of a Ray run does."""

    name = "⛓️ driver"

    def __init__(self, phase: str, config: PipelineConfig, home_root: Path, version: str, workers: int):
        super().__init__()
        self.phase, self.config, self.home_root, self.version = phase, config, Path(home_root), version
        self.workers = workers

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        home = Home.resolve(self.home_root)
        if self.phase == "assemble":
            run_pipeline(self.config, home, executor="local", workers=self.workers)
            yield from data or ()
            return
        layout = _layout(self.config, home, self.version)
        remote = _driver_copy(self.config, layout, self.phase)
        with contextlib.nullcontext() if remote is None else reading_in_place(layout.root, remote.fs, remote.root):
            if self.phase == "decontaminate":
                self._decontaminate(layout, remote)
            else:
                self._dedup(layout, remote)
        if remote is not None:
            remote.publish()  # the tokenizer, the models, the cutoffs and the decision: read by the next jobs
        yield from data or ()

    def _dedup(self, layout: WorkLayout, remote: RemoteWork | None) -> None:
        if self.config.dedup.exact or self.config.dedup.fuzzy:
            run_dedup(self.config, layout, Executors("local", self.workers, True, remote))
        ensure_tokenizer(self.config, layout)
        post_dedup_steps(self.config, layout)

    def _decontaminate(self, layout: WorkLayout, remote: RemoteWork | None) -> None:
        cutoffs = held_out_cutoffs(layout.runs, self.config.validation)
        layout.contamination.mkdir(parents=True, exist_ok=True)
        atomic_write_text(layout.contamination / CUTOFFS, json.dumps(cutoffs, sort_keys=True))
        decontaminate(
            self.config, layout, cutoffs, Executors("local", self.workers, True, remote)
        )  # saves its decision


def _driver_copy(config: PipelineConfig, layout: WorkLayout, phase: str) -> RemoteWork | None:
    """With `work_url`: this node's copy of the work directory, holding what a driver job reads before it
    starts (the work state and earlier driver outputs, and for decontamination the tokenize tasks' small
    files); None without."""
    remote = remote_work(config, layout)
    if remote is not None:
        remote.reset_mirror()
        remote.pull(DRIVER_READS["start"])
        remote.pull(DRIVER_READS["filter" if phase == "dedup" else "tokenize"])
    return remote


def _given_back(layout: WorkLayout) -> dict[str, list[list[int]]]:
    """The held-out documents the decontamination gave back to training, per cell (none when it is off)."""
    decision = load_decision(layout.contamination)
    return decision.cells if decision is not None else {}


def _layout(config: PipelineConfig, home: Home, version: str) -> WorkLayout:
    return WorkLayout(home.work(config.output.name, version))


def _prepared(config: PipelineConfig, home: Home, restart: bool) -> tuple[WorkLayout, RemoteWork | None, str]:
    """The work directory readied as a local run readies it (on the URL with `work_url`)."""
    version = store_version(config, home, stored_config_hash(config))
    layout = _layout(config, home, version)
    remote = remote_work(config, layout)
    if remote is not None:
        remote.reset_mirror()
        remote.pull(DRIVER_READS["start"])
    prepare_work(layout, config, restart, remote)
    if remote is not None:
        remote.publish()
    return layout, remote, version


def phase_jobs(config: PipelineConfig, home: Home, restart: bool = False) -> list[PhaseJob]:
    """The chain's jobs in order, after readying the work directory as a local run would."""
    layout, remote, version = _prepared(config, home, restart)
    return chain_jobs(config, home, layout, remote, version)


def chain_jobs(
    config: PipelineConfig, home: Home, layout: WorkLayout, remote: RemoteWork | None, version: str
) -> list[PhaseJob]:
    """Each phase's job; with `remote`, array tasks run staged and every executor logs on the URL."""
    tasks, cpus = config.executor.tasks, config.executor.slurm.driver_cpus

    def job(name: str, pipeline: list[PipelineStep], count: int, logging_dir: Path) -> PhaseJob:
        if remote is None:
            return PhaseJob(name, pipeline, count, logging_dir, logging_dir)
        staged = pipeline if name in DRIVER_PHASES else [StagedTask(name, pipeline, remote)]
        return PhaseJob(name, staged, count, logging_dir, remote.folder(logging_dir))

    def driver(name: str) -> list[PipelineStep]:
        return [DriverJob(name, config, home.root, version, cpus)]

    jobs = [
        job("filter", filter_pipeline(config, layout), tasks, layout.phase_logs("filter")),
        job("dedup", driver("dedup"), 1, layout.phase_logs("dedup") / "driver"),
        job("tokenize", [PhaseInTask("tokenize", config, layout)], tasks, layout.phase_logs("tokenize")),
        job("decontaminate", driver("decontaminate"), 1, layout.phase_logs("decontaminate") / "driver"),
        job("split", [PhaseInTask("split", config, layout)], tasks, layout.phase_logs("split")),
        job("assemble", driver("assemble"), 1, layout.phase_logs("assemble")),
    ]
    if remote is not None:
        remote.publish()  # the filter tasks' inputs files, dealt by `filter_pipeline` above
    return jobs


def slurm_chain(
    config: PipelineConfig, jobs: list[PhaseJob], ids: JobIds | None = None
) -> list[SlurmPipelineExecutor]:
    """One `SlurmPipelineExecutor` per job, each `depends=` on the one before; `ids` records every job id
    sbatch gives (datatrove's stats-merging jobs too)."""
    from datatrove.executor import SlurmPipelineExecutor  # lazy: heavy (datatrove)

    slurm = config.executor.slurm
    if not slurm.partition:
        raise ConfigError("field 'executor.slurm.partition': the Slurm executor needs a partition")
    executors: list[SlurmPipelineExecutor] = []
    for job in jobs:
        driver = job.name in DRIVER_PHASES
        executors.append(
            SlurmPipelineExecutor(
                job.pipeline,
                tasks=job.tasks,
                time=slurm.time,
                partition=slurm.partition,
                cpus_per_task=slurm.driver_cpus if driver else slurm.cpus_per_task,
                mem_per_cpu_gb=slurm.mem_per_cpu_gb,
                workers=slurm.max_running or -1,
                job_name=f"millrace-{config.output.name}-{job.name}",
                qos=slurm.qos,
                env_command=slurm.env_command or None,
                sbatch_args=dict(slurm.sbatch_args),
                depends=executors[-1] if executors else None,
                job_id_retriever=ids.retriever(job.name) if ids is not None else None,
                logging_dir=job.folder if isinstance(job.folder, DataFolder) else str(job.folder),
                slurm_logs_folder=str(Path(slurm.logs) / job.name if slurm.logs else job.logging_dir / "slurm"),
            )
        )
    return executors


@contextlib.contextmanager
def _storage_env(remote: RemoteWork | None) -> Iterator[None]:
    """While sbatch runs: the work URL's storage options in `FSSPEC_<PROTOCOL>`, which the jobs inherit
    (sbatch exports the environment) and fsspec reads when a task opens its pickled executor on the URL.
    Never written to a file: they may hold credentials."""
    if remote is None or not remote.storage_options:
        yield
        return
    protocols = remote.fs.protocol
    name = "FSSPEC_" + (protocols if isinstance(protocols, str) else protocols[0]).upper()
    before = os.environ.get(name)
    os.environ[name] = json.dumps(remote.storage_options)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


class Submission(TypedDict):
    """What a submission did: each phase's job id (-1: nothing left to run) and the earlier chain's cancelled
    jobs."""

    jobs: list[dict[str, str | int]]
    cancelled: list[str]


def submit(config: PipelineConfig, home: Home, restart: bool = False) -> Submission:
    """Submit the whole chain (the last job launches its dependencies first), after cancelling the earlier
    chain's jobs still pending; returns each job's id (-1 for a phase whose tasks are all complete already)
    and the cancelled ids. The ids are recorded in the work directory."""
    version = store_version(config, home, stored_config_hash(config))
    before_layout = _layout(config, home, version)
    cancelled = cancel_stale(read_chain(before_layout, remote_work(config, before_layout)))
    layout, remote, version = _prepared(config, home, restart)
    jobs = chain_jobs(config, home, layout, remote, version)
    ids = JobIds()
    executors = slurm_chain(config, jobs, ids)
    try:
        with _storage_env(remote):
            executors[-1].run()
    except subprocess.CalledProcessError as exc:
        queued = " ".join(job for stage in ids.by_stage.values() for job in stage) or "none"
        raise SlurmCommandError(
            f"sbatch failed (exit {exc.returncode}) part-way through the chain; the jobs it queued ({queued}) are "
            "recorded: submit again to cancel them and queue the chain anew"
        ) from None
    finally:  # a chain refused part-way: the jobs already queued must be known to the next submission
        chain = [(job.name, executor.job_id) for job, executor in zip(jobs, executors) if executor.job_id is not None]
        write_chain(layout, remote, ids.recorded(chain))
    return Submission(jobs=[{"phase": phase, "job_id": job} for phase, job in chain], cancelled=cancelled)


def dry_run(
    config: PipelineConfig, home: Home, out: Path | None = None, restart: bool = False
) -> list[dict[str, object]]:
    """Write each job's sbatch script (NN-<phase>.slurm) and chain.json into `out` (default: the run's
    work directory, slurm-scripts/); submit nothing. The scripts are the ones submission writes to each
    phase's logging directory, beside the pickled executor (written only at submission) they run."""
    jobs = phase_jobs(config, home, restart)
    out = out or _layout(config, home, store_version(config, home, stored_config_hash(config))).slurm_scripts
    out.mkdir(parents=True, exist_ok=True)
    chain = []
    for index, (job, executor) in enumerate(zip(jobs, slurm_chain(config, jobs)), start=1):
        ranks = executor.get_incomplete_ranks()
        array = min(math.ceil(len(ranks) / executor.tasks_per_job), executor.max_array_size) if ranks else 0
        script = out / f"{index:02d}-{job.name}.slurm"
        command = f"srun -l -n 1 launch_pickled_pipeline {executor.logging_dir.resolve_paths('executor.pik')}"
        atomic_write_text(script, executor.get_launch_file_contents(executor.get_sbatch_args(max(array, 1)), command))
        chain.append(
            {
                "phase": job.name,
                "script": str(script),
                "tasks": job.tasks,
                "incomplete": len(ranks),
                "array": array,
                "after": jobs[index - 2].name if index > 1 else None,
                "logging_dir": executor.logging_dir.resolve_paths("").rstrip("/"),
            }
        )
    atomic_write_text(out / "chain.json", json.dumps(chain, indent=2) + "\n")
    return chain
