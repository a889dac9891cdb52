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

TERMINATED_EXIT_CODE = 128 + signal.SIGTERM  # 143: what a shell reports for a process ended by SIGTERM
SHUTDOWN_GRACE_SECONDS = 20.0  # the unwinding after SIGTERM may take this long; then the watchdog exits


class TerminateSignal(KeyboardInterrupt):
    """SIGTERM, raised in the main thread; every `except KeyboardInterrupt` handles it like Ctrl-C."""


_received = threading.Event()


def sigterm_received() -> bool:
    """Whether SIGTERM reached this process under `sigterm_as_interrupt`. A batch system signals the whole
    process group: a worker pool (its forkserver included) can die of it and fail the phase before the
    main thread's `TerminateSignal` is raised, and that failure must read as the stop it is."""
    return _received.is_set()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class _Watchdog:
    """Ends the process with 143 and one line `SHUTDOWN_GRACE_SECONDS` after a SIGTERM, unless cancelled (the stop
    unwound in time). Started by the Python handler, and by a thread that reads the signal's wakeup fd: a SIGTERM
    the kernel hands to another thread while the main thread waits in C (a lock, a pool's results) runs no Python
    handler until that wait ends, which may be never; the wakeup fd is written at once, from any thread."""

    def __init__(self, command: list[str], handler: Callable[[int, FrameType | None], None]):
        self.command, self.handler = command, handler
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._previous_fd = -1
        self._read = self._write = -1
        self._reading = False  # a thread reads the pipe and owns its read end

    def start(self) -> None:
        _received.set()
        with self._lock:
            if self._timer is None:
                self._timer = threading.Timer(SHUTDOWN_GRACE_SECONDS, _exit_now, (self.command,))
                self._timer.daemon = True
                self._timer.start()

    def watch(self) -> None:
        """Start the thread that reads the wakeup fd (where no other code uses it, e.g. an asyncio loop)."""
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        if self._previous_fd != -1:  # someone else's: left to them
            signal.set_wakeup_fd(self._previous_fd)
        else:
            self._reading = True
            threading.Thread(
                target=self._read_signals, args=(self._read,), name="millrace-sigterm-watch", daemon=True
            ).start()

    def _read_signals(self, read: int) -> None:
        """Owns the pipe's read end and closes it at EOF (`close` shut the write end): were it closed by `close`
        before this thread first reads, its number could be reused (a subprocess's stdout pipe) and read here."""
        try:
            with contextlib.suppress(OSError):
                while data := os.read(read, 64):
                    # only while SIGTERM is ours: a training loop's `StopRequest` takes it as a request to finish
                    # its step and checkpoint, which may take longer than the grace
                    ours = signal.getsignal(signal.SIGTERM) is self.handler
                    if signal.SIGTERM in data and ours and os.getpid() == _installer[0]:
                        self.start()
        finally:
            os.close(read)

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:  # the stop has unwound: what is left is the one line that says so
                self._timer.cancel()
        if self._previous_fd == -1 and self._write != -1:
            signal.set_wakeup_fd(-1)
        owned = (self._write,) if self._reading else (self._write, self._read)
        for fd in owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._read = self._write = -1


_installer = [0]  # the pid that installed the handler: a forked child (the HTML extractor's sandbox) is not it


def _forget_wakeup_fd() -> None:
    """In a forked child: the parent's wakeup pipe is not the child's to write its signals to."""
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)


os.register_at_fork(after_in_child=_forget_wakeup_fd)


@contextlib.contextmanager
def sigterm_as_interrupt(command: list[str] | None = None) -> Iterator[None]:
    """Within the block SIGTERM raises `TerminateSignal` (in the main thread; elsewhere nothing changes).
    `command` is what continues the work, named by the watchdog's line (default: this process's arguments)."""
    if not _in_main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        if os.getpid() != _installer[0]:  # a forked child: ended as by default, with no traceback
            os.kill(os.getpid(), signal.SIGTERM)
            return
        watchdog.start()
        raise TerminateSignal()

    _installer[0] = os.getpid()
    watchdog = _Watchdog(command or ["millrace", *sys.argv[1:]], raise_interrupt)
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    watchdog.watch()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        watchdog.close()


def _exit_now(command: list[str]) -> None:
    """The watchdog: the stop did not finish unwinding in time; say how to continue and exit 143 at once."""
    with contextlib.suppress(OSError):
        os.write(
            2,
            f"error: stopped by SIGTERM; shutting down took over {SHUTDOWN_GRACE_SECONDS:g}s, so the process ends "
            f"now; finished work is kept, continue with: {' '.join(command)}\n".encode(),
        )
    os._exit(TERMINATED_EXIT_CODE)


class StopRequest:
    """`with StopRequest() as stop:` SIGTERM sets `stop.requested`; the holder stops at a safe point."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Callable[[int, FrameType | None], object] | int | None = None

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
