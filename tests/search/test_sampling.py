"""Swarm sampling and seed statistics: draws around the prior that respect the epoch cap's bounds, and the
Welch interval a validation reports."""

import numpy as np
import pytest
from scipy.stats import ttest_ind

from millrace.errors import ConfigError
from trainer.search.sampling import project_capped_simplex, sample_mixtures
from trainer.search.seeds import compare_seeds

PRIOR = np.array([[0.5, 0.3, 0.15, 0.05, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])


def test_draws_are_mixtures_around_the_prior_and_repeat_by_seed():
    draws = sample_mixtures(PRIOR, 400, seed=3)
    assert draws.shape == (400, 2, 5)
    np.testing.assert_allclose(draws.sum(axis=2), 1.0)
    assert (draws >= 0).all() and (draws[:, 0, 4] == 0).all()  # a zero prior share is never sampled
    np.testing.assert_array_equal(draws, sample_mixtures(PRIOR, 400, seed=3))
    assert not np.array_equal(draws, sample_mixtures(PRIOR, 400, seed=4))
    near = sample_mixtures(PRIOR, 2000, seed=1, concentrations=(5.0,))
    np.testing.assert_allclose(near.mean(axis=0), PRIOR, atol=0.01)  # the Dirichlet's mean is the prior


def test_the_concentration_scale_sets_how_far_draws_stray():
    def spread(scale):
        draws = sample_mixtures(PRIOR, 500, seed=0, concentrations=(scale,))
        return np.abs(draws - PRIOR).sum(axis=2).mean()

    far, middle, near = spread(0.1), spread(1.0), spread(5.0)
    assert far > 1.5 * middle and middle > 1.5 * near and near < 0.4


def test_max_weight_bounds_every_draw():
    bounds = np.full(PRIOR.shape, 0.35)
    draws = sample_mixtures(PRIOR, 300, seed=2, concentrations=(0.1, 1.0), max_weight=bounds)
    assert draws.max() <= 0.35 + 1e-9
    np.testing.assert_allclose(draws.sum(axis=2), 1.0)
    assert (draws[:, 0, 4] == 0).all()


def test_the_projection_is_the_nearest_point_of_the_capped_simplex():
    rng = np.random.default_rng(0)
    upper = np.array([0.5, 0.4, 0.3, 0.2, 0.1])
    points = rng.normal(0.2, 0.3, (50, 5))
    projected = project_capped_simplex(points, upper)
    feasible = project_capped_simplex(rng.dirichlet(np.ones(5), 200), upper)
    for point, nearest in zip(points, projected):
        # the projection's optimality condition: every feasible u lies at an obtuse angle from it
        assert ((feasible - nearest) @ (point - nearest)).max() <= 1e-9
    np.testing.assert_allclose(project_capped_simplex(feasible, upper), feasible, atol=1e-12)


def test_bad_priors_and_bounds_name_the_field():
    with pytest.raises(ConfigError, match=r"prior: phase 1 weights sum to 0\.9"):
        sample_mixtures(np.array([[1.0, 0.0], [0.5, 0.4]]), 3, seed=0)
    with pytest.raises(ConfigError, match="upper bounds sum to less than 1"):
        sample_mixtures(PRIOR, 3, seed=0, max_weight=np.full(PRIOR.shape, 0.1))
    with pytest.raises(ConfigError, match="concentrations"):
        sample_mixtures(PRIOR, 3, seed=0, concentrations=(0.0,))


def test_welch_interval_matches_scipys_welch_test():
    a, b = [1.012, 1.018, 1.009, 1.015], [1.021, 1.030, 1.019]
    ours = compare_seeds(a, b, confidence=0.9)
    theirs = ttest_ind(a, b, equal_var=False).confidence_interval(0.9)
    assert ours.difference == pytest.approx(np.mean(a) - np.mean(b))
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high))
    assert ours.distinguishable and (ours.n_a, ours.n_b) == (4, 3)


def test_overlapping_seeds_are_not_distinguishable():
    noise = compare_seeds([1.010, 1.016, 1.004], [1.012, 1.006, 1.015])
    assert not noise.distinguishable and noise.low < 0 < noise.high
    exact = compare_seeds([1.0, 1.0], [1.0, 1.0])
    assert (exact.low, exact.high, exact.distinguishable) == (0.0, 0.0, False)


def test_too_few_or_broken_seeds_are_an_error():
    with pytest.raises(ConfigError, match="a: a seed interval needs at least 2 seeds, got 1"):
        compare_seeds([1.0], [1.0, 2.0])
    with pytest.raises(ConfigError, match="b: seed 1 is not finite"):
        compare_seeds([1.0, 1.1], [1.0, float("nan")])
