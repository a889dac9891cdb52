"""Drill: SIGTERM, the way Slurm ends a job at its time limit or preempts it.

`train` finishes its step, writes a checkpoint there, marks the run `interrupted`, prints the
command that continues it and exits 143; the resumed run continues the uninterrupted losses. A
run killed without a word (SIGKILL) reads `stale`, never `running` forever. `pipeline run` takes
Ctrl-C's path (tasks abandoned, finished ones kept, 143) and the rerun gives the same store."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline
from testkit.corpus import config_text, make_corpus, store_files
from trainer.loop import train
from trainer.train_request import TrainRequest

STEPS = 16
ENV = {**os.environ, "PYTHONPATH": os.getcwd()}


def _millrace(home, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "millrace", "--home", str(home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=ENV,
    )


def _logged_steps(run_dir) -> list[int]:
    path = run_dir / "metrics.jsonl"
    complete = path.read_text().split("\n")[:-1] if path.exists() else []  # a line being written waits
    return [json.loads(line)["step"] for line in complete]


def _losses(run_dir) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}


def _json(home, *args):
    done = subprocess.run(
        [sys.executable, "-m", "millrace", "--home", str(home), *args, "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    return json.loads(done.stdout)


@pytest.mark.slow
def test_sigterm_mid_run_checkpoints_says_how_to_resume_and_the_resume_continues_the_losses(built, tiny_config):
    home, _ = built
    config = tiny_config(checkpoint={"every": 8, "keep": 3})
    train(config, home, TrainRequest(run="term-straight", steps=STEPS))
    for attempt in range(3):  # a quiet machine can finish before the signal lands: again, under a new name
        run = f"term-{attempt}"
        victim = _millrace(home.root, "train", str(config), "--run", run, "--steps", str(STEPS), "--no-progress")
        deadline = time.monotonic() + 300
        while victim.poll() is None and time.monotonic() < deadline and len(_logged_steps(home.run(run))) < 2:
            time.sleep(0.005)
        victim.send_signal(signal.SIGTERM)
        _, err = victim.communicate(timeout=300)
        if victim.returncode == 143:
            break
        assert victim.returncode == 0, err[-3000:]
    else:
        pytest.fail("every run finished before SIGTERM landed")
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    stopped = int(last.split("after step ")[1].split(",")[0])
    assert 2 <= stopped < STEPS
    assert last == (
        f"terminated: run {run} stopped by SIGTERM after step {stopped}, checkpoint step {stopped} "
        f"written; continue it with: millrace train {config} --mixture default --revision "
        f"uniform-sampling --run {run} --resume"
    )
    run_dir = home.run(run)
    assert (run_dir / "checkpoints" / f"step-{stopped:08d}").is_dir()
    assert not list((run_dir / "checkpoints").glob(".tmp-step-*"))
    assert _json(home.root, "train", "status", run)["state"] == "interrupted"

    killed = _millrace(
        home.root, "train", str(config), "--run", run, "--steps", str(STEPS), "--resume", "--no-progress"
    )
    while killed.poll() is None and len(_logged_steps(run_dir)) <= stopped:
        time.sleep(0.005)
    os.killpg(killed.pid, signal.SIGKILL)  # no word, no status written: the heartbeat's holder is gone
    killed.wait()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"  # as the killed run left it
    assert _json(home.root, "train", "status", run)["state"] == "stale"
    rows = {row["run"]: row for row in _json(home.root, "runs", "list")["runs"]}
    assert rows[run]["status"] == "stale"

    resumed = _millrace(
        home.root, "train", str(config), "--run", run, "--steps", str(STEPS), "--resume", "--no-progress"
    )
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-3000:]
    expected, got = _losses(home.run("term-straight")), _losses(run_dir)
    assert [got[s] for s in range(1, STEPS + 1)] == [expected[s] for s in range(1, STEPS + 1)]  # bit-identical
    assert _json(home.root, "train", "status", run)["state"] == "stopped"


@pytest.fixture(scope="module")
def pipeline_reference(tmp_path_factory):
    """A tiny corpus's config (two workers: a pool to stop) and the store it gives uninterrupted."""
    root = tmp_path_factory.mktemp("pipeline-term")
    config = root / "pipeline.toml"
    config.write_text(config_text(make_corpus(root / "corpus", documents=24), version="2026.05.01", workers=2))
    return config, run_pipeline(load_pipeline_config(config), Home.resolve(root / "reference"))


def stop_once(command: list[str], stamp: Path) -> subprocess.CompletedProcess[str]:
    """One harness run; one that does not end says whether its signal was sent, and what it last logged."""
    began = time.time()
    try:
        return subprocess.run(command, capture_output=True, text=True, env=ENV, start_new_session=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        sent = (
            f"SIGTERM sent {time.time() - float(stamp.read_text()):.0f} s before"
            if stamp.exists() and float(stamp.read_text()) > began
            else "no SIGTERM"
        )
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
        raise AssertionError(
            f"{command[-4:-1]} still running after 120 s ({sent}); its log ends:\n{said[-3000:]}"
        ) from None


@pytest.mark.slow
def test_sigterm_at_every_phase_boundary_exits_143_within_30s_and_the_reruns_give_the_same_store(
    pipeline_reference, tmp_path
):
    """The group's SIGTERM (or one to the main process alone) at the start of each phase in turn (in tokenize,
    0.2 s in, its tasks in flight), each rerun going one phase further: every stop exits 143 promptly with the
    resume line (a worker killed holding the pool's queue lock hung the pool's shutdown, and the store's lock
    with it), and the last rerun's store is the uninterrupted one, byte for byte."""
    from pipeline.runner import PHASE_LABELS

    config, expected = pipeline_reference
    home, stamp = tmp_path / "home", tmp_path / "signalled"
    for index, phase in enumerate(PHASE_LABELS):
        target = ("group", "main")[index % 2]
        delay = "0.2" if phase == "tokenize" else "0"  # tokenize: mid-phase, its tasks in flight
        harness = [sys.executable, "-m", "tests.drills.term_harness", str(home), str(config), phase, delay]
        stopped = stop_once([*harness, target, str(stamp)], stamp)
        took = time.time() - float(stamp.read_text())
        assert stopped.returncode == 143, (phase, target, stopped.stderr[-3000:])
        assert took < 30, (phase, target, took)
        assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
        said = [line for line in stopped.stderr.strip().splitlines() if "resource_tracker" not in line]
        # the stop's own line, or the watchdog's (the same command, as it was given) when it could not unwind
        assert "continue with: millrace " in said[-1] and f"pipeline run {config}" in said[-1], (phase, said[-3:])
        assert not (home / "stores" / "local" / "2026.05.01" / "store.json").exists()
    rerun = subprocess.run(
        [sys.executable, "-m", "millrace", "--home", str(home), "pipeline", "run", str(config), "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert store_files(home / "stores" / "local" / "2026.05.01") == store_files(expected)
