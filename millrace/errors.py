"""Errors a user sees as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Sequence

import pydantic


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
        if isinstance(exc, shutil.Error) and (copied := _copy_failure(exc)) is not None:
            return copied
        failures = getattr(exc, "failures", None)  # DCP's CheckpointException: rank -> (exception, traceback)
        if isinstance(failures, dict):
            for failure in failures.values():
                found = disk_full_cause(failure[0] if isinstance(failure, tuple) else failure)
                if found is not None:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None


def _copy_failure(exc: shutil.Error) -> OSError | None:
    """`shutil.copytree` gathers its failures as (source, destination, message) and drops their errno: a full
    disk among them, as the OSError it was, naming the destination."""
    entries = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
    for entry in entries:
        if len(entry) == 3 and os.strerror(errno.ENOSPC) in str(entry[2]):
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(entry[1]))
    return None


def field_name(loc: Sequence[int | str]) -> str:
    """How an error names the field at `loc`: `field 'phases.0.weights'`."""
    return "field '" + (".".join(str(part) for part in loc) or "<root>") + "'"


def first_validation_error(
    exc: pydantic.ValidationError, name: Callable[[Sequence[int | str]], str] = field_name
) -> str:
    """The first error of a validation, as every config, revision and artifact error says it:
    `field 'a.b': message (got value) (and N more)`; `name` lets a caller name the field its own way."""
    first = exc.errors()[0]
    message = "unknown option" if first["type"] == "extra_forbidden" else first["msg"]
    value = first.get("input")
    hidden = first["type"] in ("missing", "extra_forbidden") or isinstance(value, (dict, list))
    shown = "" if hidden else f" (got {value!r:.60})"
    extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{name(first['loc'])}: {message}{shown}{extra}"
