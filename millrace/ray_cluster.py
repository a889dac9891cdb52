"""Connecting this process to Ray as its driver: the one way for the pipeline's executor and the fleet's launcher.

`ray.init` installs its own SIGTERM handler (`sys.exit`) in the driver and never puts the previous one back. A
batch system's stop would then skip the project's own handling (`millrace.signals`), and every process the driver
forks later (a local executor's pool) would inherit a handler where the default ends it on the spot: a forked
worker stuck in C never runs it, and its pool's shutdown waits for it forever. The handler in place before the
call is put back.
"""

from __future__ import annotations

import os
import signal

from millrace.errors import MillraceError


class RayConnectError(MillraceError):
    """The Ray cluster refused the connection (token authentication) or could not be reached."""


def connect_ray(cpus: int) -> None:
    """Connect to $RAY_ADDRESS's cluster, else start a local one of `cpus` CPUs; nothing if already connected.

    A cluster with token authentication refuses a driver without its token: `ray.init` raises
    `AuthenticationError` where RAY_AUTH_MODE=token has no token, and a bare `ConnectionError` after its retries
    where the token is missing or wrong; one line each."""
    # lazy: optional extra (ray), heavy
    import ray
    from ray.exceptions import AuthenticationError

    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, num_cpus=None if address else cpus, include_dashboard=False, log_to_driver=False)
    except AuthenticationError as exc:
        raise RayConnectError(
            f"Ray cluster {address or '(local)'}: token authentication: {' '.join(str(exc).split())}"
        ) from None
    except ConnectionError as exc:
        raise RayConnectError(
            f"Ray cluster {address or '(local)'}: {exc}; a cluster with token authentication needs "
            "RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) in this environment"
        ) from None
    finally:
        if previous is not None and signal.getsignal(signal.SIGTERM) is not previous:
            signal.signal(signal.SIGTERM, previous)
