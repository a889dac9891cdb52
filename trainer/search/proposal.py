"""`mix search propose`: the surrogate's best mixture under the constraints, written as a new dated revision.

The proposal is for the whole planned run from the branch on: a revision of the mixture that continues the
baseline at the branch step, its phases holding the rest of the baseline's tokens (or `constraints.planned_tokens`
in all) split at the search's switch point. The epoch cap binds over that whole run: each component's room is
its available tokens times the cap, less what the baseline drew before the branch. With `reuse` and components
no usable row has seen, only those are re-optimised and the rest are held at the prior (Olmix mixture reuse).
The revision's description names the swarm, the surrogate and the predicted target with its interval;
proposal.json beside the search (the sidecar record) holds the full provenance with the hashes it came from.
"""

from __future__ import annotations

import datetime as dt

import numpy as np

from millrace.home import Home
from mixtures.manifest import read_manifest
from trainer.search.fit import rows_of, target_value
from trainer.search.propose import Constraints, Proposal, propose
from trainer.search.records import (
    FIT_FILE,
    PLAN_FILE,
    FitReport,
    ProposalConstraints,
    ProposalRecord,
    Provenance,
    SwarmPlan,
    record_hash,
)
from trainer.search.revisions import (
    cap_tokens,
    continuing,
    phase_weights,
    planned_phase_tokens,
    weights_array,
    write_and_build,
)
from trainer.search.spec import Search
from trainer.search.surrogate import FitQuality, Observations, fit_surrogate


def dated_name(search: Search) -> str:
    return f"{dt.date.today().isoformat()}-search-{search.name}"


def propose_search(
    home: Home, search: Search, plan: SwarmPlan, fit: FitReport, name: str | None = None
) -> ProposalRecord:
    """Refit the target's surrogate on the fit's rows, propose, write and build the revision; returns the record."""
    used = set(fit.rows_used)
    rows = [r for r in rows_of(home, search.name, search.spec.reuse) if r.run in used]
    values = [target_value(r, fit.target) for r in rows]
    kept = [(r, v) for r, v in zip(rows, values) if v is not None]
    obs = Observations(
        components=tuple(c.fingerprint for c in plan.components),
        weights=np.stack([weights_array(r.phases, plan.components) for r, _ in kept]),
        targets=np.array([v for _, v in kept]),
    )
    surrogate = fit_surrogate(obs, fit.surrogate, seed=search.spec.sampling.seed)  # type: ignore[arg-type]
    target = fit.target_fit
    quality = FitQuality(
        kind=target.kind,
        folds=target.folds,
        oof_predictions=np.array(target.oof_predictions),
        spearman=target.spearman or 0.0,
        rmse=target.rmse or 0.0,
        regret_at_1=target.regret_at_1 or 0.0,
    )
    prior = weights_array(plan.prior, plan.components)
    limits = search.spec.constraints
    held = held_components(search, plan, fit)
    fixed = None if held is None else np.tile(np.array(held), (prior.shape[0], 1))
    constraints = Constraints(
        phase_tokens=planned_phase_tokens(search).astype(float),
        available_tokens=cap_tokens(search, plan.components).astype(float),
        epoch_cap=limits.epoch_cap,
        min_share=limits.min_share,
        max_share=limits.max_share,
        prior=prior,
        max_distance=limits.max_distance,
    )
    chosen = propose(surrogate, constraints, quality, seed=search.spec.sampling.seed, fixed=fixed)
    return write_proposal(home, search, plan, fit, chosen, constraints, name or dated_name(search))


def held_components(search: Search, plan: SwarmPlan, fit: FitReport) -> list[bool] | None:
    """Per component, whether the proposal holds it at the prior's weights: with `reuse`, those the fit saw
    unchanged, when some changed and some did not (None: every component is free)."""
    changed = set(fit.changed_components)
    if search.spec.reuse and changed and len(changed) < len(plan.components):
        return [c.name not in changed for c in plan.components]
    return None


def write_proposal(
    home: Home,
    search: Search,
    plan: SwarmPlan,
    fit: FitReport,
    chosen: Proposal,
    constraints: Constraints,
    name: str,
) -> ProposalRecord:
    """The revision file (built) and the proposal record naming where it came from."""
    low, high = chosen.interval
    what = (
        f"proposed by search {search.name} from {len(fit.rows_used)} proxies, {fit.surrogate} surrogate "
        f"(out-of-fold Spearman {fit.target_fit.spearman:.3f}); predicted target {chosen.predicted:.4f} "
        f"[{low:.4f}, {high:.4f}]"
        + (f", prior {chosen.prior_predicted:.4f}" if chosen.prior_predicted is not None else "")
    )
    tokens = [int(t) for t in constraints.phase_tokens]
    revision = continuing(search, name, chosen.weights, tokens, plan.components, what)
    manifest = write_and_build(home, search, revision)

    built, _ = read_manifest(manifest)
    cells = {p.name: dict(p.declared_weights) for p in built.phases if p.revision is None}
    return ProposalRecord(
        search=search.name,
        mixture=search.spec.mixture.mixture,
        revision=name,
        revision_file=str(home.revisions / search.spec.mixture.mixture / f"{name}.toml"),
        continues=search.spec.mixture.revision,
        at_step=search.branch_step,
        phases=phase_weights(plan.components, search.phase_names, chosen.weights),
        prior=plan.prior,
        cells=cells,
        fixed=[c.name for c, held in zip(plan.components, held_components(search, plan, fit) or []) if held],
        constraints=ProposalConstraints(
            epoch_cap=constraints.epoch_cap,
            min_share=constraints.min_share,
            max_share=constraints.max_share,
            max_distance=constraints.max_distance,
            phase_tokens=tokens,
        ),
        provenance=Provenance(
            search=search.name,
            plan_hash=record_hash(search.directory, PLAN_FILE),
            fit_hash=record_hash(search.directory, FIT_FILE),
            surrogate=fit.surrogate,
            rows=len(fit.rows_used),
            target=fit.target,
            predicted=float(chosen.predicted),
            interval=(float(low), float(high)),
            prior_predicted=None if chosen.prior_predicted is None else float(chosen.prior_predicted),
        ),
    )
