"""One writer at a time for a store version, a training run or a ladder, and its heartbeat.

A writer holds an exclusive `flock` on a lock file beside what it writes. The kernel (or the
NFS / Lustre lock manager) drops the lock when the holder dies, however it dies, so a killed
writer never keeps a name: a rerun takes it over at once. The file says who holds it (pid,
host, since), so a second writer is refused in one line naming the holder; while held, a
thread touches the file's mtime every `HEARTBEAT_SECONDS`: a reader on any host tells a live
writer from a dead one (`holder_state`), which turns a `running` left by a SIGKILL into `stale`.

The lock file is never deleted: unlinking a file that another process has opened and is about
to lock would let two writers each lock a different inode of one name.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from millrace.errors import MillraceError

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30.0
STALE_AFTER_SECONDS = 4 * HEARTBEAT_SECONDS  # no heartbeat for this long: the holder is gone
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class Locked(MillraceError):
    """Another live process is writing the same store version, run or ladder."""

    exit_code = 75  # EX_TEMPFAIL: try again once the holder has finished


@dataclass(frozen=True)
class Holder:
    pid: int | None
    host: str | None
    since: str | None
    heartbeat: float | None  # the lock file's mtime, seconds since the epoch

    def describe(self) -> str:
        if self.pid is None:
            return "another process (it has not written its name yet)"
        return f"pid {self.pid} on host {self.host} since {self.since}"


def read_holder(path: Path) -> Holder | None:
    """Who wrote the lock file last (the holder, if the lock is held); None without a lock file."""
    try:
        stat = path.stat()
        body: object = json.loads(path.read_text(encoding="utf-8") or "{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        body, stat = {}, None
    fields: dict[str, object] = body if isinstance(body, dict) else {}
    pid, host, since = fields.get("pid"), fields.get("host"), fields.get("since")
    return Holder(
        pid=pid if isinstance(pid, int) else None,
        host=host if isinstance(host, str) else None,
        since=since if isinstance(since, str) else None,
        heartbeat=stat.st_mtime if stat else None,
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_state(path: Path, now: float | None = None) -> str:
    """'alive', 'gone' (a dead pid on this host, or no heartbeat for STALE_AFTER_SECONDS) or 'unknown'
    (no lock file): what a status reader needs to say `running` or `stale` without taking the lock."""
    holder = read_holder(path)
    if holder is None or holder.pid is None:
        return "unknown"
    if holder.host == socket.gethostname() and not _pid_alive(holder.pid):
        return "gone"
    if holder.heartbeat is not None and (now or time.time()) - holder.heartbeat > STALE_AFTER_SECONDS:
        return "gone"
    return "alive"


class WriterLock:
    """`with WriterLock(path, "run 'x'"):` holds the name for the block, or raises `Locked` naming the holder."""

    def __init__(self, path: Path | str, what: str, heartbeat_seconds: float = HEARTBEAT_SECONDS):
        self.path = Path(path)
        self.what = what
        self.heartbeat_seconds = heartbeat_seconds
        self._fd: int | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> WriterLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(self.path)
            raise Locked(
                f"{self.what} is being written by {holder.describe() if holder else 'another process'} "
                f"(lock {self.path}); wait for it to finish or stop it, then run this again"
            ) from None
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                os.close(fd)
                raise
            log.warning(
                "%s: this filesystem cannot lock files (%s); one writer at a time is not enforced for %s",
                self.path,
                os.strerror(exc.errno or 0),
                self.what,
            )
        self._fd = fd
        self._write_holder()
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name=f"heartbeat {self.path}", daemon=True)
        self._beat.start()
        return self

    def _write_holder(self) -> None:
        since = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}).encode() + b"\n"
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, body, 0)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            fd = self._fd
            if fd is None:  # released meanwhile
                return
            try:
                os.utime(fd)
            except OSError as exc:  # a full or vanished disk: the writer itself will say so
                log.debug("heartbeat %s: %s", self.path, exc)

    def release(self) -> None:
        if self._fd is None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        os.close(self._fd)  # closing the only descriptor drops the flock
        self._fd = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
