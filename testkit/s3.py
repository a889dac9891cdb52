"""moto's S3 server in its own process on 127.0.0.1 (a free port), for tests and benches that need a real
S3 endpoint: started by the caller, stopped by its PID. Its own process, so that the server's request
handling does not share the reader's interpreter lock (a threaded server would slow the reader it serves).

`with s3_server("bucket") as server:` yields an `S3Server` (`endpoint`, `storage_options` for s3fs,
`create_bucket`); `upload_tree` and `download_tree` copy a local directory to and from a URL, file by file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from testkit.ports import free_port

KEY = "testing"


@dataclass
class S3Server:
    """A running moto S3 server: its endpoint, PID, and fsspec storage options for s3fs."""

    endpoint: str
    pid: int
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def storage_options(self) -> dict[str, object]:
        return {
            "key": KEY,
            "secret": KEY,
            "skip_instance_cache": True,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=KEY, aws_secret_access_key=KEY
        ).create_bucket(Bucket=name)

    def stop(self) -> None:
        """SIGTERM to the server's PID, then SIGKILL if it has not gone within 5 s."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait()


def start_s3_server(timeout: float = 30.0) -> S3Server:
    """Start moto's server on a free loopback port and wait until it answers."""
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": KEY}
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = S3Server(f"http://127.0.0.1:{port}", process.pid, process)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto's S3 server exited with {process.returncode} before answering on port {port}")
        try:
            urllib.request.urlopen(f"{server.endpoint}/moto-api/", timeout=1).close()
            return server
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"moto's S3 server did not answer on port {port} within {timeout:g}s")


@contextlib.contextmanager
def s3_server(*buckets: str) -> Iterator[S3Server]:
    """A moto S3 server with `buckets` created, stopped by PID on exit."""
    server = start_s3_server()
    try:
        for bucket in buckets:
            server.create_bucket(bucket)
        yield server
    finally:
        server.stop()


def upload_tree(local: Path, url: str, options: Mapping[str, object]) -> None:
    """Every file under `local`, at the same relative path under `url`."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **options)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"{root.rstrip('/')}/{path.relative_to(local).as_posix()}")


def download_tree(url: str, options: Mapping[str, object]) -> dict[str, bytes]:
    """Every object under `url` with its bytes, by relative path (compares with `testkit.corpus.store_files`)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **options)
    root = root.rstrip("/")
    return {path[len(root) + 1 :]: fs.cat_file(path) for path in sorted(fs.find(root))}
