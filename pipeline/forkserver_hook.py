"""Imported by datatrove's forkserver before it forks any worker (see `pipeline.runner`).

A batch system stops a job by signalling its whole process group. The pool may be forking a replacement
worker at that moment; the parent then shuts the pool down and unlinks its semaphores, and the new worker,
unpickling its process object, fails with `FileNotFoundError` in `SemLock._rebuild`. That worker has nothing
to do and nothing to report: its traceback would bury the one line that says how to resume.
"""

import sys
import traceback
from types import TracebackType

_default_hook = sys.excepthook


def _worker_orphaned(exc_type: type[BaseException], tb: TracebackType | None) -> bool:
    if not issubclass(exc_type, FileNotFoundError):
        return False
    frames = traceback.extract_tb(tb)
    return bool(frames) and frames[-1].name == "__setstate__" and frames[-1].filename.endswith("synchronize.py")


def _quiet_orphaned_worker(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if _worker_orphaned(exc_type, tb):
        return
    _default_hook(exc_type, exc, tb)


sys.excepthook = _quiet_orphaned_worker
