"""Peak memory of `report build` on a run with the 535B shape's per-expert fields, at 1x and 16x the records.

Requirement: `report build` streams a run's metrics, so its memory does not grow with the number of records
(O(1): at most 1.2x from 1x to 16x). Before, it held every record: 500 records of this shape took 0.71 GB and
1,000 took 1.37 GB, so the reference run's 39,025 logged records would have needed about 51 GB.

Each record has what the trainer logs at that shape: 47 MoE layers x 384 experts of loads, router-bias and
load figures per layer, 200 cells' losses and realised tokens, 292 sources' losses, per-group norms, alerts.
Each build runs in a fresh process (`run_child`); the peak is VmHWM less the resident set before the build.
Baseline in the same run: the page built from every record held in memory (`reports.training.load_run` and
`write_run_page`, what `report build` did before and `report watch` still does while it follows a run), at 1x
only: at 16x it would need about 45 GB. The page's bounded parts fill up to 3,000 records: a chunk of 2,000
records, and the overview's buckets of `ceil(records / 1,000)` records each, of which there are
`ceil(records / stride)`: 700 at 2,100 records (stride 3), 1,000 at 3,000, 934 at 8,400, 989 at 33,600. The
overview's tables and the lists built from them are proportional to the buckets, so a base of 2,100 records
measured them 70% full and read their filling as growth (1.23x from 2,100 to 8,400 records)."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

from bench.result import Result, memory_mb, run_child

LAYERS, EXPERTS, CELLS, SOURCES = 47, 384, 200, 292
BASE_RECORDS = 3_000  # past one chunk (2,000 records) and with the overview's 1,000 buckets full: what is bounded
SCALE = 16  # 48,000 records: past the reference run's 39,025 (an 8.6 GB stream)
BUDGET_GROWTH = 1.2


def write_run(home: Path, records: int) -> None:
    """run.json and `records` metrics lines of the 535B shape (the loads' text is shared between lines: what is
    measured is the reader, not the writer)."""
    from millrace.artifacts import write_artifact

    run_dir = home / "runs" / "big"
    run_dir.mkdir(parents=True, exist_ok=True)
    write_artifact(run_dir / "run.json", "millrace.run", 1, {"run": "big", "status": "completed"})
    rng = random.Random(0)
    cells = [f"c{d:02d}q{q}" for d in range(40) for q in range(5)][:CELLS]
    loads = [
        {
            "layer": layer + 1,
            "load": [round(rng.uniform(0.5, 1.5) / EXPERTS, 6) for _ in range(EXPERTS)],
            "max_violation": 0.4,
            "entropy": 0.998,
            "dead_experts": 0,
            "router_entropy": 0.9,
        }
        for layer in range(LAYERS)
    ]
    shared = json.dumps(
        {
            "expert_load": loads,
            "router_bias": [{"layer": layer + 1, "norm": 3.0, "max_abs": 1.2} for layer in range(LAYERS)],
            "param_norm_per_group": dict.fromkeys(("embedding", "attention", "router", "experts"), 100.0),
            "loss_per_source": {f"source-{i:03d}": 2.5 for i in range(SOURCES)},
            "realised_tokens_per_cell": dict.fromkeys(cells, 10**9),
        }
    )[1:-1]
    with open(run_dir / "metrics.jsonl", "w") as stream:
        for step in range(1, records + 1):
            own = {
                "step": step,
                "time": 1.7e9 + step,
                "loss": 2.0 + rng.random(),
                "lr": 3e-4,
                "tokens": step * 46_137_344,
                "grad_norm": 0.3 + rng.random(),
                "loss_per_cell": {cell: 2.0 + rng.random() for cell in cells},
                "alerts": {"started": [], "ended": [], "active": [], "values": {}},
            }
            stream.write(json.dumps(own)[:-1] + ", " + shared + "}\n")


def child(kind: str, home: str, site: str) -> dict:
    """One build in this fresh process: its peak resident memory above the resident set before it."""
    from millrace.home import Home
    from reports import build_pages
    from reports.run_page import write_run_page
    from reports.training import load_run

    base = memory_mb("VmRSS")
    if kind == "streamed":
        build_pages(Home.resolve(home), Path(site), runs=["big"])
    else:
        write_run_page(load_run(Path(home) / "runs" / "big"), Path(site))
    return {"peak_mb": memory_mb("VmHWM") - base}


def measure(kind: str, home: Path, site: Path) -> float:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return run_child("bench.bench_report_memory", (kind, str(home), str(site)), env)["peak_mb"]


def main() -> list[Result]:
    peaks: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-report-memory-") as tmp:
        for records in (BASE_RECORDS, BASE_RECORDS * SCALE):
            home = Path(tmp) / f"home-{records}"
            write_run(home, records)
            for kind in ("streamed", "held") if records == BASE_RECORDS else ("streamed",):
                peaks[kind, records] = measure(kind, home, Path(tmp) / f"site-{kind}-{records}")
            shutil.rmtree(home)
    big = BASE_RECORDS * SCALE
    growth = peaks["streamed", big] / peaks["streamed", BASE_RECORDS]
    return [
        Result(
            f"report build peak memory, {BASE_RECORDS:,} records of the 535B shape",
            peaks["streamed", BASE_RECORDS],
            peaks["held", BASE_RECORDS],
            "every record held (the build before)",
            "MB",
            higher_is_better=False,
        ),
        Result(
            f"report build peak memory, {big:,} records",
            peaks["streamed", big],
            peaks["held", BASE_RECORDS] * SCALE,
            f"every record held, its {BASE_RECORDS:,}-record peak x {SCALE} (not run: too large)",
            "MB",
            higher_is_better=False,
        ),
        Result(
            f"report build peak memory growth from {BASE_RECORDS:,} to {big:,} records",
            growth,
            BUDGET_GROWTH,
            f"the O(1) budget ({BUDGET_GROWTH}x)",
            "x",
            higher_is_better=False,
            target=1.0,
        ),
    ]


if __name__ == "__main__":
    print(json.dumps(child(*sys.argv[1:])))
