"""Fuzzed config documents written as files, for the drills that check every config is accepted or refused in
one line (tests/drills/test_config_fuzz.py, tests/mixtures/test_revision_fuzz.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import tomli_w


def write_toml(path: Path, doc: Mapping[str, object]) -> bool:
    """Write `doc` as TOML; False (and nothing written) when TOML cannot say it (a None, a mixed array):
    nothing a user could write, so nothing to check."""
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):
        return False
    path.write_text(text)
    return True
