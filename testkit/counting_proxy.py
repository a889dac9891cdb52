"""A counting HTTP proxy in front of an S3 endpoint (moto's server): the bytes each client read and wrote.

Each request is tied to the process that sent it by its user agent's app id (botocore's `AWS_SDK_UA_APP_ID`,
which `pipeline.remote_work.StagedTask` sets per task, `millrace-<phase>-<rank>`; a process that sets none
counts as "unnamed"). Bytes are bodies only: what a request uploaded, what its answer downloaded.

    with counting_proxy(server.endpoint) as proxy:   # proxy.endpoint replaces the server's in storage options
        ...
        proxy.totals()  # {client: {"read": bytes, "written": bytes, "requests": n}}
"""

from __future__ import annotations

import contextlib
import http.client
import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

APP_ID = re.compile(r"\bapp/(\S+)")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "trailer"}


class CountingProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = urlsplit(upstream)
        self.lock = threading.Lock()
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: {"read": 0, "written": 0, "requests": 0})
        self.paths: dict[tuple[str, str], int] = defaultdict(int)  # (client, object path): bytes read

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, client: str, path: str, read: int, written: int) -> None:
        with self.lock:
            self.paths[client, path] += read
            entry = self.counts[client]
            entry["read"] += read
            entry["written"] += written
            entry["requests"] += 1

    def totals(self) -> dict[str, dict[str, int]]:
        with self.lock:
            return {client: dict(entry) for client, entry in self.counts.items()}

    def read_by_path(self, client: str) -> dict[str, int]:
        """The bytes `client` read, per object path (query left out; a listing: `/<bucket>?prefix=<prefix>`)."""
        with self.lock:
            return {path: n for (who, path), n in self.paths.items() if who == client and n}

    def reads(self) -> dict[str, dict[str, int]]:
        """Per client, the bytes read per object path (or listing), every request counted (an empty answer too)."""
        found: dict[str, dict[str, int]] = defaultdict(dict)
        with self.lock:
            for (who, path), n in self.paths.items():
                found[who][path] = n
        return dict(found)

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.paths.clear()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingProxy

    def log_message(self, format: str, *args: object) -> None:  # quiet: the counts are the record
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                if not size:
                    return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(self.server.upstream.netloc, timeout=120)  # host:port
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            payload = answer.read()
            found = APP_ID.search(self.headers.get("User-Agent", ""))
            client = found.group(1) if found else "unnamed"
            self.server.count(client, _object_path(self.path), len(payload), len(body))
            self.send_response(answer.status, answer.reason)
            head = self.command == "HEAD"  # its Content-Length is the object's, with no body
            for key, value in answer.getheaders():
                if key.lower() not in HOP_BY_HOP and (head or key.lower() != "content-length"):
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        finally:
            upstream.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


def _object_path(target: str) -> str:
    """A request's object path without its query; a bucket listing's as `/<bucket>?prefix=<prefix>`."""
    path, _, query = target.partition("?")
    if path.strip("/").count("/") or not query:
        return path
    prefix = parse_qs(query).get("prefix", [""])[0]
    return f"{path.rstrip('/')}?prefix={prefix}"


@contextlib.contextmanager
def counting_proxy(upstream: str) -> Iterator[CountingProxy]:
    """A counting proxy to `upstream`, serving on a free loopback port from a thread, shut down on exit."""
    proxy = CountingProxy(upstream)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
