"""Errors a user sees as one line and a non-zero exit, never a traceback."""

from __future__ import annotations


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
