"""Whether a configured location is an fsspec URL or a path on this machine: one rule for every room.

A URL starts with a protocol (`s3://`, `gs://`, `hf://`, `file://`). `file://` names a local file: code that
reads through fsspec may take it as a URL (fsspec's local filesystem), code that reads local files itself
takes `local_path` of it.
"""

from __future__ import annotations

import re
from pathlib import Path

URL = re.compile(r"^[a-z][a-z0-9+.-]*://")
FILE_PROTOCOL = "file://"


def is_url(location: str) -> bool:
    """Whether `location` starts with a protocol (`s3://...`, `file://...`) rather than being a plain path."""
    return bool(URL.match(location))


def local_path(location: str | Path) -> Path | None:
    """The local path that `location` names (a plain path, or a `file://` URL); None for any other URL."""
    text = str(location)
    if text.startswith(FILE_PROTOCOL):
        return Path(text.removeprefix(FILE_PROTOCOL))
    return None if is_url(text) else Path(text)
