"""`[executor] kind = "slurm"`: the phase chain's sbatch scripts, its dependencies, and the store it makes.

There is no Slurm here. The dry run is checked as written (partition, time, array size = tasks,
extra sbatch args, the chain). The submission path is datatrove's own `SlurmPipelineExecutor`
code, run against three small stand-ins on PATH for Slurm's commands: `sbatch` records its
arguments and runs the script it was given once per array index, at once (datatrove submits a
job's dependencies first, so in order; its stats-merging jobs are only recorded), `srun` runs its
command, `scontrol show hostnames`
prints this host. So every task runs its pickled executor in a fresh process, as on a cluster,
and the store must equal the local executor's byte for byte, with the work directory on this disk or on
a bucket (moto's S3 server, `work_url`).

The chain's bookkeeping runs against a second set of stand-ins that run nothing: `sbatch` only records,
`squeue` and `sacct` answer from a file of job states the test writes, `scancel` records what it was asked to
cancel. So a failed chain (its first job FAILED, every later one PENDING on it) is resubmitted, and
`millrace pipeline status` reads the states.
"""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from millrace.cli import main as millrace
from millrace.home import Home
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline
from testkit.corpus import config_text, make_corpus

SLURM = """
[executor.slurm]
partition = "cpu"
time = "01:30:00"
cpus_per_task = 2
mem_per_cpu_gb = 3
driver_cpus = 2
sbatch_args = {account = "lab", constraint = "amd"}
"""

