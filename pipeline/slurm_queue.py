"""A submitted Slurm chain's jobs: recorded in the work directory, asked of Slurm (`squeue`, then `sacct` for
jobs that left the queue), and the stale ones cancelled when the chain is submitted again.

After a failed array task the jobs that depend on its job (`--dependency=afterok`) never start: Slurm keeps
them PENDING with the reason `DependencyNeverSatisfied`, forever. A resubmitted chain is a new set of jobs, so
the earlier chain's pending jobs are cancelled first (`scancel`); a job of it still running is refused in one
line (two chains would run the same tasks at once). The record, `slurm-chain.json` at the work directory's
root (on the work URL with `work_url`), names each phase's job and datatrove's stats-merging jobs after it.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypedDict

from millrace.artifacts import atomic_write_text
from millrace.errors import MillraceError

if TYPE_CHECKING:
    from pipeline.remote_work import RemoteWork
    from pipeline.work import WorkLayout

log = logging.getLogger(__name__)
CHAIN = "slurm-chain.json"
LIVE = ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING", "COMPLETING")


class ChainJob(TypedDict):
    """One phase of a recorded chain: its job id as submission reported it (-1: all its tasks were complete)
    and every id sbatch gave it (its own job first, then datatrove's stats-merging job)."""

    phase: str
    job_id: str | int
    jobs: list[str]


class JobState(TypedDict):
    """A job's tasks by state, and why the pending ones wait (empty where they do not)."""

    states: dict[str, int]
    reason: str


class ChainRunning(MillraceError):
    """The earlier chain of this store version still has running jobs."""


class SlurmCommandError(MillraceError):
    """A Slurm command failed (its message is in the error)."""


class JobIds:
    """Every job id sbatch gave, by phase: a `job_id_retriever` per phase for datatrove's executor, which
    calls it for the phase's job and for the stats-merging job it submits after it."""

    def __init__(self) -> None:
        self.by_stage: dict[str, list[str]] = {}

    def retriever(self, stage: str) -> Callable[[str], str]:
        return partial(self._retrieve, stage)

    def _retrieve(self, stage: str, output: str) -> str:
        job = output.split()[-1]
        self.by_stage.setdefault(stage, []).append(job)
        return job

    def __getstate__(self) -> dict[str, object]:  # pickled with each executor: its tasks record nothing
        return {"by_stage": {}}

    def recorded(self, chain: list[tuple[str, str | int]]) -> list[ChainJob]:
        """The chain's (phase, job id) with every id sbatch gave each phase (the phase's job first)."""
        return [ChainJob(phase=phase, job_id=job, jobs=self.by_stage.get(phase, [])) for phase, job in chain]


def read_chain(layout: WorkLayout, remote: RemoteWork | None) -> list[ChainJob]:
    """The recorded chain of this work directory (empty before its first submission)."""
    path = layout.root / CHAIN
    text: str | bytes | None = path.read_text() if path.exists() else None
    if remote is not None:
        target = remote.remote_path(path)
        remote.fs.invalidate_cache()
        text = remote.fs.cat_file(target) if remote.fs.exists(target) else None
    found: list[ChainJob] = json.loads(text) if text else []
    return found


def write_chain(layout: WorkLayout, remote: RemoteWork | None, chain: list[ChainJob]) -> None:
    """Record the chain's job ids (the work directory's root; on the URL too with `work_url`)."""
    text = json.dumps(chain, indent=2) + "\n"
    atomic_write_text(layout.root / CHAIN, text)
    if remote is not None:
        remote.fs.pipe_file(remote.remote_path(layout.root / CHAIN), text.encode())


def _run(command: list[str]) -> str | None:
    """A Slurm command's output; None where the command is not installed, or where `sacct` has no accounting
    to ask (a cluster without slurmdbd: the jobs that left the queue are then unknown, not an error)."""
    if shutil.which(command[0]) is None:
        return None
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if command[0] == "squeue" and "Invalid job id" in done.stderr:  # every job has left the queue
            return ""
        if command[0] == "sacct":
            log.debug("%s: %s", " ".join(command), done.stderr.strip())
            return None
        raise SlurmCommandError(f"{' '.join(command)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def job_states(ids: list[str]) -> dict[str, JobState]:
    """Each job's tasks by state, and why the pending ones wait: {id: {"states": {state: n}, "reason": str}}.
    `squeue` for jobs in the queue, then `sacct` for the others; a job neither knows is absent."""
    found: dict[str, JobState] = {}
    if not ids:
        return found
    queued = _run(["squeue", "-h", "-r", "-j", ",".join(ids), "-o", "%F|%T|%r"])
    for line in (queued or "").splitlines():
        job, state, reason = (line.split("|") + ["", ""])[:3]
        entry = found.setdefault(job.strip(), JobState(states={}, reason=""))
        entry["states"][state] = entry["states"].get(state, 0) + 1
        if state == "PENDING" and reason not in ("", "None"):
            entry["reason"] = reason
    left = [job for job in ids if job not in found]
    accounted = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(left), "-o", "JobID,State"]) if left else None
    for line in (accounted or "").splitlines():
        job_id, _, state = line.partition("|")
        job = job_id.split("_")[0].split(".")[0]
        if job in left and state:
            entry = found.setdefault(job, JobState(states={}, reason=""))
            word = state.split()[0]
            entry["states"][word] = entry["states"].get(word, 0) + 1
    return found


def _chain_ids(chain: list[ChainJob]) -> dict[str, str]:
    """Every recorded job id of a chain, with its phase."""
    return {job: entry["phase"] for entry in chain for job in entry.get("jobs", [])}


def cancel_stale(chain: list[ChainJob]) -> list[str]:
    """Before a chain is submitted again: cancel the earlier chain's jobs still pending; refuse where one still
    runs. Returns the cancelled ids."""
    ids = _chain_ids(chain)
    states = job_states(list(ids))
    running = [job for job, entry in states.items() if set(entry["states"]) & (set(LIVE) - {"PENDING"})]
    if running:
        named = ", ".join(f"{job} ({ids[job]})" for job in running)
        raise ChainRunning(
            f"the chain submitted before still runs: job {named}; wait for it to end, or cancel it first: "
            f"scancel {' '.join(ids)}"
        )
    pending = [job for job, entry in states.items() if "PENDING" in entry["states"]]
    if pending:
        if _run(["scancel", *pending]) is None:
            raise SlurmCommandError(
                f"scancel not found; cancel the earlier chain's pending jobs: scancel {' '.join(pending)}"
            )
        log.warning(
            "cancelled the earlier chain's pending jobs %s (%s): they waited on a job that failed",
            " ".join(pending),
            ", ".join(sorted({ids[job] for job in pending})),
        )
    return pending
