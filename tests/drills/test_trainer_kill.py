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
        [sys.executable, "-m", "millrace", "--home", str(home.root), "train", str(config), "--run", run,
         "--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--no-progress", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
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

    victim = _train(config, home, "drill-killed")
    first_checkpoint = home.run("drill-killed") / "checkpoints" / f"step-{EVERY:08d}"
    deadline = time.monotonic() + 300
    while not first_checkpoint.exists() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # into the steps after the checkpoint, before the next one
    alive = victim.poll() is None
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert alive, "the run ended before it could be killed between checkpoints"
    checkpoints = sorted(p.name for p in (home.run("drill-killed") / "checkpoints").iterdir())
    assert checkpoints and checkpoints[-1].startswith("step-"), checkpoints
    resumed_from = int(checkpoints[-1].split("-")[1])
    assert resumed_from < STEPS

    resumed = _train(config, home, "drill-killed", "--resume")
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read().decode()[-2000:]
    expected, got = _losses(home, "drill-straight"), _losses(home, "drill-killed")
    after = range(resumed_from + 1, STEPS + 1)
    assert [got[s] for s in after] == [expected[s] for s in after]  # bit-identical on CPU