SBATCH = f"""#!{sys.executable}
import json, os, re, subprocess, sys
args, script = sys.argv[1:-1], sys.argv[-1]
record = os.environ["SBATCH_RECORD"]
jobs = open(record).read().splitlines() if os.path.exists(record) else []
job = str(100 + len(jobs))
text = open(script).read()
with open(record, "a") as out:
    out.write(json.dumps({{"job": job, "args": args, "script": text}}) + "\\n")
if "launch_pickled_pipeline" not in text:  # datatrove's merge_stats job: recorded, not run
    sys.exit(print("Submitted batch job " + job))
last = int(re.search(r"#SBATCH --array=0-(\\d+)", text).group(1))
offset = next((a.split("RUN_OFFSET=")[1] for a in args if "RUN_OFFSET=" in a), "0")
for task in range(last + 1):
    env = {{**os.environ, "SLURM_ARRAY_TASK_ID": str(task), "SLURM_JOB_ID": job, "RUN_OFFSET": offset,
           "SLURM_NODELIST": "localhost"}}
    with open(record + ".log", "a") as log:  # the tasks' output, for a failing test
        subprocess.run(["bash", script], env=env, check=True, stdout=log, stderr=log)
print("Submitted batch job " + job)
"""
SRUN = """#!/bin/bash
while [[ "$1" == -* ]]; do [[ "$1" == "-n" ]] && shift; shift; done
exec "$@"
"""
SCONTROL = """#!/bin/bash
echo localhost
"""
RECORD_ONLY_SBATCH = f"""#!{sys.executable}
import json, os, sys
record = os.environ["SBATCH_RECORD"]
jobs = open(record).read().splitlines() if os.path.exists(record) else []
job = str(100 + len(jobs))
if job == os.environ.get("SBATCH_FAIL_AT"):  # slurmctld busy: this submission is refused, the earlier ones stand
    sys.exit(print("sbatch: error: Batch job submission failed: Socket timed out", file=sys.stderr) or 1)
with open(record, "a") as out:
    out.write(json.dumps({{"job": job, "args": sys.argv[1:-1], "script": open(sys.argv[-1]).read()}}) + "\\n")
print("Submitted batch job " + job)
"""
# squeue -h -r -j IDS -o FORMAT, sacct -n -X -P -j IDS -o FORMAT: the jobs of $SLURM_STATES ({id: [state, reason]})
# that each knows (squeue the live ones, sacct the ended ones), as real Slurm prints them
QUEUE = f"""#!{sys.executable}
import json, os, sys
ids = sys.argv[sys.argv.index("-j") + 1].split(",")
states = json.load(open(os.environ["SLURM_STATES"])) if os.path.exists(os.environ["SLURM_STATES"]) else {{}}
live = os.path.basename(sys.argv[0]) == "squeue"
found = [j for j in ids if j in states and (states[j][0] in ("PENDING", "RUNNING")) == live]
if live and not found:
    sys.exit(print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr) or 1)
for j in found:
    print(f"{{j}}|{{states[j][0]}}|{{states[j][1]}}" if live else f"{{j}}_0|{{states[j][0]}}")
"""
SCANCEL = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["SCANCEL_RECORD"], "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commands: dict[str, str]) -> Path:
    """`commands` (name: script) on PATH, with this Python's scripts; where they record, under `tmp_path`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in commands.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SBATCH_RECORD", str(tmp_path / "sbatch.jsonl"))
    monkeypatch.setenv("SLURM_STATES", str(tmp_path / "states.json"))
    monkeypatch.setenv("SCANCEL_RECORD", str(tmp_path / "scancel.jsonl"))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[2]))
    return tmp_path / "sbatch.jsonl"


def records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    corpus = make_corpus(root / "corpus")
    config_path = root / "pipeline.toml"
    config_path.write_text(config_text(corpus, tasks=3, extra='kind = "slurm"\n' + SLURM))
    two_tasks = root / "two-tasks.toml"  # fewer task processes for the submitted chain
    two_tasks.write_text(config_text(corpus, tasks=2, extra='kind = "slurm"\n' + SLURM))
    return root, config_path, two_tasks


def test_dry_run_writes_one_script_per_phase_and_submits_nothing(corpus, tmp_path, capsys):
    _, config_path, _ = corpus
    home = tmp_path / "home"
    assert millrace(["pipeline", "run", str(config_path), "--home", str(home), "--dry-run", "--json"]) == 0
    chain = json.loads(capsys.readouterr().out)
    assert chain["submitted"] is False
    jobs = chain["jobs"]
    assert [job["phase"] for job in jobs] == ["filter", "dedup", "tokenize", "decontaminate", "split", "assemble"]
    assert [job["after"] for job in jobs] == [None, "filter", "dedup", "tokenize", "decontaminate", "split"]
    assert [job["array"] for job in jobs] == [3, 1, 3, 1, 3, 1]  # array = tasks; the driver's work is one task
    for job in jobs:
        script = Path(job["script"]).read_text()
        assert script.startswith("#!/bin/bash\n")
        options = dict(re.findall(r"^#SBATCH --([\w-]+)=?(.*)$", script, re.MULTILINE))
        assert options["partition"] == "cpu" and options["time"] == "01:30:00"
        assert options["array"] == f"0-{job['array'] - 1}"
        assert options["account"] == "lab" and options["constraint"] == "amd"
        assert options["cpus-per-task"] == "2" and options["mem-per-cpu"] == "3G"
        assert f"launch_pickled_pipeline {job['logging_dir']}/executor.pik" in script
    assert not list(home.rglob("executor.pik"))  # nothing was submitted, so nothing pickled for a job
    assert not (home / "stores").exists()


def test_a_partition_is_required_and_time_is_checked(corpus, tmp_path, capsys):
    _, config_path, _ = corpus
    bad = tmp_path / "bad.toml"
    bad.write_text(config_path.read_text().replace('partition = "cpu"', "").replace("01:30:00", "90 minutes"))
    assert millrace(["pipeline", "run", str(bad), "--home", str(tmp_path / "home"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "executor.slurm.time" in err and "Traceback" not in err
    bad.write_text(config_path.read_text().replace('partition = "cpu"', ""))
    assert millrace(["pipeline", "run", str(bad), "--home", str(tmp_path / "home"), "--dry-run"]) == 2
    assert "executor.slurm.partition" in capsys.readouterr().err


@pytest.fixture(scope="module")
def local_store(corpus, tmp_path_factory):
    """The two-task config's store as the local executor builds it."""
    _, _, two_tasks = corpus
    home = Home.resolve(tmp_path_factory.mktemp("local-home"))
    return run_pipeline(load_pipeline_config(two_tasks), home, executor="local")


