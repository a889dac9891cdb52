"""Follow a live run: rewrite its page's data files whenever metrics.jsonl or run.json changes.

Polls file sizes and modification times (portable, no inotify dependency); only the new
lines are parsed and only the data chunks they touch are rewritten (`reports.run_data`),
and the open page polls `data/live.js` and updates in place. Stops when asked (Ctrl-C),
after `timeout` seconds, or, with `until_finished`, once run.json says the run is over
(after one last write, whose live.js tells the page to stop polling).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
from reports.run_data import RunSeries
from reports.run_page import REFRESH_SECONDS, run_series
from reports.site import build_run_page
from reports.training import MetricsTail
from trainer.records import FINISHED, METRICS_FILE, RUN_FILE, observed_run_status, read_run

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchEvent:
    """One rebuild, as `on_build` sees it."""

    page: Path
    rebuilds: int
    records: int
    step: int | None
    total_steps: int | None
    status: str


@dataclass(frozen=True)
class WatchOptions:
    """How `watch` follows a run: poll every `interval` seconds; stop once run.json says the run is over
    (`until_finished`) or after `timeout` seconds; the open page polls every `refresh_seconds`; `wait` for a
    run that has not started (its run.json not there yet) instead of failing."""

    interval: float = 2.0
    until_finished: bool = True
    timeout: float | None = None
    refresh_seconds: int = REFRESH_SECONDS
    wait: bool = False

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ConfigError(f"--interval {self.interval}: must be positive")


@dataclass
class WatchResult:
    page: Path
    rebuilds: int
    status: str
    reason: str  # "finished", "timeout", "stopped" (the `stop` event) or "interrupted"


def _pause(seconds: float, stop: threading.Event | None) -> bool:
    """Sleep; True when `stop` was set meanwhile (a caller running watch in a thread ends it so)."""
    if stop is None:
        time.sleep(seconds)
        return False
    return stop.wait(seconds)


def _page_path(home: Home, run: str, out: Path | str | None) -> Path:
    return (home.site if out is None else Path(out)) / "runs" / run / "index.html"


def _signature(run_dir: Path) -> tuple[tuple[int, int] | None, ...]:
    out: list[tuple[int, int] | None] = []
    for name in (RUN_FILE, METRICS_FILE):
        try:
            st = (run_dir / name).stat()
            out.append((st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def _wait_for_start(
    run_dir: Path, interval: float, deadline: float | None, stop: threading.Event | None
) -> str | None:
    """Wait for the run's record to appear; None once it has, else why the wait ended (timeout, stopped,
    interrupted)."""
    log.info("waiting for %s to appear", run_dir / RUN_FILE)
    try:
        while not (run_dir / RUN_FILE).exists():
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout"
            if _pause(interval, stop):
                return "stopped"
    except KeyboardInterrupt:
        return "interrupted"
    return None


@dataclass
class _Rebuilder:
    """The page rebuilt whenever the run's files change, and what the last rebuild saw."""

    home: Home
    run: str
    run_dir: Path
    out: Path | str | None
    refresh_seconds: int
    on_build: Callable[[WatchEvent], None] | None
    page: Path
    tail: MetricsTail
    series: RunSeries = field(default_factory=run_series)  # a new line rewrites the last data chunk only
    seen: tuple[tuple[int, int] | None, ...] | None = None
    rebuilds: int = 0
    status: str = "unknown"

    def rebuild_if_changed(self) -> bool:
        """Rebuild when metrics.jsonl or run.json changed since the last look; True when it did."""
        signature = _signature(self.run_dir)
        if signature == self.seen:
            return False
        self.seen = signature
        run_info = read_run(self.run_dir)
        self.status = observed_run_status(self.run_dir, run_info) or "unknown"
        self.page = build_run_page(
            self.home, self.run, self.out, refresh_seconds=self.refresh_seconds, tail=self.tail, series=self.series
        )
        self.rebuilds += 1
        records = self.tail.records
        log.debug("rebuilt %s: %d records, status %s", self.page, len(records), self.status)
        if self.on_build:
            last_step = records[-1].step if records else None
            self.on_build(
                WatchEvent(self.page, self.rebuilds, len(records), last_step, run_info.total_steps, self.status)
            )
        return True


def watch(
    home: Home | Path | str,
    run: str,
    out: Path | str | None = None,
    options: WatchOptions | None = None,
    stop: threading.Event | None = None,
    on_build: Callable[[WatchEvent], None] | None = None,
) -> WatchResult:
    """Rebuild `SITE/runs/<run>/index.html` as the run's stream grows; returns why it stopped. `stop` ends
    it from another thread; `on_build` sees each rebuild."""
    home = home if isinstance(home, Home) else Home.resolve(home)
    run_dir = home.run(run)
    options = options or WatchOptions()
    interval = options.interval
    deadline = None if options.timeout is None else time.monotonic() + options.timeout
    if not (run_dir / RUN_FILE).exists():
        if not options.wait:
            raise ConfigError(f"run {run!r}: no {RUN_FILE} in {run_dir} (--wait waits for the run to start)")
        why = _wait_for_start(run_dir, interval, deadline, stop)
        if why is not None:
            return WatchResult(page=_page_path(home, run, out), rebuilds=0, status="not started", reason=why)
    page = _page_path(home, run, out)
    tail = MetricsTail(run_dir / METRICS_FILE)
    rebuilder = _Rebuilder(home, run, run_dir, out, options.refresh_seconds, on_build, page, tail)
    reason = "interrupted"
    try:
        while True:
            if rebuilder.rebuild_if_changed() and options.until_finished and rebuilder.status in FINISHED:
                reason = "finished"
                break
            if deadline is not None and time.monotonic() >= deadline:
                reason = "timeout"
                break
            if _pause(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())), stop):
                reason = "stopped"
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    return WatchResult(page=rebuilder.page, rebuilds=rebuilder.rebuilds, status=rebuilder.status, reason=reason)
