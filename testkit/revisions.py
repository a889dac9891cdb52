"""A valid revision file's contents, and the store cells it names, for the tests that break it field by field."""

from __future__ import annotations

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
