"""Drill: a store on S3 (moto's server on loopback, its own process, stopped by PID) read through a small
loopback proxy that injects faults into ranged reads: a connection reset, a server that never answers, a
body cut short. Each read gives up after `read_timeout`, is retried by the loader alone (the proxy counts
retries + 1 requests, not a product of s3fs's and botocore's retries; aiohttp reopens a reset keep-alive
connection once), logs each retry, and ends in one line
naming the object's URL and byte range. A damaged local cache entry is dropped and fetched again.

The write side: PUTs reset or never answered. Publishing a store (`[output] url`) fails in one line naming the
object, and a rerun resumes the copy and completes the bucket, `store.json` last; `store copy` gives up at its
deadline; a URL holding another store version is refused."""

import http.client
import json
import logging
import os
import socket
import struct
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loader import MixtureStream
from loader.files import ReadOptions, StoreAccess
from millrace.cli import main as millrace
from millrace.errors import ArtifactError
from testkit.batches import batch_digest
from testkit.damage import flip_byte
from testkit.manifests import ManifestFrame, make_manifest
from testkit.s3 import s3_server
from testkit.stores import RANDOM, make_store

pytest.importorskip("s3fs")
pytest.importorskip("moto")

CELLS = {"a": 20_000, "b": 6_000}
URL = "s3://millrace/stores/t/2026.01.01"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def moto_endpoint():
    with s3_server("millrace") as server:
        yield server.endpoint


