"""The writer of the run's `metrics.jsonl`, one `trainer.records.MetricsRecord` per logged step.

`metrics.jsonl` is flushed line by line so that a reader (the report's live curves)
can follow it while the run goes on. On resume the lines of steps after the
checkpoint, and a torn last line a crash left, are dropped (atomically; `millrace.jsonl`),
so the file never holds a step twice.
TensorBoard scalars are written too when the `tensorboard` package is installed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TextIO

from millrace.jsonl import cut_back
from trainer.records import METRICS_FILE, SCALARS, MetricsRecord

log = logging.getLogger(__name__)


def open_resumed(path: Path, start_step: int) -> TextIO:
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
                from torch.utils.tensorboard import SummaryWriter  # lazy: heavy (torch)

                self.board = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=start_step)
            except ImportError:
                log.debug("tensorboard is not installed; writing metrics.jsonl only")

    def write(self, metrics: MetricsRecord) -> None:
        self.handle.write(metrics.line() + "\n")
        self.handle.flush()
        if self.board is not None:
            step = metrics.step
            for key in SCALARS:
                value = getattr(metrics, key)
                if isinstance(value, (int, float)):
                    self.board.add_scalar(key, value, step)
            for cell, loss in metrics.loss_per_cell.items():
                self.board.add_scalar(f"loss_per_cell/{cell}", loss, step)
            for layer in metrics.expert_load:
                self.board.add_scalar(f"max_violation/layer{layer.layer}", layer.max_violation, step)
            for bias in metrics.router_bias:
                self.board.add_scalar(f"router_bias_max_abs/layer{bias.layer}", bias.max_abs, step)

    def close(self) -> None:
        self.handle.close()
        if self.board is not None:
            self.board.close()
