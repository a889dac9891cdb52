"""Errors a user sees as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import errno


class MillraceError(Exception):
    """Base of every error that the command line reports as `error: <message>`."""

    exit_code = 2


class ConfigError(MillraceError):
    """A configuration or revision file (or a command-line value) is invalid."""


class Interrupted(MillraceError):
    """Ctrl-C: the message says what to run to continue; the exit status is the shell's 130."""

    exit_code = 130


class ArtifactError(MillraceError):
    """An artifact on disk is missing, corrupt, or of a schema we do not know."""


class Terminated(Interrupted):
    """SIGTERM (a Slurm time limit, a preemption, `scancel`): stopped cleanly; the exit status is the shell's 143."""

    exit_code = 143


class DiskFull(MillraceError):
    """The disk (or a quota) filled while writing: the message names the path; temporaries are removed."""


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def disk_full_cause(exc: BaseException | None) -> OSError | None:
    """The 'no space' OSError behind `exc` (its cause and context chain, or a DCP CheckpointException's
    per-rank failures), or None: where the disk filled, that is the one line a user needs."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            return exc
        failures = getattr(exc, "failures", None)  # DCP's CheckpointException: rank -> (exception, traceback)
        if isinstance(failures, dict):
            for failure in failures.values():
                found = disk_full_cause(failure[0] if isinstance(failure, tuple) else failure)
                if found is not None:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None
