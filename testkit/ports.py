"""A free TCP port on 127.0.0.1, for the tests that start a server or a rendezvous of their own (moto's S3,
torch's c10d and gloo, a Ray head)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel has just handed out and nobody holds (released on return, so take it at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
