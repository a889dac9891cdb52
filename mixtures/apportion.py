"""Largest-remainder apportionment of a phase's sequences to cells, in exact arithmetic.

Each cell gets the floor or the ceiling of its exact share (so it differs from the
share by less than one), the counts sum exactly to the total, and bounds are
honoured: a lower bound of 1 keeps a small non-zero weight from being rounded
away, an upper bound keeps a cell under the epoch cap. When the bounds can't be
met without moving some count a whole sequence off its share, the result is an
error naming the cells, never a silent drop. Hand-written because no library does
bounded apportionment in exact rationals; ties break by cell name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction


@dataclass
class Infeasible(Exception):
    """`reason` is "tiny" (shares under one sequence that can't all get one) or "cap"."""

    reason: str
    cells: list[str]
    shares: dict[str, Fraction]

    def __str__(self) -> str:
        return f"{self.reason}: {', '.join(self.cells)}"


def exact_shares(weights: Mapping[str, Fraction], total: int) -> dict[str, Fraction]:
    mass = sum(weights.values(), Fraction(0))
    if mass <= 0:
        raise ValueError("weights must have a positive sum")
    return {cell: Fraction(weight) * total / mass for cell, weight in weights.items()}


def apportion(
    weights: Mapping[str, Fraction | float],
    total: int,
    lower: Mapping[str, int] | None = None,
    upper: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Integer counts summing to `total`, each floor or ceil of its share, within [lower, upper]."""
    shares = exact_shares({cell: Fraction(w) for cell, w in weights.items()}, total)
    lower = lower or {}
    upper = upper or {}
    counts: dict[str, int] = {}
    raised: list[str] = []
    over_cap: list[str] = []
    for cell, share in shares.items():
        floor = math.floor(share)
        count = floor
        if lower.get(cell, 0) > floor:
            count = math.ceil(share)
            if lower[cell] > count:
                raise Infeasible("tiny", [cell], shares)
            raised.append(cell)
        if cell in upper and count > upper[cell]:
            over_cap.append(cell)
        counts[cell] = count
    if over_cap:
        raise Infeasible("cap", sorted(over_cap), shares)
    missing = total - sum(counts.values())
    if missing < 0:
        raise Infeasible("tiny", sorted(raised, key=lambda c: (shares[c], c)), shares)
    candidates = [
        cell
        for cell, share in shares.items()
        if counts[cell] < share and counts[cell] + 1 <= upper.get(cell, counts[cell] + 1)
    ]
    if missing > len(candidates):
        blocked = sorted(cell for cell in shares if counts[cell] < shares[cell] and cell not in candidates)
        raise Infeasible("cap", blocked, shares)
    candidates.sort(key=lambda cell: (-(shares[cell] - counts[cell]), cell))
    for cell in candidates[:missing]:
        counts[cell] += 1
    return counts
