"""`mix search validate`: the proposal and the baselines trained and measured, not predicted.

Each arm (the proposal; the baselines `natural`, `current` -- the baseline revision's own weights -- and
`uniform`) is a revision continuing the baseline at the branch step with the proxies' budget. Each seed is one
shared checkpoint (the baseline to the branch step, initialised with that seed) that every arm restores, so
the arms differ in their mixture only and the seeds measure how much a result moves with the start. Per eval
set the measured difference mean(proposal) - mean(baseline) gets a Welch interval (`trainer.search.seeds`);
an interval that holds 0 is reported as "not distinguishable from noise".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from millrace.home import Home
from trainer.fleet import check_outcomes
from trainer.fleet.config import TrainingJob
from trainer.search.fit import target_value
from trainer.search.records import (
    PROPOSAL_FILE,
    VALIDATION_FILE,
    Comparison,
    ProposalRecord,
    SwarmPlan,
    ValidationRecord,
    ValidationRun,
    read_search_record,
    write_search_record,
)
from trainer.search.revisions import continuing, prior_weights, weights_array, write_and_build
from trainer.search.run import (
    final_results,
    job_config,
    launching,
    phase_tokens,
    search_writer,
    shared_checkpoints,
    train_jobs,
)
from trainer.search.seeds import compare_seeds
from trainer.search.spec import Search

log = logging.getLogger(__name__)
PROPOSAL = "proposal"
TARGET = "target"


def arm_weights(search: Search, plan: SwarmPlan, proposal: ProposalRecord, arm: str) -> np.ndarray:
    if arm == PROPOSAL:
        return weights_array(proposal.phases, plan.components)
    return prior_weights(search, plan.components, "baseline" if arm == "current" else arm)


def arm_revision(search: Search, arm: str) -> str:
    return f"{search.spec.mixture.revision}.search-{search.name}.v-{arm}"


def verdict(comparison: Comparison) -> str:
    if not comparison.distinguishable:
        return "not distinguishable from noise"
    return "proposal better" if comparison.difference < 0 else "proposal worse"


def measured(runs: list[ValidationRun], arm: str, metric: str, terms: dict[str, float]) -> list[float]:
    """One arm's figures for `metric` over its seeds ("target": the search's target)."""
    values = [target_value(r, terms if metric == TARGET else {metric: 1.0}) for r in runs if r.arm == arm]
    return [v for v in values if v is not None]


def compare(
    runs: list[ValidationRun], metrics: list[str], against: str, confidence: float, terms: dict[str, float]
) -> list[Comparison]:
    """Per metric, the proposal's seeds against one baseline's (lower is better)."""
    out = []
    for metric in metrics:
        a, b = measured(runs, PROPOSAL, metric, terms), measured(runs, against, metric, terms)
        if len(a) < 2 or len(b) < 2:
            continue
        result = compare_seeds(a, b, confidence)
        comparison = Comparison(
            metric=metric,
            against=against,
            difference=float(result.difference),
            low=float(result.low),
            high=float(result.high),
            distinguishable=bool(result.distinguishable),
            n_a=result.n_a,
            n_b=result.n_b,
            verdict="",
        )
        out.append(comparison.model_copy(update={"verdict": verdict(comparison)}))
    return out


def validation_metrics(runs: list[ValidationRun], terms: dict[str, float]) -> list[str]:
    """The target's metrics, the macro average and every external set the runs report."""
    found = {m for r in runs if r.results for m in r.results.metric_names()}
    wanted = [TARGET] + list(terms) + ["bpb.macro"] + sorted(m for m in found if m.startswith("bpb.set."))
    return list(dict.fromkeys(m for m in wanted if m in found or m == TARGET))


def validate_search(
    home: Home,
    search: Search,
    plan: SwarmPlan,
    progress: bool = False,
    on_run: Callable[[str], None] | None = None,
) -> ValidationRecord:
    """Train what is missing (under the search's writer lock), measure, compare; writes validation.json."""
    proposal = read_search_record(search.directory, PROPOSAL_FILE, ProposalRecord)
    spec = search.spec.validation
    arms = [PROPOSAL, *spec.baselines]
    with search_writer(search):
        for arm in arms:
            weights = arm_weights(search, plan, proposal, arm)
            revision = continuing(
                search, arm_revision(search, arm), weights, phase_tokens(search), plan.components, f"validation: {arm}"
            )
            write_and_build(home, search, revision)
        planned = [(arm, seed, f"search-{search.name}-v-{arm}-s{seed}") for seed in spec.seeds for arm in arms]
        with launching(search, len(spec.seeds) + len(planned)) as launcher:
            bases = shared_checkpoints(home, search, spec.seeds, progress, launcher)
            jobs = [
                TrainingJob(run, job_config(search, arm_revision(search, arm), seed, run), bases[seed])
                for arm, seed, run in planned
            ]
            check_outcomes(
                train_jobs(home, jobs, search, progress, lambda o: on_run(o.run) if on_run else None, launcher)
            )
        runs = [
            ValidationRun(
                arm=arm,
                revision=arm_revision(search, arm),
                seed=seed,
                run=run,
                status="done",
                results=final_results(home, run),
            )
            for arm, seed, run in planned
        ]
        terms = search.spec.target.terms()
        metrics = validation_metrics(runs, terms)
        record = ValidationRecord(
            search=search.name,
            proposal=proposal.revision,
            seeds=list(spec.seeds),
            confidence=spec.confidence,
            runs=runs,
            comparisons=[c for b in spec.baselines for c in compare(runs, metrics, b, spec.confidence, terms)],
        )
        write_search_record(search.directory, VALIDATION_FILE, record)
        return record
