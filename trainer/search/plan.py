"""`mix search plan`: the swarm on paper -- its components, the sampling distribution, the branch point, each
proxy's budget and sampled weights, the compute, and whether the epoch caps allow it.

The proxies' mixtures come from `trainer.search.sampling.sample_mixtures` (a Dirichlet around the prior,
concentrations scaled per draw, bounded by the epoch cap), seeded, so planning twice gives the same swarm.
"""

from __future__ import annotations

import math

import numpy as np

from millrace.errors import ConfigError
from millrace.home import Home
from trainer.flops import flops_per_token
from trainer.search.fingerprint import components_of
from trainer.search.records import (
    BranchPoint,
    Component,
    EpochCheck,
    PlannedProxy,
    PlanSampling,
    ProxyBudget,
    StoreRef,
    SwarmPlan,
)
from trainer.search.revisions import (
    cap_tokens,
    drawn_before,
    phase_weights,
    planned_phase_tokens,
    prior_weights,
    proxy_weight_bounds,
)
from trainer.search.sampling import sample_mixtures
from trainer.search.spec import Search


def search_components(search: Search) -> list[Component]:
    """The search's columns; fewer than two is one line (with one component there is no mixture to choose)."""
    cells = [name for name, cell in search.base.manifest.cells.items() if cell.sequences_available > 0]
    components = components_of(search.base.store, cells, search.spec.components.tail_tokens)
    if len(components) < 2:
        store = search.base.store
        held = f"one cell with training data ({cells[0]})" if cells else "no cell with training data"
        if len(cells) > 1:
            tail = search.spec.components.tail_tokens
            held = f"{len(cells)} cells, all under components.tail_tokens = {tail:,} and merged into one tail"
        raise ConfigError(
            f"{search.path}: store {store.name}/{store.version} gives {search.spec.mixture.mixture}/"
            f"{search.spec.mixture.revision} {held}; a search chooses weights between 2 or more components, so "
            "there is nothing to choose: train the revision as it is"
        )
    return components


def without_held_out(search: Search, components: list[Component]) -> list[str]:
    """The components none of whose cells holds held-out data: a macro target over cells cannot measure them."""
    cells = search.base.store.manifest.cells
    return [c.name for c in components if not any(cells[cell].validation_tokens for cell in c.cells)]


def proxy_count(search: Search, components: int) -> int:
    return search.spec.proxies.count or max(2, math.ceil(search.spec.proxies.per_component * components))


def shared_run(search: Search, seed: int) -> str:
    """The run trained once to the branch step that every proxy (seed 0) or validation run (its seed) restores."""
    return f"search-{search.name}-base-s{seed}"


def proxy_names(search: Search, index: int) -> tuple[str, str]:
    """A proxy's run and revision names."""
    proxy = f"p{index:03d}"
    return f"search-{search.name}-{proxy}", f"{search.spec.mixture.revision}.search-{search.name}.{proxy}"


def epoch_check(search: Search, components: list[Component], samples: np.ndarray) -> EpochCheck:
    """The worst component's epochs over the lineage under the heaviest sampled proxy, against the cap."""
    held = search.base.manifest.cells
    available = np.array([sum(held[cell].sequences_available for cell in c.cells) for c in components], dtype=float)
    phase_sequences = np.array(search.phase_steps, dtype=float) * search.base.manifest.global_batch
    drawn = drawn_before(search, components)
    epochs = (drawn + np.einsum("npc,p->nc", samples, phase_sequences)) / np.maximum(available, 1)
    worst = np.unravel_index(int(np.argmax(epochs)), epochs.shape)
    cap = search.base.revision.epoch_cap
    value = float(epochs[worst])
    planned = float(planned_phase_tokens(search).sum())
    room = float(np.minimum(cap_tokens(search, components) * search.spec.constraints.epoch_cap, planned).sum())
    return EpochCheck(
        feasible=value <= cap + 1e-9,
        planned_feasible=room >= planned,
        worst_cell=components[worst[1]].name,
        worst_epochs=value,
        epoch_cap=cap,
        note="" if value <= cap + 1e-9 else f"proxy p{worst[0]:03d} draws {components[worst[1]].name} past the cap",
    )


