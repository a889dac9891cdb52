"""Proposals: the surrogate's best mixture, exactly where it is known, and never outside the constraints
(the epoch cap over the whole run, shares, closeness to the prior, mixture reuse), at 200 components too."""

import numpy as np
import pytest

from millrace.errors import ConfigError
from trainer.search.propose import Constraints, max_weights, propose, violations
from trainer.search.sampling import sample_mixtures
from trainer.search.surrogate import FitQuality, LogLinear, Observations, cross_validate, fit_surrogate


def quality_of(kind, rmse=0.01):
    return FitQuality(kind, 5, np.zeros(3), 0.95, rmse, 0.0)


def law(slopes):
    return LogLinear(intercept=0.1, coefficients=np.asarray(slopes, dtype=float), ridge=0.0)


def test_a_known_log_linear_law_fills_the_best_components_up_to_max_share():
    surrogate = law([[-3.0, 0.5, -2.0, 1.0, -1.0, 0.0]])
    plenty = Constraints(np.array([1e6]), np.full(6, 1e9), max_share=0.3)
    proposal = propose(surrogate, plenty, quality_of("log-linear", rmse=0.02))
    np.testing.assert_allclose(proposal.weights, [[0.3, 0.0, 0.3, 0.0, 0.3, 0.1]], atol=1e-7)
    assert proposal.predicted == pytest.approx(np.exp(0.1 - 0.9 - 0.6 - 0.3))
    assert proposal.interval == pytest.approx(
        (proposal.predicted - 1.96 * 0.02, proposal.predicted + 1.96 * 0.02), abs=1e-4
    )
    assert proposal.prior_predicted is None


def test_the_epoch_cap_binds_over_the_whole_run_not_per_phase():
    # component 0 is best in both phases but holds 10 tokens: 8 epochs = 80 tokens over 100 + 50 planned
    surrogate = law([[-2.0, 0.0, 0.0], [-2.0, 0.0, 0.0]])
    capped = Constraints(np.array([100.0, 50.0]), np.array([10.0, 1e4, 1e4]))
    proposal = propose(surrogate, capped, quality_of("log-linear"))
    spent = capped.phase_tokens @ proposal.weights
    assert spent[0] == pytest.approx(80.0, rel=1e-5) and spent[0] <= 80.0
    assert proposal.weights[:, 0].max() > 0.5  # spent where it helps, not spread evenly by phase
    assert violations(proposal.weights, capped) == []


@pytest.fixture(scope="module")
def swarm200():
    """200 components, two phases, a natural prior that breaks nothing, and a log-linear swarm around it."""
    rng = np.random.default_rng(4)
    available = rng.lognormal(16, 1.0, 200)
    prior = np.tile(available / available.sum(), (2, 1))
    constraints = Constraints(
        np.array([3.0, 1.0]) * available.sum(),
        available,
        epoch_cap=8.0,
        min_share=1e-4,
        max_share=0.1,
        prior=prior,
        max_distance=0.3,
    )
    assert violations(prior, constraints) == []
    weights = sample_mixtures(prior, 300, seed=5, max_weight=max_weights(constraints))
    slopes = rng.normal(0, 1.0, (2, 200))
    targets = np.exp(0.2 + np.einsum("npc,pc->n", weights, slopes)) * np.exp(rng.normal(0, 0.005, 300))
    return constraints, slopes, Observations(tuple(map(str, range(200))), weights, targets)


@pytest.mark.parametrize("kind", ["log-linear", "lightgbm"])
def test_200_components_never_break_a_constraint(swarm200, kind):
    constraints, _, obs = swarm200
    surrogate = fit_surrogate(obs, kind)
    starts = obs.weights[np.argsort(obs.targets)[:3]]
    proposal = propose(surrogate, constraints, quality_of(kind), starts=starts)
    assert violations(proposal.weights, constraints) == []
    distance = 0.5 * np.abs(proposal.weights - constraints.prior).sum(axis=1)
    assert distance.max() <= 0.3 + 1e-9 and proposal.weights.min() >= 1e-4 - 1e-12
    assert proposal.predicted <= proposal.prior_predicted  # never worse than the prior, by its own lights


