"""What `millrace pipeline run` prints without a terminal, and what Ctrl-C leaves behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from testkit.corpus import config_text, make_corpus

LINE = re.compile(r"pipeline: (filter|dedup|tokenize), (\d+)/(\d+) tasks done, ([\d,]+) documents read$")


@pytest.mark.slow
def test_ctrl_c_is_one_line_then_the_rerun_logs_steady_phase_lines(tmp_path):
    corpus = make_corpus(tmp_path / "corpus")
    config = tmp_path / "pipeline.toml"
    config.write_text(config_text(corpus, tasks=2, workers=2))
    argv = [sys.executable, "-m", "millrace", "--home", str(tmp_path / "home"), "pipeline", "run", str(config)]
    env = {**os.environ, "MILLRACE_PROGRESS_SECONDS": "0.1", "PYTHONPATH": os.getcwd()}
    # a terminal's Ctrl-C goes to the whole process group: the command and datatrove's workers
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    task_logs = tmp_path / "home" / "work" / "local" / "2026.01.02" / "logs" / "1-filter" / "logs"
    deadline = time.monotonic() + 120
    while len(list(task_logs.glob("task_*.log"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # Ctrl-C while both workers run a task
    seen = [process.stderr.readline()]
    os.killpg(process.pid, signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 130, "".join(seen) + rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
    assert rest.strip().splitlines()[-1] == (
        f"interrupted: pipeline stopped in phase filter; finished tasks are kept, continue with: "
        f"millrace pipeline run {config}"
    ), rest
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [m.groups() for line in done.stderr.splitlines() if (m := LINE.search(line))]
    assert lines[-1][:3] == ("tokenize", "2", "2") and int(lines[-1][3].replace(",", "")) > 0, done.stderr
    assert {phase for phase, *_ in lines} >= {"tokenize"}
