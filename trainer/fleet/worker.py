"""A fleet worker: one long-lived process that imports the trainer once and trains jobs one after another.

Started by `trainer.fleet.pool` as `python -m trainer.fleet.worker FD`. Each job arrives as one JSON line on
stdin, `{"argv": [...], "log": PATH}`: the arguments of `millrace ...` (the same command a fresh process per
job would run) and the file its output is appended to. The worker points its stdout and stderr at that log,
runs the command through `millrace.cli.main` (the same refusals, one-line errors and exit statuses as a
fresh process), and answers `{"code": N}` on file descriptor FD. A SIGTERM during a job takes the trainer's
path (the step finishes, a checkpoint, exit status 143); the worker then answers and exits, as a stopped
process would. Between jobs nothing is held open but the log of none: its output goes to /dev/null.

A fresh process per job pays the interpreter and torch imports each time (seconds, more on a busy machine);
here they are paid once per worker, and a checkpoint many jobs start from is read once
(`trainer.checkpoint_memo`). Nothing a run computes depends on what ran before it in the process:
every run seeds its own model and restores its own (or its source's) checkpoint.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

PRELOADED = ("millrace.cli", "trainer.cli", "trainer.loop")  # what every job imports, paid once: torch among it
STOPPED = (130, 143)  # Ctrl-C / SIGTERM: the fleet is stopping, the worker goes with its job


def point_output_at(path: str) -> None:
    """fds 1 and 2 (and so `sys.stdout`, `sys.stderr` and the log handlers writing to them) to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def run_job(argv: list[str], log: Path) -> int:
    """`millrace ARGV` in this process, its output appended to `log`; its exit status."""
    from millrace.cli import main  # lazy: after the worker's preloads (`main` below imports them first)

    point_output_at(str(log))
    try:
        return main(argv)
    except SystemExit as exc:  # click's --help / a usage error
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a crash: its traceback in the job's log, the job failed, the worker goes on
        traceback.print_exc()
        return 1
    finally:
        point_output_at(os.devnull)


def serve(requests: Iterable[str], answers: TextIO) -> int:
    """Jobs from `requests` until it closes (the fleet is done) or a job was stopped."""
    for line in requests:
        request = json.loads(line)
        code = run_job(request["argv"], Path(request["log"]))
        answers.write(json.dumps({"code": code}) + "\n")
        answers.flush()
        if code in STOPPED:
            return code
    return 0


def main() -> int:
    answers = os.fdopen(int(sys.argv[1]), "w")
    for module in PRELOADED:
        importlib.import_module(module)

    from trainer.checkpoint_memo import keeping_loaded  # lazy: heavy (torch), after the preloads above

    with answers, keeping_loaded():  # jobs branched from one checkpoint (a swarm's proxies) read it once
        return serve(sys.stdin, answers)


if __name__ == "__main__":
    sys.exit(main())
