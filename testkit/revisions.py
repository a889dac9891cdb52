"""A valid revision file's contents, and the store cells it names, for the tests that break it field by field;
a revision file of the phases a test gives, written where `mix build` looks for it."""

from __future__ import annotations

from pathlib import Path

import tomli_w

from millrace.home import Home
from testkit.stores import grid

CELLS = {**grid(), "c09q0": 0, "c09q1": 100}  # c09q0 is empty, c09q1 too small for one sample


def base() -> dict[str, object]:
    """Revision `r1` of mixture `default` on store `local`: two phases, weights by pattern and a strategy."""
    return {
        "mixture": "default",
        "revision": "r1",
        "seed": 1,
        "seq_len": 256,
        "global_batch": 4,
        "epoch_cap": 8.0,
        "store": {"name": "local"},
        "phases": [
            {"name": "main", "tokens": 65536, "weights": {"c00q0": 0.25, "c01q*": 0.5, "c*q4": 0.25}},
            {"name": "cooldown", "tokens": 8192, "strategy": "uniform", "cells": ["c*q4"]},
        ],
    }


def write_revision_file(
    home: Home, mixture: str, revision: str, phases: list[dict[str, object]], **extra: object
) -> Path:
    """Revision `revision` of `mixture` on store `local` (seq_len 128, global batch 8, epoch cap 4) with `phases`
    and any other top-level fields in `extra`, at the path `mix build` reads."""
    doc = {
        "mixture": mixture,
        "revision": revision,
        "seed": 7,
        "seq_len": 128,
        "global_batch": 8,
        "epoch_cap": 4.0,
        "store": {"name": "local"},
        "phases": phases,
        **extra,
    }
    path = home.revisions / mixture / f"{revision}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(doc))
    return path
