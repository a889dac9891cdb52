"""A store on a real S3-compatible server (moto's standalone server on loopback, read with s3fs): the same
batches as the local store, a bounded local cache, transient errors retried, a missing object named."""

from dataclasses import replace

import numpy as np
import pytest

from loader import MixtureStream
from loader.files import ReadOptions, StoreAccess
from millrace.cli import main as millrace
from millrace.errors import ArtifactError
from testkit.batches import batch_digest
from testkit.manifests import ManifestFrame, make_manifest
from testkit.s3 import s3_server
from testkit.stores import RANDOM, make_store

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

CELLS = {"a": 30_000, "b": 9_000, "c": 2_000}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """An S3 endpoint on 127.0.0.1 (a real HTTP server speaking the S3 protocol) and a bucket on it."""
    import os

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with s3_server("millrace") as server:
        yield server.storage_options


@pytest.fixture(scope="module")
def copied(s3, tmp_path_factory):
    from millrace.home import Home

    home = Home.resolve(tmp_path_factory.mktemp("object-store"))
    store = make_store(home, CELLS, replace(RANDOM, shards=3))
    manifest = make_manifest(
        home, store, [{"a": 40, "b": 16, "c": 8}, {"a": 8, "b": 8, "c": 48}], ManifestFrame(seq_len=64)
    )
    url = "s3://millrace/stores/t/2026.01.01"
    options = [
        f"--option=key={s3['key']}",
        f"--option=secret={s3['secret']}",
        f'--option=client_kwargs={{"endpoint_url": "{s3["client_kwargs"]["endpoint_url"]}"}}',
    ]
    assert millrace(["--home", str(home.root), "store", "copy", "t/2026.01.01", url, *options]) == 0
    return home, manifest, url


def remote_stream(manifest, url, s3, tmp_path, **options) -> MixtureStream:
    return MixtureStream(
        manifest,
        prefetch=2,
        store=StoreAccess(url=url, storage_options=s3, read=ReadOptions(cache_dir=tmp_path / "cache", **options)),
    )


@pytest.mark.slow
def test_the_copy_on_s3_gives_the_local_stores_batches(copied, s3, tmp_path):
    _, manifest, url = copied
    local = [batch_digest(b) for b in MixtureStream(manifest, prefetch=0).iterate()]
    remote = remote_stream(manifest, url, s3, tmp_path, cache_bytes=1 << 30)
    assert [batch_digest(b) for b in remote.iterate()] == local
    assert remote.tokenizer_store is None and remote.source_names == ["alpha", "beta", "gamma"]
    again = remote_stream(manifest, url, s3, tmp_path, cache_bytes=1 << 30)  # a restart: served from the cache
    assert [batch_digest(again.batch(s)) for s in range(3)] == local[:3]


@pytest.mark.slow
def test_the_local_cache_stays_within_cache_bytes(copied, s3, tmp_path):
    _, manifest, url = copied
    stream = remote_stream(manifest, url, s3, tmp_path, cache_bytes=40_000)
    for _ in stream.iterate():
        pass
    files = list((tmp_path / "cache").glob("*.data"))
    cached = sum(p.stat().st_blocks * 512 for p in files)  # what the sparse files take on disk
    assert len(files) > 1 and 0 < cached <= 40_000


@pytest.mark.slow
def test_transient_read_errors_are_retried_and_a_missing_object_is_named(copied, s3, tmp_path):
    _, manifest, url = copied
    expected = batch_digest(MixtureStream(manifest, prefetch=0).batch(4))
    stream = remote_stream(manifest, url, s3, tmp_path, backoff_s=0.01)
    fs = stream._space.files.fs
    real, failures = fs._cat_file, []

    async def flaky(path, *args, **kwargs):  # the loader reads through the async call, under its deadline
        if len(failures) < 3:
            failures.append(path)
            raise ConnectionResetError("connection reset by peer")
        return await real(path, *args, **kwargs)

    fs._cat_file = flaky
    try:
        assert batch_digest(stream.batch(4)) == expected and len(failures) == 3
    finally:
        fs._cat_file = real

    victim = "millrace/stores/t/2026.01.01/cells/b/shard_00001.bin"
    body = fs.cat_file(victim)
    fs.rm(victim)
    try:
        fresh = remote_stream(manifest, url, s3, tmp_path / "other", retries=1, backoff_s=0.01)
        b = fresh.cell_names.index("b")
        sequences = np.arange(fresh.manifest.cells["b"].sequences_available)
        with pytest.raises(ArtifactError, match=r"s3://millrace/stores/t/2026.01.01/cells/b/shard_00001.bin"):
            fresh._space.read(np.full(sequences.size, b), sequences, np.zeros_like(sequences), True)
    finally:
        fs.pipe_file(victim, body)
