"""The `local` executor's processes: up to `concurrency` long-lived workers (`trainer.fleet.worker`), each
importing the trainer once and training its jobs one after another.

A fresh `python -m millrace train` per job spends seconds importing torch and the trainer before its first
step (12 s a proxy on this 2-core machine when it is busy, longer than a micro proxy's steps). A worker pays
that once. Each worker is its own session, as a fresh process is: a terminal's Ctrl-C reaches the fleet
only, and the fleet's SIGTERM reaches the worker's job, which checkpoints and stops (exit 143). A worker that
dies is replaced by a fresh one for the next job; its job is reported with the worker's exit status.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trainer.fleet.launchers import Handle, open_log, signal_group
from trainer.fleet.worker import STOPPED

CLOSE_SECONDS = 30.0  # how long an idle worker has to exit once its requests are closed


@dataclass
class Worker:
    """One worker process: its request pipe, the read end of its answers, whether a job is in it."""

    process: subprocess.Popen[bytes]
    answers: int  # a non-blocking fd
    busy: bool = False
    buffer: bytes = field(default=b"")

    def send(self, argv: list[str], log: Path) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps({"argv": argv, "log": str(log)}) + "\n").encode())
        self.process.stdin.flush()
        self.busy = True

    def answer(self) -> int | None:
        """The job's exit status once the worker has answered, else None."""
        with contextlib.suppress(BlockingIOError):
            self.buffer += os.read(self.answers, 4096)
        if b"\n" not in self.buffer:
            return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.busy = False
        return int(json.loads(line)["code"])

    def close(self) -> None:
        """An idle worker ends at once (it holds nothing); a busy one is stopped like a fresh process's job
        (SIGTERM: it checkpoints and exits), and killed if it has not exited after `CLOSE_SECONDS`."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        signal_group(self.process, signal.SIGTERM)
        try:
            self.process.wait(CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            signal_group(self.process, signal.SIGKILL)
            self.process.wait()
        os.close(self.answers)


def start_worker(env: dict[str, str], log: Path) -> Worker:
    """A worker in its own session; what it prints before its first job (an import error) goes to `log`."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    with open_log(log, f"$ {sys.executable} -m trainer.fleet.worker (a fleet worker)") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trainer.fleet.worker", str(write)],
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(write,),
            start_new_session=True,
        )
    os.close(write)
    return Worker(process, read)


class PoolLauncher:
    """`local`: each job is `millrace ...` in an idle worker, or in a new one. `size` workers (the fleet's
    concurrency, or fewer for fewer jobs) start with the first job, so the others' imports overlap it; the
    fleet never runs more jobs at once than its concurrency."""

    def __init__(self, size: int) -> None:
        self.size = size  # workers started at the first job: their imports overlap it
        self.workers: list[Worker] = []

    def start(self, run: str, command: list[str], env: dict[str, str], log: Path) -> Handle:
        if command[:2] != ["-m", "millrace"]:
            raise ValueError(f"a fleet worker runs `millrace` commands, not {command[:2]}")
        worker = next((w for w in self.workers if not w.busy and w.process.poll() is None), None)
        if worker is None:
            worker = start_worker(env, log)
            self.workers.append(worker)
        while len(self.workers) < self.size:  # the others, idle until their first job
            self.workers.append(start_worker(env, log))
        open_log(log, "$ (fleet worker " + str(worker.process.pid) + ") millrace " + " ".join(command[2:])).close()
        worker.send(command[2:], log)
        return Handle(run, log, process=worker.process, extra={"worker": worker})

    def poll(self, handle: Handle) -> int | None:
        worker: Worker = handle.extra["worker"]
        code = worker.answer()
        if code in STOPPED:  # the worker exits with its stopped job
            self.drop(worker)
        if code is not None:
            return code
        ended = worker.process.poll()
        if ended is None:
            return None
        code = worker.answer()  # it may have answered just before it exited
        self.drop(worker)
        return code if code is not None else (ended or 1)

    def stop(self, handle: Handle) -> None:
        assert handle.process is not None
        signal_group(handle.process, signal.SIGTERM)

    def kill(self, handle: Handle) -> None:
        assert handle.process is not None
        signal_group(handle.process, signal.SIGKILL)
        handle.process.wait()
        self.drop(handle.extra["worker"])

    def drop(self, worker: Worker) -> None:
        if worker in self.workers:
            self.workers.remove(worker)
            worker.close()

    def close(self) -> None:
        """Close every worker's requests (idle ones exit) and wait for them."""
        while self.workers:
            self.drop(self.workers[0])
