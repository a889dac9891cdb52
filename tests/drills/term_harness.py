"""Runs `millrace pipeline run CONFIG` and, DELAY seconds into PHASE, sends SIGTERM to its whole process
group, as Slurm does at a time limit or a preemption (TARGET `main`: to this process alone, as `kill PID` does).

    python -m tests.drills.term_harness HOME CONFIG PHASE DELAY_SECONDS [TARGET [STAMP]]

STAMP, when given, is a file the signal's wall-clock time is written to just before it is sent. The exit status
is the command's own (143 after a SIGTERM; 0 if it finished first).
"""

import os
import signal
import sys
import threading
import time

import pipeline.runner as runner
from millrace.cli import main


def send(target: str, stamp: str | None) -> None:
    if stamp:
        with open(stamp, "w") as handle:
            handle.write(repr(time.time()))
    if target == "main":
        os.kill(os.getpid(), signal.SIGTERM)
    else:
        os.killpg(os.getpgid(0), signal.SIGTERM)


def with_timer(phase: str, delay: float, target: str = "group", stamp: str | None = None):
    original = runner.run_pipeline

    def run_pipeline(*args, on_phase=None, **kwargs):
        def announced(label: str) -> None:
            if on_phase is not None:
                on_phase(label)
            if label == phase:
                threading.Timer(delay, send, (target, stamp)).start()

        return original(*args, on_phase=announced, **kwargs)

    return run_pipeline


if __name__ == "__main__":
    home, config, phase, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    target, stamp = (sys.argv[5:] + ["group", None])[:2]
    runner.run_pipeline = with_timer(phase, delay, target, stamp)
    sys.exit(main(["--home", home, "pipeline", "run", config, "--json"]))
