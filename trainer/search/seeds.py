"""Is a measured difference between two mixtures more than seed noise?

Identical small runs differ by seed (about 0.004 in loss on the reference ladder), so a proposal is judged by
several seeds of each mixture from the same checkpoint and budget: Welch's t interval for the difference of
the means (unequal variances, Welch-Satterthwaite degrees of freedom). When the interval holds zero the
difference is not distinguishable from noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from millrace.errors import ConfigError


@dataclass(frozen=True)
class SeedComparison:
    difference: float  # mean(a) - mean(b)
    low: float
    high: float
    distinguishable: bool  # the interval excludes 0
    n_a: int
    n_b: int


def _values(name: str, values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size < 2:
        raise ConfigError(f"{name}: a seed interval needs at least 2 seeds, got {array.size}")
    if not np.isfinite(array).all():
        raise ConfigError(f"{name}: seed {int(np.flatnonzero(~np.isfinite(array))[0])} is not finite")
    return array


def compare_seeds(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> SeedComparison:
    """Welch t interval for mean(a) - mean(b); distinguishable when the interval excludes 0."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence: must lie in (0, 1), got {confidence}")
    x, y = _values("a", a), _values("b", b)
    difference = float(x.mean() - y.mean())
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    error = math.sqrt(va + vb)
    if error == 0.0:  # every seed equal on both sides: no noise to speak of
        return SeedComparison(difference, difference, difference, difference != 0.0, x.size, y.size)
    freedom = (va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))
    half = float(student_t.ppf(0.5 + confidence / 2, freedom)) * error
    low, high = difference - half, difference + half
    return SeedComparison(difference, low, high, low > 0.0 or high < 0.0, x.size, y.size)
