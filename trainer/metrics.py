"""The run's observable record: `run.json` at start and `metrics.jsonl`, one object per logged step.

`metrics.jsonl` is flushed line by line so that a reader (the report's live curves)
can follow it while the run goes on. On resume the lines of steps after the
checkpoint, and a torn last line a crash left, are dropped (atomically; `millrace.jsonl`),
so the file never holds a step twice.
TensorBoard scalars are written too when the `tensorboard` package is installed.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from millrace.artifacts import read_artifact, write_artifact
from millrace.jsonl import cut_back, read_records
from millrace.writer_lock import observed_status

log = logging.getLogger(__name__)

RUN_KIND = "millrace.run"
RUN_SCHEMA_VERSION = 1
METRICS_FILE = "metrics.jsonl"
RUN_FILE = "run.json"
LOCK_FILE = "writer.lock"  # held by the run's writer (`millrace.writer_lock`); its mtime is the heartbeat


def write_run(run_dir: Path, payload: dict[str, Any]) -> str:
    return write_artifact(run_dir / RUN_FILE, RUN_KIND, RUN_SCHEMA_VERSION, payload)


def read_run(run_dir: Path) -> dict[str, Any]:
    return read_artifact(run_dir / RUN_FILE, RUN_KIND, (RUN_SCHEMA_VERSION,))


def observed_run_status(run_dir: Path, run: dict[str, Any]) -> str | None:
    """run.json's status, `stale` where it says `running` and its writer is gone."""
    return observed_status(run.get("status"), run_dir / LOCK_FILE)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    return read_records(run_dir / METRICS_FILE)


def last_record(run_dir: Path, tail_bytes: int = 1 << 16) -> dict[str, Any] | None:
    """The last complete metrics line, read from the file's end (a long run's stream is never read whole)."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return None
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - tail_bytes))
        lines = [line for line in handle.read().split(b"\n") if line.strip()]
    for line in reversed(lines):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def open_resumed(path: Path, start_step: int):
    """`path` (JSON lines with a `step`) opened for appending, after dropping, atomically, the lines of
    steps past `start_step` and a torn last line: a resumed run never holds a step twice."""
    cut_back(path, start_step)
    return open(path, "a", encoding="utf-8")


class MetricsWriter:
    def __init__(self, run_dir: Path, start_step: int, tensorboard: bool):
        self.path = run_dir / METRICS_FILE
        run_dir.mkdir(parents=True, exist_ok=True)
        self.handle = open_resumed(self.path, start_step)
        self.board = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.board = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=start_step)
            except ImportError:
                log.debug("tensorboard is not installed; writing metrics.jsonl only")

    def write(self, record: dict[str, Any]) -> None:
        self.handle.write(json.dumps(finite(record), separators=(",", ":")) + "\n")
        self.handle.flush()
        if self.board is not None:
            step = record["step"]
            for key in ("loss", "lr", "grad_norm", "param_norm", "param_norm_with_router_bias", "tokens_per_second",
                        "mfu", "data_wait_fraction"):
                if isinstance(record.get(key), (int, float)):
                    self.board.add_scalar(key, record[key], step)
            for cell, value in record.get("loss_per_cell", {}).items():
                self.board.add_scalar(f"loss_per_cell/{cell}", value, step)
            for layer in record.get("expert_load", []):
                self.board.add_scalar(f"max_violation/layer{layer['layer']}", layer["max_violation"], step)
            for layer in record.get("router_bias", []):
                self.board.add_scalar(f"router_bias_max_abs/layer{layer['layer']}", layer["max_abs"], step)

    def close(self) -> None:
        self.handle.close()
        if self.board is not None:
            self.board.close()
