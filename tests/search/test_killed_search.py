"""`mix search run` is killable and resumable: Ctrl-C once the first proxy's row is written stops it with exit 130
and one line saying how to continue; the same command then finishes the swarm, the finished proxies kept as
they were."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from testkit.searches import known_optimum_home, write_search
from trainer.search.records import read_proxies

pytestmark = pytest.mark.slow


def test_a_stopped_swarm_says_how_to_continue_and_continues(tmp_path) -> None:
    home = known_optimum_home(tmp_path / "home")
    spec = write_search(tmp_path / "spec", proxies=6, proxy_steps=8)
    command = [sys.executable, "-m", "millrace", "--home", str(home.root), "mix", "search", "run", str(spec)]
    command.append("--no-progress")
    directory = home.search("known")
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # only guards against a hang: the event is the first row written
    while not read_proxies(directory).rows and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 130, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted: millrace mix search run ") and "run it again to continue" in last
    before = {r.proxy: r for r in read_proxies(directory).rows if r.status == "done"}
    assert before and len(before) < 6

    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    after = {r.proxy: r for r in read_proxies(directory).rows}
    assert sorted(after) == [f"p{i:03d}" for i in range(6)] and all(r.status == "done" for r in after.values())
    assert all(after[proxy] == row for proxy, row in before.items())  # kept, not trained again
