"""Run every benchmark (or those named on the command line) and print ratios against baselines."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help="bench modules to run (default: all bench_*.py)")
    parser.add_argument("--json", action="store_true", help="print results as JSON lines")
    parser.add_argument("--proxies", type=int, help="mix_search: the swarm's proxies (default 64)")
    parser.add_argument(
        "--part",
        action="append",
        default=[],
        help="mix_search: run only this part (swarm, fit, ranking, blas, throughput, records)",
    )
    args = parser.parse_args()
    if args.proxies:
        os.environ["MILLRACE_BENCH_PROXIES"] = str(args.proxies)
    if args.part:
        os.environ["MILLRACE_BENCH_PARTS"] = ",".join(args.part)
    here = Path(__file__).parent
    names = args.names or sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    failed = False
    for name in names:
        known = (here / f"{name}.py").exists()
        module = importlib.import_module(f"bench.{name}" if known else f"bench.bench_{name}")  # `report_page` too
        print(f"== {name}", flush=True)
        for result in module.main():
            if args.json:
                print(json.dumps({**result.__dict__, "ratio": result.ratio}))
            else:
                print("  " + result.line(), flush=True)
            failed |= result.target is not None and result.ratio < result.target
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
