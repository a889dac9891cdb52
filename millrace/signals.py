"""SIGTERM, the way a batch system says stop: a Slurm time limit or a preemption, and `scancel`.

Slurm sends SIGTERM and, KillWait seconds later (30 by default), SIGKILL. Python's default
for SIGTERM is to die on the spot, running no `finally` and no `except KeyboardInterrupt`:
no temporary file removed, no status written, no word on how to continue. Two answers:
- `sigterm_as_interrupt()` (every command, from `millrace.cli`): SIGTERM raises
  `TerminateSignal`, a KeyboardInterrupt, so it takes the path Ctrl-C takes (the pipeline
  stops its pool and says how to continue; atomic writers remove their temporaries);
- `StopRequest` (the training loop): SIGTERM only sets a flag, the loop finishes its step,
  writes a checkpoint, marks the run interrupted and exits 143. A second SIGTERM is obeyed at once.
A clean stop must also be a prompt one (Slurm's SIGKILL follows within 30 s): after a `TerminateSignal`, a
watchdog ends the process with 143 and the same one line if the unwinding has not finished within
`SHUTDOWN_GRACE_SECONDS` (a worker pool that cannot be shut down; the locks are the kernel's, dropped on exit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

TERMINATED_EXIT_CODE = 128 + signal.SIGTERM  # 143: what a shell reports for a process ended by SIGTERM
SHUTDOWN_GRACE_SECONDS = 20.0  # the unwinding after SIGTERM may take this long; then the watchdog exits


class TerminateSignal(KeyboardInterrupt):
    """SIGTERM, raised in the main thread; every `except KeyboardInterrupt` handles it like Ctrl-C."""


_received = threading.Event()


def sigterm_received() -> bool:
    """Whether SIGTERM reached this process under `sigterm_as_interrupt`. A batch system signals the whole
    process group: a worker pool (its forkserver included) can die of it and fail the stage before the
    main thread's `TerminateSignal` is raised, and that failure must read as the stop it is."""
    return _received.is_set()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises `TerminateSignal` (in the main thread; elsewhere nothing changes)."""
    if not _in_main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        if os.getpid() != installer:  # a forked child (the HTML extractor's sandbox): ended as by default,
            os.kill(os.getpid(), signal.SIGTERM)  # no TerminateSignal traceback from a process told to stop
            return
        _received.set()
        watchdogs.append(threading.Timer(SHUTDOWN_GRACE_SECONDS, _exit_now))
        watchdogs[-1].daemon = True
        watchdogs[-1].start()
        raise TerminateSignal()

    watchdogs: list[threading.Timer] = []
    installer = os.getpid()
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        for watchdog in watchdogs:  # the stop has unwound: what is left is the one line that says so
            watchdog.cancel()


def _exit_now() -> None:
    """The watchdog: the stop did not finish unwinding in time; say how to continue and exit 143 at once."""
    command = " ".join(["millrace", *sys.argv[1:]])
    with contextlib.suppress(OSError):
        os.write(
            2,
            f"error: stopped by SIGTERM; shutting down took over {SHUTDOWN_GRACE_SECONDS:g}s, so the process ends "
            f"now; finished work is kept, continue with: {command}\n".encode(),
        )
    os._exit(TERMINATED_EXIT_CODE)


class StopRequest:
    """`with StopRequest() as stop:` SIGTERM sets `stop.requested`; the holder stops at a safe point."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once

    def __enter__(self) -> StopRequest:
        if _in_main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._note)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
