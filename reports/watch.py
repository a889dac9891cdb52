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
from dataclasses import dataclass
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
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


def watch(
    home: Home | Path | str,
    run: str,
    out: Path | str | None = None,
    *,
    interval: float = 2.0,
    until_finished: bool = True,
    timeout: float | None = None,
    refresh_seconds: int = REFRESH_SECONDS,
    wait: bool = False,
    stop: threading.Event | None = None,
    on_build: Callable[[WatchEvent], None] | None = None,
) -> WatchResult:
    """Rebuild `SITE/runs/<run>/index.html` as the run's stream grows; returns why it stopped."""
    home = home if isinstance(home, Home) else Home.resolve(home)
    run_dir = home.run(run)
    if interval <= 0:
        raise ConfigError(f"--interval {interval}: must be positive")
    deadline = None if timeout is None else time.monotonic() + timeout
    if not (run_dir / RUN_FILE).exists():
        if not wait:
            raise ConfigError(f"run {run!r}: no {RUN_FILE} in {run_dir} (--wait waits for the run to start)")
        why = _wait_for_start(run_dir, interval, deadline, stop)
        if why is not None:
            return WatchResult(page=_page_path(home, run, out), rebuilds=0, status="not started", reason=why)
    seen = None
    rebuilds = 0
    page = _page_path(home, run, out)
    status = "unknown"
    reason = "interrupted"
    tail = MetricsTail(run_dir / METRICS_FILE)
    series = run_series()  # the page's data chunks: a new line rewrites the last one only
    try:
        while True:
            signature = _signature(run_dir)
            if signature != seen:
                seen = signature
                run_info = read_run(run_dir)
                status = observed_run_status(run_dir, run_info) or "unknown"
                page = build_run_page(home, run, out, refresh_seconds=refresh_seconds, tail=tail, series=series)
                rebuilds += 1
                log.debug("rebuilt %s: %d records, status %s", page, len(tail.records), status)
                if on_build:
                    on_build(
                        WatchEvent(
                            page,
                            rebuilds,
                            len(tail.records),
                            tail.records[-1].step if tail.records else None,
                            run_info.total_steps,
                            status,
                        )
                    )
                if until_finished and status in FINISHED:
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
    return WatchResult(page=page, rebuilds=rebuilds, status=status, reason=reason)
