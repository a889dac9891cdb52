"""Drill: SIGKILL a training run between checkpoints, `--resume`, and the losses from the
checkpoint on equal the uninterrupted run's."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

STEPS, EVERY = 16, 4


def _train(config, home, run, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "millrace",
            "--home",
            str(home.root),
            "train",
            str(config),
            "--run",
            run,
            "--steps",
            str(STEPS),
            "--checkpoint-every",
            str(EVERY),
            "--no-progress",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _losses(home, run):
    lines = (home.run(run) / "metrics.jsonl").read_text().splitlines()
    return {record["step"]: record["loss"] for record in map(json.loads, lines)}


@pytest.mark.slow
def test_sigkill_between_checkpoints_then_resume_continues_the_same_losses(built, tiny_config):
    home, _ = built
    config = tiny_config(checkpoint={"every": EVERY, "keep": 3})
    straight = _train(config, home, "drill-straight")
    assert straight.wait(timeout=600) == 0, straight.stderr.read().decode()[-2000:]

    for attempt in range(3):  # a quiet machine can outrun the poll: try again under a new run name
        run = f"drill-killed-{attempt}"
        victim = _train(config, home, run)
        metrics = home.run(run) / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while victim.poll() is None and time.monotonic() < deadline:
            complete = metrics.read_text().split("\n")[:-1] if metrics.exists() else []  # a line being written waits
            steps = [json.loads(line)["step"] for line in complete]
            if steps and steps[-1] > EVERY and steps[-1] % EVERY:
                break  # past a checkpoint, before the next one
            time.sleep(0.001)
        alive = victim.poll() is None
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        checkpoints = sorted(p.name for p in (home.run(run) / "checkpoints").glob("step-*"))
        resumed_from = int(checkpoints[-1].split("-")[1]) if checkpoints else 0
        if alive and 0 < resumed_from < STEPS:
            break
    else:
        pytest.fail("every run ended before it could be killed between checkpoints")

    resumed = _train(config, home, run, "--resume")
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read().decode()[-2000:]
    expected, got = _losses(home, "drill-straight"), _losses(home, run)
    after = range(resumed_from + 1, STEPS + 1)
    assert [got[s] for s in after] == [expected[s] for s in after]  # bit-identical on CPU
