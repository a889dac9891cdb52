"""An S3 server for tests: moto's, in its own process on a free loopback port, stopped by its PID.

`moto_server()` yields its endpoint; `s3_options(endpoint)` are the fsspec `storage_options` that reach
it (the fake credentials moto accepts, its endpoint); `make_bucket` creates a bucket; `upload_tree`
puts a local directory under a URL, file by file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server(start_timeout: float = 60) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (its own process and session); yields `http://127.0.0.1:<port>`."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=10)


def s3_options(endpoint: str) -> dict:
    """fsspec storage_options for s3fs against the server at `endpoint` (moto accepts any credentials)."""
    return {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}


def make_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=bucket)


def upload_tree(local: Path, url: str, options: dict) -> None:
    """Every file under `local`, at the same relative path under `url`."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **options)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"{root.rstrip('/')}/{path.relative_to(local).as_posix()}")


def download_tree(url: str, options: dict) -> dict[str, bytes]:
    """Every object under `url` with its bytes, by relative path (compares with `testkit.corpus.store_files`)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **options)
    root = root.rstrip("/")
    return {path[len(root) + 1 :]: fs.cat_file(path) for path in sorted(fs.find(root))}
