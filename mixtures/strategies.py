"""Strategies: candidate weights from a store's token counts, held under the epoch cap.

`STRATEGIES` is the registry: one `Strategy` per name, declaring the phase fields it takes (`StrategyOption`:
type and checks, validated when a revision is read, and `mix new`'s option), and its weight function. From it
come the names a revision's `strategy` accepts, the phase checks (an option of another strategy, or on a
`weights` phase, is refused naming the field), `mix new --strategy` and its options, and the table in
docs/mixtures.md (`strategy_table`). Adding a strategy is one entry here, plus a test.

Every strategy gives desired weights over its cells; `water_fill` then caps each
cell at the sequences the epoch cap still allows it and spreads the excess over
the others in proportion to their desired weights, so what a strategy writes is
valid by construction. Exact rationals throughout: the cap is never passed by a
rounding error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Annotated, Any

import pydantic

from millrace.config import StrictModel
from millrace.errors import ConfigError
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


def parse_factors(text: str | None, option: str) -> dict[str, float]:
    """`q0=0.5,q4=2` -> {"q0": 0.5, "q4": 2.0} (`mix new --tilt`, `--weight`)."""
    factors: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r}: expected KEY=NUMBER")
        try:
            factors[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"{option} {item!r}: expected KEY=NUMBER") from None
    return factors


@dataclass(frozen=True)
class StrategyOption:
    """A phase field a strategy takes: its type with its checks (pydantic, read strictly as a revision is),
    and how `mix new --<name>` reads it from text."""

    name: str
    annotation: object  # a type with its pydantic checks (`Annotated[...]`)
    help: str
    metavar: str = "X"
    parse: Callable[[str], object] = float


@dataclass(frozen=True)
class Strategy:
    """One registered strategy: its weight function gets the store's tokens per cell and the phase's options."""

    name: str
    summary: str  # one line: the docs' table and `mix new --help`
    weights: Callable[[Mapping[str, int], Mapping[str, Any]], dict[str, Fraction]]
    options: tuple[StrategyOption, ...] = ()

    @cached_property
    def model(self) -> type[StrictModel]:
        """The options as a model: each one required."""
        fields: dict[str, Any] = {option.name: (option.annotation, ...) for option in self.options}
        return pydantic.create_model(f"{self.name}-options", __base__=StrictModel, **fields)


BUCKET = Annotated[str, pydantic.StringConstraints(pattern=r"^q\d+$")]
STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy("natural", "proportional to available tokens", lambda tokens, _: natural(tokens)),
        Strategy("uniform", "equal over the cells", lambda tokens, _: uniform(tokens)),
        Strategy(
            "temperature",
            "tokens^(1/T): 1 is natural, large T tends to uniform",
            lambda tokens, options: temperature(tokens, options["temperature"]),
            (
                StrategyOption(
                    "temperature",
                    Annotated[float, pydantic.Field(ge=0.01, le=100)],  # beyond: all on one cell, or uniform
                    "T, from 0.01 to 100 (weights ∝ tokens^(1/T))",
                    "T",
                ),
            ),
        ),
        Strategy(
            "quality-tilt",
            "natural times a factor per quality bucket qN of cells named cNNqQ (1 for buckets not named)",
            lambda tokens, options: quality_tilt(tokens, options["tilt"]),
            (
                StrategyOption(
                    "tilt",
                    dict[BUCKET, Annotated[float, pydantic.Field(ge=0)]],
                    "factors per quality bucket, e.g. q0=0.5,q4=2",
                    "qN=F,...",
                    lambda text: parse_factors(text, "--tilt"),
                ),
            ),
        ),
    )
}
STRATEGY_NAMES: tuple[str, ...] = tuple(STRATEGIES)


def option_names() -> dict[str, str]:
    """Every strategy option's phase field -> the strategy that takes it."""
    return {option.name: strategy.name for strategy in STRATEGIES.values() for option in strategy.options}


def strategy_table() -> str:
    """The registry as the Markdown table docs/mixtures.md shows (tests/mixtures/test_strategies.py compares)."""
    rows = ["| strategy | weights | phase fields |", "|---|---|---|"]
    for strategy in STRATEGIES.values():
        fields = "; ".join(f"`{option.name}`: {option.help}" for option in strategy.options) or "none"
        rows.append(f"| `{strategy.name}` | {strategy.summary} | {fields} |")
    return "\n".join(rows)


def desired_weights(strategy: str, tokens: Mapping[str, int], options: Mapping[str, Any]) -> dict[str, Fraction]:
    if not tokens:
        raise StrategyError("no non-empty cell to weight")
    if strategy not in STRATEGIES:
        raise StrategyError(f"unknown strategy {strategy!r}")
    return STRATEGIES[strategy].weights(tokens, options)


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