def sample_proxies(search: Search, components: list[Component], prior: np.ndarray) -> np.ndarray:
    """(proxies, phases, components) mixtures around `prior`, inside the epoch cap and `max_share`."""
    spec = search.spec
    sequences = search.proxy_steps * search.base.manifest.global_batch
    bound = np.minimum(proxy_weight_bounds(search, components, sequences), spec.constraints.max_share)
    check_room(search, components, bound, sequences)
    return sample_mixtures(
        prior,
        proxy_count(search, len(components)),
        spec.sampling.seed,
        concentrations=tuple(spec.sampling.concentrations),
        max_weight=bound,
    )


def check_room(search: Search, components: list[Component], bound: np.ndarray, sequences: int) -> None:
    """Bounds that leave no mixture (shares summing to under 1) as one line naming the field that binds."""
    room = float(bound[0].sum())
    if room >= 1.0 - 1e-9:
        return
    share = search.spec.constraints.max_share
    if len(components) * share < 1.0:
        raise ConfigError(
            f"{search.path}: field 'constraints.max_share' {share:g}: {len(components)} components at most "
            f"{share:g} each cannot make a mixture; raise it to at least {1 / len(components):.3g}"
        )
    raise ConfigError(
        f"{search.path}: field 'proxies.tokens': a proxy's {sequences:,} sequences would take the "
        f"{len(components)} components past the baseline's epoch cap ({search.base.revision.epoch_cap:g}; they "
        f"hold room for {room:.0%} of it); lower proxies.tokens"
    )


def plan_search(search: Search, home: Home) -> SwarmPlan:
    """The swarm for `search` (nothing trained, nothing written)."""
    components = search_components(search)
    spec = search.spec
    prior = prior_weights(search, components, spec.sampling.prior)
    samples = sample_proxies(search, components, prior)
    count, names = len(samples), search.phase_names
    proxies = []
    for index, sample in enumerate(samples):
        run, revision = proxy_names(search, index)
        phases = phase_weights(components, names, sample)
        proxies.append(PlannedProxy(proxy=f"p{index:03d}", run=run, revision=revision, phases=phases))
    per_token = flops_per_token(search.config, search.base.manifest.seq_len)
    branch_flops = per_token * search.branch_step * search.step_tokens
    proxy_flops = per_token * search.proxy_steps * search.step_tokens
    store = search.base.store
    return SwarmPlan(
        search=search.name,
        spec_file=str(search.path.resolve()),
        spec=spec.model_dump(mode="json"),
        store=StoreRef(name=store.name, version=store.version, manifest_hash=store.manifest_hash),
        components=components,
        prior=phase_weights(components, names, prior),
        sampling=PlanSampling(
            distribution="dirichlet",
            centre=spec.sampling.prior,
            concentrations=list(spec.sampling.concentrations),
            seed=spec.sampling.seed,
            bounded_by="epoch cap over the lineage",
        ),
        branch=BranchPoint(
            run=shared_run(search, 0),
            revision=spec.mixture.revision,
            at_step=search.branch_step,
            total_steps=search.base.manifest.total_steps,
            flops=branch_flops,
        ),
        budget=ProxyBudget(
            tokens=search.proxy_steps * search.step_tokens,
            steps=search.proxy_steps,
            phase_steps=search.phase_steps,
            seq_len=search.base.manifest.seq_len,
            global_batch=search.base.manifest.global_batch,
            flops=proxy_flops,
        ),
        proxies=proxies,
        total_flops=branch_flops + count * proxy_flops,
        epochs=epoch_check(search, components, samples),
    )
