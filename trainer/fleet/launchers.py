"""Where a fleet's job runs: a process here (local, torchrun), a Ray task, or a Slurm job.

Each launcher starts one job's `millrace train` command with its output appended to the job's log file,
says when it has ended, and asks it to stop: SIGTERM, on which the trainer finishes its step, writes a
checkpoint, marks the run interrupted and exits 143 (`millrace.signals.StopRequest`). A job's command is
the arguments after the interpreter, which each launcher names where the job runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from millrace.artifacts import atomic_write_text
from millrace.errors import ConfigError
from millrace.ray_cluster import connect_ray
from trainer.fleet.config import FleetConfig

log = logging.getLogger(__name__)


@dataclass
class Handle:
    """A started job: what its launcher needs to poll and stop it."""

    run: str
    log: Path
    process: subprocess.Popen[bytes] | None = None
    ref: Any = None  # a Ray object ref
    job_id: str = ""  # a Slurm job id
    extra: dict[str, Any] = field(default_factory=dict)


class Launcher(Protocol):
    def start(self, run: str, command: list[str], env: dict[str, str], log: Path) -> Handle: ...

    def poll(self, handle: Handle) -> int | None:
        """The job's exit status once it has ended, else None."""

    def stop(self, handle: Handle) -> None:
        """Ask the job to checkpoint and stop (SIGTERM)."""

    def kill(self, handle: Handle) -> None:
        """End it now (after `stop` went unheeded)."""

    def close(self) -> None:
        """The fleet is done: release what the launcher holds (the local executor's worker processes)."""


def open_log(log: Path, line: str) -> BinaryIO:
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab")  # noqa: SIM115 - the child process holds it
    out.write(line.encode() + b"\n")
    out.flush()
    return out


def spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The command in its own session (a terminal's Ctrl-C reaches the fleet only; it forwards SIGTERM), its
    stdout and stderr appended to `log`."""
    with open_log(log, "$ " + " ".join(command)) as out:
        return subprocess.Popen(
            command, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """The signal to the job's whole process group (torchrun's ranks too)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


class ProcessLauncher:
    """`local`: `python -m millrace train ...`; `torchrun`: the same under `torch.distributed.run --standalone`
    on `nproc_per_node` ranks (gloo on CPU, NCCL on GPUs)."""

    def __init__(self, fleet: FleetConfig):
        self.prefix = [sys.executable]
        if fleet.executor == "torchrun":
            self.prefix += [
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                str(fleet.nproc_per_node),
            ]

    def start(self, run: str, command: list[str], env: dict[str, str], log: Path) -> Handle:
        return Handle(run, log, process=spawn(self.prefix + command, env, log))

    def poll(self, handle: Handle) -> int | None:
        assert handle.process is not None
        return handle.process.poll()

    def stop(self, handle: Handle) -> None:
        assert handle.process is not None
        signal_group(handle.process, signal.SIGTERM)

    def kill(self, handle: Handle) -> None:
        assert handle.process is not None
        signal_group(handle.process, signal.SIGKILL)
        handle.process.wait()

    def close(self) -> None:
        pass


def ray_job(command: list[str], env: dict[str, str], log: str) -> int:
    """A Ray task: the job as a process on the worker's node; `ray.cancel` (a KeyboardInterrupt here)
    becomes SIGTERM to it, so it checkpoints."""
    process = spawn([sys.executable, *command], env, Path(log))
    try:
        return process.wait()
    except KeyboardInterrupt:
        signal_group(process, signal.SIGTERM)
        return process.wait()


