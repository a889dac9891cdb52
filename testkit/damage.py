"""Damage a file in place as a disk or a copy does, for the tests that check a reader names what is wrong:
one byte changed, the size and structure kept."""

from __future__ import annotations

from pathlib import Path


def flip_byte(path: Path, at: int | None = None, mask: int = 0x01) -> bytearray:
    """XOR the byte at `at` (the middle one by default; negative counts from the end) with `mask`; the file's
    new bytes."""
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2 if at is None else at] ^= mask
    path.write_bytes(bytes(raw))
    return raw
