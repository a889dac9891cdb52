"""Cells as the mixtures room sees them: a name, available tokens, sequences they hold.

Names and patterns: `c03q4` is domain 3, quality bucket 4; a weight key is either
a cell name or an fnmatch pattern (`c03q*` all of domain 3, `c*q4` every q4 cell,
`*` every cell).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

CELL_NAME = re.compile(r"^c(\d+)q(\d+)$")
PATTERN_CHARS = set("*?[")


def bucket_of(cell: str) -> str | None:
    """`q4` for `c03q4`; None for cells that are not (domain, bucket) cells."""
    match = CELL_NAME.match(cell)
    return f"q{int(match.group(2))}" if match else None


def is_pattern(key: str) -> bool:
    return bool(PATTERN_CHARS & set(key))


@dataclass(frozen=True)
class CellTable:
    """Available tokens per cell of one store, viewed at one sequence length."""

    tokens: Mapping[str, int]
    seq_len: int

    def sequences(self, cell: str) -> int:
        """Samples of seq_len + 1 tokens, overlapping by one: (tokens - 1) // seq_len."""
        return max(0, (self.tokens[cell] - 1) // self.seq_len)

    @property
    def sampleable(self) -> list[str]:
        return [cell for cell in sorted(self.tokens) if self.sequences(cell) > 0]

    def match(self, key: str) -> list[str]:
        """Cells a weight key names: itself if it is a cell, else the sampleable cells a pattern matches."""
        if not is_pattern(key):
            return [key] if key in self.tokens else []
        return [cell for cell in self.sampleable if fnmatch.fnmatchcase(cell, key)]

    def expand(self, weights: Mapping[str, float]) -> tuple[dict[str, Fraction], list[str]]:
        """Pattern weights shared by available tokens; returns (exact weights, keys matching nothing)."""
        expanded: dict[str, Fraction] = {}
        unmatched: list[str] = []
        for key, weight in weights.items():
            cells = self.match(key)
            if not cells:
                unmatched.append(key)
                continue
            if not is_pattern(key):
                expanded[key] = expanded.get(key, Fraction(0)) + Fraction(weight)
                continue
            total = sum(self.tokens[cell] for cell in cells)
            for cell in cells:
                expanded[cell] = expanded.get(cell, Fraction(0)) + Fraction(weight) * self.tokens[cell] / total
        return expanded, unmatched
