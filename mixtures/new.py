"""Write a new revision file from a store's stats with a strategy (`mix new`).

By default the file holds concrete per-cell weights, computed now and pinned to
the store version and manifest hash they were computed from; with `symbolic`
it keeps the strategy, to be resolved against whatever store version a build
finds (how the shipped revisions of the embedded corpus are written).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pydantic
from pydantic_core import PydanticCustomError

from millrace.artifacts import atomic_write_text
from millrace.config import StrictModel
from millrace.errors import ConfigError, first_validation_error
from millrace.home import Home
from mixtures.catalog import load_named
from mixtures.manifest import BuiltManifest
from mixtures.resolve import open_store, resolve_revision
from mixtures.revision import Revision, StoreSpec, load_revision, parse_revision, revision_to_toml
from mixtures.strategies import STRATEGIES, STRATEGY_NAMES
from pipeline.store.format import Store

log = logging.getLogger(__name__)

STRATEGY_CHOICES = (*STRATEGY_NAMES, "explicit")
SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9, "T": 10**12}


def parse_tokens(text: str) -> int:
    """`15T`, `3.75T`, `500M`, `1_048_576` -> an integer token count."""
    cleaned = text.strip().replace("_", "").upper()
    suffix = cleaned[-1:] if cleaned[-1:] in SUFFIXES and cleaned[-1:] else ""
    try:
        value = Decimal(cleaned[: len(cleaned) - len(suffix)]) * SUFFIXES[suffix]
    except InvalidOperation:
        raise ConfigError(f"token budget {text!r}: expected a number like 1048576, 500M or 3.75T") from None
    if value <= 0 or value != value.to_integral_value():
        raise ConfigError(f"token budget {text!r}: must be a positive whole number of tokens")
    return int(value)


def parse_phase(text: str, default_strategy: str) -> dict[str, object]:
    """`NAME:TOKENS[:STRATEGY[@PATTERN,PATTERN]]`, e.g. `cooldown:3.75T:uniform@c*q3,c*q4`."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ConfigError(f"--phase {text!r}: expected NAME:TOKENS[:STRATEGY[@PATTERNS]]")
    strategy, _, cells = (parts[2] if len(parts) == 3 else default_strategy).partition("@")
    if strategy not in STRATEGY_CHOICES:
        raise ConfigError(f"--phase {text!r}: unknown strategy {strategy!r} (one of {', '.join(STRATEGY_CHOICES)})")
    phase: dict[str, object] = {"name": parts[0], "tokens": parse_tokens(parts[1]), "strategy": strategy}
    if cells:
        phase["cells"] = [c for c in cells.split(",") if c]
    return phase


DEFAULT_FRAME = {"epoch_cap": 8.0, "seq_len": 256, "global_batch": 16, "seed": 1234}


class NewRevision(StrictModel):
    """What `mix new` is asked to write: revision `revision` of `mixture`, from store `NAME[/VERSION]`'s stats.

    `phases` are `NAME:TOKENS[:STRATEGY[@PATTERNS]]` strings (default: one phase "main" of the store's total
    tokens, or for a revision that `continues` a parent from `at_step`, of the parent's tokens left after it);
    a phase that names no strategy takes `strategy`. Epoch cap, seq_len, global batch and seed default to the
    parent's, else 8, 256, 16, 1234. `options` are strategy options by phase field (`{"temperature": 2.0}`),
    given to the phases whose strategy takes them; `weights` the explicit strategy's. `symbolic` keeps the
    strategies in the file; `out` writes it elsewhere than the home's mixtures directory."""

    mixture: str
    revision: str
    store: str | None = None  # NAME[/VERSION]; None: the parent's, with `continues`
    strategy: str = "natural"
    phases: list[str] = []
    epoch_cap: float | None = pydantic.Field(None, gt=0)
    seq_len: int | None = pydantic.Field(None, ge=1)
    global_batch: int | None = pydantic.Field(None, ge=1)
    seed: int | None = pydantic.Field(None, ge=0)
    options: dict[str, object] = {}  # passed on to the phases, whose strategies check them
    weights: dict[str, float] | None = None
    out: Path | None = None
    symbolic: bool = False
    description: str = ""
    continues: str | None = None
    at_step: int | None = pydantic.Field(None, ge=1)

    @pydantic.field_validator("strategy")
    @classmethod
    def _known_strategy(cls, strategy: str) -> str:
        if strategy not in STRATEGY_CHOICES:
            raise PydanticCustomError("strategy", f"unknown strategy (one of {', '.join(STRATEGY_CHOICES)})")
        return strategy

    @pydantic.model_validator(mode="after")
    def _lineage_pair(self) -> NewRevision:
        if (self.continues is None) != (self.at_step is None):
            raise PydanticCustomError(
                "lineage",
                "--continues and --at-step go together: the parent revision and the first step of the new one",
            )
        return self

    def frame_numbers(self) -> dict[str, float | None]:
        """The frame numbers given (None: the parent's or the default)."""
        return {
            "epoch_cap": self.epoch_cap,
            "seq_len": self.seq_len,
            "global_batch": self.global_batch,
            "seed": self.seed,
        }


