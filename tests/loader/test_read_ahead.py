"""The read-ahead over a store on S3 (moto's server on 127.0.0.1, its own process, stopped by PID): the next
batches' chunks are staged concurrently, the batches are the local store's, and what is staged stays within
the byte budget (one batch over at most: a batch is staged whole) and is released when iteration ends; a second
pass is read from the local cache, with no request."""

from dataclasses import replace

import pytest

from loader import MixtureStream
from loader.files import ReadOptions, StoreAccess
from millrace.errors import ConfigError
from millrace.home import Home
from pipeline.store.remote import copy_store
from testkit.batches import batch_digest
from testkit.manifests import ManifestFrame, make_manifest
from testkit.s3 import s3_server
from testkit.stores import RANDOM, make_store

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

CHUNK = 64 << 10


@pytest.fixture(scope="module")
def on_s3(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("read-ahead"))
    store = make_store(
        home, {"a": 400_000, "b": 150_000}, replace(RANDOM, shards=2)
    )  # 17 chunks of .bin over 4 shards
    manifest = make_manifest(home, store, [{"a": 96, "b": 32}], ManifestFrame(seq_len=256))
    with s3_server("millrace") as server:
        url = "s3://millrace/stores/t/2026.01.01"
        copy_store(store, url, server.storage_options)
        yield manifest, url, server.storage_options


def test_read_ahead_gives_the_local_batches_within_its_budget(on_s3, tmp_path):
    manifest, url, options = on_s3
    local = [batch_digest(b) for b in MixtureStream(manifest, prefetch=0).iterate()]
    budget = 3 * CHUNK
    stream = MixtureStream(
        manifest,
        prefetch=0,
        store=StoreAccess(
            url=url,
            storage_options=options,
            read=ReadOptions(cache_dir=tmp_path, readahead_bytes=budget, fetch_bytes=CHUNK, fetch_threads=4),
        ),
    )
    fetcher = stream._space.files.fetcher
    assert fetcher is not None
    stage, staged = fetcher.stage, []

    def observed(file, chunks):  # what is staged after each batch's chunks are pinned
        keys = stage(file, chunks)
        staged.append(fetcher.staged_bytes)
        return keys

    fetcher.stage = observed
    remote = [batch_digest(b) for b in stream.iterate()]
    assert remote == local and len(local) == 16
    one_batch = 8 * 2 * CHUNK  # 8 windows of 257 tokens, each in at most two chunks
    assert staged and 0 < max(staged) <= budget + one_batch
    assert fetcher.staged_bytes == 0  # every batch read, every pin released
    fetched = fetcher.started, fetcher.on_demand
    assert [
        batch_digest(b) for b in stream.iterate(0, len(local))
    ] == local  # a second pass reads the local cache's files
    assert (fetcher.started, fetcher.on_demand) == fetched and fetched[0] > 0


def test_read_ahead_off_reads_on_demand_and_a_negative_budget_is_refused(on_s3, tmp_path):
    manifest, url, options = on_s3
    stream = MixtureStream(
        manifest,
        prefetch=2,
        store=StoreAccess(url=url, storage_options=options, read=ReadOptions(cache_dir=tmp_path, readahead_bytes=0)),
    )
    assert stream._space.files.fetcher is None
    assert [batch_digest(b) for b in stream.iterate(0, 2)] == [
        batch_digest(b) for b in MixtureStream(manifest, prefetch=0).iterate(0, 2)
    ]
    with pytest.raises(ConfigError, match="readahead_bytes -1"):
        ReadOptions(readahead_bytes=-1)
