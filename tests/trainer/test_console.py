"""What `millrace train` prints without a terminal, and what Ctrl-C leaves behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from trainer.records import read_run

LINE = re.compile(r"train (\S+): step (\d+)/(\d+), [\d,]+ tokens/s, loss \d+\.\d{4}, ETA \d+(m\d\ds|s)$")


def millrace(home, *argv: str) -> list[str]:
    return [sys.executable, "-m", "millrace", "--home", str(home.root), *argv]


def env(seconds: str) -> dict:
    return {**os.environ, "MILLRACE_PROGRESS_SECONDS": seconds, "PYTHONPATH": os.getcwd()}


@pytest.mark.slow
def test_without_a_terminal_progress_lines_and_ctrl_c_says_how_to_resume(built, tiny_config):
    """Ctrl-C: one line naming the resume command, exit 130, run.json `interrupted`; the resumed run
    (stdout and stderr are pipes, not a terminal) logs a steady line per step and ends with --json."""
    home, _ = built
    config = tiny_config(checkpoint={"every": 2, "keep": 2})
    process = subprocess.Popen(
        millrace(home, "train", str(config), "--run", "ctrl-c"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env("0"),
    )
    seen = []
    deadline = time.monotonic() + 240
    for line in process.stderr:
        seen.append(line)
        match = LINE.search(line.rstrip())
        if (match and int(match.group(2)) >= 3) or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 130, "".join(seen) + rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith("interrupted: run ctrl-c stopped after step "), rest
    assert "Traceback" not in rest, rest
    assert "torch.distributed is disabled" not in "".join(seen) + rest  # DCP's warning at every checkpoint
    assert read_run(home.run("ctrl-c")).status == "interrupted"
    command = last.split("continue it with: ")[1].split()
    assert command[:2] == ["millrace", "train"] and command[-1] == "--resume"
    resumed = subprocess.run(
        millrace(home, *command[1:], "--steps", "12", "--json"),
        capture_output=True,
        text=True,
        env=env("0"),
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert read_run(home.run("ctrl-c")).status == "stopped"
    result = json.loads(resumed.stdout)
    steps = [int(m.group(2)) for line in resumed.stderr.splitlines() if (m := LINE.search(line))]
    assert steps == list(range(result["start_step"] + 1, 13)) and result["end_step"] == 12, resumed.stderr
