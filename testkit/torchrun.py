"""Training under torchrun in CPU processes (gloo), and the loss curve a run logged, for the distributed tests."""

from __future__ import annotations

import os
import subprocess
import sys

from millrace.home import Home
from trainer.records import read_metrics


def torchrun(ranks: int, config: object, home: Home, run: str, steps: int) -> str:
    """`millrace train` on `ranks` CPU processes, resuming the run's checkpoint if any; fails the test on error.
    Returns what the ranks printed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(ranks),
        "-m",
        "millrace",
        "train",
        str(config),
        "--home",
        str(home.root),
        "--run-name",
        run,
        "--steps",
        str(steps),
        "--resume",
        "--no-progress",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def curve(home: Home, run: str) -> list[tuple[float | None, float | None]]:
    """(loss, grad norm) per logged step: AdamW ignores the gradient's scale, so both are compared."""
    return [(record.loss, record.grad_norm) for record in read_metrics(home.run(run))]
