"""Steady progress lines while a datatrove stage runs: tasks done and documents read so far.

Read from what datatrove writes as tasks finish (`completions/` and `stats/<rank>.json`
under the stage's logging directory), so it works for any executor that shares the disk.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from millrace.progress import SteadyLines


def documents_read(logging_dir: Path) -> int:
    """Documents the first step (the reader) of each finished task read."""
    total = 0
    for path in (logging_dir / "stats").glob("*.json"):
        try:
            steps = json.loads(path.read_text())
            stats = steps[0]["stats"]
            documents = stats.get("read", stats.get("documents", 0))
        except (OSError, ValueError, LookupError, TypeError, AttributeError):
            continue
        total += documents.get("total", 0) if isinstance(documents, dict) else int(documents or 0)
    return total


def tasks_done(logging_dir: Path) -> int:
    completions = logging_dir / "completions"
    return sum(1 for _ in completions.iterdir()) if completions.is_dir() else 0


class StageLines:
    """While a stage runs, a thread logs 'pipeline: filter, 3/8 tasks done, 12,345 documents read'."""

    def __init__(self, label: str, logging_dir: Path, tasks: int, lines: SteadyLines | None = None):
        self.label, self.logging_dir, self.tasks = label, Path(logging_dir), tasks
        self.lines = lines or SteadyLines()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"progress-{label}", daemon=True)

    def line(self) -> str:
        return (f"pipeline: {self.label}, {tasks_done(self.logging_dir)}/{self.tasks} tasks done, "
                f"{documents_read(self.logging_dir):,} documents read")

    def _loop(self) -> None:
        while not self._stop.wait(max(self.lines.interval, 0.05)):
            self.lines.emit(self.line(), force=True)

    def __enter__(self) -> "StageLines":
        self.lines.emit(self.line(), force=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            self.lines.emit(self.line(), force=True)
