"""The fleet: many tiny trainings at once give what training them one by one gives; a killed fleet resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from millrace.errors import MillraceError
from millrace.home import Home
from millrace.ray_cluster import connect_ray
from mixtures.build import build
from mixtures.new import NewRevision, new_revision
from testkit.stores import make_store
from trainer.fleet import FleetConfig, TrainingJob, check_outcomes, run_jobs
from trainer.records import read_metrics, read_run

ROOT = Path(__file__).parents[2]
STEPS = 4


@pytest.fixture(scope="module")
def fleet_home(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("fleet-home"))
    make_store(home, {"c00q0": 8000, "c01q0": 6000, "c02q1": 4000})
    new_revision(
        home,
        NewRevision(
            mixture="mix",
            revision="natural",
            store="t",
            strategy="natural",
            phases=["main:4096"],
            seq_len=32,
            global_batch=4,
        ),
    )
    build(home, "mix", "natural")
    return home


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """Two tiny configs on mixture mix/natural (seeds 0 and 1), and one whose --steps is refused."""
    import tomllib

    import tomli_w

    base = tomllib.loads((ROOT / "trainer" / "configs" / "tiny.toml").read_text())
    base["metrics"].update({"tensorboard": False, "peak_flops_per_device": 1e11})
    base["data"].update({"mixture": "mix", "revision": "natural"})
    base["samples"] = {**base.get("samples", {}), "enabled": False}
    folder = tmp_path_factory.mktemp("fleet-configs")
    paths = []
    for seed in (0, 1):
        data = base | {"steps": STEPS, "parallel": {**base["parallel"], "seed": seed}}
        paths.append(folder / f"seed{seed}.toml")
        paths[-1].write_text(tomli_w.dumps(data))
    return paths


def curve(home: Home, run: str) -> list[tuple[int, float, float]]:
    return [(r.step, r.loss, r.grad_norm) for r in read_metrics(home.run(run))]


@pytest.mark.slow
def test_two_concurrent_local_jobs_equal_training_them_in_process(fleet_home, configs):
    """Two jobs at once in processes, and a third that is refused: the two curves equal the in-process
    fleet's, loss for loss and grad norm for grad norm; the refusal is one failed outcome naming its log."""
    home = fleet_home

    def jobs(prefix: str) -> list[TrainingJob]:
        return [
            TrainingJob(f"{prefix}-a", configs[0]),
            TrainingJob(f"{prefix}-b", configs[1]),
            TrainingJob(f"{prefix}-bad", configs[0], steps=STEPS + 1),
        ]

    done: list[str] = []
    local = run_jobs(home, jobs("local"), FleetConfig(executor="local", concurrency=2, threads=1), on_done=done.append)
    here = run_jobs(home, jobs("here"), FleetConfig(executor="in-process", threads=1))
    assert [o.status for o in local] == [o.status for o in here] == ["completed", "completed", "failed"]
    assert sorted(done) == ["local-a", "local-b"]
    for name in ("a", "b"):
        assert curve(home, f"local-{name}") == curve(home, f"here-{name}")
        assert len(curve(home, f"local-{name}")) == STEPS
        assert (home.run(f"local-{name}") / "train.log").read_text().count("run local-") > 0
    assert curve(home, "local-a") != curve(home, "local-b")  # two seeds: the comparison can fail
    bad = local[2]
    assert bad.log == home.run("local-bad") / "train.log" and "past the learning-rate horizon" in bad.message, bad
    with pytest.raises(MillraceError, match=r"1 of 3 runs failed, first local-bad: .*log: .*local-bad/train.log"):
        check_outcomes(local)
    again = run_jobs(home, jobs("local")[:2], FleetConfig(executor="local"))
    assert [o.status for o in again] == ["skipped", "skipped"]


