"""`mix search run`: the shared checkpoint once, then every proxy as a run with lineage branched from it.

A proxy is an ordinary run: its revision continues the baseline revision at the branch step with the proxy's
sampled weights (written and built by the mixtures room), and it starts from the shared checkpoint's run
(`train(from_run=...)`, `trainer.branch`). Resumable at two levels: a proxy whose run completed is not trained
again, and one killed mid-way resumes from its own checkpoint, else from the branch. Each proxy's row is appended
to proxies.jsonl as it ends (`records.ProxyLog`: one line, never the table again), so a kill loses at most the
proxies in flight. One writer per search.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import tomli_w

from millrace.artifacts import atomic_write_text
from millrace.errors import ArtifactError
from millrace.home import Home
from millrace.writer_lock import WriterLock
from trainer.fleet import check_outcomes, run_jobs
from trainer.fleet.config import JobOutcome, TrainingJob
from trainer.fleet.launchers import Launcher
from trainer.fleet.run import launching as fleet_launching
from trainer.ladder.results import record_digest
from trainer.records import read_eval, read_metrics, read_run
from trainer.search.plan import shared_run
from trainer.search.records import (
    SEARCH_LOCK_FILE,
    Component,
    PlannedProxy,
    ProxyLog,
    ProxyResults,
    ProxyRow,
    StoreRef,
    SwarmPlan,
    read_proxies,
)
from trainer.search.revisions import continuing, realised, weights_array, write_and_build
from trainer.search.spec import Search

log = logging.getLogger(__name__)


def search_writer(search: Search) -> WriterLock:
    """The search's one-writer lock: plan, run, fit, propose and validate rewrite its files under it."""
    return WriterLock(search.directory / SEARCH_LOCK_FILE, f"search {search.name!r}")


def job_config(search: Search, revision: str, seed: int, run: str, shared: bool = False) -> Path:
    """A run's train config: the search's model, the one horizon, no samples. The shared checkpoint's run
    checkpoints at its end and is not evaluated; a proxy (or validation run) is evaluated once, at its end,
    and writes no checkpoint (killed, it starts again from the branch: a proxy is small)."""
    data = search.config.model_dump(mode="json")
    data["steps"] = search.horizon
    data["data"].update({"mixture": search.spec.mixture.mixture, "revision": revision})
    data["parallel"]["seed"] = seed
    data["checkpoint"].update({"every": 0, "at_end": shared, "keep": 1})
    data["metrics"]["tensorboard"] = False
    data["eval"].update(
        {"enabled": not shared, "every": search.horizon, "max_sequences": search.spec.eval.max_sequences}
    )
    data["samples"]["enabled"] = False
    path = search.directory / "configs" / f"{run}.toml"
    atomic_write_text(
        path,
        f"# search {search.name}: run {run} (written by `millrace mix search`; do not edit)\n" + tomli_w.dumps(data),
    )
    return path


def completed(home: Home, run: str) -> bool:
    try:
        return read_run(home.run(run)).status == "completed"
    except ArtifactError:
        return False


def train_jobs(
    home: Home,
    jobs: Sequence[TrainingJob],
    search: Search,
    progress: bool,
    on_outcome: Callable[[JobOutcome], None] | None,
    launcher: Launcher | None = None,
) -> list[JobOutcome]:
    """Train `jobs` on the search's fleet (`[fleet]`: in-process, local processes, torchrun, Ray or Slurm);
    finished runs are skipped, killed ones resume; Ctrl-C / SIGTERM stop them all. `launcher`: the search's
    (`launching`), whose local workers train the shared checkpoints and then the runs branched from them."""
    return run_jobs(home, jobs, search.fleet, progress=progress, on_outcome=on_outcome, launcher=launcher)


def launching(search: Search, jobs: int) -> contextlib.AbstractContextManager[Launcher | None]:
    """The search's fleet launcher for about `jobs` jobs (`trainer.fleet.run.launching`)."""
    return fleet_launching(search.fleet, jobs)


def shared_checkpoints(
    home: Home, search: Search, seeds: Sequence[int], progress: bool, launcher: Launcher | None = None
) -> dict[int, str]:
    """Train the baseline to the branch step once per seed (those not there yet); returns seed -> run."""
    from trainer import checkpoint as ckpt  # lazy: heavy (torch)

    runs = {seed: shared_run(search, seed) for seed in seeds}
    jobs = []
    for seed, run in runs.items():
        found = ckpt.list_checkpoints(home.run(run) / "checkpoints")
        if not any(step == search.branch_step for step, _ in found):
            config = job_config(search, search.spec.mixture.revision, seed, run, shared=True)
            jobs.append(TrainingJob(run, config, None, search.branch_step))
            log.info("search %s: shared checkpoint %s: the baseline to step %d", search.name, run, search.branch_step)
    if jobs:
        check_outcomes(train_jobs(home, jobs, search, progress, None, launcher))
    return runs


