"""Where a run stands, phase by phase: tasks done (datatrove's completion markers in the work directory, on
the disk or on the work URL; the same for every executor) and, for a Slurm chain, each phase's jobs and their
states (`pipeline.slurm_queue`). Reads only: it changes nothing in the work directory or the queue."""

from __future__ import annotations

from typing import Any

from millrace.home import Home
from pipeline.config import PipelineConfig
from pipeline.remote_work import RemoteWork
from pipeline.runner import remote_work, store_version, stored_config_hash
from pipeline.slurm_queue import ChainJob, JobState, job_states, read_chain
from pipeline.work import PHASES, WorkLayout

COMPLETIONS = "completions"


def _markers(layout: WorkLayout, remote: RemoteWork | None) -> list[str]:
    """Every completion marker under the work's logs/, relative to it (<phase logs>/[<run>/]completions/<rank>)."""
    if remote is None:
        return [p.relative_to(layout.logs).as_posix() for p in layout.logs.rglob(f"{COMPLETIONS}/*") if p.is_file()]
    root = remote.remote_path(layout.logs)
    remote.fs.invalidate_cache()
    found = remote.fs.find(root) if remote.fs.exists(root) else []
    return [path[len(root) + 1 :] for path in found if f"/{COMPLETIONS}/" in path]


def _done_by_run(markers: list[str]) -> dict[str, dict[str, int]]:
    """Markers counted by phase logging folder and run ("" for a phase's own run, else a dedup round's name or
    a Slurm chain's `driver` job)."""
    done: dict[str, dict[str, int]] = {}
    for marker in markers:
        folder, *run, _, _ = marker.split("/")
        runs = done.setdefault(folder, {})
        runs["/".join(run)] = runs.get("/".join(run), 0) + 1
    return done


def _slurm_jobs(chain: list[ChainJob]) -> dict[str, list[dict[str, Any]]]:
    """Each phase's recorded jobs with their states."""
    states = job_states([job for entry in chain for job in entry["jobs"]])
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for entry in chain:
        for job in entry["jobs"]:
            state = states.get(job, JobState(states={}, reason=""))
            by_stage.setdefault(entry["phase"], []).append({"job_id": job, **state})
    return by_stage


def chain_status(config: PipelineConfig, home: Home) -> dict[str, Any]:
    """The run's phases with their tasks done and (Slurm) their jobs' states; whether the store is built."""
    name = config.output.name
    version = store_version(config, home, stored_config_hash(config))
    layout = WorkLayout(home.work(name, version))
    remote = remote_work(config, layout)
    done = _done_by_run(_markers(layout, remote))
    chain = read_chain(layout, remote)
    jobs = _slurm_jobs(chain) if chain else {}
    phases = []
    for phase in PHASES:
        if phase.logs is None:
            continue
        runs = done.get(phase.logs, {})
        tasks = config.executor.tasks if phase.name in ("filter", "tokenize", "decontaminate", "split") else None
        entry: dict[str, Any] = {"phase": phase.name, "tasks": tasks, "done": runs.get("", 0)}
        if set(runs) - {""}:
            entry["runs"] = {run: count for run, count in sorted(runs.items()) if run}
        if chain:
            entry["jobs"] = jobs.get(phase.name, [])
        phases.append(entry)
    return {
        "store": f"{name}/{version}",
        "executor": config.executor.kind,
        "work": remote.url if remote is not None else str(layout.root),
        "started": (layout.root / "work.json").exists() or bool(done),
        "built": (home.store(name, version) / "store.json").exists(),
        "phases": phases,
    }


def describe_jobs(jobs: list[dict[str, Any]]) -> str:
    """A phase's jobs in a few words: `101 PENDING (DependencyNeverSatisfied)`, `102 COMPLETED x3`."""
    words = []
    for job in jobs:
        states = ", ".join(f"{state}" + (f" x{n}" if n > 1 else "") for state, n in job["states"].items())
        reason = f" ({job['reason']})" if job.get("reason") else ""
        words.append(f"{job['job_id']} {states or 'left the queue'}{reason}")
    return "; ".join(words)


def status_rows(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(phase, tasks done, jobs) per phase, for the table `millrace pipeline status` prints."""
    rows = []
    for phase in status["phases"]:
        done = f"{phase['done']}/{phase['tasks']}" if phase["tasks"] is not None else str(phase["done"])
        if "runs" in phase:
            done += " (" + ", ".join(f"{run} {n}" for run, n in phase["runs"].items()) + ")"
        rows.append((phase["phase"], done, describe_jobs(phase.get("jobs", []))))
    return rows
