"""Peak memory of the store's assembly on the driver, at 1x and 8x the tasks (200 cells).

Requirement: assembly holds one task's part file and one cell's pieces at a time, never every task's parts at
once (at 5,000 tasks x 200 cells those are about 3 GB of JSON): its peak grows with one cell's shard table
(a row per task, the manifest it writes), not with tasks x cells. Measured on synthetic part files of the
shape the split tasks write (`parts/<rank>.json`: per cell one shard, one trace part, sources' counts and
three sample texts), each size in a fresh process (`run_child`); the peak is Python's (`tracemalloc`) over
writing every cell's manifest (`pipeline.steps.assemble.write_cells`). Baseline in the same run: every part
file loaded at once and each cell's manifest built from them, as assembly did before.

    python -m bench assembly_memory
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path

from bench.result import Result, run_child

CELLS, BASE_TASKS, SCALE = 200, 50, 8
SOURCES = ("web", "code", "books")


def piece(rank: int, cell: str) -> dict:
    """One task's piece of a cell, as `cell_shards` returns it."""
    counts = {"documents": 40, "tokens": 40_000, "bytes": 160_000}
    return {
        "shards": [{"name": f"shard-{rank:05d}-00000", "documents": 40, "tokens": 40_000, "digest": "ab" * 16}],
        "validation": [],
        "sources": dict.fromkeys(SOURCES, counts),
        "validation_sources": {},
        "given_back_sources": {},
        "trace": {"file": f"documents-{rank:05d}.parquet", "sha256": "cd" * 32, "documents": 40, "shards": 1},
        "held_out_trace": None,
        "samples": [
            {"id": f"{cell}/{rank}/{i}", "source": "web", "text": "word " * 60, "hash": rank * 7 + i} for i in range(3)
        ],
    }


def write_parts(parts: Path, tasks: int) -> None:
    parts.mkdir(parents=True)
    cells = [f"c{d:02d}q{q}" for d in range(40) for q in range(5)][:CELLS]
    for rank in range(tasks):
        body = {"cells": {c: piece(rank, c) for c in cells}, "overlap": {}, "worker": {}, "set_ngrams": {}}
        (parts / f"{rank:05d}.json").write_text(json.dumps(body))


def all_at_once(staging: Path, parts_dir: Path) -> None:
    """The baseline: every part file held at once, each cell's manifest built from them."""
    from pipeline.steps.assemble import _cell_manifest, _written_cell

    parts = [json.loads(p.read_text()) for p in sorted(parts_dir.glob("*.json"), key=lambda p: int(p.stem))]
    for cell in sorted({cell for part in parts for cell in part["cells"]}):
        pieces = [p["cells"][cell] for p in parts if cell in p["cells"]]
        _written_cell(staging, _cell_manifest(cell, pieces, "uint16", "f" * 64, {}))


def child(kind: str, tasks: int) -> dict:
    from pipeline.steps.assemble import write_cells

    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        write_parts(work / "parts", tasks)
        staging = work / "staging"
        (staging / "cells").mkdir(parents=True)
        tracemalloc.start()
        if kind == "ours":
            write_cells(staging, work / "parts", "uint16", "f" * 64, {}, [])
        else:
            all_at_once(staging, work / "parts")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {"peak_mb": peak / 2**20}


def main() -> list[Result]:
    peaks = {}
    for tasks in (BASE_TASKS, BASE_TASKS * SCALE):
        for kind in ("ours", "all-at-once"):
            peaks[kind, tasks] = run_child("bench.bench_assembly_memory", (kind, str(tasks)), os.environ)["peak_mb"]
            print(f"  {tasks:,} tasks x {CELLS} cells, {kind}: peak {peaks[kind, tasks]:,.1f} MB", flush=True)
    small, big = BASE_TASKS, BASE_TASKS * SCALE
    out = [
        Result(
            f"assembly peak memory, {tasks:,} tasks x {CELLS} cells",
            peaks["ours", tasks],
            peaks["all-at-once", tasks],
            "every part file at once",
            "MB",
            higher_is_better=False,
        )
        for tasks in (small, big)
    ]
    out.append(
        Result(
            f"assembly peak memory, {big:,} vs {small:,} tasks x {CELLS} cells",
            peaks["ours", big],
            peaks["ours", small],
            f"{small:,} tasks",
            "MB",
            higher_is_better=False,
            target=1 / 1.2,
        )
    )
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(child(sys.argv[1], int(sys.argv[2]))))
    else:
        for result in main():
            print(result.line())
