"""What a fleet runs and how: the jobs, the `[fleet]` table of the ladder and search specs, the outcomes.

Torch-free (pydantic and the standard library only), so the search's records and the report pages can
read a `[fleet]` table without the trainer's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pydantic

from millrace.config import StrictModel

Executor = Literal["in-process", "local", "torchrun", "ray", "slurm"]
Status = Literal["completed", "skipped", "failed", "interrupted"]


@dataclass(frozen=True)
class TrainingJob:
    """One training run of a fleet: `millrace train CONFIG --run RUN --resume [--from-run S] [--steps N]`."""

    run: str  # run name under $MILLRACE_HOME/runs/
    config: Path  # a written train TOML (mixture and revision inside)
    start_from: str | None = None  # branch: start from this run's checkpoint (`train --from-run`)
    steps: int | None = None  # stop here (default: the learning-rate horizon)


@dataclass(frozen=True)
class JobOutcome:
    """How one job ended: `completed` (trained to its stop here), `skipped` (finished before this fleet),
    `failed` (its `log` says why) or `interrupted` (the fleet was stopped; it resumes from its checkpoint)."""

    run: str
    status: Status
    log: Path
    seconds: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("completed", "skipped")


class SlurmFleet(StrictModel):
    """One sbatch job per training run (`executor = "slurm"`); the home must be on a shared filesystem."""

    partition: str = pydantic.Field("", description="sbatch --partition (required for the slurm executor)")
    time: str = pydantic.Field("01:00:00", description="sbatch --time per job")
    cpus_per_task: int = pydantic.Field(2, ge=1, description="sbatch --cpus-per-task")
    mem_gb: int = pydantic.Field(8, ge=1, description="sbatch --mem, in GiB")
    gpus: int = pydantic.Field(0, ge=0, description="sbatch --gpus per job (0: none)")
    qos: str = ""
    env_command: str = pydantic.Field("", description="a line run before training (e.g. `source venv/bin/activate`)")
    sbatch_args: dict[str, str] = pydantic.Field(default_factory=dict, description="more #SBATCH --key=value lines")
    poll_seconds: float = pydantic.Field(10.0, gt=0, description="how often squeue is asked which jobs remain")


class FleetConfig(StrictModel):
    """`[fleet]`: how many trainings run at once, and where."""

    executor: Executor = pydantic.Field(
        "local",
        description="in-process (one after another in this process) | local (processes here) | torchrun "
        "(each job on nproc_per_node ranks here) | ray (RAY_ADDRESS=... for a running cluster) | slurm",
    )
    concurrency: int = pydantic.Field(2, ge=1, description="jobs running at once (in-process: always 1)")
    threads: int = pydantic.Field(
        0, ge=0, description="CPU threads per job (OMP_NUM_THREADS); 0: this machine's cores / concurrency"
    )
    reuse_processes: bool = pydantic.Field(
        True,
        description="local: each of the `concurrency` processes imports the trainer once and trains its jobs one "
        "after another (false: a fresh `millrace train` process per job, seconds of imports each)",
    )
    nproc_per_node: int = pydantic.Field(1, ge=1, description="torchrun: ranks per job")
    stop_seconds: float = pydantic.Field(
        120.0, gt=0, description="after SIGINT/SIGTERM, how long a job has to write its checkpoint before SIGKILL"
    )
    slurm: SlurmFleet = SlurmFleet()
