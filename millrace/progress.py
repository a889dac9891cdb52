"""Progress for long commands: a bar on a terminal, else a steady log line at an interval.

Under nohup, Slurm or CI a bar draws nothing until the end; a line every
`MILLRACE_PROGRESS_SECONDS` (default 10) says what is happening instead.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable

log = logging.getLogger("millrace.progress")

DEFAULT_SECONDS = 10.0


def on_terminal() -> bool:
    """Bars are drawn on stderr; a redirected stdout or stderr (nohup, Slurm, CI, `| tee`) means lines."""
    return sys.stderr.isatty() and sys.stdout.isatty()


def interval_seconds() -> float:
    raw = os.environ.get("MILLRACE_PROGRESS_SECONDS")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_SECONDS
    except ValueError:
        return DEFAULT_SECONDS


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class SteadyLines:
    """Logs `line()` at most once per interval (and always when `force`), one whole line per event."""

    def __init__(self, interval: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.interval = interval_seconds() if interval is None else interval
        self.clock = clock
        self.last: float | None = None

    def due(self) -> bool:
        return self.last is None or self.clock() - self.last >= self.interval

    def emit(self, line: str, force: bool = False) -> None:
        if force or self.due():
            self.last = self.clock()
            log.info("%s", line)
