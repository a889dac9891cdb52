"""Plain names for runs, stores, mixtures and revisions, and the lists offered when a name is wrong.

A name becomes a directory under $MILLRACE_HOME, so it may hold no path separator and no
leading dot: `--run ../escape` must never write outside `runs/`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import click

from millrace.errors import ArtifactError, ConfigError

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
MAX_NAME_LENGTH = 128  # a directory name (255 bytes at most), and room for the names composed from it
NAME_RULE = f"letters, digits, '.', '_' and '-', starting with a letter or digit, at most {MAX_NAME_LENGTH} characters"
_NAME = re.compile(NAME_PATTERN)


def check_name(value: object, what: str) -> str:
    """`value` if it is a plain name, else a one-line ConfigError naming `what` (e.g. '--run').

    `fullmatch`: `$` alone also matches before a trailing newline, and `--run $'x\\n'` would pass."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > MAX_NAME_LENGTH:
        shown = (
            repr(value)
            if not isinstance(value, str) or len(value) <= 60
            else f"{value[:40]!r}... ({len(value)} characters)"
        )
        raise ConfigError(f"{what} {shown}: not a plain name ({NAME_RULE})")
    return value


def artifact_name(value: object, field: str, artifact: object) -> str:
    """A name read from an artifact (`run.json`'s `run`, `store.json`'s `name`): it becomes a path just as a
    name on the command line does, so it is held to the same rule; else a one-line ArtifactError naming the
    artifact and field (a crafted `run = "../../x"` must not write outside the site)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > MAX_NAME_LENGTH:
        raise ArtifactError(f"{artifact}: field {field!r} {value!r:.80}: not a plain name ({NAME_RULE})")
    return value


def known(kind: str, names: Iterable[str], where: str = "") -> str:
    """The tail of a 'no such name' message: '; revisions of default: natural, uniform-sampling'."""
    names = sorted(set(names))
    scope = f" {where}" if where else ""
    return f"; {kind}{scope}: {', '.join(names)}" if names else f"; there are no {kind}{scope} yet"


def describe(param: click.Parameter | None) -> str:
    if param is None:
        return "name"
    return param.opts[0] if isinstance(param, click.Option) else param.human_readable_name


class PlainName(click.ParamType[str, object]):
    """A click type for name options and arguments; a bad one is `error: --run '../x': not a plain name`."""

    name = "NAME"

    def __init__(self, slash_version: bool = False):
        self.slash_version = slash_version

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        what = describe(param)
        if self.slash_version and isinstance(value, str) and value.count("/") == 1:
            name, version = value.split("/")
            check_name(name, what)
            check_name(version, what)
            return value
        return check_name(value, what)


PLAIN_NAME = PlainName()
STORE_NAME = PlainName(slash_version=True)
