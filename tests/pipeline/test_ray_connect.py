"""A Ray cluster with token authentication refuses a driver that has no token: the run stops with one line that
names the cluster and the setting to give, not ray's traceback. RAY_AUTH_MODE=token without a token is refused by
ray.init itself (ray's own `AuthenticationError`) before it connects, so no cluster is started here; ray reads
RAY_AUTH_MODE when it is imported, hence a fresh process. (A driver without RAY_AUTH_MODE gets a bare
`ConnectionError` after ray's retries; `connect_ray` words it the same way.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.ports import free_port

DRIVER = """
from millrace.errors import MillraceError
from millrace.ray_cluster import connect_ray
try:
    connect_ray(1)
except MillraceError as exc:
    raise SystemExit(f"{type(exc).__name__}: {exc}")
"""


@pytest.mark.slow  # a fresh process that imports ray
def test_a_cluster_that_wants_a_token_is_one_line_naming_it(tmp_path):
    pytest.importorskip("ray")
    address = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "RAY_ADDRESS": address,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(tmp_path / "no-token"),
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert last.startswith(f"RayConnectError: Ray cluster {address}: token authentication: RAY_AUTH_TOKEN_PATH")
    assert str(tmp_path / "no-token") in last
