"""Built manifests with counts set by the test (not by the mixtures room), and stats-only stores."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from millrace.artifacts import read_artifact, read_envelope
from millrace.home import Home
from mixtures.manifest import BuiltManifest, ManifestCell, ManifestPhase, StoreRef, manifest_path, write_manifest
from pipeline.store.format import (
    CELL_SCHEMA_VERSION,
    SCHEMA_VERSION,
    CellManifest,
    StoreManifest,
    write_stats_only_store,
)
from testkit.stores import RANDOM

EOS = RANDOM.eos

# The loader tests' store (`RANDOM` documents) and two-phase schedules over it.
LOADER_CELLS = {"a": 6000, "b": 2500, "c": 800, "d": 170}  # d is small: repeated for several epochs
LOADER_PHASES = [{"a": 120, "b": 60, "c": 2, "d": 26}, {"a": 40, "b": 20, "c": 10, "d": 34}]
BOUNDARY_STEP = 26  # phase 1 starts at position 208 = step 26 with global batch 8
# A long schedule over the same store (cells repeat for many epochs): 2,000 + 3,000 steps.
LONG_PHASES = [{"a": 9000, "b": 5000, "c": 1500, "d": 500}, {"a": 6000, "b": 6000, "c": 6000, "d": 6000}]
LONG_BOUNDARY_STEP = 2000


def make_stats_store(home: Home, cells: dict[str, int], name: str = "plan", version: str = "2026.01.01") -> Path:
    root = home.store(name, version)
    write_stats_only_store(root, name, version, cells)
    return root


@dataclass(frozen=True)
class ManifestFrame:
    """The numbers a test manifest's schedule is built with (those a revision would give): sequence length,
    global batch, the loader's seed and its document blocks and runs."""

    seq_len: int = 16
    global_batch: int = 8
    seed: int = 1234
    document_block: int = 1024
    document_run: int = 1


def make_manifest(
    home: Home,
    store_root: Path,
    phases: list[dict[str, int]],
    frame: ManifestFrame | None = None,
    mixture: str = "mix",
    revision: str = "r1",
    phase_names: list[str] | None = None,
) -> Path:
    """A BuiltManifest over `store_root` with exactly the given per-phase counts, under `frame`'s numbers."""
    frame = frame or ManifestFrame()
    seq_len, global_batch = frame.seq_len, frame.global_batch
    envelope = read_envelope(store_root / "store.json", "millrace.store", (SCHEMA_VERSION,))
    store = envelope.model(StoreManifest)
    built_phases = _phases(phases, seq_len, global_batch, phase_names or [f"phase{i}" for i in range(len(phases))])
    position = sum(phase.sequences for phase in built_phases)
    manifest = BuiltManifest(
        mixture=mixture,
        revision=revision,
        revision_hash="sha256:test",
        store=StoreRef(
            name=store.name, version=store.version, manifest_hash=envelope.content_hash, stats_only=store.stats_only
        ),
        tokenizer_fingerprint=None if store.stats_only else "test",
        dtype=store.dtype,
        eos_id=None if store.stats_only else EOS,
        seed=frame.seed,
        seq_len=seq_len,
        global_batch=global_batch,
        epoch_cap=8.0,
        document_block=frame.document_block,
        document_run=frame.document_run,
        cells=_cells(store_root, store, seq_len),
        phases=built_phases,
        total_sequences=position,
        total_steps=position // global_batch,
    )
    path = manifest_path(home, store.name, store.version, mixture, revision)
    write_manifest(path, manifest)
    return path


def _cells(store_root: Path, store: StoreManifest, seq_len: int) -> dict[str, ManifestCell]:
    """The manifest's cells as the store declares them (shard counts from each cell.json; none in a stats-only
    store), so that the loader pins and opens exactly what is on disk."""
    cells = {}
    for name, summary in store.cells.items():
        shards = 0
        if not store.stats_only:
            cell = read_artifact(
                store_root / "cells" / name / "cell.json", "millrace.cell", CellManifest, (CELL_SCHEMA_VERSION,)
            )
            shards = len(cell.shards.names)
        cells[name] = ManifestCell(
            name=name,
            available_tokens=summary.tokens,
            documents=summary.documents,
            sequences_available=max(0, (summary.tokens - 1) // seq_len),
            cell_manifest_hash=summary.manifest_hash,
            shards=shards,
        )
    return cells


def _phases(phases: list[dict[str, int]], seq_len: int, global_batch: int, names: list[str]) -> list[ManifestPhase]:
    """Phases with exactly the test's counts, one after the other; each must fill whole batches, as a built
    manifest's do."""
    built, position = [], 0
    for index, counts in enumerate(phases):
        sequences = sum(counts.values())
        assert sequences % global_batch == 0, "test counts must fill whole batches"
        built.append(
            ManifestPhase(
                name=names[index],
                token_budget=sequences * seq_len,
                start_position=position,
                sequences=sequences,
                start_step=position // global_batch,
                steps=sequences // global_batch,
                counts=counts,
                declared_weights={c: n / sequences for c, n in counts.items()},
            )
        )
        position += sequences
    return built