class FaultProxy(BaseHTTPRequestHandler):
    """Forwards every request to moto; ranged GETs get `server.fault` instead (and are counted)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._forward()

    def do_PUT(self):
        if self.server.put_fault is not None and self.server.puts_left <= 0:
            self.server.refused_puts += 1
            if self.server.put_fault == "hang":
                self.server.stop.wait(30)
            self._reset()
            return
        self.server.puts_left -= 1
        self._forward()

    def _reset(self):
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def do_GET(self):
        fault = self.server.fault
        if "Range" in self.headers:
            self.server.ranged.append(self.path)
            if fault == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            if fault == "hang":
                self.server.stop.wait(30)
                self.close_connection = True
                return
        self._forward(truncate=fault == "truncate" and "Range" in self.headers)

    def _forward(self, truncate=False):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=10)
        upstream.request(
            self.command,
            self.path,
            body=body or None,
            headers={k: v for k, v in self.headers.items() if k.lower() != "host"},
        )
        response = upstream.getresponse()
        data = response.read()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2] if truncate else data)
        if truncate:  # the body stops half-way and the connection stays open: a stall, as on a bad link
            self.wfile.flush()
            self.server.stop.wait(30)
            self.close_connection = True
        upstream.close()


@pytest.fixture(scope="module")
def proxy(moto_endpoint):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FaultProxy)
    server.daemon_threads = True
    server.upstream = ("127.0.0.1", int(moto_endpoint.rsplit(":", 1)[1]))
    server.fault, server.ranged, server.stop = None, [], threading.Event()
    server.put_fault, server.puts_left, server.refused_puts = None, 0, 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stop.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def copied(moto_endpoint, tmp_path_factory):

    from millrace.home import Home

    for key, value in CREDENTIALS.items():
        os.environ.setdefault(key, value)
    home = Home.resolve(tmp_path_factory.mktemp("remote-faults"))
    store = make_store(home, CELLS, replace(RANDOM, shards=2))
    manifest = make_manifest(home, store, [{"a": 24, "b": 8}], ManifestFrame(seq_len=64))
    assert (
        millrace(
            [
                "--home",
                str(home.root),
                "store",
                "copy",
                "t/2026.01.01",
                URL,
                "--option=key=testing",
                "--option=secret=testing",
                f'--option=client_kwargs={{"endpoint_url": "{moto_endpoint}"}}',
            ]
        )
        == 0
    )
    return manifest


def through(proxy) -> dict:
    return through_endpoint(f"http://127.0.0.1:{proxy.server_address[1]}")


def through_endpoint(endpoint: str) -> dict:
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }


def stream(manifest, proxy, cache, **options) -> MixtureStream:
    return MixtureStream(
        manifest,
        prefetch=0,
        store=StoreAccess(url=URL, storage_options=through(proxy), read=ReadOptions(cache_dir=cache, **options)),
    )


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["reset", "hang", "truncate"])
def test_a_faulty_server_is_retried_in_one_layer_then_named(copied, proxy, tmp_path, caplog, fault):
    proxy.fault, proxy.ranged[:] = None, []
    reader = stream(copied, proxy, tmp_path / "cache", retries=1, backoff_s=0.05, read_timeout=1.5)
    proxy.fault = fault
    caplog.set_level(logging.WARNING, logger="loader.files")
    try:
        with pytest.raises(ArtifactError) as caught:
            reader.batch(0)
    finally:
        proxy.fault = None
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{URL}/cells/") and " bytes [" in message and "after 2 attempts" in message, message
    if fault != "reset":
        assert "stalled: no complete answer within read_timeout 1.5s" in message, message
    first = proxy.ranged[0]
    # retries + 1 requests: no layer below retried on its own (it was s3fs's 5 x 5 over botocore's). A reset
    # keep-alive connection is reopened once by aiohttp, for an idempotent GET: at most 2 per attempt.
    assert proxy.ranged.count(first) == 2 if fault != "reset" else 2 <= proxy.ranged.count(first) <= 4, proxy.ranged
    name = first.rsplit("/", 1)[1]
    retries = [r for r in caplog.records if "retry" in r.getMessage() and name in r.getMessage()]
    assert len(retries) == 1, [r.getMessage() for r in caplog.records]


@pytest.mark.slow
def test_a_damaged_cache_entry_is_fetched_again_not_blamed_on_the_object(copied, proxy, tmp_path, caplog):
    proxy.fault, proxy.ranged[:] = None, []
    expected = batch_digest(MixtureStream(copied, prefetch=0).batch(0))
    cache = tmp_path / "cache"
    assert batch_digest(stream(copied, proxy, cache).batch(0)) == expected
    fetched = len(proxy.ranged)
    victim = max(cache.glob("*.data"), key=lambda p: p.stat().st_blocks)  # a shard file's fetched chunks
    held = victim.with_suffix(".have").read_bytes()
    chunk = 64 << 10
    at = held.index(1) * chunk + min(chunk, victim.stat().st_size - held.index(1) * chunk) // 2  # inside a held chunk
    data = flip_byte(victim, at, 0xFF)
    caplog.set_level(logging.WARNING, logger="loader.files")
    assert batch_digest(stream(copied, proxy, cache).batch(0)) == expected  # a new process: nothing checked yet
    assert len(proxy.ranged) > fetched, "the damaged chunk is fetched again"
    assert any(str(victim) in r.getMessage() and "local disk" in r.getMessage() for r in caplog.records)
    assert victim.exists() and victim.read_bytes() != bytes(data), "the entry is replaced by good bytes"


def publishing_config(tmp_path, proxy, version: str, vocab: int = 400):
    from testkit.corpus import config_text, make_corpus

    port = proxy.server_address[1]
    options = (
        '{ key = "testing", secret = "testing", client_kwargs = '
        f'{{ endpoint_url = "http://127.0.0.1:{port}", region_name = "us-east-1" }} }}'
    )
    corpus = tmp_path / "corpus"
    if not corpus.exists():
        make_corpus(corpus, documents=60)
    text = config_text(corpus, version=version, workers=1).replace(
        "[output]\n", f'[output]\nurl = "s3://millrace/published"\nstorage_options = {options}\n'
    )
    path = tmp_path / f"pipeline-{version}-{vocab}.toml"
    path.write_text(text.replace("vocab_size = 400", f"vocab_size = {vocab}"))
    return path


@pytest.mark.slow
def test_a_publication_cut_by_resets_on_put_is_resumed_by_the_rerun_and_never_overwritten(proxy, tmp_path, capsys):
    from testkit.corpus import store_files
    from testkit.s3 import download_tree

    config = publishing_config(tmp_path, proxy, "2026.05.01")
    home = tmp_path / "home"
    proxy.put_fault, proxy.puts_left, proxy.refused_puts = "reset", 3, 0
    try:
        failed = millrace(["--home", str(home), "pipeline", "run", str(config), "--json"])
    finally:
        proxy.put_fault = None
    err = capsys.readouterr().err.strip().splitlines()
    assert failed != 0 and proxy.refused_puts > 0
    assert err[-1].startswith("error: s3://millrace/published/local/2026.05.01/") and "write failed after" in err[-1]
    assert "Traceback" not in "\n".join(err)
    opts = {**through(proxy), "skip_instance_cache": True}
    url = "s3://millrace/published/local/2026.05.01"
    first = download_tree(url, opts)
    assert len(first) == 3 and "store.json" not in first, "store.json goes up last"

    proxy.puts_left = 1000
    assert millrace(["--home", str(home), "pipeline", "run", str(config), "--json"]) == 0
    local = store_files(home / "stores" / "local" / "2026.05.01")
    assert download_tree(url, opts) == local
    assert 1000 - proxy.puts_left == len(local) - len(first), "the rerun resumed the copy: what was there is kept"
    capsys.readouterr()

    other = publishing_config(tmp_path, proxy, "2026.05.01", vocab=300)  # another config, the same version
    assert millrace(["--home", str(tmp_path / "home-2"), "pipeline", "run", str(other)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error:") and url in line and "refusing to overwrite" in line, line
    assert download_tree(url, opts) == local


@pytest.mark.slow
def test_store_copy_gives_up_on_a_put_that_never_answers_at_its_deadline_in_one_line(
    moto_endpoint, proxy, tmp_path, capsys
):
    import time

    from millrace.home import Home

    store = make_store(Home.resolve(tmp_path), {"a": 2_000}, replace(RANDOM, shards=1))
    proxy.put_fault, proxy.puts_left, proxy.refused_puts = "hang", 0, 0
    started = time.monotonic()
    try:
        code = millrace(
            ["--home", str(tmp_path), "store", "copy", str(store), "s3://millrace/stalled/t"]
            + ["--timeout", "1", "--retries", "1"]
            + [f"--option={k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in through(proxy).items()]
        )
    finally:
        proxy.put_fault = None
    took = time.monotonic() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and proxy.refused_puts == 2, (code, proxy.refused_puts, err)
    assert err[-1].startswith("error: s3://millrace/stalled/t/") and "write failed after 2 attempts" in err[-1]
    assert "stalled: no complete answer within --timeout 1s" in err[-1], err[-1]
    assert took < 10, took


@pytest.mark.slow
def test_store_copy_to_a_missing_bucket_is_one_line_naming_it(moto_endpoint, proxy, tmp_path, capsys):
    from millrace.home import Home

    store = make_store(Home.resolve(tmp_path), {"a": 2_000}, replace(RANDOM, shards=1))
    options = [f"--option={k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in through(proxy).items()]
    code = millrace(["--home", str(tmp_path), "store", "copy", str(store), "s3://no-such-bucket/t", *options])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in "\n".join(err), err
    assert err[0].startswith("error: s3://no-such-bucket/t/") and "no such bucket" in err[0], err


def fake_store(root, cells: int, files: int = 4):
    """A store's shape for copying: `files` small files in each of `cells` folders, and its store.json."""
    for cell in range(cells):
        (root / "cells" / f"c{cell:03d}").mkdir(parents=True)
        for n in range(files):
            (root / "cells" / f"c{cell:03d}" / f"shard-{n:05d}.bin").write_bytes(bytes([n]) * (100 + n))
    (root / "store.json").write_bytes(b'{"cells": %d}' % cells)
    return root


