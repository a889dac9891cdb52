"""`python -m trainer.torchrun`: torchrun killed with SIGTERM ends in one line and 143 (torchrun's own
`SignalException` was a traceback and exit 1); its rank checkpointed and said how to continue."""

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
def test_a_killed_torchrun_launcher_exits_143_with_one_line(built, tiny_config):
    home, _ = built
    config = tiny_config(checkpoint={"every": 8, "keep": 2})
    launcher = subprocess.Popen(
        [sys.executable, "-m", "trainer.torchrun", "--standalone", "--nproc_per_node", "1"]
        + ["-m", "millrace", "train", str(config), "--home", str(home.root), "--run-name", "launched"]
        + ["--steps", "60", "--no-progress"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    metrics = home.run("launched") / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while (
        launcher.poll() is None and time.monotonic() < deadline and not (metrics.exists() and metrics.stat().st_size)
    ):
        time.sleep(0.01)
    launcher.send_signal(signal.SIGTERM)  # the launcher alone: it passes the signal on to its rank
    _, err = launcher.communicate(timeout=240)
    assert launcher.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = err.strip().splitlines()
    assert lines[-1].startswith("terminated: torchrun stopped by SIGTERM"), lines[-3:]
    assert any("continue it with: millrace train" in line for line in lines), err[-3000:]
