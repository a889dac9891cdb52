"""A rung's revision: the ladder's revision scaled to the rung's token budget and batch.

The phases keep their share of the budget and their weights exactly: the base revision
is resolved against its store once (so strategy weights are the ones its own build
declares), and each phase's declared per-cell weights become the rung revision's
explicit weights. The build's largest-remainder apportionment then realises each cell
within one sequence of its share in every phase. Rung revisions are ordinary revisions of
the mixture (`$MILLRACE_HOME/mixtures/<mixture>/<revision>.<ladder>.<rung>.toml`), built
by the mixtures room like any other, so `mix plan` and the composition page show them.

A small rung can be too small for its store: a phase of 12 sequences cannot give one
sequence to each of 35 cells. `feasible_tokens` finds the smallest budget, in whole steps,
whose scaled revision resolves with the mixtures room's own checks, so that `ladder plan`
sizes (or refuses) each rung exactly as `ladder run` will build it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from millrace.artifacts import atomic_write_text
from millrace.errors import ConfigError
from millrace.home import Home
from mixtures.build import build, resolve_named
from mixtures.catalog import load_named
from mixtures.manifest import BuiltManifest
from mixtures.resolve import phase_sequences, resolve, store_versions
from mixtures.revision import Revision, load_revision, parse_revision, revision_to_toml
from pipeline.store.format import Store

MAX_STEPS = 1 << 40  # beyond any rung's budget
CONFIRM_STEPS = 16  # steps past the size condition that the epoch cap may still refuse


@dataclass(frozen=True)
class BaseRevision:
    """The ladder's revision resolved once against its store: what every rung scales."""

    mixture: str
    revision: Revision
    source: Path
    store: Store
    manifest: BuiltManifest

    @property
    def total_tokens(self) -> int:
        return sum(phase.token_budget for phase in self.manifest.phases)


def rung_revision_name(revision: str, ladder: str, rung: str) -> str:
    return f"{revision}.{ladder}.{rung}"


def resolve_base(home: Home, mixture: str, revision: str) -> BaseRevision:
    manifest, loaded, source, store = resolve_named(home, mixture, revision)
    return BaseRevision(mixture, loaded, Path(source), store, manifest)


def base_if_stored(home: Home, mixture: str, revision: str) -> BaseRevision | None:
    """The base revision resolved, or None when its store is not built here (a plan on paper)."""
    loaded, _ = load_named(home, mixture, revision)
    if not store_versions(home, loaded.store.name):
        return None
    return resolve_base(home, mixture, revision)


def scaled_revision(base: BaseRevision, name: str, tokens: int, batch: int) -> Revision:
    """The base revision with `tokens` in all, split over its phases in its own proportions.

    A base that continues a parent is scaled whole: its inherited phases become the rung's first
    phases, `parent/phase` named `parent.phase` (a rung trains from scratch)."""
    total = base.total_tokens
    store = base.store
    data = base.revision.model_dump(mode="json", exclude_none=True)
    data.pop("continues", None)
    data.update(
        {
            "revision": name,
            "global_batch": batch,
            "description": f"{base.revision.key} scaled to {tokens:,} tokens in batches of {batch} (ladder rung)",
            "store": {"name": store.name, "version": store.version, "manifest_hash": store.manifest_hash},
            "phases": [
                {
                    "name": phase.name.replace("/", "."),
                    "tokens": max(1, round(tokens * phase.token_budget / total)),
                    "weights": {cell: w for cell, w in phase.declared_weights.items() if w > 0},
                }
                for phase in base.manifest.phases
            ],
        }
    )
    return parse_revision(data, f"{base.source} scaled for rung {name}")


def rung_problem(base: BaseRevision, name: str, tokens: int, batch: int) -> str | None:
    """Why the rung revision would not build at this budget (the mixtures room's own message), or None."""
    scaled = scaled_revision(base, name, tokens, batch)
    try:
        resolve(scaled, base.store, f"{base.source} scaled for rung {name}")
    except ConfigError as exc:
        return str(exc)
    return None