def test_a_fitted_surrogate_lands_near_the_known_optimum():
    """30 components, 300 rows of a known log-linear law: the fitted proposal gets 90% of the possible gain."""
    rng = np.random.default_rng(11)
    available = rng.lognormal(10, 1.0, 30)
    prior = np.tile(available / available.sum(), (2, 1))
    constraints = Constraints(np.array([3.0, 1.0]) * available.sum(), available, max_share=0.2, prior=prior)
    truth = law(rng.normal(0, 1.0, (2, 30)))
    weights = sample_mixtures(prior, 300, seed=2, max_weight=max_weights(constraints))
    targets = truth.predict(weights) * np.exp(rng.normal(0, 0.01, 300))
    obs = Observations(tuple(map(str, range(30))), weights, targets)
    best = propose(truth, constraints, quality_of("log-linear")).weights  # the law's own constrained optimum
    found = propose(fit_surrogate(obs), constraints, cross_validate(obs)).weights

    def measured(weights):
        return float(truth.predict(weights[None])[0])

    gain_possible = measured(prior) - measured(best)
    assert gain_possible > 0.1
    assert measured(found) - measured(best) < 0.1 * gain_possible
    assert violations(found, constraints) == []


def test_mixture_reuse_keeps_fixed_components_as_one_virtual_domain():
    prior = np.array([[0.1, 0.2, 0.3, 0.4, 0.0], [0.25, 0.25, 0.25, 0.25, 0.0]])
    fixed = np.zeros(prior.shape, dtype=bool)
    fixed[:, :3] = True
    surrogate = law([[0.0, -2.0, 0.0, 1.0, -1.0], [0.0, 0.0, 0.0, 1.0, -1.0]])  # the group: -2/3 in phase 0
    constraints = Constraints(np.array([10.0, 10.0]), np.full(5, 100.0), max_share=0.5, prior=prior)
    proposal = propose(surrogate, constraints, quality_of("log-linear"), fixed=fixed)
    group = proposal.weights[:, :3]
    np.testing.assert_allclose(
        group / group.sum(axis=1, keepdims=True), prior[:, :3] / prior[:, :3].sum(axis=1, keepdims=True)
    )
    assert proposal.weights[0, 4] == pytest.approx(0.5) and group[0].sum() == pytest.approx(0.5)  # both re-optimised
    assert violations(proposal.weights, constraints, fixed) == []
    unconstrained = propose(surrogate, constraints, quality_of("log-linear")).weights
    assert violations(unconstrained, constraints, fixed) != []  # without reuse, component 1 would grow alone


def test_impossible_or_mismatched_inputs_are_one_line_errors():
    surrogate = law([[-1.0, 0.0]])
    tight = Constraints(np.array([1000.0]), np.array([10.0, 10.0]), epoch_cap=8.0)
    with pytest.raises(ConfigError, match=r"no mixture meets them.*epoch cap 8"):
        propose(surrogate, tight, quality_of("log-linear"))
    roomy = Constraints(np.array([10.0]), np.array([10.0, 10.0]))
    with pytest.raises(ConfigError, match="measured for a lightgbm surrogate"):
        propose(surrogate, roomy, quality_of("lightgbm"))
    with pytest.raises(ConfigError, match=r"fixed: mixture reuse .* needs a prior"):
        propose(surrogate, roomy, quality_of("log-linear"), fixed=np.array([[True, False]]))
    with pytest.raises(ConfigError, match="max_distance: a closeness to the prior needs a prior"):
        Constraints(np.array([10.0]), np.array([10.0, 10.0]), max_distance=0.1)
    with pytest.raises(ConfigError, match="prior: expected shape"):
        Constraints(np.array([10.0]), np.array([10.0, 10.0]), prior=np.array([[1.0]]))
