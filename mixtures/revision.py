"""Revision files: a mixture's weights per phase, as a human-edited TOML file.

A revision is named and immutable: once built, a changed file under the same
name is refused (write a new revision instead). A complete example:

    # mixtures/revisions/default/quality-tilt.toml
    mixture = "default"            # the mixture this revision belongs to
    revision = "quality-tilt"      # its name; the file is <revision>.toml
    description = "natural weights, tilted towards the high-quality buckets"
    seed = 1234                    # keys the loader's per-cell permutations
    seq_len = 256                  # tokens per sample (a sample reads seq_len + 1)
    global_batch = 16              # sequences per optimizer step, all ranks together
    epoch_cap = 8                  # no cell is drawn more than 8 times over, across phases
    normalize = false              # optional; true rescales weights that don't sum to 1

    [store]
    name = "local"                 # the token store under $MILLRACE_HOME/stores/
    # version = "2026.11.30"       # optional: without it, the newest version is used
    # manifest_hash = "sha256:…"   # optional: refuse a store whose store.json differs

    [[phases]]                     # phases run in order; each is a token budget
    name = "main"
    tokens = 1_048_576
    strategy = "quality-tilt"      # weights computed from the store's stats at build
    tilt = { q0 = 0.5, q1 = 0.75, q3 = 1.5, q4 = 2.0 }

    [[phases]]
    name = "cooldown"
    tokens = 196_608
    [phases.weights]               # or explicit weights over cells and patterns
    "c*q4" = 0.75                  # every q4 cell, shared by available tokens
    "c03q*" = 0.25                 # every bucket of domain 3

A phase has either `weights` or `strategy`:
- `weights`: a table from cell names or fnmatch patterns (`*`, `?`, `[..]`) to
  non-negative finite weights. A pattern's weight is shared among the non-empty
  cells it matches in proportion to their available tokens; a cell named by
  several keys gets the sum. The expanded weights must sum to 1 within 1e-9
  unless `normalize = true`: a sum of 0.7 is a typo to report, not to fix.
- `strategy`: a name in `mixtures.strategies.STRATEGIES` (the table in docs/mixtures.md: `natural`,
  `uniform`, `temperature` with `temperature`, `quality-tilt` with `tilt`, ...), with the phase fields that
  strategy takes and no other, optionally restricted to the cells matching `cells` (a list of names or
  patterns, e.g. `["c*q3", "c*q4"]` for a cooldown on the top buckets). Strategy weights are water-filled
  under the epoch cap: a cell whose share would pass the cap is held at it and the rest spread over the
  others, so a strategy phase is valid by construction.

A revision may continue another (the reference run's mid-run swap): the steps before
`at_step` are exactly the parent's, and this revision's phases count from `at_step`.

    [continues]
    revision = "natural"           # the parent, a revision of the same mixture
    at_step = 200                  # the first step drawn from this revision's weights
    # manifest_hash = "sha256:…"   # optional: refuse a parent whose built manifest differs

The parent's store (the same version unless `store.version` names another, which is an
error), tokenizer, seed, seq_len and global_batch must be this revision's too; the epoch
cap and every cell's epochs count the parent's draws before `at_step` (`mixtures.lineage`).

A phase's `tokens` becomes `round(tokens / (seq_len * global_batch))` steps (at
least one) of `global_batch` sequences; a cell's epochs are the sequences drawn
from it across all phases divided by the sequences it holds,
`(available_tokens - 1) // seq_len`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pydantic
import pydantic_core
import tomli_w

from millrace.artifacts import content_hash
from millrace.config import StrictModel, parse_document
from millrace.errors import ConfigError, field_name, first_validation_error
from millrace.names import NAME_PATTERN
from mixtures.strategies import STRATEGIES, option_names


class StoreSpec(StrictModel):
    name: str = pydantic.Field(pattern=NAME_PATTERN)
    version: str | None = pydantic.Field(default=None, pattern=NAME_PATTERN)
    manifest_hash: str | None = pydantic.Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")


class PhaseSpec(StrictModel):
    """A phase; its strategy's options (`temperature`, `tilt`, ...) are the extra fields, each checked against
    the registry (`mixtures.strategies.STRATEGIES`) and kept as its model reads it."""

    model_config = pydantic.ConfigDict(extra="allow")

    name: str = pydantic.Field(pattern=NAME_PATTERN)
    tokens: int = pydantic.Field(gt=0)
    weights: dict[str, float] | None = None
    strategy: str | None = None
    cells: list[str] | None = None

    @pydantic.field_validator("strategy")
    @classmethod
    def _registered(cls, name: str | None) -> str | None:
        if name is not None and name not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r} (one of {', '.join(STRATEGIES)})")
        return name

    @property
    def options(self) -> dict[str, object]:
        """The strategy's options as the phase gives them."""
        return dict(self.__pydantic_extra__ or {})

    @pydantic.model_validator(mode="after")
    def _strategy_options(self) -> PhaseSpec:
        """Each extra field is an option of this phase's strategy, valid for it; anything else is refused there."""
        given, owners = self.options, option_names()
        errors: list[Any] = []
        for field, value in given.items():
            owner = owners.get(field)
            if owner is None:
                errors.append({"type": "extra_forbidden", "loc": (field,), "input": value})
            elif self.strategy != owner:
                weights = " (this phase has weights)" if self.weights is not None else ""
                where = f"strategy {owner!r}" if self.strategy else f"a strategy phase{weights}"
                errors.append(refused(field, value, f"only for {where}"))
        if not errors and self.strategy is not None:
            try:
                checked = STRATEGIES[self.strategy].model.model_validate(given, strict=True)
            except pydantic.ValidationError as exc:
                errors = list(exc.errors())
            else:
                (self.__pydantic_extra__ or {}).update(checked.model_dump())
        if errors:
            raise pydantic_core.ValidationError.from_exception_data("PhaseSpec", errors)
        return self