def phase_sequences_at(base: BaseRevision, tokens: int, batch: int) -> list[int]:
    """Each phase's sequences in the rung revision of `tokens` (as `scaled_revision` splits them)."""
    return [
        phase_sequences(max(1, round(tokens * phase.token_budget / base.total_tokens)), base.revision.seq_len, batch)
        for phase in base.manifest.phases
    ]


def built_steps(base: BaseRevision, tokens: int, batch: int) -> int:
    """The steps of the rung revision of `tokens` once built (each phase rounds to whole batches)."""
    return sum(phase_sequences_at(base, tokens, batch)) // batch


def every_cell_fits(base: BaseRevision, tokens: int, batch: int) -> bool:
    """The apportionment's size condition, fast: in each phase the cells' floors, raised to one sequence,
    fit in the phase (the epoch cap, and the exact arithmetic, are left to `resolve`)."""
    for phase, sequences in zip(base.manifest.phases, phase_sequences_at(base, tokens, batch)):
        weights = [w for w in phase.declared_weights.values() if w > 0]
        mass = math.fsum(weights)
        if sum(max(1, math.floor(w * sequences / mass)) for w in weights) > sequences:
            return False
    return True


def feasible_tokens(base: BaseRevision, name: str, tokens: int, batch: int) -> tuple[int, str | None]:
    """`tokens` if the rung revision builds at that budget, else the smallest budget in whole steps of
    `batch` sequences that does (one step fewer does not), and the reason the planned one did not.

    Steps double until the cells fit, then bisect on the fast size condition; the budget found is
    then confirmed (and moved by a step where the exact arithmetic or the epoch cap disagree) with
    the mixtures room's own `resolve`, so the plan holds exactly what `ladder run` builds."""
    problem = rung_problem(base, name, tokens, batch)
    if problem is None:
        return tokens, None
    step_tokens = batch * base.revision.seq_len
    low = tokens // step_tokens  # low: too few steps; high: enough
    high = low + 1
    while not every_cell_fits(base, high * step_tokens, batch):
        low, high = high, high * 2
        if high > MAX_STEPS:
            raise ConfigError(f"{problem} (and no budget up to {MAX_STEPS * step_tokens:,} tokens holds every cell)")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if every_cell_fits(base, middle * step_tokens, batch) else (middle, high)
    for _ in range(CONFIRM_STEPS):
        if rung_problem(base, name, high * step_tokens, batch) is None:
            break
        high += 1
    else:
        raise ConfigError(f"{problem} (and no budget up to {high * step_tokens:,} tokens builds)")
    while high - 1 > tokens // step_tokens and rung_problem(base, name, (high - 1) * step_tokens, batch) is None:
        high -= 1
    return high * step_tokens, problem


def write_rung_revision(
    home: Home,
    revision: Revision,
    header: str,
    remedy: str = "the ladder's rules, revision or store changed; rename the ladder to re-plan it",
) -> Path:
    """Write a generated revision (a rung's, a search proxy's) once; an existing file with another meaning is
    refused (names are immutable), with `remedy` saying what changed and what to do."""
    path = home.revisions / revision.mixture / f"{revision.revision}.toml"
    if path.exists():
        existing = load_revision(path)
        if existing.hash() != revision.hash():
            raise ConfigError(
                f"{path}: generated revision {revision.key} exists with different weights or budget ({remedy})"
            )
        return path
    atomic_write_text(path, revision_to_toml(revision, header))
    return path


def build_rung_revision(
    home: Home, mixture: str, revision: str, ladder: str, rung: str, tokens: int, batch: int
) -> tuple[str, Path]:
    """Write and build the rung's revision; returns its name and built manifest."""
    name = rung_revision_name(revision, ladder, rung)
    scaled = scaled_revision(resolve_base(home, mixture, revision), name, tokens, batch)
    write_rung_revision(
        home,
        scaled,
        f"Ladder {ladder}, rung {rung}: {mixture}/{revision} scaled to {tokens:,} "
        "tokens (written by `millrace ladder run`; do not edit).",
    )
    return name, build(home, mixture, name)
