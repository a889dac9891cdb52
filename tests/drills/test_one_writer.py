"""Drill: two writers, one name. A store version, a training run and a ladder have one writer at a time;
the second is refused in one line naming the holder (pid, host, since), and a killed holder frees the
name at once (the lock is the kernel's, dropped with the process)."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.writer_lock import Locked, WriterLock, holder_state
from pipeline.store.format import Store
from testkit.cli import child_env, start_millrace
from testkit.corpus import config_text, make_corpus
from testkit.ladders import micro_ladder
from trainer.ladder.ladder_fit import fit_ladder
from trainer.ladder.run import run_ladder
from trainer.records import LOCK_FILE, RunRecord, observed_run_status

VERSION = "2026.04.01"
HOLD = (
    "import sys, time; from millrace.writer_lock import WriterLock; WriterLock(sys.argv[1], 'x').acquire(); "
    "print('held', flush=True); time.sleep(600)"
)


@contextlib.contextmanager
def holding(lock: Path) -> Iterator[subprocess.Popen]:
    """Another live process holding `lock` for the block."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(lock)],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _wait_for_holder(lock: Path, pid: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if json.loads(lock.read_text() or "{}").get("pid") == pid:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    pytest.fail(
        f"{lock} never named pid {pid} (exit {proc.poll()}): {proc.stderr.read()[-2000:] if proc.stderr else ''}"
    )


def _refusal(stderr: str, what: str, pid: int) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert lines and lines[-1].startswith(
        f"error: {what} is being written by pid {pid} on host {socket.gethostname()} since "
    ), stderr[-2000:]
    return lines[-1]


def test_a_killed_holder_frees_the_name_and_its_running_status_reads_stale(tmp_path):
    lock = tmp_path / "runs" / "r" / LOCK_FILE
    running = RunRecord(run="r", status="running")
    with holding(lock) as holder:
        with pytest.raises(Locked, match=f"run 'r' is being written by pid {holder.pid} on host "):
            WriterLock(lock, "run 'r'").acquire()
        assert holder_state(lock) == "alive" and observed_run_status(lock.parent, running) == "running"
    assert holder_state(lock) == "gone" and observed_run_status(lock.parent, running) == "stale"
    assert observed_run_status(lock.parent, RunRecord(run="r", status="completed")) == "completed"
    with WriterLock(lock, "run 'r'"):  # the kernel dropped the dead holder's lock: no manual cleanup
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        assert holder_state(lock) == "alive"


def test_a_heartbeat_that_stopped_reads_stale_from_another_host(tmp_path):
    lock = tmp_path / "writer.lock"
    lock.write_text(json.dumps({"pid": 1, "host": "another-node", "since": "2026-12-01 00:00:00 UTC"}))
    assert holder_state(lock) == "alive"  # a pid on another host cannot be probed: the heartbeat decides
    os.utime(lock, (time.time() - 3600, time.time() - 3600))
    assert holder_state(lock) == "gone"


def test_a_second_ladder_run_is_refused_before_it_trains_a_rung(ladder_home, tmp_path):
    ladder = micro_ladder(tmp_path)
    with (
        holding(ladder_home.ladder("micro") / "writer.lock") as holder,
        pytest.raises(Locked, match=f"ladder 'micro' is being written by pid {holder.pid} on host "),
    ):
        run_ladder(ladder, ladder_home)
    assert not ladder_home.runs.exists() and not (ladder_home.ladder("micro") / "ladder.json").exists()


def test_a_ladder_fit_while_the_ladder_is_written_is_refused(home, tmp_path):
    """`ladder fit` rewrites ladder.json: during a run it would drop a rung result written meanwhile."""
    with (
        holding(home.ladder("micro") / "writer.lock") as holder,
        pytest.raises(Locked, match=f"ladder 'micro' is being written by pid {holder.pid} on host "),
    ):
        fit_ladder(home, "micro")


@pytest.mark.slow
def test_two_pipeline_runs_of_one_version_one_builds_the_other_is_refused(tmp_path):
    corpus = make_corpus(tmp_path / "corpus", documents=90)
    config = tmp_path / "pipeline.toml"
    config.write_text(config_text(corpus, version=VERSION))
    home = tmp_path / "home"
    first = start_millrace(home, "pipeline", "run", str(config), "--json")
    lock = home / "stores" / "local" / f".{VERSION}.lock"
    _wait_for_holder(lock, first.pid, first)
    os.killpg(first.pid, signal.SIGSTOP)  # the first is mid-build, whatever the machine's speed
    try:
        second = start_millrace(home, "pipeline", "run", str(config), "--json")
        _, err = second.communicate(timeout=300)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert second.returncode == 75
    _refusal(err, f"store local/{VERSION}", first.pid)
    _out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    store = home / "stores" / "local" / VERSION
    assert Store(store).verify() == []
    assert sorted(p.name for p in store.parent.iterdir()) == [f".{VERSION}.lock", VERSION]  # no orphan staging
    again = start_millrace(home, "pipeline", "run", str(config), "--json")
    assert again.wait(timeout=300) == 0  # "already built": the lock is free once the writer ended


@pytest.mark.slow
def test_two_trains_of_one_run_the_second_is_refused_and_the_first_is_intact(built, tiny_config):
    home, _ = built
    steps = 12
    first = start_millrace(
        home.root,
        "train",
        str(tiny_config()),
        "--run",
        "shared",
        "--steps",
        str(steps),
        "--checkpoint-every",
        "4",
        "--no-progress",
    )
    _wait_for_holder(home.run("shared") / "writer.lock", first.pid, first)
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        other = tiny_config("other", optimizer={"lr": 1e-2})
        second = start_millrace(home.root, "train", str(other), "--run", "shared", "--steps", "6", "--no-progress")
        _, err = second.communicate(timeout=300)
        resumed = start_millrace(home.root, "train", str(other), "--run", "shared", "--resume", "--no-progress")
        _, resumed_err = resumed.communicate(timeout=300)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert second.returncode == 75 and resumed.returncode == 75
    _refusal(err, "run 'shared'", first.pid)
    _refusal(resumed_err, "run 'shared'", first.pid)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    run_dir = home.run("shared")
    steps_logged = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps_logged == list(range(1, steps + 1))
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "stopped" and record["stop_step"] == steps  # 12 of the 60-step horizon
    assert record["config"]["optimizer"]["lr"] == 3e-3  # the first's config, not the refused one's
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-00000008", "step-00000012"]
