"""`[executor] kind = "slurm"`: the phase chain's sbatch scripts, its dependencies, and the store it makes.

There is no Slurm here. The dry run is checked as written (partition, time, array size = tasks,
extra sbatch args, the chain). The submission path is datatrove's own `SlurmPipelineExecutor`
code, run against three small stand-ins on PATH for Slurm's commands: `sbatch` records its
arguments and runs the script it was given once per array index, at once (datatrove submits a
job's dependencies first, so in order; its stats-merging jobs are only recorded), `srun` runs its
command, `scontrol show hostnames`
prints this host. So every task runs its pickled executor in a fresh process, as on a cluster,
and the store must equal the local executor's byte for byte.
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
    subprocess.run(["bash", script], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("Submitted batch job " + job)
"""
SRUN = """#!/bin/bash
while [[ "$1" == -* ]]; do [[ "$1" == "-n" ]] && shift; shift; done
exec "$@"
"""
SCONTROL = """#!/bin/bash
echo localhost
"""


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


@pytest.mark.slow
def test_submitted_chain_depends_phase_on_phase_and_builds_the_local_store(corpus, tmp_path, capsys, monkeypatch):
    from testkit.corpus import store_files

    _, _, two_tasks = corpus
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in {"sbatch": SBATCH, "srun": SRUN, "scontrol": SCONTROL}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "sbatch.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SBATCH_RECORD", str(record))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[2]))

    home = tmp_path / "home"
    assert millrace(["pipeline", "run", str(two_tasks), "--home", str(home), "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    phases = [call for call in calls if "launch_pickled_pipeline" in call["script"]]  # the rest merge stats
    ids = {call["job"]: re.search(r"--job-name=millrace-local-(\w+)", call["script"]).group(1) for call in phases}
    assert [job["phase"] for job in jobs] == list(ids.values())
    assert [job["job_id"] for job in jobs] == list(ids)
    for before, call in zip([None, *phases], phases):
        dependency = next((a for a in call["args"] if a.startswith("--dependency=")), None)
        assert dependency == (f"--dependency=afterok:{before['job']}" if before else None)

    local = run_pipeline(load_pipeline_config(two_tasks), Home.resolve(tmp_path / "local"), executor="local")
    built = Home.resolve(home).store("local", "2026.01.02")
    assert store_files(built) == store_files(local)


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
