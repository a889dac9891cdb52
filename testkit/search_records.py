"""A finished mixture search's five records (plan, proxies, fit, proposal, validation), written by the search's
own writers from what the search's maths computed: a swarm of `PROXIES` proxies scored by a known law, fitted,
proposed and validated with seeds. The search page and the composition page read them; no proxy is trained, so
a page test pays for the records and not for the runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from millrace.home import Home
from trainer.records import EvalFigures
from trainer.search.propose import Constraints, propose
from trainer.search.records import (
    FIT_FILE,
    PLAN_FILE,
    PROPOSAL_FILE,
    PROXIES_FILE,
    VALIDATION_FILE,
    BranchPoint,
    Comparison,
    Component,
    ComponentWeight,
    EpochCheck,
    FitReport,
    PhaseWeights,
    PlannedProxy,
    ProposalConstraints,
    ProposalRecord,
    Provenance,
    ProxyBudget,
    ProxyResults,
    ProxyRow,
    ProxyTable,
    SetFit,
    StoreRef,
    SwarmPlan,
    ValidationRecord,
    ValidationRun,
    write_search_record,
)
from trainer.search.sampling import sample_mixtures
from trainer.search.seeds import compare_seeds
from trainer.search.surrogate import FitQuality, Observations, cross_validate, fit_surrogate

CELLS = {"c00q0": 400_000, "c00q1": 300_000, "c01q0": 250_000, "c01q1": 150_000, "c02q0": 30_000, "c02q1": 10_000}
COMPONENTS = [(name, [name]) for name in ("c00q0", "c00q1", "c01q0", "c01q1")] + [("tail", ["c02q0", "c02q1"])]
PHASES = ("main", "cooldown")
SEARCH, PROXIES = "page-search", 24
# each arm's three seeds: (bpb.macro, bpb.set.code); the proposal is better beyond noise on the macro only
ARMS = {
    "proposal": ([0.951, 0.953, 0.950], [1.20, 1.26, 1.18]),
    "natural": ([0.981, 0.979, 0.984], [1.22, 1.19, 1.25]),
}


# two one-cell components with made-up fingerprints, for the records' own tests (round trips, tampering)
TWO_COMPONENTS = [
    Component(name="c00q0", fingerprint="sha256:aa", cells=["c00q0"], tokens=10),
    Component(name="c01q0", fingerprint="sha256:bb", cells=["c01q0"], tokens=30),
]


def two_component_row(proxy: str = "p000", macro: float = 2.5) -> ProxyRow:
    """A finished proxy row over `TWO_COMPONENTS` (weights 0.25 and 0.75 in phase main) scoring `macro`."""
    weights = [ComponentWeight(component="c00q0", fingerprint="sha256:aa", weight=0.25)]
    weights.append(ComponentWeight(component="c01q0", fingerprint="sha256:bb", weight=0.75))
    results = ProxyResults(step=4, bpb=EvalFigures(macro=macro, cell={"c00q0": 2.0}, set={"code": 3.0}))
    return ProxyRow(
        proxy=proxy,
        run=f"s-{proxy}",
        revision=f"s-{proxy}",
        phases=[PhaseWeights(phase="main", weights=weights)],
        status="done",
        results=results,
    )


def two_component_plan(proxies: int) -> SwarmPlan:
    """Search `demo`'s plan of `proxies` proxies over `TWO_COMPONENTS`, each with `two_component_row`'s weights."""
    main = two_component_row().phases
    return SwarmPlan(
        search="demo",
        spec_file="demo.toml",
        spec={},
        store=StoreRef(name="ref", version="v1", manifest_hash="sha256:cc"),
        components=TWO_COMPONENTS,
        prior=main,
        branch=BranchPoint(run="base", revision="r", at_step=10, total_steps=100),
        budget=ProxyBudget(tokens=4096, steps=4, phase_steps=[4], seq_len=32, global_batch=32),
        proxies=[
            PlannedProxy(proxy=f"p{i:03d}", run=f"s-p{i:03d}", revision="r", phases=main) for i in range(proxies)
        ],
        epochs=EpochCheck(feasible=True, epoch_cap=8.0),
    )


@dataclass(frozen=True)
class Swarm:
    """The proxies' names, mixtures (proxy, phase, component) and measured scores, and the prior they were drawn
    around: what every later record is computed from."""

    names: list[str]
    tokens: np.ndarray
    prior: np.ndarray
    proxies: list[str]
    weights: np.ndarray
    macro: np.ndarray
    code: np.ndarray


@dataclass(frozen=True)
class WrittenSearch:
    """What the pages must show, as the search computed it."""

    fit: FitReport
    proposal: ProposalRecord
    comparisons: list[Comparison]
    prior: np.ndarray


def phase_weights(names: Sequence[str], weights: np.ndarray) -> list[PhaseWeights]:
    """One `PhaseWeights` per phase from a (phase, component) array."""
    return [
        PhaseWeights(
            phase=phase,
            weights=[ComponentWeight(component=n, fingerprint=f"fp-{n}", weight=float(w)) for n, w in zip(names, row)],
        )
        for phase, row in zip(PHASES, weights)
    ]


def proxy_results(macro: float, code: float) -> ProxyResults:
    """A proxy's (or a validation run's) scores at its last step."""
    return ProxyResults(step=40, bpb=EvalFigures(macro=float(macro), set={"code": float(code)}))


def set_fit(metric: str, obs: Observations, quality: FitQuality, proxies: list[str]) -> SetFit:
    """The fit record of one metric from its observations and cross-validated quality."""
    return SetFit(
        metric=metric,
        kind=quality.kind,
        folds=quality.folds,
        rows=obs.rows,
        spearman=quality.spearman,
        rmse=quality.rmse,
        regret_at_1=quality.regret_at_1,
        measured=obs.targets.tolist(),
        oof_predictions=quality.oof_predictions.tolist(),
        proxies=proxies,
    )


def scored_swarm() -> Swarm:
    """`PROXIES` mixtures sampled around the cells' natural shares, scored by a known log-linear law (and a noisy
    second metric), so that the fit has something true to find."""
    tokens = np.array([sum(CELLS[c] for c in cells) for _, cells in COMPONENTS], dtype=float)
    prior = np.tile(tokens / tokens.sum(), (2, 1))
    weights = sample_mixtures(prior, PROXIES, seed=0)
    slopes = np.array([[-1.0, 0.5, -0.5, 1.0, 0.0], [-0.5, -1.0, 0.5, 0.0, 0.0]])
    macro = np.exp(0.1 + np.einsum("npc,pc->n", weights, slopes))
    code = macro * 1.3 + np.random.default_rng(1).normal(0, 0.02, PROXIES)
    proxies = [f"p{i:02d}" for i in range(PROXIES)]
    return Swarm([name for name, _ in COMPONENTS], tokens, prior, proxies, weights, macro, code)


def write_plan(home: Home, swarm: Swarm, manifest_hash: str) -> tuple[SwarmPlan, str]:
    """The swarm plan over store `ref/v1` (its manifest hash given) and its hash, which provenance cites."""
    plan = SwarmPlan(
        search=SEARCH,
        spec_file="search.toml",
        spec={},
        store=StoreRef(name="ref", version="v1", manifest_hash=manifest_hash),
        components=[
            Component(name=n, fingerprint=f"fp-{n}", cells=cells, tokens=int(t))
            for (n, cells), t in zip(COMPONENTS, swarm.tokens)
        ],
        prior=phase_weights(swarm.names, swarm.prior),
        branch=BranchPoint(run="base", revision="natural", at_step=10, total_steps=100),
        budget=ProxyBudget(tokens=40_960, steps=40, phase_steps=[32, 8], seq_len=32, global_batch=32),
        proxies=[
            PlannedProxy(proxy=p, run=f"{SEARCH}-{p}", revision=f"{SEARCH}-{p}", phases=phase_weights(swarm.names, w))
            for p, w in zip(swarm.proxies, swarm.weights)
        ],
        epochs=EpochCheck(feasible=True, epoch_cap=8.0),
    )
    return plan, write_search_record(home.search(SEARCH), PLAN_FILE, plan)


def write_proxy_table(home: Home, swarm: Swarm, components: list[Component]) -> None:
    """Every proxy done, with its measured scores."""
    rows = [
        ProxyRow(
            proxy=p,
            run=f"{SEARCH}-{p}",
            revision=f"{SEARCH}-{p}",
            phases=phase_weights(swarm.names, w),
            status="done",
            results=proxy_results(m, c),
        )
        for p, w, m, c in zip(swarm.proxies, swarm.weights, swarm.macro, swarm.code)
    ]
    write_search_record(home.search(SEARCH), PROXIES_FILE, ProxyTable(search=SEARCH, components=components, rows=rows))


def write_fit(home: Home, swarm: Swarm, components: list[Component]) -> tuple[FitReport, str, FitQuality]:
    """The log-linear surrogate cross-validated on the target (bpb.macro) and on one eval set; the report, its
    hash and the target's quality (the proposal's interval comes from it)."""
    obs = Observations(tuple(swarm.names), swarm.weights, swarm.macro)
    quality = cross_validate(obs, "log-linear", folds=4)
    code_obs = Observations(tuple(swarm.names), swarm.weights, swarm.code)
    fit = FitReport(
        search=SEARCH,
        surrogate="log-linear",
        target={"bpb.macro": 1.0},
        components=components,
        rows_used=swarm.proxies,
        target_fit=set_fit("bpb.macro", obs, quality, swarm.proxies),
        sets=[set_fit("bpb.set.code", code_obs, cross_validate(code_obs, "log-linear", folds=4), swarm.proxies)],
    )
    return fit, write_search_record(home.search(SEARCH), FIT_FILE, fit), quality


PHASE_TOKENS = (800_000, 200_000)  # the proposal's planned tokens per phase


def write_proposal(home: Home, swarm: Swarm, hashes: tuple[str, str], quality: FitQuality) -> ProposalRecord:
    """The surrogate's proposal under the token and share constraints, as revision `proposed` continuing
    `natural`, with its provenance (the plan's and the fit's hashes)."""
    obs = Observations(tuple(swarm.names), swarm.weights, swarm.macro)
    constraints = Constraints(np.array(PHASE_TOKENS, dtype=float), swarm.tokens, max_share=0.6, prior=swarm.prior)
    proposal = propose(fit_surrogate(obs), constraints, quality)
    record = ProposalRecord(
        search=SEARCH,
        mixture="default",
        revision="proposed",
        revision_file="proposed.toml",
        continues="natural",
        at_step=10,
        phases=phase_weights(swarm.names, proposal.weights),
        prior=phase_weights(swarm.names, swarm.prior),
        constraints=ProposalConstraints(
            epoch_cap=constraints.epoch_cap, min_share=0.0, max_share=0.6, phase_tokens=list(PHASE_TOKENS)
        ),
        provenance=Provenance(
            search=SEARCH,
            plan_hash=hashes[0],
            fit_hash=hashes[1],
            surrogate="log-linear",
            rows=PROXIES,
            target={"bpb.macro": 1.0},
            predicted=proposal.predicted,
            interval=proposal.interval,
            prior_predicted=proposal.prior_predicted,
        ),
    )
    write_search_record(home.search(SEARCH), PROPOSAL_FILE, record)
    return record


def write_validation(home: Home) -> list[Comparison]:
    """Three seeds of each arm (`ARMS`), compared per metric and on the target (1 x bpb.macro)."""
    runs = [
        ValidationRun(arm=arm, revision=arm, seed=s, run=f"v-{arm}-{s}", status="done", results=proxy_results(m, c))
        for arm, (ms, cs) in ARMS.items()
        for s, m, c in zip((1, 2, 3), ms, cs)
    ]
    comparisons = []
    for metric, index in (("bpb.macro", 0), ("bpb.set.code", 1), ("target", 0)):  # the target: 1 x bpb.macro
        seen = compare_seeds(ARMS["proposal"][index], ARMS["natural"][index])
        comparisons.append(
            Comparison(
                metric=metric,
                against="natural",
                difference=seen.difference,
                low=seen.low,
                high=seen.high,
                distinguishable=seen.distinguishable,
                n_a=seen.n_a,
                n_b=seen.n_b,
                verdict="better beyond noise" if seen.distinguishable else "not distinguishable from noise",
            )
        )
    record = ValidationRecord(
        search=SEARCH, proposal="proposed", seeds=[1, 2, 3], confidence=0.95, runs=runs, comparisons=comparisons
    )
    write_search_record(home.search(SEARCH), VALIDATION_FILE, record)
    return comparisons


def write_scored_search(home: Home, manifest_hash: str) -> WrittenSearch:
    """Search `SEARCH` over store `ref/v1` (manifest `manifest_hash`), all five records written in the order the
    search writes them."""
    swarm = scored_swarm()
    plan, plan_hash = write_plan(home, swarm, manifest_hash)
    write_proxy_table(home, swarm, plan.components)
    fit, fit_hash, quality = write_fit(home, swarm, plan.components)
    record = write_proposal(home, swarm, (plan_hash, fit_hash), quality)
    return WrittenSearch(fit, record, write_validation(home), swarm.prior)
