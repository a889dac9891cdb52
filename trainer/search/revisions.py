"""The search's revisions: weights over components become ordinary revisions of the mixture that continue the
baseline at the branch step (proxies, validation arms, the proposal), written and built by the mixtures room.

A component's weight is spread over its cells by their available tokens (the merged tail's cells share its
weight as a pattern's cells would). What a proxy trained on is read back from its built manifest (each cell's
sequences over the phase's), so a row records the realised shares, not only the sampled ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from millrace.home import Home
from mixtures.build import build
from mixtures.lineage import inherited_phases
from mixtures.manifest import BuiltManifest, read_manifest
from mixtures.revision import Revision, parse_revision
from trainer.ladder.rung_revision import write_rung_revision
from trainer.search.records import Component, ComponentWeight, PhaseWeights
from trainer.search.spec import Search, split_steps

HALF_SEQUENCE = 0.5  # a cell whose weight would draw less than this many sequences is left out of the phase


def phase_weights(components: list[Component], names: list[str], weights: np.ndarray) -> list[PhaseWeights]:
    """(phases, components) -> records keyed by fingerprint and name."""
    return [
        PhaseWeights(
            phase=name,
            weights=[
                ComponentWeight(component=c.name, fingerprint=c.fingerprint, weight=float(w))
                for c, w in zip(components, row)
            ],
        )
        for name, row in zip(names, weights)
    ]


def weights_array(phases: list[PhaseWeights], components: list[Component]) -> np.ndarray:
    """Records -> (phases, components), columns in `components`' order (a column a row lacks is 0)."""
    out = np.zeros((len(phases), len(components)))
    for p, phase in enumerate(phases):
        known = phase.by_fingerprint()
        out[p] = [known.get(c.fingerprint, 0.0) for c in components]
    return out


def cell_weights(
    components: list[Component], row: np.ndarray, tokens: dict[str, int], sequences: int
) -> dict[str, float]:
    """One phase's component weights as cell weights (a component's cells share it by available tokens).

    A weight too small to draw half a sequence of the phase's `sequences` is dropped (the mixtures room refuses
    a non-zero weight that would never be sampled; the rest are renormalised by the revision's `normalize`):
    what a proxy trained on is then read back from its built manifest."""
    out: dict[str, float] = {}
    for component, weight in zip(components, row):
        mass = sum(tokens[cell] for cell in component.cells) or 1
        for cell in component.cells:
            share = float(weight) * tokens[cell] / mass
            if tokens[cell] and share * sequences >= HALF_SEQUENCE:
                out[cell] = share
    if not out:  # every weight tiny: the largest component's cells carry the phase
        return cell_weights(components, (row == row.max()).astype(float), tokens, sequences)
    return out


def cell_tokens(search: Search) -> dict[str, int]:
    return {name: cell.available_tokens for name, cell in search.base.manifest.cells.items()}


