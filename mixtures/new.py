"""Write a new revision file from a store's stats with a strategy (`mix new`).

By default the file holds concrete per-cell weights, computed now and pinned to
the store version and manifest hash they were computed from; with `symbolic`
it keeps the strategy, to be resolved against whatever store version a build
finds (how the shipped revisions of the embedded corpus are written).
"""

from __future__ import annotations

import datetime
import logging
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Mapping, Sequence

import pydantic

from millrace.artifacts import atomic_write_text
from millrace.errors import ConfigError
from millrace.home import Home
from mixtures.resolve import open_store, resolve
from mixtures.revision import STRATEGY_NAMES, Revision, StoreSpec, load_revision, parse_revision, revision_to_toml

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


def parse_phase(text: str, default_strategy: str) -> dict:
    """`NAME:TOKENS[:STRATEGY[@PATTERN,PATTERN]]`, e.g. `cooldown:3.75T:uniform@c*q3,c*q4`."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ConfigError(f"--phase {text!r}: expected NAME:TOKENS[:STRATEGY[@PATTERNS]]")
    strategy, _, cells = (parts[2] if len(parts) == 3 else default_strategy).partition("@")
    if strategy not in STRATEGY_CHOICES:
        raise ConfigError(f"--phase {text!r}: unknown strategy {strategy!r} (one of {', '.join(STRATEGY_CHOICES)})")
    phase: dict = {"name": parts[0], "tokens": parse_tokens(parts[1]), "strategy": strategy}
    if cells:
        phase["cells"] = [c for c in cells.split(",") if c]
    return phase


def parse_factors(text: str | None, option: str) -> dict[str, float]:
    """`q0=0.5,q4=2` -> {"q0": 0.5, "q4": 2.0}."""
    factors: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        try:
            factors[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"{option} {item!r}: expected KEY=NUMBER") from None
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r}: expected KEY=NUMBER")
    return factors


def new_revision(
    home: Home,
    mixture: str,
    revision: str,
    store: str,
    *,
    strategy: str = "natural",
    phases: Sequence[str] | None = None,
    epoch_cap: float = 8.0,
    seq_len: int = 256,
    global_batch: int = 16,
    seed: int = 1234,
    temperature: float | None = None,
    tilt: Mapping[str, float] | None = None,
    weights: Mapping[str, float] | None = None,
    out: Path | str | None = None,
    symbolic: bool = False,
    description: str = "",
) -> Path:
    """Write `mixture/revision` from store `NAME[/VERSION]`'s stats; returns the file's path.

    `phases` are `NAME:TOKENS[:STRATEGY[@PATTERNS]]` strings (default: one phase
    "main" of the store's total tokens). Refuses to overwrite a different file.
    """
    name, _, version = store.partition("/")
    try:
        spec = StoreSpec.model_validate({"name": name, **({"version": version} if version else {})})
    except pydantic.ValidationError as exc:
        raise ConfigError(f"--store {store!r}: expected NAME[/VERSION] ({exc.errors()[0]['msg']})") from None
    opened = open_store(home, spec, f"--store {store}")
    total = sum(cell.tokens for cell in opened.manifest.cells.values())
    requested = [parse_phase(text, strategy) for text in (phases or [f"main:{total}"])]
    phase_specs = []
    for phase in requested:
        chosen = phase.pop("strategy")
        if chosen == "explicit":
            if not weights:
                raise ConfigError(f"--phase {phase['name']!r}: strategy 'explicit' needs --weight CELL=W options")
            if "cells" in phase:
                raise ConfigError(f"--phase {phase['name']!r}: strategy 'explicit' takes no @PATTERNS (use --weight)")
            phase["weights"] = dict(weights)
        else:
            phase["strategy"] = chosen
            if chosen == "temperature":
                if temperature is None:
                    raise ConfigError(f"--phase {phase['name']!r}: strategy 'temperature' needs --temperature")
                phase["temperature"] = temperature
            if chosen == "quality-tilt":
                if not tilt:
                    raise ConfigError(f"--phase {phase['name']!r}: strategy 'quality-tilt' needs --tilt q0=0.5,q4=2")
                phase["tilt"] = dict(tilt)
        phase_specs.append(phase)
    source = f"mix new {mixture} --revision {revision}"
    data = {
        "mixture": mixture, "revision": revision, "description": description, "seed": seed, "seq_len": seq_len,
        "global_batch": global_batch, "epoch_cap": float(epoch_cap), "store": spec.model_dump(exclude_none=True),
        "phases": phase_specs,
    }
    symbolic_revision = parse_revision(data, source)
    manifest = resolve(symbolic_revision, opened, source)
    if symbolic:
        written = symbolic_revision
    else:
        data["store"] = {"name": opened.name, "version": opened.version, "manifest_hash": opened.manifest_hash}
        data["phases"] = [
            {"name": built.name, "tokens": built.token_budget,
             "weights": {cell: w for cell, w in built.declared_weights.items() if w > 0}}
            for built in manifest.phases
        ]
        written = parse_revision(data, source)
        resolve(written, opened, source)
    strategies = ", ".join(f"{p['name']}: {p.get('strategy', 'explicit')}" for p in phase_specs)
    header = (
        f"Mixture revision written by `millrace mix new` on {datetime.date.today().isoformat()}\n"
        f"from store {opened.name}/{opened.version} ({strategies}).\n"
        "Revision names are immutable once built: save changes under a new name.\n"
    )
    target = Path(out) if out is not None else home.revisions / mixture / f"{revision}.toml"
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
        log.info("revision %s unchanged: %s", written.key, target)
        return target
    atomic_write_text(target, revision_to_toml(written, header))
    log.info("wrote revision %s (%d phases) to %s", written.key, len(written.phases), target)
    return target