FLEET_SCRIPT = """
import sys
from pathlib import Path
from millrace.cli import main
from millrace.errors import Interrupted
from millrace.home import Home
from trainer.fleet import FleetConfig, TrainingJob, run_jobs
home, first, second = Home.resolve(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
jobs = [TrainingJob("kill-a", first), TrainingJob("kill-b", second, steps=30)]
try:
    run_jobs(home, jobs, FleetConfig(executor="local", concurrency=1, threads=1))
except Interrupted as exc:
    print(f"terminated: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


@pytest.mark.slow
def test_a_killed_fleet_resumes_and_skips_completed_runs(fleet_home, configs, tmp_path):
    """SIGTERM while the second job trains: exit 143, one line saying how to continue, the job checkpointed;
    the same fleet again skips the first and resumes the second from its checkpoint."""
    import tomllib

    import tomli_w

    home = fleet_home
    long = tmp_path / "long.toml"
    data = tomllib.loads(configs[1].read_text())
    long.write_text(tomli_w.dumps(data | {"steps": 30}))
    args = [str(home.root), str(configs[0]), str(long)]
    fleet = subprocess.Popen(
        [sys.executable, "-c", FLEET_SCRIPT, *args],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    metrics = home.run("kill-b") / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while (
        fleet.poll() is None
        and time.monotonic() < deadline
        and not (metrics.exists() and metrics.read_text().count("\n") >= 2)
    ):
        time.sleep(0.05)
    os.kill(fleet.pid, signal.SIGTERM)
    _, err = fleet.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.startswith("terminated:")]
    assert fleet.returncode == 143 and len(lines) == 1, err[-2000:]
    assert "run the same command again to continue" in lines[0]
    stopped = read_run(home.run("kill-b"))
    assert stopped.status == "interrupted" and read_run(home.run("kill-a")).status == "completed"
    checkpoint = max(json.loads(line)["step"] for line in metrics.read_text().splitlines())
    outcomes = run_jobs(
        home, [TrainingJob("kill-a", configs[0]), TrainingJob("kill-b", long, steps=30)], FleetConfig()
    )
    assert [o.status for o in outcomes] == ["skipped", "completed"]
    assert f"at step {checkpoint}" in (home.run("kill-b") / "train.log").read_text()  # resumed, not restarted
    assert [step for step, _, _ in curve(home, "kill-b")] == list(range(1, 31))


SBATCH = f"""#!{sys.executable}
import os, subprocess, sys
script = sys.argv[-1]
with open(os.environ["SBATCH_RECORD"], "a") as out:
    out.write(" ".join(sys.argv[1:]) + "\\n" + open(script).read())
