import numpy as np
import pytest

from millrace.errors import ArtifactError
from pipeline.store.format import ShardReader, ShardWriter


@pytest.mark.slow
def test_shard_roundtrip_and_megatron_reads_it(tmp_path):
    docs = [np.arange(n, dtype=np.uint16) + n for n in (3, 0, 7, 1)]
    writer = ShardWriter(tmp_path / "shard_00000", np.uint16)
    for doc in docs:
        writer.add_document(doc)
    info = writer.close()
    assert (info.documents, info.tokens) == (4, 11)
    reader = ShardReader(tmp_path / "shard_00000")
    assert [d.tolist() for d in reader] == [d.tolist() for d in docs]

    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    dataset = indexed.IndexedDataset(str(tmp_path / "shard_00000"))
    assert len(dataset) == 4
    assert [dataset[i].tolist() for i in range(4)] == [d.tolist() for d in docs]


def test_truncated_index_is_named(tmp_path):
    writer = ShardWriter(tmp_path / "s", np.uint16)
    writer.add_document([1, 2, 3])
    writer.close()
    idx = tmp_path / "s.idx"
    idx.write_bytes(idx.read_bytes()[:-3])
    with pytest.raises(ArtifactError, match=r"s\.idx"):
        ShardReader(tmp_path / "s")


def test_chunk_digests_sidecar_matches_the_files_and_bulk_add_equals_one_by_one(tmp_path):
    from pipeline.store.format import ShardDigests, digest_hex

    docs = [np.arange(n, dtype=np.uint16) + 2 for n in (5, 1, 9)]
    one = ShardWriter(tmp_path / "one", np.uint16)
    for source, doc in enumerate(docs):
        one.add_document(doc, source_id=source)
    bulk = ShardWriter(tmp_path / "bulk", np.uint16)
    bulk.add_documents(np.concatenate(docs), np.asarray([d.size for d in docs]), np.arange(3))
    first, second = one.close(), bulk.close()
    assert first.digest == second.digest
    raw = (tmp_path / "one.xxh").read_bytes()
    assert digest_hex(raw) == first.digest
    parsed = ShardDigests.parse(raw, "one.xxh")
    assert parsed.to_bytes() == ShardDigests.of_files(tmp_path / "one").to_bytes() == raw
    assert [(f.chunk_bytes, f.digests.size) for f in parsed.files()] == [(64 << 10, 1)] * 3
    with pytest.raises(ArtifactError, match=r"one\.xxh"):
        ShardDigests.parse(raw[:-1], "one.xxh")


def test_digests_computed_while_writing_equal_those_of_the_written_files(tmp_path):
    """Documents of odd sizes straddle the 64 KiB chunks: the digests the writer computed from the bytes as
    they went by must be the ones a reader computes from the files."""
    from pipeline.store.format import ShardDigests

    rng = np.random.default_rng(1)
    writer = ShardWriter(tmp_path / "s", np.uint16, durable=False)
    for size in rng.integers(1, 40_000, size=20):
        writer.add_document(rng.integers(0, 60_000, size=int(size)).astype(np.uint16), source_id=int(size) % 3)
    info = writer.close()
    written = ShardDigests.parse((tmp_path / "s.xxh").read_bytes(), "s.xxh")
    assert written.bin.digests.size > 5 and (tmp_path / "s.bin").stat().st_size % (
        64 << 10
    )  # many chunks, a partial last
    assert written.to_bytes() == ShardDigests.of_files(tmp_path / "s").to_bytes()
    assert ShardReader(tmp_path / "s").tokens == info.tokens