def listings(proxy, bucket: str = "millrace") -> dict[str, int]:
    """Bytes read per listing (`/<bucket>?prefix=...`) by this process through the counting proxy."""
    return {p: n for p, n in proxy.read_by_path("unnamed").items() if p.startswith(f"/{bucket}?prefix=")}


@pytest.mark.slow
def test_a_first_copy_probes_the_url_and_lists_one_folder_at_a_time_at_1x_and_8x(moto_endpoint, tmp_path):
    from pipeline.store.remote import copy_store
    from testkit.counting_proxy import counting_proxy

    largest, root_listed = {}, {}
    with counting_proxy(moto_endpoint) as counting:
        options = {**through_endpoint(counting.endpoint), "skip_instance_cache": True}
        for cells in (2, 16):
            url = f"s3://millrace/firsts/x{cells}"
            store = fake_store(tmp_path / f"x{cells}", cells)
            counting.reset()
            assert copy_store(store, url, options) == cells * 4 + 1
            read = listings(counting)
            largest[cells], root_listed[cells] = max(read.values()), read.get(f"/millrace?prefix=firsts/x{cells}/", 0)
    # the probe reads at most one key of the URL's listing; a listing holds one folder, however many there are
    assert root_listed[16] <= 1.2 * root_listed[2] and root_listed[16] < 2_000, root_listed
    assert largest[16] <= 1.2 * largest[2], largest


@pytest.mark.slow
def test_a_copy_cut_part_way_is_resumed_folder_by_folder(moto_endpoint, tmp_path):
    import s3fs

    from pipeline.store.remote import copy_store
    from testkit.s3 import download_tree

    store, url = fake_store(tmp_path / "s", 3), "s3://millrace/resumed/s"
    options = {**through_endpoint(moto_endpoint), "skip_instance_cache": True}
    assert copy_store(store, url, options) == 3 * 4 + 1
    fs = s3fs.S3FileSystem(**options)
    fs.rm(["millrace/resumed/s/store.json", "millrace/resumed/s/cells/c001/shard-00003.bin"])
    fs.rm("millrace/resumed/s/cells/c002", recursive=True)  # a copy cut before its last folder and marker
    assert copy_store(store, url, options) == 1 + 4 + 1
    assert download_tree(url, options) == {p.relative_to(store).as_posix(): p.read_bytes() for p in store.rglob("*.*")}