subprocess.run(["bash", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("4242")
"""


def stand_in(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture(scope="module")
def reference(fleet_home, configs):
    """The first config trained by the in-process fleet: what every executor must give."""
    outcome = run_jobs(fleet_home, [TrainingJob("ref-a", configs[0])], FleetConfig(executor="in-process", threads=1))
    assert outcome[0].status == "completed"
    return curve(fleet_home, "ref-a")


@pytest.mark.slow
def test_a_slurm_job_trains_what_the_in_process_fleet_trains(fleet_home, configs, reference, tmp_path, monkeypatch):
    """There is no Slurm here: `sbatch` is a stand-in that records its arguments and runs the script at once,
    `squeue` says the job has left the queue."""
    home = fleet_home
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "sbatch", SBATCH)
    stand_in(bin_dir, "squeue", "#!/bin/bash\n")
    stand_in(bin_dir, "scancel", "#!/bin/bash\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SBATCH_RECORD", str(tmp_path / "sbatch.txt"))
    slurm = FleetConfig.model_validate(
        {"executor": "slurm", "threads": 1, "slurm": {"partition": "cpu", "time": "00:10:00", "poll_seconds": 0.1}}
    )
    assert run_jobs(home, [TrainingJob("slurm-a", configs[0])], slurm)[0].status == "completed"
    recorded = (tmp_path / "sbatch.txt").read_text()
    assert "--parsable" in recorded and "#SBATCH --partition=cpu" in recorded and "#SBATCH --time=00:10:00" in recorded
    assert (
        f"#SBATCH --output={home.run('slurm-a') / 'train.log'}" in recorded and "export OMP_NUM_THREADS=1" in recorded
    )
    assert curve(home, "slurm-a") == reference


@pytest.mark.slow
def test_a_ray_job_trains_what_the_in_process_fleet_trains(fleet_home, configs, reference):
    """A local Ray of one CPU (its start-up is most of this test's time)."""
    ray = pytest.importorskip("ray")
    connect_ray(1)
    try:
        outcome = run_jobs(fleet_home, [TrainingJob("ray-a", configs[0])], FleetConfig(executor="ray", threads=1))[0]
    finally:
        ray.shutdown()
    assert outcome.status == "completed" and curve(fleet_home, "ray-a") == reference


def test_a_fleet_table_in_a_ladder_file_is_checked_at_load(tmp_path):
    """`[fleet]` in a ladder file: where the rungs train; a wrong executor is one line naming the field."""
    from millrace.errors import ConfigError
    from testkit.ladders import write_ladder
    from trainer.ladder.spec import load_ladder

    rules = "[rules]\nwidths = [8]\nlayers = [1]\ntokens_per_active_param = 3.0\nbatch = 4\n"
    assert load_ladder(write_ladder(tmp_path / "plain.toml", "plain", "r", rules)).fleet.executor == "in-process"
    fleet = load_ladder(write_ladder(tmp_path / "two.toml", "two", "r", rules + '[fleet]\nexecutor = "local"\n'))
    assert (fleet.fleet.executor, fleet.fleet.concurrency) == ("local", 2)
    with pytest.raises(ConfigError, match=r"fleet\.executor") as caught:
        load_ladder(write_ladder(tmp_path / "bad.toml", "bad", "r", rules + '[fleet]\nexecutor = "mpi"\n'))
    assert "\n" not in str(caught.value)


def children() -> set[int]:
    """This process's child processes, live or not yet waited for (zombies)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[1]) == os.getpid():
            found.add(int(entry.name))
    return found


@pytest.mark.parametrize("reuse", [False, True])
def test_a_fleet_that_fails_stops_the_jobs_it_started(tmp_path, configs, reuse):
    """The second job cannot start (its run directory is a file): the fleet's error propagates, and the job it had
    started is stopped and waited for first, never left training in its own session after the fleet is gone."""
    home = Home.resolve(tmp_path / "home")
    home.run("blocked").parent.mkdir(parents=True)
    home.run("blocked").write_text("not a run directory")
    before = children()
    jobs = [TrainingJob("started", configs[0]), TrainingJob("blocked", configs[1])]
    fleet = FleetConfig(executor="local", concurrency=2, threads=1, reuse_processes=reuse, stop_seconds=20)
    with pytest.raises(OSError):
        run_jobs(home, jobs, fleet)
    left = children() - before
    for pid in left:  # what the fleet left behind, cleaned up here
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not left


def test_a_slurm_job_is_ended_only_when_squeue_says_so(tmp_path, monkeypatch):
    """`squeue` timing out (a busy controller) says nothing about the job: it is asked again, not taken for ended
    (the fleet would report a job still training as failed, and a rerun would start it a second time)."""
    from trainer.fleet.launchers import Handle, SlurmLauncher

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    answer = tmp_path / "answer"
    stand_in(bin_dir, "squeue", f'#!/bin/bash\nsource "{answer}"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    launcher = SlurmLauncher(FleetConfig.model_validate({"executor": "slurm", "slurm": {"partition": "cpu"}}))
    handle = Handle("a", tmp_path / "train.log", job_id="7")
    said = {
        "echo 7": None,  # queued or running
        "echo 'slurm_load_jobs error: Socket timed out on send/recv operation' >&2; exit 1": None,
        "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1": 0,  # long gone from the queue
        "true": 0,  # left the queue
    }
    for text, ended in said.items():
        answer.write_text(text + "\n")
        assert launcher.poll(handle) == ended, text
