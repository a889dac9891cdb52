"""The batch gather (pieces cut with numpy, one read per piece, sources by repeat) against the epoch's token
stream rebuilt independently from the shards, where the cutting is hardest: many small blocks, windows that
cross blocks and shards, empty documents, and `.bin` files of several digest chunks."""

import numpy as np
import pytest

from loader import MixtureStream
from millrace.errors import ArtifactError
from testkit.batches import epoch_stream
from testkit.damage import flip_byte
from testkit.manifests import ManifestFrame, make_manifest
from testkit.stores import RANDOM, StoreContents, StoreTokenizer, write_store

EOS, VOCAB = RANDOM.eos, RANDOM.vocab

BLOCK = 37  # documents per shuffled block: a window of SEQ_LEN tokens crosses several
SEQ_LEN = 100


def documents(rng, count: int) -> list[tuple[np.ndarray, int]]:
    """Random documents ending in EOS, about one in twelve empty."""
    docs = []
    for _ in range(count):
        length = 0 if rng.random() < 0.08 else int(rng.integers(1, 160))
        doc = rng.integers(2, VOCAB, size=length).astype(np.uint16)
        if length:
            doc[-1] = EOS
        docs.append((doc, int(rng.integers(0, 3))))
    return docs


@pytest.fixture
def store(home):
    rng = np.random.default_rng(3)
    cells = {
        "x": [documents(rng, 1300) for _ in range(3)],
        "y": [documents(rng, 90)],
    }  # x: ~190 KB (3 chunks) per .bin
    return write_store(home, "gather", "2026.01.01", StoreContents(cells, ["a", "b", "c"]), StoreTokenizer(VOCAB, EOS))


def all_windows(stream: MixtureStream, cell: str, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    sequences = np.arange(stream.manifest.cells[cell].sequences_available)
    cell_id = stream.cell_names.index(cell)
    return stream._space.read(np.full(sequences.size, cell_id), sequences, np.full(sequences.size, epoch), True)


@pytest.mark.slow
@pytest.mark.parametrize("run", [1, 5])  # 5: runs of documents, the last of each block short (37 = 7 x 5 + 2)
def test_every_window_of_several_epochs_equals_the_rebuilt_epoch_stream(home, store, run):
    path = make_manifest(
        home,
        store,
        [{"x": 40, "y": 8}],
        ManifestFrame(seq_len=SEQ_LEN, document_block=BLOCK, document_run=run),
        revision=f"run{run}",
    )
    stream = MixtureStream(path, prefetch=0)
    assert stream._space.cells[stream.cell_names.index("x")].table.tokens[0] * 2 > 1 << 16  # several chunks
    for cell in ("x", "y"):
        for epoch in range(4):
            tokens, sources = epoch_stream(store, cell, stream.manifest.seed, epoch, BLOCK, run)
            windows, window_sources = all_windows(stream, cell, epoch)
            starts = np.arange(windows.shape[0]) * SEQ_LEN
            expected = tokens[starts[:, None] + np.arange(SEQ_LEN + 1)]
            assert np.array_equal(windows, expected), (cell, epoch)
            assert np.array_equal(window_sources, sources[starts[:, None] + np.arange(SEQ_LEN)]), (cell, epoch)
            assert window_sources.dtype == np.int32


def test_a_flipped_byte_in_a_later_chunk_is_named_with_that_chunks_range(home, store):
    victim = store / "cells" / "x" / "shard_00001.bin"
    assert victim.stat().st_size > 70_000
    raw = flip_byte(victim, 70_000)
    stream = MixtureStream(
        make_manifest(home, store, [{"x": 40, "y": 8}], ManifestFrame(seq_len=SEQ_LEN, document_block=BLOCK)),
        prefetch=0,
    )
    with pytest.raises(ArtifactError, match=f"{victim}: bytes \\[65536, {min(len(raw), 1 << 17)}\\) differ"):
        all_windows(stream, "x", 1)


def test_segments_from_the_pieces_equal_segments_after_each_eos_over_four_epochs(home, store):
    """A window of 4 epochs under the run shuffle, rebuilt from the shards: the loader's segments and positions,
    which come from where its pieces start, are the ones a scan for EOS finds, and its per-token sources the
    rebuilt stream's."""
    from loader.packing import pack, pack_segments, token_values

    run = 6
    stream = MixtureStream(
        make_manifest(
            home,
            store,
            [{"x": 40, "y": 8}],
            ManifestFrame(seq_len=SEQ_LEN, document_block=BLOCK, document_run=run),
            revision="segments",
        ),
        prefetch=0,
    )
    x = stream.cell_names.index("x")
    sequences = np.arange(0, stream.manifest.cells["x"].sequences_available, 7)
    for epoch in range(4):
        tokens, sources = epoch_stream(store, "x", stream.manifest.seed, epoch, BLOCK, run)
        windows, starts, segment_sources = stream._space.gather(
            np.full(sequences.size, x), sequences, np.full(sequences.size, epoch), True
        )
        expected = tokens[sequences[:, None] * SEQ_LEN + np.arange(SEQ_LEN + 1)]
        assert np.array_equal(windows, expected)
        packed = pack_segments(windows, starts, segment_sources)
        got_segments, got_positions, got_sources = packed.segment_ids, packed.positions, packed.segment_sources
        assert got_sources is not None
        _, segment_ids, positions, _ = pack(expected, EOS)
        assert np.array_equal(packed.input_ids, expected[:, :-1]) and np.array_equal(packed.labels, expected[:, 1:])
        assert np.array_equal(got_segments, segment_ids) and np.array_equal(got_positions, positions)
        assert np.array_equal(
            token_values(got_sources, got_segments), sources[sequences[:, None] * SEQ_LEN + np.arange(SEQ_LEN)]
        )
        assert segment_ids.max() > 1  # windows hold several documents
