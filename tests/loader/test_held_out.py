"""Held-out sequences through the loader: pinned by every manifest, never in a training batch, always the same."""

import numpy as np
import pytest

from loader import MixtureStream
from loader.held_out import PAD_LABEL, ValidationSequences
from millrace.errors import ArtifactError
from millrace.home import Home
from mixtures.manifest import read_manifest
from testkit.stores import StoreContents, StoreTokenizer, write_store

EOS, VOCAB, SENTINEL = 1, 300, 299
SOURCES = ["alpha", "beta"]


def documents(rng, count, sentinel=False):
    docs = []
    for _ in range(count):
        doc = rng.integers(2, SENTINEL, size=int(rng.integers(5, 60))).astype(np.uint16)
        if sentinel:
            doc[rng.integers(0, doc.size - 1)] = SENTINEL  # only held-out documents hold this id
        doc[-1] = EOS
        docs.append((doc, int(rng.integers(0, len(SOURCES)))))
    return docs


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("validation-home"))
    rng = np.random.default_rng(5)
    cells = {
        "c00q0": [documents(rng, 80), documents(rng, 40)],
        "c01q1": [documents(rng, 90)],
        "c02q0": [documents(rng, 60)],
    }
    validation = {"c00q0": documents(rng, 6, True), "c01q1": documents(rng, 3, True), "c02q0": documents(rng, 4, True)}
    write_store(home, "v", "2026.01.01", StoreContents(cells, SOURCES, validation), StoreTokenizer(VOCAB, EOS))
    # c02q0 has weight 0 in this revision: its held-out shard must be pinned all the same
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision

    new_revision(
        home,
        NewRevision(
            mixture="mix",
            revision="two",
            store="v",
            phases=["main:2560:explicit"],
            seq_len=16,
            global_batch=4,
            weights={"c00q0": 0.5, "c01q1": 0.5, "c02q0": 0.0},
        ),
    )
    return home, build(home, "mix", "two"), validation


def test_every_cell_held_out_shard_is_pinned_and_read_back_exactly(held_out):
    _, path, validation = held_out
    manifest, _ = read_manifest(path)
    assert sorted(manifest.cells) == ["c00q0", "c01q1"]  # what trains
    assert sorted(manifest.validation) == ["c00q0", "c01q1", "c02q0"]  # what is evaluated
    assert all(
        entry.kind == "cell" and entry.directory == f"cells/{name}" for name, entry in manifest.validation.items()
    )
    sequences = ValidationSequences(path, max_sequences=10_000)
    for index, entry in enumerate(sequences.entries):
        expected = np.concatenate([doc for doc, _ in validation[entry.name]])
        assert entry.tokens == expected.size
        first = sum(e.sequences for e in sequences.entries[:index])
        rows = sequences.rows(first, first + entry.sequences)
        assert (rows.entry_ids == index).all()
        labels = rows.labels[rows.labels != PAD_LABEL]
        assert np.array_equal(labels, expected[1:])  # every held-out token is predicted exactly once
        assert np.array_equal(rows.input_ids[0, :5], expected[:5])
        sources = np.concatenate([np.full(doc.size, src) for doc, src in validation[entry.name]])
        assert np.array_equal(rows.label_sources[rows.labels != PAD_LABEL], sources[1:])


def test_held_out_documents_never_reach_a_training_batch(held_out):
    _, path, _ = held_out
    stream = MixtureStream(path, prefetch=0)
    seen = 0
    for batch in stream.iterate():
        assert not (batch.input_ids == SENTINEL).any() and not (batch.labels == SENTINEL).any()
        seen += batch.input_ids.size
    assert seen == stream.steps * 4 * 16
    rows = ValidationSequences(path, max_sequences=100).rows(0, 3)
    assert (rows.input_ids == SENTINEL).any() or (rows.labels == SENTINEL).any()


def test_the_same_rows_whatever_the_split(held_out):
    _, path, _ = held_out
    sequences = ValidationSequences(path, max_sequences=2)
    assert [e.sequences for e in sequences.entries] == [2, 2, 2] and sequences.total == 6
    whole = sequences.rows(0, 6)
    again = ValidationSequences(path, max_sequences=2)
    parts = [again.rows(a, b) for a, b in ((0, 1), (1, 4), (4, 6))]
    for field in ("input_ids", "labels", "segment_ids", "positions", "entry_ids", "label_sources"):
        assert np.array_equal(getattr(whole, field), np.concatenate([getattr(p, field) for p in parts])), field
    with pytest.raises(Exception, match="outside"):
        sequences.rows(5, 7)


def test_an_altered_validation_shard_is_refused(held_out, tmp_path):
    import shutil

    home, _path, _ = held_out
    copy = tmp_path / "home"
    shutil.copytree(home.root, copy)
    moved = Home.resolve(copy)
    manifest = sorted(moved.stores.glob("v/*/mixtures/mix/two/manifest.json"))[0]
    idx = moved.store("v", "2026.01.01") / "cells" / "c02q0" / "validation-00000.idx"
    idx.write_bytes(idx.read_bytes()[:-8] + b"\x00" * 8)
    with pytest.raises(ArtifactError, match=r"validation-00000\.idx"):
        ValidationSequences(manifest, max_sequences=4)
