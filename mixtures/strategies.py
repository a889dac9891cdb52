"""Strategies: candidate weights from a store's token counts, held under the epoch cap.

Every strategy gives desired weights over its cells; `water_fill` then caps each
cell at the sequences the epoch cap still allows it and spreads the excess over
the others in proportion to their desired weights, so what a strategy writes is
valid by construction. Exact rationals throughout: the cap is never passed by a
rounding error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from mixtures.cells import bucket_of


class StrategyError(ValueError):
    """A strategy can't be applied (no cells, no buckets, budget beyond every cap)."""


def natural(tokens: Mapping[str, int]) -> dict[str, Fraction]:
    return {cell: Fraction(count) for cell, count in tokens.items()}


def uniform(tokens: Mapping[str, int]) -> dict[str, Fraction]:
    return {cell: Fraction(1) for cell in tokens}


def temperature(tokens: Mapping[str, int], value: float) -> dict[str, Fraction]:
    """tokens^(1/T): T=1 is natural, large T tends to uniform. Taken relative to the largest cell, in
    logs (1e12 tokens to the power 1/0.01 overflows a float; the ratio (count/largest)^(1/T) never does)."""
    largest = math.log(max(*tokens.values(), 1))
    return {
        cell: Fraction(math.exp((math.log(count) - largest) / value)) if count > 0 else Fraction(0)
        for cell, count in tokens.items()
    }


def quality_tilt(tokens: Mapping[str, int], tilt: Mapping[str, float]) -> dict[str, Fraction]:
    """Natural weights times a factor per quality bucket (1 for buckets not named)."""
    buckets = {cell: bucket_of(cell) for cell in tokens}
    unbucketed = sorted(cell for cell, bucket in buckets.items() if bucket is None)
    if unbucketed:
        raise StrategyError(f"quality-tilt needs cells named cNNqQ; {unbucketed[0]!r} has no quality bucket")
    named = {cell: bucket for cell, bucket in buckets.items() if bucket is not None}
    unknown = sorted(set(tilt) - set(buckets.values()))
    if unknown:
        raise StrategyError(f"tilt names bucket {unknown[0]!r}, which no cell has")
    return {cell: Fraction(count) * Fraction(tilt.get(named[cell], 1.0)) for cell, count in tokens.items()}


def desired_weights(
    strategy: str,
    tokens: Mapping[str, int],
    *,
    temperature_value: float | None = None,
    tilt: Mapping[str, float] | None = None,
) -> dict[str, Fraction]:
    if not tokens:
        raise StrategyError("no non-empty cell to weight")
    if strategy == "natural":
        return natural(tokens)
    if strategy == "uniform":
        return uniform(tokens)
    if strategy == "temperature":
        if temperature_value is None:
            raise StrategyError("temperature strategy needs a temperature")
        return temperature(tokens, temperature_value)
    if strategy == "quality-tilt":
        return quality_tilt(tokens, tilt or {})
    raise StrategyError(f"unknown strategy {strategy!r}")


def water_fill(desired: Mapping[str, Fraction], capacity: Mapping[str, int], total: int) -> dict[str, Fraction]:
    """Weights on the simplex with weight * total <= capacity per cell, closest to `desired` in ratio.

    Cells saturate in order of capacity / desired; the rest share what is left in
    proportion to their desired weights.
    """
    active = {cell: Fraction(w) for cell, w in desired.items() if w > 0}
    if not active:
        raise StrategyError("every desired weight is zero")
    room = sum(capacity[cell] for cell in active)
    if room < total:
        raise StrategyError(
            f"{total} sequences exceed the {room} that the epoch cap leaves these cells; "
            "lower the budget or raise the cap"
        )
    sequences: dict[str, Fraction] = {cell: Fraction(0) for cell in desired}
    remaining = Fraction(total)
    mass = sum(active.values(), Fraction(0))
    order = sorted(active, key=lambda cell: (Fraction(capacity[cell]) / active[cell], cell))
    for position, cell in enumerate(order):
        fair = remaining * active[cell] / mass
        if capacity[cell] < fair:
            sequences[cell] = Fraction(capacity[cell])
            remaining -= capacity[cell]
            mass -= active[cell]
            continue
        for other in order[position:]:
            sequences[other] = remaining * active[other] / mass
        break
    return {cell: count / total for cell, count in sequences.items()}
