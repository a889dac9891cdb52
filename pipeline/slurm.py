"""The pipeline as a chain of Slurm jobs: datatrove's `SlurmPipelineExecutor`, one job per phase (two
driver phases, tokenizer and models, run inside the dedup job).

    filter    array of executor.tasks   the filter pipeline, built at submission
    dedup     one task (driver_cpus)    duplicate finding (its component rounds on the local
                                        executor inside the job), the tokenizer, the post-dedup models
    tokenize  array of executor.tasks   the tokenize pipeline, built in the task (it needs the tokenizer
                                        and the models the dedup job made)
    decontaminate  one task             the held-out cutoffs from tokenize's runs, then the n-gram
                                        containment stage (local executor inside the job) and its decision
    split     array of executor.tasks   held-out split, built in the task (the cutoffs recomputed from the
                                        runs, the documents given back read from the saved decision)
    assemble  one task                  `run_pipeline` on the local executor: every phase is complete
                                        (same logging directories, same completion markers), so it only
                                        runs the driver steps and assembles the store

Each job depends on the one before (`depends=`: `sbatch --dependency=afterok:<id>`); the
whole chain is submitted at once from a login node and needs a filesystem that the login and
compute nodes share (the work directory and $MILLRACE_HOME). Phases use the local run's
logging directories, so a failed chain is resumed by submitting it again, or finished with
`--executor local`, and yields the same store.

`dry_run` writes each job's sbatch script and `chain.json` (phases under "stage", array sizes, dependencies)
for review and submits nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datatrove.data import DocumentsPipeline
from datatrove.pipeline.base import PipelineStep

from millrace.artifacts import atomic_write_text, content_hash
from millrace.errors import ConfigError
from millrace.home import Home
from pipeline.config import PipelineConfig
from pipeline.runner import (
    Executors,
    decontaminate,
    ensure_tokenizer,
    filter_pipeline,
    post_dedup_steps,
    run_dedup,
    run_pipeline,
    split_pipeline,
    store_version,
    stored_config,
    tokenize_pipeline,
)
from pipeline.stages.held_out.contamination import load_decision
from pipeline.stages.tokenize.cell_shards import held_out_cutoffs
from pipeline.work import WorkLayout, prepare_work

if TYPE_CHECKING:
    from datatrove.executor import SlurmPipelineExecutor

DRIVER_PHASES = ("dedup", "decontaminate", "assemble")


@dataclass(frozen=True)
class PhaseJob:
    """One phase of the chain: its name, its pipeline, how many tasks, and where it logs."""

    name: str
    pipeline: list[PipelineStep]
    tasks: int
    logging_dir: Path


class PhaseInTask(PipelineStep):
    """Builds a phase's pipeline inside the task and runs it: `tokenize` and `split` need files
    that earlier jobs write (the tokenizer, the fitted models, the held-out cutoffs)."""

    name = "⛓️ stage"

    def __init__(self, phase: str, config: PipelineConfig, home_root: Path, version: str):
        super().__init__()
        self.phase, self.config, self.home_root, self.version = phase, config, Path(home_root), version

    def steps(self) -> list[PipelineStep]:
        layout = _layout(self.config, Home.resolve(self.home_root), self.version)
        if self.phase == "split":
            cutoffs = held_out_cutoffs(layout.runs, self.config.validation)
            return split_pipeline(self.config, layout, cutoffs, _given_back(layout))
        if not self.config.fits_cells:
            return tokenize_pipeline(self.config, layout, [])
        from pipeline.stages.tokenize.cell_steps import CellSteps

        cells = CellSteps(self.config.quality, self.config.domains, layout.models)  # fitted by the dedup job
        return tokenize_pipeline(self.config, layout, cells.steps())

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        for step in self.steps():
            data = step(data, rank, world_size)
        if data is not None:
            yield from data


class DriverJob(PipelineStep):
    """The driver's work as a one-task job: `dedup` (duplicate finding, tokenizer, post-dedup models),
    `decontaminate` (held-out cutoffs, the containment stage, its decision) or `assemble` (the rest of
    `run_pipeline`, whose executor runs are all complete by then)."""

    name = "⛓️ driver"

    def __init__(self, phase: str, config: PipelineConfig, home_root: Path, version: str, workers: int):
        super().__init__()
        self.phase, self.config, self.home_root, self.version = phase, config, Path(home_root), version
        self.workers = workers

    def run(self, data: DocumentsPipeline = None, rank: int = 0, world_size: int = 1) -> DocumentsPipeline:
        home = Home.resolve(self.home_root)
        if self.phase == "assemble":
            run_pipeline(self.config, home, executor="local", workers=self.workers)
        elif self.phase == "decontaminate":
            layout = _layout(self.config, home, self.version)
            cutoffs = held_out_cutoffs(layout.runs, self.config.validation)
            decontaminate(self.config, layout, cutoffs, Executors("local", self.workers, True))  # saves its decision
        else:
            layout = _layout(self.config, home, self.version)
            if self.config.dedup.exact or self.config.dedup.fuzzy:
                run_dedup(self.config, layout, Executors("local", self.workers, True))
            ensure_tokenizer(self.config, layout)
            post_dedup_steps(self.config, layout)
        yield from data or ()


def _given_back(layout: WorkLayout) -> dict[str, list[list[int]]]:
    """The held-out documents the decontamination gave back to training, per cell (none when it is off)."""
    decision = load_decision(layout.contamination)
    return decision.cells if decision is not None else {}


def _layout(config: PipelineConfig, home: Home, version: str) -> WorkLayout:
    return WorkLayout(home.work(config.output.name, version))


def phase_jobs(config: PipelineConfig, home: Home, restart: bool = False) -> list[PhaseJob]:
    """The chain's jobs in order, after readying the work directory as a local run would."""

    version = store_version(config, home, content_hash(stored_config(config)))
    layout = _layout(config, home, version)
    prepare_work(layout, config, restart)
    tasks, cpus = config.executor.tasks, config.executor.slurm.driver_cpus
    return [
        PhaseJob("filter", filter_pipeline(config, layout), tasks, layout.phase_logs("filter")),
        PhaseJob(
            "dedup", [DriverJob("dedup", config, home.root, version, cpus)], 1, layout.phase_logs("dedup") / "driver"
        ),
        PhaseJob(
            "tokenize", [PhaseInTask("tokenize", config, home.root, version)], tasks, layout.phase_logs("tokenize")
        ),
        PhaseJob(
            "decontaminate",
            [DriverJob("decontaminate", config, home.root, version, cpus)],
            1,
            layout.phase_logs("decontaminate") / "driver",
        ),
        PhaseJob("split", [PhaseInTask("split", config, home.root, version)], tasks, layout.phase_logs("split")),
        PhaseJob(
            "assemble", [DriverJob("assemble", config, home.root, version, cpus)], 1, layout.phase_logs("assemble")
        ),
    ]