def option_name(loc: Sequence[int | str]) -> str:
    """A `NewRevision` field as `mix new` spells it: `seq_len` -> `--seq-len`."""
    return f"--{str(loc[0]).replace('_', '-')}" if loc else "mix new"


@dataclass(frozen=True)
class Frame:
    """What a new revision is written against: its store, its frame numbers, its parent if any."""

    store: Store
    spec: StoreSpec
    numbers: dict[str, float]  # epoch_cap, seq_len, global_batch, seed (DEFAULT_FRAME's keys)
    default_tokens: int  # the one phase written when none is given
    continues: dict[str, object] | None  # the [continues] table


def frame_of(home: Home, request: NewRevision) -> Frame:
    """The store and numbers from the request; a child takes its parent's store and numbers where not given."""
    store, continues, at_step, given = request.store, request.continues, request.at_step, request.frame_numbers()
    parent = None
    if continues is not None:
        loaded, path = load_named(home, request.mixture, continues)
        parent, _ = resolve_revision(home, loaded, str(path))
        store = store or f"{parent.store.name}/{parent.store.version}"
    if store is None:
        raise ConfigError("--store is required (or --continues, whose store the new revision keeps)")
    name, _, version = store.partition("/")
    try:
        spec = StoreSpec.model_validate({"name": name, **({"version": version} if version else {})})
    except pydantic.ValidationError as exc:
        raise ConfigError(f"--store {store!r}: expected NAME[/VERSION] ({first_validation_error(exc)})") from None
    opened = open_store(home, spec, f"--store {store}")
    inherited: dict[str, float] = (
        {k: getattr(parent, k) for k in DEFAULT_FRAME} if parent is not None else DEFAULT_FRAME
    )
    numbers = {k: inherited[k] if (value := given.get(k)) is None else value for k in DEFAULT_FRAME}
    numbers["epoch_cap"] = float(numbers["epoch_cap"])
    if parent is None:
        return Frame(opened, spec, numbers, sum(c.tokens for c in opened.manifest.cells.values()), None)
    assert at_step is not None
    left = max(1, parent.total_steps - at_step) * parent.global_batch * parent.seq_len
    return Frame(opened, spec, numbers, left, {"revision": continues, "at_step": at_step})


def phase_spec(
    phase: dict[str, object], weights: Mapping[str, float] | None, options: Mapping[str, object]
) -> dict[str, object]:
    """A parsed --phase with its strategy's options (`STRATEGIES`) filled in from the command's."""
    chosen = str(phase.pop("strategy"))  # `parse_phase` checked it is a strategy name
    if chosen == "explicit":
        if not weights:
            raise ConfigError(f"--phase {phase['name']!r}: strategy 'explicit' needs --weight CELL=W options")
        if "cells" in phase:
            raise ConfigError(f"--phase {phase['name']!r}: strategy 'explicit' takes no @PATTERNS (use --weight)")
        phase["weights"] = dict(weights)
        return phase
    phase["strategy"] = chosen
    for option in STRATEGIES[chosen].options:
        if options.get(option.name) is None:
            raise ConfigError(
                f"--phase {phase['name']!r}: strategy {chosen!r} needs --{option.name.replace('_', '-')} "
                f"{option.metavar} ({option.help})"
            )
        phase[option.name] = options[option.name]
    return phase


