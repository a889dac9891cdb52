import os

import numpy as np
import pytest

from loader import MixtureStream
from millrace.errors import ArtifactError
from testkit.damage import flip_byte
from testkit.manifests import make_manifest
from testkit.stores import RANDOM, make_store

CELLS = {"a": 900, "b": 400}
PHASES = [{"a": 24, "b": 8}]


@pytest.fixture
def store_and_manifest(home):
    store = make_store(home, CELLS, RANDOM)
    return store, make_manifest(home, store, PHASES)


def shard_file(store, cell, shard, suffix):
    return store / "cells" / cell / f"shard_{shard:05d}{suffix}"


def read_every_window(path):
    """Open the stream (which reads no shard file) and read every sequence of every cell, epoch 0."""
    stream = MixtureStream(path, prefetch=0)
    assert stream.open_files == 0
    for cell_id, cell in enumerate(stream.cell_names):
        sequences = np.arange(stream.manifest.cells[cell].sequences_available)
        stream._space.read(np.full(sequences.size, cell_id), sequences, np.zeros_like(sequences), True)


@pytest.mark.slow
def test_missing_bin_is_named(store_and_manifest):
    store, path = store_and_manifest
    victim = shard_file(store, "b", 1, ".bin")
    victim.unlink()
    with pytest.raises(ArtifactError, match=str(victim)):
        read_every_window(path)


def test_missing_idx_is_named(store_and_manifest):
    store, path = store_and_manifest
    victim = shard_file(store, "a", 0, ".idx")
    victim.unlink()
    with pytest.raises(ArtifactError, match=str(victim)):
        read_every_window(path)


def test_truncated_bin_is_named(store_and_manifest):
    store, path = store_and_manifest
    victim = shard_file(store, "a", 1, ".bin")
    os.truncate(victim, victim.stat().st_size - 2)
    with pytest.raises(ArtifactError, match=str(victim)):
        read_every_window(path)


def test_altered_idx_is_named(store_and_manifest):
    store, path = store_and_manifest
    victim = shard_file(store, "a", 0, ".idx")
    raw = flip_byte(victim, -1, 0xFF)
    with pytest.raises(ArtifactError, match=f"{victim}: bytes \\[0, {len(raw)}\\) differ from the manifest's digest"):
        read_every_window(path)


def test_flipped_bin_byte_is_named_with_its_byte_range_when_read(store_and_manifest):
    store, path = store_and_manifest
    victim = shard_file(store, "a", 1, ".bin")
    raw = flip_byte(victim)
    stream = MixtureStream(path, prefetch=0)
    a = stream.cell_names.index("a")
    stream._space.read(np.asarray([a]), np.asarray([0]), np.asarray([0]), True)  # shard 0 only: fine
    with pytest.raises(ArtifactError, match=f"{victim}: bytes \\[0, {len(raw)}\\) differ"):
        read_every_window(path)


def test_replaced_digest_sidecar_is_named(store_and_manifest):
    store, path = store_and_manifest
    victim = shard_file(store, "b", 0, ".xxh")
    flip_byte(victim, -1, 0x01)
    with pytest.raises(ArtifactError, match=f"{victim}: differs from"):
        read_every_window(path)


def test_altered_source_sidecar_is_named(store_and_manifest):
    store, path = store_and_manifest
    victim = shard_file(store, "b", 0, ".src")
    ids = np.fromfile(victim, dtype=np.uint16)
    (ids + 1).astype(np.uint16).tofile(victim)
    with pytest.raises(ArtifactError, match=str(victim)):
        read_every_window(path)


def test_rebuilt_store_is_refused(store_and_manifest, home):
    _store, path = store_and_manifest
    make_store(home, {"a": 900, "b": 401}, RANDOM, seed=5)  # same name and version, different content
    with pytest.raises(ArtifactError, match=r"store\.json"):
        MixtureStream(path)


def test_altered_manifest_is_refused(store_and_manifest):
    _, path = store_and_manifest
    path.write_text(path.read_text().replace('"seed": 1234', '"seed": 1235'))
    with pytest.raises(ArtifactError, match=str(path)):
        MixtureStream(path)