def refused(field: str, value: object, message: str) -> pydantic_core.InitErrorDetails:
    """A validation error at `field` saying `message`."""
    return {"type": pydantic_core.PydanticCustomError("strategy_option", message), "loc": (field,), "input": value}


class ContinuesSpec(StrictModel):
    revision: str = pydantic.Field(pattern=NAME_PATTERN)
    at_step: int = pydantic.Field(ge=1)
    manifest_hash: str | None = pydantic.Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")


class Revision(StrictModel):
    mixture: str = pydantic.Field(pattern=NAME_PATTERN)
    revision: str = pydantic.Field(pattern=NAME_PATTERN)
    description: str = ""
    store: StoreSpec
    seed: int = pydantic.Field(ge=0, lt=1 << 63)
    seq_len: int = pydantic.Field(gt=0)
    global_batch: int = pydantic.Field(gt=0)
    epoch_cap: float = pydantic.Field(gt=0)
    normalize: bool = False
    continues: ContinuesSpec | None = None
    phases: list[PhaseSpec] = pydantic.Field(min_length=1)

    @property
    def key(self) -> str:
        return f"{self.mixture}/{self.revision}"

    def hash(self) -> str:
        """Hash of the revision's meaning: comments, layout, the description and options left at their
        defaults don't change it (so an option added to the format later keeps existing hashes)."""
        return content_hash(self.model_dump(mode="json", exclude_defaults=True, exclude={"description"}))


