"""Global sample positions -> (cell, draw, epoch, sequence): a pure function of the manifest.

Follows the semantics fixed in `mixtures.manifest`: phases are contiguous ranges of
positions; inside a phase the cells are interleaved exactly (`mixtures.interleave`);
a cell's draws are numbered across phases (phase 0's first), and draw k of cell c is
epoch `k // sequences_available`, sequence `perm_{seed, c, epoch}(k % sequences_available)`
(`loader.permutation`). Building a `Schedule` costs O(phases x cells) whatever the
number of tokens; looking up a range of positions costs O(range x tree depth).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loader.permutation import ROUNDS, permute, round_keys
from millrace.errors import ArtifactError
from mixtures.interleave import Interleaver
from mixtures.manifest import BuiltManifest, ManifestPhase

_EPOCH_MASK = (1 << 40) - 1


@dataclass(frozen=True)
class SampleIndex:
    """Where each of a run of consecutive global positions draws its tokens from."""

    positions: np.ndarray  # int64 [n] global sample positions
    cell_ids: np.ndarray  # int32 [n] index into Schedule.cell_names
    draws: np.ndarray  # int64 [n] the cell's draw number, counted across phases
    epochs: np.ndarray  # int64 [n]
    sequences: np.ndarray  # int64 [n] sequence index inside the cell
    phase: int

    def rows(self, start: int, stop: int) -> SampleIndex:
        return SampleIndex(
            self.positions[start:stop],
            self.cell_ids[start:stop],
            self.draws[start:stop],
            self.epochs[start:stop],
            self.sequences[start:stop],
            self.phase,
        )


class Schedule:
    """The manifest's sample order, checked for internal consistency when built."""

    def __init__(self, manifest: BuiltManifest, path: Path | str = "<manifest>"):
        self.manifest = manifest
        self.path = Path(path)
        self.cell_names: list[str] = sorted(manifest.cells)
        self.cell_index = {name: i for i, name in enumerate(self.cell_names)}
        self.global_batch = manifest.global_batch
        self.total_sequences = manifest.total_sequences
        self.total_steps = manifest.total_steps
        self.sequences_available = np.asarray(
            [manifest.cells[name].sequences_available for name in self.cell_names], dtype=np.int64
        )
        self._check()
        self.phase_starts = [phase.start_position for phase in manifest.phases]
        self._interleavers = [
            Interleaver([phase.interleaved_counts().get(name, 0) for name in self.cell_names])
            for phase in manifest.phases
        ]
        self._check_cut_phases()
        # Draws each cell made in the phases before phase p.
        offsets = np.zeros((len(manifest.phases), len(self.cell_names)), dtype=np.int64)
        for p in range(1, len(manifest.phases)):
            offsets[p] = offsets[p - 1] + self._phase_counts(p - 1)
        self._draw_offsets = offsets

    def _phase_counts(self, p: int) -> np.ndarray:
        counts = self.manifest.phases[p].counts
        return np.asarray([counts.get(name, 0) for name in self.cell_names], dtype=np.int64)

    def _fail(self, what: str) -> ArtifactError:
        return ArtifactError(f"{self.path}: inconsistent manifest: {what}")

    def _check(self) -> None:
        m = self.manifest
        if m.global_batch <= 0 or m.seq_len <= 0:
            raise self._fail(f"global_batch {m.global_batch} and seq_len {m.seq_len} must be positive")
        if not m.phases:
            raise self._fail("no phases")
        position = 0
        for p, phase in enumerate(m.phases):
            self._check_phase(p, phase, position)
            position += phase.sequences
        if position != m.total_sequences or m.total_steps * m.global_batch != m.total_sequences:
            raise self._fail(
                f"total_sequences {m.total_sequences} / total_steps {m.total_steps} "
                f"disagree with the phases ({position} sequences)"
            )
        self._check_cells()

    def _check_phase(self, p: int, phase: ManifestPhase, position: int) -> None:
        """Phase `p` counts known cells, its counts sum to its sequences, and it starts at `position`, on a
        whole step."""
        m, where = self.manifest, f"phases[{p}] ({phase.name})"
        unknown = sorted(set(phase.counts) - set(m.cells))
        if unknown:
            raise self._fail(f"{where} counts cells not in the manifest: {unknown}")
        if any(count < 0 for count in phase.counts.values()):
            raise self._fail(f"{where} has a negative count")
        if sum(phase.counts.values()) != phase.sequences:
            raise self._fail(
                f"{where} counts sum to {sum(phase.counts.values())}, not its {phase.sequences} sequences"
            )
        if phase.start_position != position:
            raise self._fail(f"{where} starts at {phase.start_position}, expected {position}")
        if phase.sequences <= 0 or phase.sequences % m.global_batch:
            raise self._fail(
                f"{where} has {phase.sequences} sequences, not a positive multiple of global_batch {m.global_batch}"
            )
        if phase.start_step * m.global_batch != position or phase.steps * m.global_batch != phase.sequences:
            raise self._fail(f"{where} start_step/steps disagree with its positions")

    def _check_cells(self) -> None:
        """Each cell's sequences follow from its tokens, and a drawn cell has some."""
        m = self.manifest
        for name in self.cell_names:
            cell = m.cells[name]
            if cell.sequences_available != max(0, (cell.available_tokens - 1) // m.seq_len):
                raise self._fail(
                    f"cell {name!r}: sequences_available {cell.sequences_available} is not "
                    f"(available_tokens - 1) // seq_len for {cell.available_tokens} tokens"
                )
            drawn = sum(phase.counts.get(name, 0) for phase in m.phases)
            if drawn and m.cells[name].sequences_available <= 0:
                raise self._fail(f"cell {name!r} is drawn {drawn} times but has no sequences")

    def _check_cut_phases(self) -> None:
        """A phase cut at a mixture switch draws the first `sequences` positions of its full interleaving."""
        for p, phase in enumerate(self.manifest.phases):
            if phase.prefix_of is None:
                continue
            unknown = sorted(c for c, n in phase.prefix_of.items() if n > 0 and c not in self.cell_index)
            if unknown:
                raise self._fail(f"phases[{p}] ({phase.name}) prefix_of names cells not in the manifest: {unknown}")
            if self._interleavers[p].size < phase.sequences:
                raise self._fail(
                    f"phases[{p}] ({phase.name}) is cut at {phase.sequences} sequences, past the "
                    f"{self._interleavers[p].size} of the phase it is a prefix of"
                )
            prefix = self._interleavers[p].prefix_counts(phase.sequences)
            if any(int(prefix[i]) != phase.counts.get(name, 0) for i, name in enumerate(self.cell_names)):
                raise self._fail(
                    f"phases[{p}] ({phase.name}) counts are not the first {phase.sequences} "
                    "positions of the phase it is a prefix of"
                )

    def phase_of_position(self, position: int) -> int:
        if not 0 <= position < self.total_sequences:
            raise IndexError(f"position {position} outside the schedule's {self.total_sequences} samples")
        return bisect.bisect_right(self.phase_starts, position) - 1

    def phase_of_step(self, step: int) -> int:
        return self.phase_of_position(step * self.global_batch)

    def realised_counts(self, position: int) -> dict[str, int]:
        """Samples per cell over global positions [0, position): what was actually drawn."""
        if not 0 <= position <= self.total_sequences:
            raise IndexError(f"position {position} outside [0, {self.total_sequences}]")
        if position == 0:
            return dict.fromkeys(self.cell_names, 0)
        p = self.phase_of_position(position - 1)
        counts = self._draw_offsets[p] + self._interleavers[p].prefix_counts(position - self.phase_starts[p])
        return {name: int(c) for name, c in zip(self.cell_names, counts)}

    def index(self, start: int, stop: int) -> SampleIndex:
        """Positions [start, stop), which must lie inside one phase (batches always do)."""
        if not 0 <= start < stop <= self.total_sequences:
            raise IndexError(f"positions [{start}, {stop}) outside the schedule's {self.total_sequences} samples")
        p = self.phase_of_position(start)
        base = self.phase_starts[p]
        if stop > base + self.manifest.phases[p].sequences:  # not the interleaver's size: a cut phase ends early
            raise IndexError(f"positions [{start}, {stop}) straddle the end of phase {p}")
        cell_ids, draws = self._interleavers[p].assign(start - base, stop - base)
        draws += self._draw_offsets[p][cell_ids]
        available = self.sequences_available[cell_ids]
        epochs = draws // available
        sequences = self._permute(cell_ids, epochs, draws % available, available)
        positions = np.arange(start, stop, dtype=np.int64)
        return SampleIndex(positions, cell_ids, draws, epochs, sequences, p)

    def _permute(self, cell_ids: np.ndarray, epochs: np.ndarray, values: np.ndarray, domain: np.ndarray) -> np.ndarray:
        pairs, inverse = np.unique((cell_ids.astype(np.int64) << 40) | epochs, return_inverse=True)
        table = np.asarray(
            [round_keys(self.manifest.seed, self.cell_names[int(p >> 40)], int(p & _EPOCH_MASK)) for p in pairs],
            dtype=np.uint64,
        ).reshape(-1, ROUNDS)
        return permute(values, domain, table[inverse.reshape(-1)].T)
