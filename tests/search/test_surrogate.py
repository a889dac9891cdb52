"""Surrogates of a swarm: fitted on rows of a known law they rank held-out mixtures as the law does, and the
out-of-fold metrics are the ones a search needs (a surrogate fitted on noise scores as noise)."""

import numpy as np
import pytest

from millrace.errors import ConfigError
from trainer.search.propose import Constraints, propose
from trainer.search.sampling import sample_mixtures
from trainer.search.surrogate import Observations, cross_validate, fit_quality, fit_surrogate

PHASES, COMPONENTS, ROWS = 2, 20, 160


@pytest.fixture(scope="module")
def law():
    """Rows of a known log-linear law with 1% noise, mixtures drawn around a skewed prior as a swarm draws."""
    rng = np.random.default_rng(7)
    shares = rng.dirichlet(np.full(COMPONENTS, 2.0))
    prior = np.tile(shares, (PHASES, 1))
    slopes = rng.normal(0.0, 1.0, (PHASES, COMPONENTS))
    weights = sample_mixtures(prior, ROWS, seed=1)
    targets = np.exp(0.3 + np.einsum("npc,pc->n", weights, slopes) + rng.normal(0, 0.01, ROWS))
    names = tuple(f"c{i:02d}" for i in range(COMPONENTS))
    return prior, slopes, Observations(names, weights, targets)


@pytest.fixture(scope="module")
def quadratic():
    """One phase over four components, the target least at an interior mixture: no log-linear shape; with
    LightGBM's out-of-fold quality on it."""
    best = np.array([0.4, 0.3, 0.2, 0.1])
    weights = sample_mixtures(np.full((1, 4), 0.25), 300, seed=0, concentrations=(1.0, 3.0))
    targets = 1.0 + ((weights[:, 0] - best) ** 2).sum(axis=1)
    obs = Observations(("a", "b", "c", "d"), weights, targets)
    return best, obs, cross_validate(obs, "lightgbm", folds=5)


def test_log_linear_recovers_the_law_and_ranks_out_of_fold(law):
    _, slopes, obs = law
    quality = cross_validate(obs, "log-linear", folds=5)
    assert quality.spearman >= 0.9
    assert quality.rmse < 0.05 * obs.targets.mean()
    fitted = fit_surrogate(obs, "log-linear")
    centred = slopes - slopes.mean(axis=1, keepdims=True)  # the law is known up to a constant per phase
    found = fitted.coefficients - fitted.coefficients.mean(axis=1, keepdims=True)
    assert np.corrcoef(found.ravel(), centred.ravel())[0, 1] > 0.9
    fresh = sample_mixtures(law[0], 50, seed=9)
    truth = np.exp(0.3 + np.einsum("npc,pc->n", fresh, slopes))
    np.testing.assert_allclose(fitted.predict(fresh), truth, rtol=0.05)


def test_lightgbm_ranks_an_interior_optimum_the_log_linear_cannot_see(quadratic):
    _, obs, trees = quadratic
    assert trees.spearman >= 0.9 and trees.kind == "lightgbm" and trees.oof_predictions.shape == (obs.rows,)
    assert cross_validate(obs, "log-linear", folds=5).spearman < trees.spearman


def test_shuffled_targets_score_as_noise(law):
    _, _, obs = law
    shuffled = Observations(obs.components, obs.weights, np.random.default_rng(0).permutation(obs.targets))
    assert abs(cross_validate(shuffled, "log-linear").spearman) < 0.3


def test_fit_quality_metrics_by_hand():
    targets = np.array([3.0, 1.0, 2.0, 4.0])
    quality = fit_quality("log-linear", 2, np.array([0.5, 2.0, 1.0, 5.0]), targets)
    assert quality.regret_at_1 == 2.0  # ranked best: row 0 (3.0); the best row measured 1.0
    assert quality.spearman == pytest.approx(0.2)  # rank differences 2, -2, 0, 0: 1 - 6*8/(4*15)
    assert quality.rmse == pytest.approx(np.sqrt((2.5**2 + 1 + 1 + 1) / 4))
    perfect = fit_quality("log-linear", 2, targets * 2, targets)
    assert (perfect.spearman, perfect.regret_at_1) == (1.0, 0.0)


def test_out_of_fold_predictions_never_see_their_own_row(law):
    _, _, obs = law
    quality = cross_validate(obs, "log-linear", folds=4, seed=3)
    in_sample = fit_surrogate(obs, "log-linear").predict(obs.weights)
    assert np.abs(quality.oof_predictions - obs.targets).mean() > np.abs(in_sample - obs.targets).mean()
    again = cross_validate(obs, "log-linear", folds=4, seed=3)
    np.testing.assert_array_equal(quality.oof_predictions, again.oof_predictions)


def test_degenerate_rows_are_a_one_line_error(law):
    _, _, obs = law
    few = obs.subset(np.arange(3))
    with pytest.raises(ConfigError, match="3 rows cannot be split into 5 folds"):
        cross_validate(few, "log-linear", folds=5)
    flat = Observations(obs.components, obs.weights, np.full(obs.rows, 1.2))
    with pytest.raises(ConfigError, match=r"targets: all 160 rows have the same target 1\.2"):
        fit_surrogate(flat)
    with pytest.raises(ConfigError, match="targets: all 160 rows"):
        cross_validate(flat, "lightgbm")
    broken = obs.targets.copy()
    broken[17] = np.nan
    with pytest.raises(ConfigError, match="targets: row 17 is not finite"):
        Observations(obs.components, obs.weights, broken)
    weights = obs.weights.copy()
    weights[4, 1, 0] += 0.2
    with pytest.raises(ConfigError, match="weights: row 4 phase 1 is not on the simplex"):
        Observations(obs.components, weights, obs.targets)
    with pytest.raises(ConfigError, match="needs positive targets, row 0"):
        fit_surrogate(Observations(obs.components, obs.weights, obs.targets - obs.targets[0]))
    with pytest.raises(ConfigError, match="surrogate kind"):
        fit_surrogate(obs, "cubic")  # type: ignore[arg-type]


def test_lightgbm_proposal_lands_near_an_interior_optimum(quadratic):
    best, obs, quality = quadratic
    constraints = Constraints(np.array([1.0]), np.full(4, 10.0), prior=np.full((1, 4), 0.25))
    proposal = propose(fit_surrogate(obs, "lightgbm"), constraints, quality)
    assert np.abs(proposal.weights[0] - best).sum() < 0.15
    excess = ((proposal.weights[0] - best) ** 2).sum()  # the law's target above its optimum
    assert excess < 0.1 * ((0.25 - best) ** 2).sum()  # a tenth of the prior's
