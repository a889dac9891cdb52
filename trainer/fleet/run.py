"""Run many trainings: skip the finished, start up to `concurrency` at once, report each as it ends.

Resumable: a job whose run is finished (run.json `completed`, or `stopped` at its `steps`) is skipped,
and every job is started with `--resume`, so a killed one continues from its latest checkpoint (a branched
one from its source's until it has its own). Killable: SIGINT or SIGTERM sends SIGTERM to every job (each
writes a checkpoint and stops), then the fleet exits 130 or 143 with one line saying how to continue. A
failed job is one line naming the run and its log file; the others go on; `check_outcomes` then fails. A
fleet that itself fails (a job that cannot start, a callback's error) stops its running jobs the same way
before its error propagates: none outlives it in its own session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from millrace.errors import ArtifactError, ConfigError, Interrupted, MillraceError, Terminated
from millrace.home import Home
from millrace.signals import TerminateSignal, sigterm_as_interrupt
from trainer.fleet.config import FleetConfig, JobOutcome, TrainingJob
from trainer.fleet.launchers import Handle, Launcher, launcher_for
from trainer.records import read_run

log = logging.getLogger(__name__)
LOG_FILE = "train.log"  # each job's stdout and stderr, in its run directory
CONTINUE = (
    "run the same command again to continue (finished runs are skipped, the others resume from their checkpoints)"
)


def job_log(home: Home, job: TrainingJob) -> Path:
    return home.run(job.run) / LOG_FILE


def finished(home: Home, job: TrainingJob) -> bool:
    """Completed, or stopped at (or past) the job's `steps`."""
    try:
        record = read_run(home.run(job.run))
    except ArtifactError:
        return False
    return record.status == "completed" or (
        record.status == "stopped"
        and job.steps is not None
        and record.stop_step is not None
        and record.stop_step >= job.steps
    )


def train_arguments(home: Home, job: TrainingJob) -> list[str]:
    """The job as `millrace train` arguments (after the interpreter)."""
    command = ["-m", "millrace", "train", str(Path(job.config).resolve()), "--home", str(home.root.resolve())]
    command += ["--run-name", job.run, "--resume", "--no-progress"]
    command += ["--from-run", job.start_from] if job.start_from else []
    return command + (["--steps", str(job.steps)] if job.steps else [])


def threads_per_job(fleet: FleetConfig) -> int:
    """CPU threads each job's torch uses: the configured number, else the cores shared out."""
    if fleet.threads:
        return fleet.threads
    ranks = fleet.concurrency * (fleet.nproc_per_node if fleet.executor == "torchrun" else 1)
    return max(1, (os.cpu_count() or 1) // ranks)


def check_jobs(jobs: Sequence[TrainingJob]) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.run in seen:
            raise ConfigError(f"fleet: run {job.run!r} is listed twice")
        seen.add(job.run)
        if not Path(job.config).is_file():
            raise ConfigError(f"fleet: run {job.run!r}: config {job.config} not found")


def run_jobs(
    home: Home,
    jobs: Sequence[TrainingJob],
    fleet: FleetConfig,
    *,
    progress: bool = False,
    on_done: Callable[[str], None] | None = None,
    on_outcome: Callable[[JobOutcome], None] | None = None,
    launcher: Launcher | None = None,
) -> list[JobOutcome]:
    """Train `jobs` on `fleet`; returns one outcome per job, in the jobs' order. `on_done(run)` is called as
    each job completes or is found finished, `on_outcome(outcome)` as each job ends in any way. `launcher`:
    one from `launching` that outlives this call (its workers train the next call's jobs too). Raises
    `Interrupted` (130) / `Terminated` (143) when stopped."""
    check_jobs(jobs)
    report = Report(len(jobs), on_done, on_outcome, progress)
    outcomes: dict[str, JobOutcome] = {}
    pending: list[TrainingJob] = []
    for job in jobs:
        if finished(home, job):
            log.info("fleet: run %s already finished; skipped", job.run)
            report(outcomes, JobOutcome(job.run, "skipped", job_log(home, job)))
        else:
            pending.append(job)
    if pending and fleet.executor == "in-process":
        # lazy: heavy (torch); trainer.fleet.in_process imports this module (a cycle)
        from trainer.checkpoint_memo import keeping_loaded
        from trainer.fleet.in_process import run_in_process

        with keeping_loaded():  # proxies branched from one checkpoint read it once
            for job in pending:
                report(outcomes, run_in_process(home, job, threads_per_job(fleet), job_log(home, job)))
    elif pending and launcher is not None:
        Fleet(home, fleet, launcher, len(jobs)).run(pending, outcomes, report)
    elif pending:
        with launching(fleet, len(pending)) as own:
            assert own is not None
            Fleet(home, fleet, own, len(jobs)).run(pending, outcomes, report)
    return [outcomes[job.run] for job in jobs]


@contextlib.contextmanager
def launching(fleet: FleetConfig, jobs: int) -> Iterator[Launcher | None]:
    """The fleet's launcher for about `jobs` jobs over one or more `run_jobs` calls (a swarm's shared
    checkpoint, then its proxies, on the same workers); what it holds is released at the end. None for the
    in-process executor."""
    if fleet.executor == "in-process":
        yield None
        return
    launcher = launcher_for(fleet, jobs)
    try:
        yield launcher
    finally:
        launcher.close()


@dataclass
class Report:
    """Each job's end: recorded, said in one line (a progress line on stderr with `progress`), called back."""

    total: int
    on_done: Callable[[str], None] | None
    on_outcome: Callable[[JobOutcome], None] | None
    progress: bool

    def __call__(self, outcomes: dict[str, JobOutcome], outcome: JobOutcome) -> None:
        outcomes[outcome.run] = outcome
        count = f"{len(outcomes)} of {self.total} done"
        if outcome.status == "failed":
            log.error("fleet: run %s failed: %s; log: %s", outcome.run, outcome.message, outcome.log)
        elif outcome.status == "completed":
            log.info("fleet: run %s completed in %.1fs (%s)", outcome.run, outcome.seconds, count)
        if self.progress and outcome.status != "failed":
            print(f"fleet: {outcome.run} {outcome.status} ({count})", file=sys.stderr, flush=True)
        if outcome.ok and self.on_done is not None:
            self.on_done(outcome.run)
        if self.on_outcome is not None:
            self.on_outcome(outcome)


def check_outcomes(outcomes: Sequence[JobOutcome]) -> None:
    """One line and a non-zero exit when any job failed, naming the first one's run and log."""
    failed = [outcome for outcome in outcomes if outcome.status == "failed"]
    if failed:
        first = failed[0]
        raise MillraceError(
            f"{len(failed)} of {len(outcomes)} runs failed, first {first.run}: {first.message} (log: {first.log})"
        )


def last_error(log_path: Path) -> str:
    """The log's last `error:` line (the trainer's one-line refusal), else its last line."""
    try:
        lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line for line in lines if line.startswith(("error:", "terminated:", "interrupted:"))]
    return (errors or lines or ["no output"])[-1][:300]


