"""One benchmark figure: ours against a named baseline measured in the same run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_child(module: str, args: tuple[str, ...], env: Mapping[str, str]) -> dict:
    """`python -m module *args` in a fresh process from the repository root; its last stdout line is JSON."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=dict(env), capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"bench child {args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def best_of(run: Callable[[], object], repeats: int = 3) -> float:
    """Fastest wall time of a few runs of `run` (the machine is shared; the same rule for every system)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def memory_mb(field: str) -> float:
    """A /proc/self/status figure in MB: VmRSS (resident), VmHWM (peak resident, reset at exec), RssAnon
    (resident anonymous memory: heap and indices, without the shard pages that memmaps map in)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


@dataclass(frozen=True)
class Result:
    name: str
    ours: float
    baseline: float
    baseline_name: str
    unit: str
    higher_is_better: bool = True
    target: float | None = None  # the ratio the requirement asks for, if any

    @property
    def ratio(self) -> float:
        if self.higher_is_better:
            return self.ours / self.baseline if self.baseline else float("inf")
        return self.baseline / self.ours if self.ours else float("inf")

    def line(self) -> str:
        target = (
            ""
            if self.target is None
            else f"  (target ≥ {self.target:g}: {'met' if self.ratio >= self.target else 'NOT met'})"
        )
        return (
            f"{self.name}: {self.ours:,.4g} {self.unit} vs {self.baseline_name} {self.baseline:,.4g} {self.unit}"
            f" -> ratio {self.ratio:.2f}{target}"
        )
