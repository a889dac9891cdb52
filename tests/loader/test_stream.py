import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loader import MixtureStream
from loader.permutation import permutation
from millrace.errors import ArtifactError, ConfigError
from testkit.batches import batch_digest, epoch_stream
from testkit.manifests import BOUNDARY_STEP, LONG_BOUNDARY_STEP, ManifestFrame, make_manifest
from testkit.manifests import LOADER_CELLS as CELLS
from testkit.manifests import LOADER_PHASES as PHASES
from testkit.stores import RANDOM

EOS = RANDOM.eos

ROOT = Path(__file__).resolve().parents[2]


def run_digests(*args: str) -> list:
    result = subprocess.run(
        [sys.executable, "-m", "testkit.batches", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


def cell_epoch(manifest_path: Path, cell: str, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """A cell's tokens and per-token sources in `epoch`'s order, rebuilt independently of the loader."""
    stream = MixtureStream(manifest_path, prefetch=0)
    return epoch_stream(manifest_path.parents[3], cell, stream.manifest.seed, epoch, stream.manifest.document_block)


@pytest.mark.slow
def test_separate_processes_give_identical_batches_and_seed_changes_them(built):
    home, path = built
    steps = [0, 1, BOUNDARY_STEP, 38]
    first, second = run_digests(str(path), json.dumps(steps)), run_digests(str(path), json.dumps(steps))
    assert first == second
    assert first == [batch_digest(MixtureStream(path).batch(s)) for s in steps]
    other = make_manifest(home, path.parents[3], PHASES, ManifestFrame(seed=99), revision="other-seed")
    assert [batch_digest(MixtureStream(other).batch(s)) for s in steps] != first


@pytest.mark.slow
@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_in_a_new_process_continues_the_uninterrupted_run(long_schedule, prefetch):
    m = 3
    ks = [0, 1, LONG_BOUNDARY_STEP - 1, LONG_BOUNDARY_STEP, 4990]
    stream = MixtureStream(long_schedule, prefetch=prefetch)
    states, uninterrupted = [], []
    batches = stream.iterate()
    for k in range(stream.steps):
        if k in ks:
            states.append(stream.state_dict())
            assert states[-1]["step"] == k
        uninterrupted.append(batch_digest(next(batches)))
    resumed = run_digests(str(long_schedule), "[]", json.dumps(states), str(m))
    assert resumed == [uninterrupted[k : k + m] for k in ks]


def test_state_is_small_and_refuses_another_manifest(built):
    home, path = built
    stream = MixtureStream(path)
    state = stream.state_dict()
    assert len(json.dumps(state)) < 300
    other = MixtureStream(make_manifest(home, path.parents[3], PHASES, ManifestFrame(seed=7), revision="other"))
    with pytest.raises(ArtifactError, match=r"another|different mixture"):
        other.load_state_dict(state)
    with pytest.raises(ConfigError, match="past the end"):
        stream.load_state_dict({**state, "step": stream.steps + 1})
    with pytest.raises(ArtifactError, match="not a loader state"):
        stream.load_state_dict({"step": 3})


def test_step_past_the_end_is_an_error(built):
    _, path = built
    stream = MixtureStream(path)
    with pytest.raises(ConfigError, match="outside the schedule"):
        stream.batch(stream.steps)
    with pytest.raises(ConfigError, match="outside the schedule"):
        list(stream.iterate(start_step=0, end_step=stream.steps + 1))


def test_rank_slices_union_to_the_global_batch(built):
    _, path = built
    whole = MixtureStream(path, world=1)
    for world in (2, 4):
        ranks = [MixtureStream(path, rank=r, world=world) for r in range(world)]
        for step in (0, BOUNDARY_STEP - 1, BOUNDARY_STEP, whole.steps - 1):
            full, parts = whole.batch(step), [r.batch(step) for r in ranks]
            for field in (
                "input_ids",
                "labels",
                "segment_ids",
                "positions",
                "cell_ids",
                "sample_positions",
            ):
                assert (np.concatenate([getattr(p, field) for p in parts]) == getattr(full, field)).all()
            assert (np.concatenate([p.token_sources() for p in parts]) == full.token_sources()).all()
            assert [cell for p in parts for cell in p.cells] == full.cells
    with pytest.raises(ConfigError, match="divide"):
        MixtureStream(path, world=3)


def test_counts_per_phase_and_phase_boundaries_are_exact(built):
    _, path = built
    stream = MixtureStream(path)
    drawn = [stream.index(s) for s in range(stream.steps)]
    cells = np.concatenate([d.cell_ids for d in drawn])
    assert [stream.phase_name(s) for s in (BOUNDARY_STEP - 1, BOUNDARY_STEP)] == ["phase0", "phase1"]
    boundary = BOUNDARY_STEP * 8
    for phase, (lo, hi) in zip(PHASES, [(0, boundary), (boundary, cells.size)]):
        part = cells[lo:hi]
        realised = np.bincount(part, minlength=4)
        assert dict(zip(stream.cell_names, realised.tolist())) == phase
        prefix = np.zeros((part.size + 1, 4))
        prefix[np.arange(1, part.size + 1), part] = 1
        prefix = prefix.cumsum(0)
        shares = np.asarray([phase[c] for c in stream.cell_names]) / part.size
        assert np.abs(prefix - np.arange(part.size + 1)[:, None] * shares).max() < 2
    assert stream.realised_counts(BOUNDARY_STEP) == PHASES[0]
    assert stream.realised_counts(stream.steps) == {c: PHASES[0][c] + PHASES[1][c] for c in CELLS}


def test_repeated_cell_epochs_are_distinct_full_permutations(built):
    _, path = built
    stream = MixtureStream(path)
    d = stream.cell_names.index("d")
    available = stream.manifest.cells["d"].sequences_available
    index = [stream.index(s) for s in range(stream.steps)]
    rows = [
        (int(i.draws[j]), int(i.epochs[j]), int(i.sequences[j]))
        for i in index
        for j in range(i.cell_ids.size)
        if i.cell_ids[j] == d
    ]
    rows.sort()
    assert [r[0] for r in rows] == list(range(60))  # draws numbered across both phases
    epochs = {}
    for _, epoch, sequence in rows:
        epochs.setdefault(epoch, []).append(sequence)
    assert len(epochs) == 6
    for epoch, sequences in epochs.items():
        assert sorted(sequences) == list(range(available))
        assert sequences == permutation(stream.manifest.seed, "d", epoch, available).tolist()
    assert len({tuple(s) for s in epochs.values()}) == 6


def test_tokens_packing_and_sources_match_the_shards(built):
    _, path = built
    stream = MixtureStream(path)
    seq_len = stream.seq_len
    for step in (0, 7, BOUNDARY_STEP + 3):
        batch = stream.batch(step)
        for row, cell in enumerate(batch.cells):
            tokens, _ = cell_epoch(path, cell, int(batch.epochs[row]))
            start = int(batch.sequences[row]) * seq_len
            window = tokens[start : start + seq_len + 1].astype(np.int64)
            assert (batch.input_ids[row] == window[:-1]).all() and (batch.labels[row] == window[1:]).all()
            segment, position = 0, 0
            for j in range(seq_len):
                if j and window[j - 1] == EOS:
                    segment, position = segment + 1, 0
                assert (batch.segment_ids[row, j], batch.positions[row, j]) == (segment, position)
                position += 1
        assert batch.input_ids.dtype == np.int64 and batch.segment_ids.dtype == np.int32
        assert batch.token_sources().shape == batch.input_ids.shape


def test_sources_follow_document_boundaries(built):
    _, path = built
    stream = MixtureStream(path)
    batch = stream.batch(3)
    for row, cell in enumerate(batch.cells):
        _, per_token = cell_epoch(path, cell, int(batch.epochs[row]))
        start = int(batch.sequences[row]) * stream.seq_len
        assert (batch.token_sources()[row] == per_token[start : start + stream.seq_len]).all()
    segments = batch.segment_ids.max(axis=1) + 1  # each row's table holds its segments' sources, then -1
    assert all((batch.segment_sources[row, segments[row] :] == -1).all() for row in range(len(batch.cells)))
    assert (batch.segment_sources[np.arange(len(batch.cells)), segments - 1] >= 0).all()


def test_window_spanning_two_shards(built):
    _, path = built
    stream = MixtureStream(path)
    a = stream.cell_names.index("a")
    boundary = int(stream._space.cells[a].shard_starts[1])
    sequence = boundary // stream.seq_len
    assert sequence * stream.seq_len < boundary < (sequence + 1) * stream.seq_len + 1
    for epoch in (0, 3):
        out, _ = stream._space.read(
            np.asarray([a, a]), np.asarray([sequence, sequence - 1]), np.asarray([epoch] * 2), False
        )
        tokens, _ = cell_epoch(path, "a", epoch)
        for row, seq in enumerate((sequence, sequence - 1)):
            assert (out[row] == tokens[seq * stream.seq_len : seq * stream.seq_len + stream.seq_len + 1]).all()


def test_prefetch_iteration_equals_direct_batches_and_stops_cleanly(built):
    _, path = built
    stream = MixtureStream(path, prefetch=3)
    batches = stream.iterate(start_step=5, end_step=12)
    got = [next(batches) for _ in range(4)]
    batches.close()
    assert [b.step for b in got] == [5, 6, 7, 8] and stream.step == 9
    assert [batch_digest(b) for b in got] == [batch_digest(stream.batch(s)) for s in range(5, 9)]
    assert [b.step for b in stream.iterate()] == list(range(9, stream.steps))


def test_a_batch_still_held_keeps_its_output_block_and_a_dropped_one_gives_it_back(built):
    """The output blocks are reused (`loader.packing.BlockPool`): never while any batch, view or tensor of one is
    alive, and always once none is (the pool stays at its size however long the run)."""
    import torch

    _, path = built
    stream = MixtureStream(path, prefetch=2)
    held = [(batch, torch.from_numpy(batch.labels)) for batch in stream.iterate(0, 12)]
    kept_view = held[3][0].positions
    expected = [batch_digest(stream.batch(step)) for step in range(12)]
    assert [batch_digest(batch) for batch, _ in held] == expected
    assert all(torch.equal(tensor, torch.from_numpy(batch.labels)) for batch, tensor in held)
    del held
    assert np.array_equal(kept_view, stream.batch(3).positions)
    buffers = [batch.tokens.base.base.obj for batch in stream.iterate(0, min(stream.steps, 40))]  # block's buffer
    assert len({id(buffer) for buffer in buffers}) <= stream._blocks.size + 1  # those waiting, the one being filled


def test_a_failure_in_the_prefetch_thread_reaches_the_consumer(built, monkeypatch):
    _, path = built
    stream = MixtureStream(path, prefetch=2)
    assemble = stream._assemble

    def failing(step, index):
        if step == 3:
            raise OSError("disk went away")
        return assemble(step, index)

    monkeypatch.setattr(stream, "_assemble", failing)
    got = []
    with pytest.raises(OSError, match="disk went away"):
        for batch in stream.iterate():
            got.append(batch.step)
    assert got == [0, 1, 2] and stream.step == 3


def test_without_sources_the_batches_are_otherwise_identical(built):
    _, path = built
    lean, full = MixtureStream(path, sources=False).batch(5), MixtureStream(path).batch(5)
    assert lean.segment_sources is None and full.segment_sources is not None
    assert batch_digest(lean) != batch_digest(full)
    for field in ("input_ids", "labels", "segment_ids", "positions", "cell_ids", "sample_positions"):
        assert np.array_equal(getattr(lean, field), getattr(full, field))