def describe(source: str, data: object, exc: pydantic.ValidationError) -> str:
    """One line naming file, revision, phase (by name), field and, for weights, the cell."""
    where = [source]
    if isinstance(data, dict) and isinstance(data.get("mixture"), str) and isinstance(data.get("revision"), str):
        where.append(f"revision {data['mixture']}/{data['revision']}")

    def name(loc: Sequence[int | str]) -> str:
        loc = list(loc)
        phase = []
        if len(loc) >= 2 and loc[0] == "phases" and isinstance(loc[1], int):
            phases = data.get("phases") if isinstance(data, dict) else None
            index = loc[1]
            named = phases[index].get("name") if isinstance(phases, list) and isinstance(phases[index], dict) else None
            phase = [f"phase {named!r}" if isinstance(named, str) else f"phase #{index + 1}"]
            loc = loc[2:]
        if len(loc) >= 2 and loc[0] in ("weights", "tilt"):
            field = f"field '{loc[0]}' {'cell' if loc[0] == 'weights' else 'bucket'} {loc[1]!r}"
        else:
            field = field_name(loc)
        return ": ".join([*where, *phase, field])

    return first_validation_error(exc, name)


def check_phases(revision: Revision, source: str) -> None:
    """The checks that need no store: phase names, weights vs strategy, signs, sums."""
    prefix = f"{source}: revision {revision.key}"
    if revision.continues is not None and revision.continues.revision == revision.revision:
        raise ConfigError(f"{prefix}: field 'continues.revision': a revision cannot continue itself")
    seen: set[str] = set()
    for phase in revision.phases:
        where = f"{prefix}: phase {phase.name!r}"
        if phase.name in seen:
            raise ConfigError(f"{where}: field 'name': phase name used twice")
        seen.add(phase.name)
        if (phase.weights is None) == (phase.strategy is None):
            raise ConfigError(f"{where}: give exactly one of 'weights' and 'strategy'")
        if phase.weights is not None:
            _check_weights(phase, where, revision.normalize)
            continue
        if phase.cells is not None and not phase.cells:
            raise ConfigError(f"{where}: field 'cells': empty list")


def _check_weights(phase: PhaseSpec, where: str, normalize: bool) -> None:
    """A weights phase: no `cells`, no negative weight, not all zero, and summing to 1 unless normalized."""
    weights = phase.weights or {}
    if phase.cells is not None:
        raise ConfigError(f"{where}: field 'cells': only for a strategy phase (this phase has weights)")
    if not weights:
        raise ConfigError(f"{where}: field 'weights': empty")
    for cell, weight in weights.items():
        if weight < 0:
            raise ConfigError(f"{where}: field 'weights' cell {cell!r}: negative weight {weight!r}")
    total = math.fsum(weights.values())
    if total <= 0:
        raise ConfigError(f"{where}: field 'weights': every weight is zero")
    if not normalize and abs(total - 1.0) > 1e-9:
        raise ConfigError(
            f"{where}: field 'weights': weights sum to {total:.12g}, not 1 within 1e-9 "
            "(fix them, or set normalize = true to rescale)"
        )


def parse_revision(data: object, source: str) -> Revision:
    try:
        revision = Revision.model_validate(data, strict=True)  # an artifact: strict (`StrictModel`)
    except pydantic.ValidationError as exc:
        raise ConfigError(describe(source, data, exc)) from None
    check_phases(revision, source)
    return revision


def load_revision(path: Path | str) -> Revision:
    """Parse and check a revision file; every problem is a one-line ConfigError naming it."""
    path = Path(path)
    return parse_revision(parse_document(path), str(path))


def revision_to_toml(revision: Revision, header: str = "") -> str:
    """The file form of a revision: phases last, weights as a table per phase."""
    data = revision.model_dump(mode="json", exclude_none=True)
    if not data.get("description"):
        data.pop("description", None)
    if not data.get("normalize"):
        data.pop("normalize", None)
    ordered: dict[str, object] = {
        k: data[k]
        for k in (
            "mixture",
            "revision",
            "description",
            "seed",
            "seq_len",
            "global_batch",
            "epoch_cap",
            "normalize",
            "store",
            "continues",
            "phases",
        )
        if k in data
    }
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + tomli_w.dumps(ordered)