def new_revision(home: Home, request: NewRevision) -> Path:
    """Write the requested revision file (`NewRevision`) from its store's stats; returns the file's path.
    Refuses to overwrite a different file."""
    mixture, revision = request.mixture, request.revision
    frame = frame_of(home, request)
    opened = frame.store
    phases = request.phases or [f"main:{frame.default_tokens}"]
    requested = [parse_phase(text, request.strategy) for text in phases]
    phase_specs = [phase_spec(phase, request.weights, request.options) for phase in requested]
    source = f"mix new {mixture} --revision {revision}"
    data: dict[str, object] = {
        "mixture": mixture,
        "revision": revision,
        "description": request.description,
        **frame.numbers,
        "store": frame.spec.model_dump(exclude_none=True),
        "phases": phase_specs,
    }
    if frame.continues is not None:
        data["continues"] = dict(frame.continues)
    symbolic_revision = parse_revision(data, source)
    manifest, _ = resolve_revision(home, symbolic_revision, source)
    if request.symbolic:
        written = symbolic_revision
    else:
        written = parse_revision(_pinned(data, frame, manifest), source)
        resolve_revision(home, written, source)
    header = _header(mixture, opened, phase_specs, request.continues, request.at_step)
    target = request.out if request.out is not None else home.revisions / mixture / f"{revision}.toml"
    return _write_unless_different(target, written, header)


def _pinned(data: dict[str, object], frame: Frame, manifest: BuiltManifest) -> dict[str, object]:
    """`data` with the store pinned by its manifest hash and each phase's weights as resolved now."""
    opened = frame.store
    data["store"] = {"name": opened.name, "version": opened.version, "manifest_hash": opened.manifest_hash}
    if manifest.ancestors and frame.continues is not None:
        data["continues"] = frame.continues | {"manifest_hash": manifest.ancestors[0].manifest_hash}
    data["phases"] = [
        {
            "name": built.name,
            "tokens": built.token_budget,
            "weights": {cell: w for cell, w in built.declared_weights.items() if w > 0},
        }
        for built in manifest.phases
        if built.revision is None
    ]
    return data


def _header(
    mixture: str, opened: Store, phase_specs: list[dict[str, object]], continues: str | None, at_step: int | None
) -> str:
    """The comment a revision file opens with: who wrote it, when, from what."""
    strategies = ", ".join(f"{p['name']}: {p.get('strategy', 'explicit')}" for p in phase_specs)
    lineage = (
        f"Continues {mixture}/{continues} from step {at_step}: the steps before are the parent's.\n"
        if continues
        else ""
    )
    return (
        f"Mixture revision written by `millrace mix new` on {datetime.date.today().isoformat()}\n"
        f"from store {opened.name}/{opened.version} ({strategies}).\n{lineage}"
        "Revision names are immutable once built: save changes under a new name.\n"
    )


def _write_unless_different(target: Path, written: Revision, header: str) -> Path:
    """Write the revision file; an identical one already there is kept, a different one refused."""
    if target.exists():
        try:
            same = load_revision(target).hash() == written.hash()
        except ConfigError:
            same = False
        if not same:
            raise ConfigError(
                f"{target}: a different revision file already exists; revision names are immutable "
                "(choose a new --revision name, or remove the file if it was never built)"
            )
        log.debug("revision %s unchanged: %s", written.key, target)
        return target
    atomic_write_text(target, revision_to_toml(written, header))
    log.debug("wrote revision %s (%d phases) to %s", written.key, len(written.phases), target)
    return target