def continuing(
    search: Search, name: str, weights: np.ndarray, phase_tokens: list[int], components: list[Component], what: str
) -> Revision:
    """A revision of the mixture continuing the baseline at the branch step with `weights` per phase."""
    base, store = search.base, search.base.store
    data = base.revision.model_dump(mode="json", exclude_none=True)
    tokens = cell_tokens(search)
    data.update(
        {
            "revision": name,
            "description": f"{what} (search {search.name}; written by `millrace mix search`, do not edit)",
            "normalize": True,
            "store": {"name": store.name, "version": store.version, "manifest_hash": store.manifest_hash},
            "continues": {"revision": base.revision.revision, "at_step": search.branch_step},
            "phases": [
                {
                    "name": phase,
                    "tokens": int(count),
                    "weights": cell_weights(components, row, tokens, max(1, count // search.base.manifest.seq_len)),
                }
                for phase, count, row in zip(search.phase_names, phase_tokens, weights)
            ],
        }
    )
    return parse_revision(data, f"search {search.name}: revision {name}")


def write_and_build(home: Home, search: Search, revision: Revision) -> Path:
    """Write the revision (once: a changed one under the same name is refused) and build it."""
    header = f"Search {search.name}: {revision.description}"
    write_rung_revision(
        home, revision, header, remedy="the search file changed; rename the search (`search = ...`) to re-plan it"
    )
    return build(home, revision.mixture, revision.revision)


def realised(manifest_path: Path, components: list[Component]) -> list[PhaseWeights]:
    """The shares each of the revision's own phases drew, per component (from the built manifest's counts)."""
    manifest, _ = read_manifest(manifest_path)
    own = [phase for phase in manifest.phases if phase.revision is None]
    rows = np.array(
        [[sum(phase.counts.get(cell, 0) for cell in c.cells) / phase.sequences for c in components] for phase in own]
    )
    return phase_weights(components, [phase.name for phase in own], rows)


def prior_weights(search: Search, components: list[Component], kind: str) -> np.ndarray:
    """The Dirichlet's centre per phase: the baseline's weights from the branch on, natural, or uniform."""
    count = len(search.phase_names)
    if kind == "uniform":
        return np.full((count, len(components)), 1.0 / len(components))
    if kind == "natural":
        row = np.array([c.tokens for c in components], dtype=float)
        return np.tile(row / row.sum(), (count, 1))
    return baseline_weights(search.base.manifest, search.branch_step, components, count)


def baseline_weights(manifest: BuiltManifest, step: int, components: list[Component], count: int) -> np.ndarray:
    """The baseline's declared weights in the phase holding `step` and (a second phase) in its last phase."""
    holding = next((p for p in manifest.phases if p.start_step <= step < p.start_step + p.steps), manifest.phases[-1])
    chosen = [holding, manifest.phases[-1]][:count]
    rows = np.array([[sum(p.declared_weights.get(cell, 0.0) for cell in c.cells) for c in components] for p in chosen])
    shares: np.ndarray = rows / rows.sum(axis=1, keepdims=True)
    return shares


def drawn_before(search: Search, components: list[Component]) -> np.ndarray:
    """Sequences each component gave the baseline before the branch (they count against its epoch cap)."""
    phases = inherited_phases(search.base.manifest, search.branch_step)
    return np.array([sum(p.counts.get(cell, 0) for p in phases for cell in c.cells) for c in components], dtype=float)


def proxy_weight_bounds(search: Search, components: list[Component], sequences: int) -> np.ndarray:
    """(phases, components) weight bounds that keep every component under the baseline's epoch cap over the
    lineage, for a continuation of `sequences` sequences."""
    held = search.base.manifest.cells
    available = np.array([sum(held[cell].sequences_available for cell in c.cells) for c in components], dtype=float)
    room = search.base.revision.epoch_cap * available - drawn_before(search, components)
    bound = np.clip(room / max(1, sequences), 0.0, 1.0)
    return np.tile(bound, (len(search.phase_names), 1))


def planned_phase_tokens(search: Search) -> np.ndarray:
    """Tokens each phase of the planned (full) run trains after the branch: the rest of the baseline, or
    `constraints.planned_tokens` in all, split at the search's switch point."""
    step_tokens = search.step_tokens
    if search.spec.constraints.planned_tokens:
        steps = max(1, round(search.spec.constraints.planned_tokens / step_tokens) - search.branch_step)
    else:
        steps = search.base.manifest.total_steps - search.branch_step
    return np.array(split_steps(steps, len(search.phase_names), search.spec.phases.switch)) * step_tokens


def cap_tokens(search: Search, components: list[Component]) -> np.ndarray:
    """Each component's tokens as the planned run's epoch cap counts them: what it holds, less what the
    baseline drew before the branch divided by the cap (so the cap binds over the whole run)."""
    held = search.base.manifest.cells
    seq = search.base.manifest.seq_len
    available = np.array([sum(held[c].sequences_available for c in comp.cells) for comp in components]) * seq
    drawn = drawn_before(search, components) * seq
    return np.maximum(available - drawn / search.spec.constraints.epoch_cap, 0.0)
