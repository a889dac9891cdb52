"""`ladder run`: rung manifests keep the revision's phases and weights; a killed ladder resumes
without retraining finished rungs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from millrace.home import Home
from mixtures.build import build
from mixtures.manifest import read_manifest
from testkit.ladders import micro_ladder
from trainer.ladder.plan import plan_ladder
from trainer.ladder.rung_revision import build_rung_revision

ROOT = Path(__file__).parents[2]


def test_rung_manifests_keep_the_revisions_phases_and_weights(ladder_home, tmp_path):
    home = ladder_home
    base, _ = read_manifest(build(home, "default", "two-phase"))
    plan = plan_ladder(micro_ladder(tmp_path, widths=(8, 16, 32), layers=(1, 1, 2), tpa=2.0), home)
    for rung in plan.rungs:
        name, path = build_rung_revision(home, "default", "two-phase", "micro", rung.name, rung.tokens, rung.batch)
        manifest, _ = read_manifest(path)
        assert name == f"two-phase.micro.{rung.name}" and manifest.global_batch == 4
        assert [p.name for p in manifest.phases] == ["main", "cool"]
        total = sum(p.token_budget for p in manifest.phases)
        assert total == pytest.approx(rung.tokens, abs=2)
        for ours, theirs in zip(manifest.phases, base.phases):
            assert ours.token_budget / total == pytest.approx(theirs.token_budget / 48000, abs=1 / total)
            weights = {c: w for c, w in theirs.declared_weights.items() if w > 0}
            assert {c: w for c, w in ours.declared_weights.items() if w > 0} == pytest.approx(weights, rel=1e-12)
            for cell, weight in weights.items():
                assert abs(ours.counts[cell] - weight * ours.sequences) <= 1.0, (rung.name, ours.name, cell)
            assert sum(ours.counts.values()) == ours.sequences
        # built again: the same file, the same manifest, nothing rewritten
        assert (
            build_rung_revision(home, "default", "two-phase", "micro", rung.name, rung.tokens, rung.batch)[1] == path
        )


def ladder_run(path: Path, home: Home) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "millrace", "--home", str(home.root), "ladder", "run", str(path), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
def test_a_killed_ladder_run_resumes_without_retraining_finished_rungs(ladder_home, tmp_path):
    home = ladder_home
    path = micro_ladder(tmp_path, widths=(8, 16), layers=(1, 1), tpa=3.0)
    plan = plan_ladder(path, home)
    first, second = (home.run(f"ladder-micro-two-phase-{r.name}-s0") for r in plan.rungs)
    every = max(1, plan.rungs[1].steps // 4)
    for _attempt in range(3):  # a quiet machine can outrun the poll
        victim = ladder_run(path, home)
        deadline = time.monotonic() + 300
        while victim.poll() is None and time.monotonic() < deadline:
            metrics = second / "metrics.jsonl"
            complete = metrics.read_text().split("\n")[:-1] if metrics.exists() else []
            if complete and every < json.loads(complete[-1])["step"] < 3 * every:
                break
            time.sleep(0.002)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        status = json.loads((second / "run.json").read_text())["status"] if (second / "run.json").exists() else None
        if list((second / "checkpoints").glob("step-*")) and status != "completed":
            break
        for run in (first, second):
            subprocess.run(["rm", "-rf", str(run)], check=True)
    else:
        pytest.fail("the ladder finished every time before it could be killed in its second rung")
    finished_metrics = (first / "metrics.jsonl").read_bytes()
    checkpoint = max(int(p.name.split("-")[1]) for p in (second / "checkpoints").glob("step-*"))

    again = ladder_run(path, home)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err.decode()[-2000:]
    assert "d8 seed 0 (ladder-micro-two-phase-d8-s0) already trained; not retrained" in err.decode()
    assert (first / "metrics.jsonl").read_bytes() == finished_metrics  # not retrained
    run = json.loads((second / "run.json").read_text())
    assert run["status"] == "completed" and run["start_step"] == checkpoint > 0  # resumed, not restarted
    steps = [json.loads(line)["step"] for line in (second / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, run["total_steps"] + 1))
    ladder = json.loads((home.ladder("micro") / "ladder.json").read_text())
    assert [(r["rung"], r["status"]) for r in ladder["results"]] == [("d8", "completed"), ("d16", "completed")]
    assert "rung d16 seed 0: completed" in out.decode()


@pytest.mark.slow
def test_a_sigterm_in_a_rung_says_to_continue_the_ladder(ladder_home, tmp_path):
    """The rung's own hint (`millrace train ... --resume`) would continue one rung: the ladder's names the ladder."""
    import threading

    from millrace.errors import Terminated
    from testkit.ladders import write_ladder
    from trainer.ladder.run import run_ladder

    path = write_ladder(
        tmp_path / "stopped.toml",
        "stopped",
        "two-phase",
        "[rules]\nwidths = [8]\nlayers = [1]\ntokens_per_active_param = 3.0\nbatch = 4\n[here]\npeak_flops = 1e10\n",
    )
    metrics = ladder_home.run("ladder-stopped-two-phase-d8-s0") / "metrics.jsonl"

    def stop_after_the_first_step() -> None:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().count("\n")) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGTERM)  # what Slurm sends; the training loop stops after its step

    threading.Thread(target=stop_after_the_first_step, daemon=True).start()
    with pytest.raises(Terminated) as caught:
        run_ladder(path, ladder_home)
    message = str(caught.value)
    assert message.startswith("ladder stopped: run ladder-stopped-two-phase-d8-s0 stopped by SIGTERM after step ")
    assert message.endswith(f"; continue the ladder with: millrace ladder run {path}"), message