def final_results(home: Home, run: str) -> ProxyResults:
    """A run's last evaluation, whole (every group), with the digest of the line it came from."""
    evals = read_eval(home.run(run))
    if not evals:
        raise ArtifactError(f"{home.run(run) / 'eval.jsonl'}: no held-out evaluation; the search scores held-out data")
    last = evals[-1]
    return ProxyResults(step=last.step, tokens=last.tokens, loss=last.loss, bpb=last.bpb, digest=record_digest(last))


def train_seconds(home: Home, run: str, after: int) -> float:
    """Seconds the run spent in its own training steps (after the branch), from its metrics."""
    return float(sum(line.step_seconds or 0.0 for line in read_metrics(home.run(run)) if line.step > after))


def merge_row(rows: list[ProxyRow], row: ProxyRow) -> list[ProxyRow]:
    return [r for r in rows if r.proxy != row.proxy] + [row]


def phase_tokens(search: Search) -> list[int]:
    return [steps * search.step_tokens for steps in search.phase_steps]


def proxy_row(home: Home, search: Search, plan: SwarmPlan, proxy: PlannedProxy, manifest: Path) -> ProxyRow:
    """The finished proxy's row: realised weights, every per-set result, time in and out of training steps."""
    store = plan.store
    return ProxyRow(
        proxy=proxy.proxy,
        run=proxy.run,
        revision=proxy.revision,
        phases=realised(manifest, plan.components),
        store=StoreRef(name=store.name, version=store.version, manifest_hash=store.manifest_hash),
        status="done",
        results=final_results(home, proxy.run),
        train_seconds=train_seconds(home, proxy.run, search.branch_step),
        flops=plan.budget.flops,
    )


def build_proxy(home: Home, search: Search, components: list[Component], proxy: PlannedProxy) -> Path:
    weights = weights_array(proxy.phases, components)
    revision = continuing(search, proxy.revision, weights, phase_tokens(search), components, f"proxy {proxy.proxy}")
    return write_and_build(home, search, revision)


def run_swarm(
    home: Home,
    search: Search,
    plan: SwarmPlan,
    progress: bool = False,
    on_row: Callable[[ProxyRow], None] | None = None,
) -> list[ProxyRow]:
    """Train the proxies not yet done (under the search's writer lock); returns every row, in plan order.
    Each proxy's row is written as it ends; a proxy that fails is recorded as failed (its error kept) and the
    command then fails naming the first."""
    with search_writer(search), contextlib.ExitStack() as stack:
        table = read_proxies(search.directory)
        rows, appended = list(table.rows), ProxyLog(search.directory, search.name, plan.components, table)
        done = {r.proxy for r in rows if r.status == "done" and completed(home, r.run)}
        pending = [p for p in plan.proxies if p.proxy not in done]
        launcher = stack.enter_context(launching(search, 1 + len(pending)))
        base = shared_checkpoints(home, search, [0], progress, launcher)[0]
        manifests = {p.run: build_proxy(home, search, plan.components, p) for p in pending}
        by_run = {p.run: p for p in pending}
        if pending:
            log.info("search %s: %d proxies to train, %d done", search.name, len(pending), len(done))

        def ended(outcome: JobOutcome) -> None:
            nonlocal rows
            row = outcome_row(home, search, plan, by_run[outcome.run], manifests[outcome.run], outcome)
            rows = merge_row(rows, row)
            appended.append(row)
            if on_row:
                on_row(row)

        jobs = [TrainingJob(p.run, job_config(search, p.revision, 0, p.run), base) for p in pending]
        outcomes = train_jobs(home, jobs, search, progress, ended, launcher)
        order = {p.proxy: i for i, p in enumerate(plan.proxies)}
        check_outcomes(outcomes)
        return sorted(rows, key=lambda r: order.get(r.proxy, len(order)))


def outcome_row(
    home: Home, search: Search, plan: SwarmPlan, proxy: PlannedProxy, manifest: Path, outcome: JobOutcome
) -> ProxyRow:
    """A proxy's row as its job ends: its results and wall time (start-up to its last evaluation), or its error."""
    if outcome.status == "failed":
        return ProxyRow(
            proxy=proxy.proxy,
            run=proxy.run,
            revision=proxy.revision,
            phases=proxy.phases,
            status="failed",
            error=outcome.message,
        )
    return proxy_row(home, search, plan, proxy, manifest).model_copy(update={"seconds": outcome.seconds or None})