def slurm_chain(config: PipelineConfig, jobs: list[PhaseJob]) -> list[SlurmPipelineExecutor]:
    """One `SlurmPipelineExecutor` per job, each `depends=` on the one before."""
    from datatrove.executor import SlurmPipelineExecutor

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
                logging_dir=str(job.logging_dir),
                slurm_logs_folder=str(Path(slurm.logs) / job.name if slurm.logs else job.logging_dir / "slurm"),
            )
        )
    return executors


def submit(config: PipelineConfig, home: Home, restart: bool = False) -> list[dict[str, object]]:
    """Submit the whole chain (the last job launches its dependencies first); returns each job's id
    (-1 for a phase whose tasks are all complete already)."""
    jobs = phase_jobs(config, home, restart)
    executors = slurm_chain(config, jobs)
    executors[-1].run()
    return [{"stage": job.name, "job_id": executor.job_id} for job, executor in zip(jobs, executors)]


def dry_run(
    config: PipelineConfig, home: Home, out: Path | None = None, restart: bool = False
) -> list[dict[str, object]]:
    """Write each job's sbatch script (NN-<phase>.slurm) and chain.json into `out` (default: the run's
    work directory, slurm-scripts/); submit nothing. The scripts are the ones submission writes to each
    phase's logging directory, beside the pickled executor (written only at submission) they run."""
    jobs = phase_jobs(config, home, restart)
    out = out or _layout(config, home, store_version(config, home, content_hash(stored_config(config)))).slurm_scripts
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
                "stage": job.name,
                "script": str(script),
                "tasks": job.tasks,
                "incomplete": len(ranks),
                "array": array,
                "after": jobs[index - 2].name if index > 1 else None,
                "logging_dir": str(job.logging_dir),
            }
        )
    atomic_write_text(out / "chain.json", json.dumps(chain, indent=2) + "\n")
    return chain