class RayLauncher:
    """One Ray task per job (one CPU each), on a local Ray or the cluster at RAY_ADDRESS."""

    def __init__(self, fleet: FleetConfig):
        import ray  # lazy: optional extra (ray)

        connect_ray(fleet.concurrency)
        self.ray = ray
        self.task = ray.remote(num_cpus=1, max_retries=0)(ray_job)

    def start(self, run: str, command: list[str], env: dict[str, str], log: Path) -> Handle:
        return Handle(run, log, ref=self.task.remote(command, env, str(log)))

    def poll(self, handle: Handle) -> int | None:
        ready, _ = self.ray.wait([handle.ref], timeout=0)
        if not ready:
            return None
        try:
            return int(self.ray.get(handle.ref))
        except (self.ray.exceptions.RayError, KeyboardInterrupt):
            return 1

    def stop(self, handle: Handle) -> None:
        self.ray.cancel(handle.ref, force=False)

    def kill(self, handle: Handle) -> None:
        self.ray.cancel(handle.ref, force=True)

    def close(self) -> None:
        pass


class SlurmLauncher:
    """One sbatch job per run (its script beside the run, `fleet.sbatch`); `squeue` says which remain, and
    `scancel` sends SIGTERM (the trainer checkpoints; Slurm's KillWait later, SIGKILL)."""

    def __init__(self, fleet: FleetConfig):
        if not fleet.slurm.partition:
            raise ConfigError("field 'fleet.slurm.partition': the slurm executor needs a partition")
        self.fleet = fleet

    def script(self, run: str, command: list[str], env: dict[str, str], log: Path) -> str:
        slurm = self.fleet.slurm
        options = {
            "job-name": f"millrace-{run}",
            "output": str(log),
            "open-mode": "append",
            "partition": slurm.partition,
            "time": slurm.time,
            "cpus-per-task": str(slurm.cpus_per_task),
            "mem": f"{slurm.mem_gb}G",
            **({"gpus": str(slurm.gpus)} if slurm.gpus else {}),
            **({"qos": slurm.qos} if slurm.qos else {}),
            **slurm.sbatch_args,
        }
        lines = ["#!/bin/bash", *(f"#SBATCH --{key}={value}" for key, value in options.items())]
        lines += [slurm.env_command] if slurm.env_command else []
        lines += [f"export {key}={value}" for key, value in env.items()]
        lines.append("exec " + " ".join([sys.executable, *command]))  # exec: scancel's SIGTERM reaches the trainer
        return "\n".join(lines) + "\n"

    def start(self, run: str, command: list[str], env: dict[str, str], log: Path) -> Handle:
        path = log.parent / "fleet.sbatch"
        log.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, self.script(run, command, env, log))
        done = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True)
        found = re.match(r"\s*(\d+)", done.stdout)
        if done.returncode or not found:
            raise ConfigError(f"sbatch {path}: {(done.stderr or done.stdout).strip() or 'no job id'}")
        return Handle(run, log, job_id=found.group(1))

    def poll(self, handle: Handle) -> int | None:
        """0 once the job has left the queue: the run's own record then says how it ended. A failed `squeue` (a
        busy controller timing out) says nothing of the job: None, and it is asked again at the next poll."""
        done = subprocess.run(["squeue", "-h", "-j", handle.job_id, "-o", "%i"], capture_output=True, text=True)
        if done.returncode == 0:
            return None if done.stdout.strip() else 0
        if "Invalid job id" in done.stderr:  # purged from the queue: it ended a while ago
            return 0
        log.warning("fleet: squeue -j %s failed (%s); asking again", handle.job_id, done.stderr.strip()[:200])
        return None

    def stop(self, handle: Handle) -> None:
        subprocess.run(["scancel", "--signal=TERM", "--full", handle.job_id], capture_output=True)

    def kill(self, handle: Handle) -> None:
        subprocess.run(["scancel", handle.job_id], capture_output=True)

    def close(self) -> None:
        pass


def launcher_for(fleet: FleetConfig, jobs: int = 1) -> Launcher:
    """The executor's launcher, for about `jobs` jobs (the local workers started: no more than it needs)."""
    if fleet.executor == "local" and fleet.reuse_processes:
        from trainer.fleet.pool import PoolLauncher  # lazy: import cycle (trainer.fleet.pool imports this module)

        return PoolLauncher(min(fleet.concurrency, max(1, jobs)))
    if fleet.executor == "ray":
        return RayLauncher(fleet)
    if fleet.executor == "slurm":
        return SlurmLauncher(fleet)
    return ProcessLauncher(fleet)
