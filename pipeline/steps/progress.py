"""Steady progress lines while a phase's executor runs: tasks done and documents read so far.

Tasks done come from datatrove's `completions/`; documents read from what tasks write as they go:
the filter phase's readers (one per source) and the tokenize phase's reader write their running count
of records read (`LiveCount`, one small file per reader and task, at most every `LIVE_SECONDS`), so
the line moves while tasks run and, at the end of the filter phase, equals the records the funnel's
read step received. Other phases count the documents their first step read, from datatrove's
`stats/<rank>.json` of finished tasks. All live on the shared disk, so this works for any executor.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from millrace.artifacts import atomic_write_text
from millrace.progress import SteadyLines

LIVE_SECONDS = 1.0


class LiveCount:
    """A task's running count of records read, written to `path` at most every `LIVE_SECONDS` and at `close`."""

    def __init__(self, path: Path | None):
        self.path, self.count, self._written = path, 0, time.monotonic()

    def update(self, records: int) -> None:
        self.count = records
        if self.path is not None and time.monotonic() - self._written >= LIVE_SECONDS:
            self.close()

    def close(self) -> None:
        if self.path is not None:
            atomic_write_text(self.path, json.dumps({"records": self.count}))
            self._written = time.monotonic()


def live_records(directory: Path) -> int:
    """The records read so far by all the tasks' readers writing `LiveCount`s into `directory`."""
    total = 0
    for path in directory.glob("*.json"):
        try:
            total += int(json.loads(path.read_text())["records"])
        except (OSError, ValueError, LookupError, TypeError):
            continue  # replaced while read: the next line counts it
    return total


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


class PhaseLines:
    """While a phase runs, a thread logs 'pipeline: filter, 3/8 tasks done, 12,345 documents read'."""

    def __init__(
        self,
        label: str,
        logging_dir: Path,
        tasks: int,
        lines: SteadyLines | None = None,
        read: Callable[[], int] | None = None,
    ):
        self.label, self.logging_dir, self.tasks = label, Path(logging_dir), tasks
        self.live = read is not None  # counts records as they are read; else only what finished tasks read
        self.read = read or (lambda: documents_read(self.logging_dir))
        self.lines = lines or SteadyLines()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"progress-{label}", daemon=True)

    def line(self) -> str:
        """A live count says what was read so far; a count of finished tasks says so, and is left out while it
        is zero (dedup rounds read signatures, not documents: '0 documents read' for minutes was untrue)."""
        text = f"pipeline: {self.label}, {tasks_done(self.logging_dir)}/{self.tasks} tasks done"
        if self.live:
            return f"{text}, {self.read():,} documents read"
        finished = self.read()
        return f"{text}, {finished:,} documents read by the finished tasks" if finished else text

    def _loop(self) -> None:
        while not self._stop.wait(max(self.lines.interval, 0.05)):
            self.lines.emit(self.line(), force=True)

    def __enter__(self) -> PhaseLines:
        self.lines.emit(self.line(), force=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            self.lines.emit(self.line(), force=True)
