"""Train a ladder's rungs: per rung and seed, a scaled revision, a config, a resumable run.

The rungs train on the ladder's `[fleet]` (`trainer.fleet`: in this process one after another
by default, or several at once as local processes, under torchrun, on Ray or on Slurm).
Resumable at two levels: a rung whose run completed is not trained again (its result is
read back from its files), and a rung killed mid-way resumes from its latest checkpoint
(the rung configs checkpoint a few times per rung). `ladder.json` is rewritten as each
rung ends, so a kill loses at most the rungs in flight, and those only since their last
checkpoint. One `ladder run` at a time writes a ladder (`millrace.writer_lock`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from millrace.artifacts import atomic_write_text
from millrace.errors import ArtifactError, ConfigError, Interrupted
from millrace.home import Home
from mixtures.manifest import read_manifest
from trainer.config import TrainConfig
from trainer.fleet import FleetConfig, JobOutcome, TrainingJob, check_outcomes, run_jobs
from trainer.ladder.plan import LadderPlan, RungPlan, plan_ladder
from trainer.ladder.results import curve, ladder_writer, read_ladder_or_none, record_digest, write_ladder
from trainer.ladder.rung_revision import build_rung_revision
from trainer.ladder.spec import load_ladder
from trainer.records import LadderRecord, RungResult, read_eval, read_run

log = logging.getLogger(__name__)
CHECKPOINTS_PER_RUNG = 4


def run_name(ladder: str, revision: str, rung: str, seed: int) -> str:
    return f"ladder-{ladder}-{revision}-{rung}-s{seed}"


def rung_config(plan: LadderPlan, rung: RungPlan, revision: str, seed: int, steps: int) -> dict[str, Any]:
    """The rung's training config: the family's shape, the rung's lr and revision, evaluation on."""
    config: TrainConfig = rung.config
    data = config.model_dump(mode="json")
    data["data"].update({"mixture": plan.spec.mixture.mixture, "revision": revision})
    data["parallel"]["seed"] = seed
    data["steps"] = 0
    data["checkpoint"].update({"every": max(1, steps // CHECKPOINTS_PER_RUNG), "at_end": True})
    data["metrics"]["tensorboard"] = False
    if "eval" in TrainConfig.model_fields:  # the trainer's held-out evaluation (the fitted metric)
        data["eval"] = {
            **data.get("eval", {}),
            "enabled": True,
            "every": max(1, steps // plan.spec.eval.evaluations),
            "max_sequences": plan.spec.eval.max_sequences,
        }
    if "samples" in TrainConfig.model_fields:  # completions at checkpoints: not what a rung is for
        data["samples"] = {**data.get("samples", {}), "enabled": False}
    TrainConfig.model_validate(data)
    return data


def write_rung_config(path: Path, data: dict[str, Any], header: str) -> Path:
    atomic_write_text(path, f"# {header}\n" + tomli_w.dumps(data))
    return path


def finished(home: Home, run: str) -> bool:
    try:
        return read_run(home.run(run)).status == "completed"
    except ArtifactError:
        return False


def rung_result(
    home: Home, plan: LadderPlan, rung: RungPlan, revision: str, seed: int, run: str, seconds: float | None
) -> RungResult:
    run_dir = home.run(run)
    info = read_run(run_dir)
    evals = read_eval(run_dir)
    return RungResult(
        rung=rung.name,
        revision=revision,
        seed=seed,
        run=run,
        status=info.status,
        flops=rung.flops,
        tokens=rung.tokens,
        steps=info.total_steps,
        batch=rung.batch,
        seconds=seconds,
        final=evals[-1] if evals else None,
        final_digest=record_digest(evals[-1]) if evals else None,
        curve=curve(evals),
    )


@dataclass(frozen=True)
class RungJob:
    """One rung and seed of the ladder, and the fleet job that trains it."""

    rung: RungPlan
    seed: int
    job: TrainingJob


def rung_job(home: Home, plan: LadderPlan, rung: RungPlan, revision: str, seed: int) -> RungJob:
    """The rung's scaled revision (built), and its config written unless its run has finished already."""
    ladder = plan.spec.ladder
    name, manifest = build_rung_revision(
        home, plan.spec.mixture.mixture, revision, ladder, rung.name, rung.tokens, rung.batch
    )
    steps = read_manifest(manifest)[0].total_steps
    run = run_name(ladder, revision, rung.name, seed)
    path = home.ladder(ladder) / "rungs" / f"{rung.name}-s{seed}-{revision}.toml"
    if finished(home, run):
        log.info("ladder %s: rung %s seed %d (%s) already trained; not retrained", ladder, rung.name, seed, run)
    else:
        write_rung_config(
            path,
            rung_config(plan, rung, name, seed, steps),
            f"ladder {ladder}: rung {rung.name}, seed {seed}, revision {name} (do not edit)",
        )
        log.info(
            "ladder %s: rung %s seed %d: d_model %d, %d layers, %s tokens, %d steps (%s)",
            ladder,
            rung.name,
            seed,
            rung.d_model,
            rung.layers,
            f"{rung.tokens:,}",
            steps,
            run,
        )
    return RungJob(rung, seed, TrainingJob(run, path))


def select_rungs(plan: LadderPlan, names: list[str] | None, include_target: bool = False) -> list[RungPlan]:
    available = plan.rungs + ([plan.target] if include_target and plan.target else [])
    if not names:
        return available
    by_name = {r.name: r for r in plan.rungs + ([plan.target] if plan.target else [])}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ConfigError(f"{plan.path}: no rung {missing[0]!r} (rungs: {', '.join(by_name)})")
    return [by_name[n] for n in names]


def merge_results(old: list[RungResult], new: list[RungResult]) -> list[RungResult]:
    runs = {r.run for r in new}
    return [r for r in old if r.run not in runs] + new


@dataclass(frozen=True)
class LadderSelection:
    """Which of a ladder's runs to train, and where: the `rungs` by name (None: all), `seeds` seeds each
    (None: the ladder's), on `revision` (None: the ladder's own); the rungs are sized for it and every
    revision in `sized_for`, so that revisions compared on one rung train on the same tokens. `fleet`: where
    the rungs train (None: the ladder's `[fleet]`)."""

    rungs: list[str] | None = None
    seeds: int | None = None
    revision: str | None = None
    sized_for: tuple[str, ...] = ()
    fleet: FleetConfig | None = None


def run_ladder(
    path: Path | str,
    home: Home,
    selection: LadderSelection | None = None,
    progress: bool = False,
    on_result: Callable[[RungResult], None] | None = None,
) -> LadderRecord:
    """Train the selected rungs (default all, `LadderSelection`); returns the updated ladder.json body."""
    chosen = selection or LadderSelection()
    spec = load_ladder(path)
    if chosen.fleet is not None:
        spec = spec.model_copy(update={"fleet": chosen.fleet})
    revision = chosen.revision or spec.mixture.revision
    plan = plan_ladder(path, home, spec, revisions=[revision, *chosen.sized_for])
    with ladder_writer(home, plan.spec.ladder):
        return _run_rungs(plan, home, chosen.rungs, chosen.seeds, revision, progress, on_result)


def _run_rungs(
    plan: LadderPlan,
    home: Home,
    rungs: list[str] | None,
    seeds: int | None,
    revision: str,
    progress: bool,
    on_result: Callable[[RungResult], None] | None,
) -> LadderRecord:
    """The rungs' runs on the ladder's fleet (`[fleet]`), ladder.json rewritten as each ends (under the
    ladder's writer lock); a failed rung fails the ladder once the others have trained."""
    seeds = seeds or plan.spec.seeds
    before = read_ladder_or_none(home, plan.spec.ladder)
    body = LadderRecord(
        ladder=plan.spec.ladder,
        file=str(plan.path.resolve()),
        metric=plan.spec.fit.metric,
        asymptote=plan.spec.fit.asymptote,
        plan=plan.record(),
        results=before.results if before is not None else [],
        fits=before.fits if before is not None else {},
        comparison=before.comparison if before is not None else None,
    )
    jobs = {
        job.job.run: job
        for job in (
            rung_job(home, plan, rung, revision, seed) for rung in select_rungs(plan, rungs) for seed in range(seeds)
        )
    }
    previous = {r.run: r.seconds for r in body.results}

    def record(outcome: JobOutcome) -> None:
        nonlocal body
        if not outcome.ok:
            return
        job = jobs[outcome.run]
        seconds = previous.get(outcome.run) if outcome.status == "skipped" else outcome.seconds
        result = rung_result(home, plan, job.rung, revision, job.seed, outcome.run, seconds)
        body = body.model_copy(update={"results": merge_results(body.results, [result])})
        write_ladder(home, body)
        if on_result:
            on_result(result)

    try:
        outcomes = run_jobs(
            home, [job.job for job in jobs.values()], plan.spec.fleet, progress=progress, on_outcome=record
        )
    except Interrupted as exc:  # a rung's hint would continue one rung: `ladder run` continues them all
        said = re.split(r"; (?:continue it with:|run the same command again)", str(exc), maxsplit=1)[0]
        own = revision == plan.spec.mixture.revision
        again = f"millrace ladder run {plan.path}" + ("" if own else f" --revision {revision}")
        raise type(exc)(f"ladder {plan.spec.ladder}: {said}; continue the ladder with: {again}") from None
    check_outcomes(outcomes)
    return body
