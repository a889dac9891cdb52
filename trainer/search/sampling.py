"""Mixtures for a proxy swarm, drawn around the prior as RegMix draws them.

Each draw is a Dirichlet around the prior's shares, its concentration scaled per draw (small scales give
sparse, far-off mixtures; large ones stay near the prior), so the swarm covers both the neighbourhood of
the prior and the corners a surrogate must learn. Components with a zero prior share stay at zero. The
epoch cap reaches the draws as per-component upper bounds. A draw outside them is drawn again, as RegMix
rejects it (up to `REDRAWS` times), and only one still outside is projected (Euclidean) onto
{0 <= w <= max_weight, sum w = 1}, so no proxy trains a mixture the full run could not afford. Projecting at
once would put every far draw on the same face of the bounds: with two components and a 60% cap, a default
swarm of four proxies trained one mixture four times.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from millrace.errors import ConfigError

CONCENTRATIONS = (0.1, 0.3, 1.0, 3.0, 5.0)
SIMPLEX_TOLERANCE = 1e-6
REDRAWS = 64  # rounds of redrawing the draws outside the bounds before the rest are projected


def check_prior(prior: np.ndarray, name: str = "prior") -> np.ndarray:
    """`prior` as a float (phases, components) array whose phases lie on the simplex, or a one-line error."""
    array = np.asarray(prior, dtype=float)
    if array.ndim != 2 or array.shape[1] == 0:
        raise ConfigError(f"{name}: expected (phases, components) weights, got shape {array.shape}")
    if not np.isfinite(array).all() or (array < 0).any():
        raise ConfigError(f"{name}: weights must be finite and non-negative")
    sums = array.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > SIMPLEX_TOLERANCE)
    if bad.size:
        raise ConfigError(f"{name}: phase {bad[0]} weights sum to {sums[bad[0]]:.6g}, not 1")
    return array


def project_capped_simplex(points: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of `points` onto {0 <= w <= upper, sum w = 1}.

    The projection is clip(v - tau, 0, upper) for the tau that makes the row sum to one; the sum falls
    monotonically in tau, so tau is found by bisection for all rows at once."""
    points = np.atleast_2d(np.asarray(points, dtype=float))
    upper = np.broadcast_to(np.asarray(upper, dtype=float), points.shape)
    if (upper.sum(axis=-1) < 1.0 - SIMPLEX_TOLERANCE).any():
        raise ConfigError("max_weight: a phase's upper bounds sum to less than 1, so no mixture fits under them")
    low = (points - upper).min(axis=-1, keepdims=True) - 1.0
    high = points.max(axis=-1, keepdims=True)
    for _ in range(100):
        middle = 0.5 * (low + high)
        above = np.clip(points - middle, 0.0, upper).sum(axis=-1, keepdims=True) > 1.0
        low = np.where(above, middle, low)
        high = np.where(above, high, middle)
    projected = np.clip(points - 0.5 * (low + high), 0.0, upper)
    shares: np.ndarray = projected / projected.sum(axis=-1, keepdims=True)
    return shares


def _dirichlet(rng: np.random.Generator, shares: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """(n, phases, components) Dirichlet draws with mean `shares` and concentration `scales[i]` times the
    number of sampled components (a scale of 1 is as spread as a flat Dirichlet); zero shares stay zero."""
    support = (shares > 0).sum(axis=1, keepdims=True)
    alpha = np.maximum(shares * support * scales[:, None, None], 1e-3) * (shares > 0)
    draws = rng.gamma(alpha)
    totals = draws.sum(axis=2, keepdims=True)
    for row, phase in np.argwhere(totals[..., 0] <= 0):  # every gamma underflowed: the sparsest draw
        draws[row, phase, rng.choice(shares.shape[1], p=shares[phase])] = 1.0
    normalised: np.ndarray = draws / draws.sum(axis=2, keepdims=True)
    return normalised


def sample_mixtures(
    prior: np.ndarray,
    n: int,
    seed: int,
    *,
    concentrations: Sequence[float] = CONCENTRATIONS,
    max_weight: np.ndarray | None = None,
) -> np.ndarray:
    """(n, phases, components) mixtures from a Dirichlet around `prior` (phases, components) (RegMix),
    concentration scaled per draw; max_weight (phases, components): the epoch cap as weight bounds (draws are
    projected onto {0 <= w <= max_weight, sum w = 1})."""
    shares = check_prior(prior)
    if n < 0:
        raise ConfigError(f"n: the number of mixtures must be >= 0, got {n}")
    scales = np.asarray(concentrations, dtype=float)
    if scales.size == 0 or not np.isfinite(scales).all() or (scales <= 0).any():
        raise ConfigError(f"concentrations: expected positive scales, got {tuple(concentrations)}")
    rng = np.random.default_rng(seed)
    draws = _dirichlet(rng, shares, rng.choice(scales, size=n))
    if max_weight is None:
        return draws
    upper = np.asarray(max_weight, dtype=float)
    if upper.shape != shares.shape:
        raise ConfigError(f"max_weight: expected shape {shares.shape}, got {upper.shape}")
    upper = np.where(shares > 0, upper, 0.0)  # the projection must not move weight onto unsampled components
    if upper.sum(axis=1).min() >= 1.0 - SIMPLEX_TOLERANCE:  # else the projection below says why nothing fits
        for _ in range(REDRAWS):
            outside = np.flatnonzero((draws > upper).any(axis=(1, 2)))
            if not outside.size:
                break
            draws[outside] = _dirichlet(rng, shares, rng.choice(scales, size=outside.size))
    return project_capped_simplex(draws.reshape(-1, shares.shape[1]), np.tile(upper, (n, 1))).reshape(draws.shape)