class Fleet:
    """The scheduling loop over a launcher: at most `concurrency` jobs running, each settled as it ends."""

    def __init__(self, home: Home, fleet: FleetConfig, launcher: Launcher, total: int):
        self.home, self.fleet, self.launcher, self.total = home, fleet, launcher, total
        self.running: dict[str, tuple[TrainingJob, Handle, float]] = {}
        self.env = {"OMP_NUM_THREADS": str(threads_per_job(fleet)), "PYTHONUNBUFFERED": "1"}
        # how often jobs are asked whether they ended: squeue is a call to the cluster; a local worker's answer
        # is a read of a pipe, and a slot left idle after its job is time the swarm does not train
        self.interval = {"slurm": fleet.slurm.poll_seconds, "local": 0.02}.get(fleet.executor, 0.1)

    def run(self, pending: list[TrainingJob], outcomes: dict[str, JobOutcome], report: Report) -> None:
        queue = list(pending)
        try:
            with sigterm_as_interrupt():
                while queue or self.running:
                    while queue and len(self.running) < self.fleet.concurrency:
                        job = queue.pop(0)
                        handle = self.launcher.start(
                            job.run, train_arguments(self.home, job), self.env, job_log(self.home, job)
                        )
                        self.running[job.run] = (job, handle, time.perf_counter())
                    for outcome in self.ended():
                        report(outcomes, outcome)
                    if self.running:
                        time.sleep(self.interval)
        except KeyboardInterrupt as exc:
            stopped = self.stop_all()
            kind = Terminated if isinstance(exc, TerminateSignal) else Interrupted
            raise kind(
                f"fleet stopped: {stopped} run(s) checkpointed and stopped, {len(outcomes)} of {self.total} "
                f"finished; {CONTINUE}"
            ) from None
        except BaseException:  # the fleet fails (a job that cannot start, a callback's error): no job outlives it
            if self.running:
                self.stop_all()
            raise

    def ended(self) -> list[JobOutcome]:
        done = []
        for run, (job, handle, began) in list(self.running.items()):
            code = self.launcher.poll(handle)
            if code is None:
                continue
            del self.running[run]
            seconds = time.perf_counter() - began
            if code == 0 and finished(self.home, job):
                done.append(JobOutcome(run, "completed", handle.log, seconds))
            else:
                reason = last_error(handle.log)
                done.append(JobOutcome(run, "failed", handle.log, seconds, f"exit {code}: {reason}"))
        return done

    def stop_all(self) -> int:
        """SIGTERM to every running job, then wait up to `stop_seconds` for their checkpoints; SIGKILL after."""
        handles = [handle for _, handle, _ in self.running.values()]
        log.warning("fleet: stopping %d running job(s); each writes a checkpoint first", len(handles))
        for handle in handles:
            self.launcher.stop(handle)
        deadline = time.monotonic() + self.fleet.stop_seconds
        waiting = list(handles)
        while waiting and time.monotonic() < deadline:
            waiting = [handle for handle in waiting if self.launcher.poll(handle) is None]
            if waiting:
                time.sleep(min(self.interval, 0.2))
        for handle in waiting:
            log.warning(
                "fleet: run %s did not stop in %.0fs; killed (it resumes from its last checkpoint)",
                handle.run,
                self.fleet.stop_seconds,
            )
            self.launcher.kill(handle)
        return len(handles)
