"""The mixture search (`millrace mix search`): what bounds a swarm on a small machine.

Parts: the proxy's CPU training throughput against a plain dense PyTorch model of the same FLOPs per token on
the same batches (at least 0.5x), and a proxy's time outside its training steps (`bench/proxy_throughput.py`).
"""

from __future__ import annotations

from bench.result import Result


def main() -> list[Result]:
    from bench import proxy_throughput

    return proxy_throughput.main()
