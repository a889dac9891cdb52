"""The schedule over random multi-phase manifests (index only, no tokens)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.permutation import permutation
from loader.schedule import Schedule
from millrace.errors import ArtifactError
from mixtures.manifest import BuiltManifest, ManifestCell, ManifestPhase, StoreRef

BATCH = 4


def manifest_of(available: list[int], phases: list[list[int]], seed: int = 5) -> BuiltManifest:
    names = [f"c{i:02d}q{i % 5}" for i in range(len(available))]
    built, position = [], 0
    for p, counts in enumerate(phases):
        sequences = sum(counts)
        built.append(
            ManifestPhase(
                name=f"p{p}",
                token_budget=sequences,
                start_position=position,
                sequences=sequences,
                start_step=position // BATCH,
                steps=sequences // BATCH,
                counts={n: c for n, c in zip(names, counts) if c},
                declared_weights={n: c / sequences for n, c in zip(names, counts)},
            )
        )
        position += sequences
    cells = {
        n: ManifestCell(
            name=n, available_tokens=a * 8 + 1, documents=1, sequences_available=a, cell_manifest_hash=None, shards=0
        )
        for n, a in zip(names, available)
    }
    return BuiltManifest(
        mixture="m",
        revision="r",
        revision_hash="x",
        store=StoreRef(name="s", version="v", manifest_hash="h", stats_only=True),
        tokenizer_fingerprint=None,
        dtype=None,
        eos_id=None,
        seed=seed,
        seq_len=8,
        global_batch=BATCH,
        epoch_cap=8.0,
        cells=cells,
        phases=built,
        total_sequences=position,
        total_steps=position // BATCH,
    )


@st.composite
def manifests(draw):
    cells = draw(st.integers(1, 12))
    available = draw(st.lists(st.integers(1, 40), min_size=cells, max_size=cells))
    phases = []
    for _ in range(draw(st.integers(1, 3))):
        counts = draw(st.lists(st.one_of(st.integers(0, 2), st.integers(0, 120)), min_size=cells, max_size=cells))
        counts[0] += -sum(counts) % BATCH or (BATCH if sum(counts) == 0 else 0)
        phases.append(counts)
    return manifest_of(available, phases)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True)
@given(manifests())
def test_every_phase_prefix_exact_and_draws_are_full_permutations(manifest):
    schedule = Schedule(manifest)
    k = len(schedule.cell_names)
    index = schedule.index(0, manifest.phases[0].sequences)
    parts = [index] + [schedule.index(p.start_position, p.start_position + p.sequences) for p in manifest.phases[1:]]
    seen = {}
    for phase, part in zip(manifest.phases, parts):
        counts = np.asarray([phase.counts.get(n, 0) for n in schedule.cell_names])
        prefix = np.zeros((part.cell_ids.size + 1, k))
        prefix[np.arange(1, part.cell_ids.size + 1), part.cell_ids] = 1
        prefix = prefix.cumsum(0)
        ideal = np.arange(part.cell_ids.size + 1)[:, None] * counts[None, :] / phase.sequences
        assert np.abs(prefix - ideal).max() < 2
        for cell, draw, epoch, sequence in zip(part.cell_ids, part.draws, part.epochs, part.sequences):
            seen.setdefault(int(cell), []).append((int(draw), int(epoch), int(sequence)))
    for cell, draws in seen.items():
        available = int(schedule.sequences_available[cell])
        assert [d for d, _, _ in draws] == list(range(len(draws)))  # numbered across phases, in order
        for epoch in range(len(draws) // available + 1):
            got = [s for _, e, s in draws if e == epoch]
            expected = permutation(manifest.seed, schedule.cell_names[cell], epoch, available)
            assert got == expected[: len(got)].tolist()
    total = schedule.realised_counts(manifest.total_sequences)
    assert total == {n: sum(p.counts.get(n, 0) for p in manifest.phases) for n in schedule.cell_names}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 3000), st.integers(0, 2**31), st.integers(0, 5))
def test_permutations_are_bijections_and_epochs_differ(domain, seed, epoch):
    first = permutation(seed, "c00q0", epoch, domain)
    assert np.array_equal(np.sort(first), np.arange(domain))
    if domain >= 8:
        assert not np.array_equal(first, permutation(seed, "c00q0", epoch + 1, domain))


def _phase(p: int, **fields):
    """Phase `p` with `fields` changed, unvalidated (as a hand-edited file would hold it)."""

    def change(manifest: BuiltManifest) -> None:
        manifest.phases[p] = manifest.phases[p].model_copy(update=fields)

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_phase(1, counts={"c00q0": 2, "c99q4": 6}), r"phases\[1\] \(p1\) counts cells not in the manifest"),
        (_phase(0, counts={"c00q0": -1, "c01q1": 9}), r"phases\[0\] \(p0\) has a negative count"),
        (_phase(0, counts={"c00q0": 4, "c01q1": 5}), r"phases\[0\] \(p0\) counts sum to 9, not its 8 sequences"),
        (_phase(1, start_position=4), r"phases\[1\] \(p1\) starts at 4, expected 8"),
        (_phase(1, steps=3), r"phases\[1\] \(p1\) start_step/steps disagree"),
        (lambda m: m.phases.pop(), r"total_sequences 16 / total_steps 4 disagree with the phases \(8 sequences\)"),
        (
            lambda m: m.cells.update(c00q0=m.cells["c00q0"].model_copy(update={"sequences_available": 7})),
            r"cell 'c00q0': sequences_available 7",
        ),
    ],
)
def test_an_inconsistent_manifest_is_refused_naming_the_phase_or_cell(change, message):
    manifest = manifest_of([6, 6], [[4, 4], [2, 6]])
    Schedule(manifest, "m.json")  # consistent as built
    change(manifest)
    with pytest.raises(ArtifactError, match=rf"m\.json: inconsistent manifest: {message}"):
        Schedule(manifest, "m.json")