@pytest.mark.slow
def test_submitted_chain_depends_phase_on_phase_and_builds_the_local_store(
    corpus, local_store, tmp_path, capsys, monkeypatch
):
    from testkit.corpus import store_files

    _, _, two_tasks = corpus
    record = stand_ins(tmp_path, monkeypatch, {"sbatch": SBATCH, "srun": SRUN, "scontrol": SCONTROL})
    home = tmp_path / "home"
    assert millrace(["pipeline", "run", str(two_tasks), "--home", str(home), "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    calls = records(record)
    phases = [call for call in calls if "launch_pickled_pipeline" in call["script"]]  # the rest merge stats
    ids = {call["job"]: re.search(r"--job-name=millrace-local-(\w+)", call["script"]).group(1) for call in phases}
    assert [job["phase"] for job in jobs] == list(ids.values())
    assert [job["job_id"] for job in jobs] == list(ids)
    for before, call in zip([None, *phases], phases):
        dependency = next((a for a in call["args"] if a.startswith("--dependency=")), None)
        assert dependency == (f"--dependency=afterok:{before['job']}" if before else None)

    built = Home.resolve(home).store("local", "2026.01.02")
    assert store_files(built) == store_files(local_store)


@pytest.mark.slow
def test_a_chain_with_its_work_directory_on_a_bucket_builds_the_local_store(
    corpus, local_store, tmp_path, capsys, monkeypatch
):
    """`work_url` on Slurm: every task staged in its own scratch directory, every driver job reading the small
    files it needs from the bucket; the executors' markers and pickles on the bucket, opened by the jobs with
    the storage options sbatch's environment gave them."""
    pytest.importorskip("moto")
    from testkit.corpus import store_files
    from testkit.s3 import download_tree, s3_server

    root, _, _ = corpus
    commands = {"sbatch": SBATCH, "srun": SRUN, "scontrol": SCONTROL, "squeue": QUEUE, "sacct": QUEUE}
    stand_ins(tmp_path, monkeypatch, commands)
    with s3_server("work") as server:
        opts = server.storage_options
        client = opts["client_kwargs"]
        client = f'{{endpoint_url = "{client["endpoint_url"]}", region_name = "{client["region_name"]}"}}'
        options = f'{{key = "{opts["key"]}", secret = "{opts["secret"]}", client_kwargs = {client}}}'
        bucket = (
            f'\nwork_url = "s3://work/runs"\nwork_storage_options = {options}\nscratch = "{tmp_path / "scratch"}"\n'
        )
        config_path = tmp_path / "bucket.toml"
        config_path.write_text(config_text(root / "corpus", tasks=2, extra='kind = "slurm"' + bucket + SLURM))
        home = tmp_path / "home"
        assert millrace(["pipeline", "run", str(config_path), "--home", str(home), "--json"]) == 0
        jobs = json.loads(capsys.readouterr().out)["jobs"]
        assert [job["phase"] for job in jobs][-1] == "assemble" and all(job["job_id"] != -1 for job in jobs)
        work = download_tree("s3://work/runs/local/2026.01.02", opts)
        assert {"filtered/00000.jsonl.zst", "logs/1-filter/executor.pik", "logs/6-assemble/completions/00000"} <= set(
            work
        )
        assert "FSSPEC_S3" not in os.environ  # the options went to the jobs' environment only
        assert millrace(["pipeline", "status", str(config_path), "--home", str(home), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
    built = Home.resolve(home).store("local", "2026.01.02")
    assert store_files(built) == store_files(local_store)
    mirror = home / "work" / "local" / "2026.01.02"
    assert not (mirror / "filtered").exists()  # the tasks' outputs stayed on the bucket: of tokens/, only the
    assert {p.name for p in mirror.glob("tokens/*/*")} == {"held-out.json"}  # candidates the driver jobs read
    assert list((tmp_path / "scratch").iterdir()) == []
    assert status["built"] and status["work"] == "s3://work/runs/local/2026.01.02"
    done = {phase["phase"]: (phase["done"], phase.get("runs")) for phase in status["phases"]}
    assert done["filter"] == (2, None) and done["tokenize"] == (2, None) and done["split"] == (2, None)
    assert done["assemble"] == (1, None) and done["dedup"][1]["driver"] == 1


def test_a_resubmitted_chain_cancels_the_earlier_chains_pending_jobs_and_status_shows_them(
    corpus, tmp_path, capsys, monkeypatch
):
    _, _, two_tasks = corpus
    commands = {"sbatch": RECORD_ONLY_SBATCH, "squeue": QUEUE, "sacct": QUEUE, "scancel": SCANCEL}
    record = stand_ins(tmp_path, monkeypatch, commands)
    home = tmp_path / "home"
    run = ["pipeline", "run", str(two_tasks), "--home", str(home), "--json"]
    assert millrace(run) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["cancelled"] == []
    given = [call["job"] for call in records(record)]  # six phases, each with datatrove's stats-merging job
    chain = json.loads((home / "work" / "local" / "2026.01.02" / "slurm-chain.json").read_text())
    assert [job for entry in chain for job in entry["jobs"]] == given and len(given) == 12
    assert [entry["jobs"][0] for entry in chain] == [job["job_id"] for job in first["jobs"]]

    # the filter job's array task failed: everything after it waits forever
    states = {job: ["PENDING", "DependencyNeverSatisfied"] for job in given}
    states[given[0]] = ["FAILED", ""]
    (tmp_path / "states.json").write_text(json.dumps(states))
    assert millrace(["pipeline", "status", str(two_tasks), "--home", str(home), "--json"]) == 0
    status = {phase["phase"]: phase for phase in json.loads(capsys.readouterr().out)["phases"]}
    assert status["filter"]["jobs"][0] == {"job_id": given[0], "states": {"FAILED": 1}, "reason": ""}
    assert status["dedup"]["jobs"][0] == {
        "job_id": given[2],
        "states": {"PENDING": 1},
        "reason": "DependencyNeverSatisfied",
    }
    assert status["filter"]["done"] == 0 and status["filter"]["tasks"] == 2
    assert millrace(["pipeline", "status", str(two_tasks), "--home", str(home)]) == 0
    assert f"{given[2]} PENDING (DependencyNeverSatisfied)" in capsys.readouterr().out

    assert millrace(run) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["cancelled"] == given[1:]
    assert records(tmp_path / "scancel.jsonl") == [given[1:]]
    renewed = [call["job"] for call in records(record)][12:]
    assert [job["job_id"] for job in second["jobs"]] == renewed[::2]

    # a job of the new chain runs: a third submission is refused, nothing cancelled, nothing submitted
    states.update({job: ["PENDING", "Dependency"] for job in renewed})
    states[renewed[0]] = ["RUNNING", "None"]
    (tmp_path / "states.json").write_text(json.dumps(states))
    assert millrace(run) == 2
    err = capsys.readouterr().err
    assert f"job {renewed[0]} (filter)" in err and f"scancel {' '.join(renewed)}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert len(records(record)) == 24 and len(records(tmp_path / "scancel.jsonl")) == 1


def test_the_starter_configs_slurm_block_loads_once_uncommented(corpus, tmp_path):
    from pipeline.starter import init_config

    root, _, _ = corpus
    lines = init_config(root / "corpus").splitlines()
    start = lines.index(next(line for line in lines if line.startswith("# [executor.slurm]")))
    end = lines.index(next(line for line in lines if line.startswith("# logs = ")))
    lines[start : end + 1] = [line.removeprefix("# ") for line in lines[start : end + 1]]
    text = "\n".join(lines).replace('kind = "local"', 'kind = "slurm"', 1)
    (tmp_path / "starter.toml").write_text(text)
    slurm = load_pipeline_config(tmp_path / "starter.toml").executor
    assert slurm.kind == "slurm" and slurm.slurm.partition == "cpu" and slurm.slurm.sbatch_args == {"account": "lab"}


def test_a_chain_whose_submission_failed_part_way_records_the_jobs_it_submitted(corpus, tmp_path, capsys, monkeypatch):
    """sbatch refused the tokenize job after the filter and dedup jobs were queued: those are recorded, so the
    next submission cancels them (pending) or refuses (running) rather than queueing a second chain beside them."""
    _, _, two_tasks = corpus
    commands = {"sbatch": RECORD_ONLY_SBATCH, "squeue": QUEUE, "sacct": QUEUE, "scancel": SCANCEL}
    record = stand_ins(tmp_path, monkeypatch, commands)
    monkeypatch.setenv("SBATCH_FAIL_AT", "104")  # the tokenize job: filter, dedup and their stats jobs are queued
    home = tmp_path / "home"
    run = ["pipeline", "run", str(two_tasks), "--home", str(home), "--json"]
    assert millrace(run) == 2
    err = capsys.readouterr().err
    assert (
        "sbatch failed (exit 1)" in err
        and "(100 101 102 103)" in err
        and "Traceback" not in err
        and len(err.strip().splitlines()) == 1
    )
    queued = [call["job"] for call in records(record)]
    assert queued == ["100", "101", "102", "103"]
    chain = json.loads((home / "work" / "local" / "2026.01.02" / "slurm-chain.json").read_text())
    assert [job for entry in chain for job in entry["jobs"]] == queued

    (tmp_path / "states.json").write_text(json.dumps({job: ["PENDING", "Priority"] for job in queued}))
    monkeypatch.delenv("SBATCH_FAIL_AT")
    assert millrace(run) == 0
    assert json.loads(capsys.readouterr().out)["cancelled"] == queued
    assert records(tmp_path / "scancel.jsonl") == [queued]
