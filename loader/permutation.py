"""Keyed pseudo-random permutations of `range(n)` for any `n`, evaluated pointwise.

A balanced Feistel network over `2h` bits (`2^(2h) >= n`, the smallest such even
width, so fewer than 4n values) is a bijection of `[0, 2^(2h))` whatever its round
function; cycle-walking (re-applying it until the value falls below `n`) restricts it
to a bijection of `[0, n)`. Nothing is materialised: one value costs a few rounds,
and a whole batch is evaluated at once with numpy, each element carrying its own
domain and key, so draws from many cells and epochs go through one vectorised pass.

Keys come from BLAKE2b over (seed, cell name, epoch): a new permutation for every
epoch of a repeated cell, and the same one on every machine and every run.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

ROUNDS = 6
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


@functools.lru_cache(maxsize=1 << 14)
def round_keys(seed: int, cell: str, epoch: int) -> tuple[int, ...]:
    """The ROUNDS 64-bit round keys of the permutation for (seed, cell, epoch)."""
    digest = hashlib.blake2b(f"millrace/feistel/{seed}/{cell}/{epoch}".encode(), digest_size=8 * ROUNDS).digest()
    return tuple(int.from_bytes(digest[8 * i : 8 * i + 8], "little") for i in range(ROUNDS))


def half_width(domain: np.ndarray) -> np.ndarray:
    """Bits per Feistel half: the smallest h >= 1 with 4^h >= domain (domains below 2^53)."""
    _, bits = np.frexp(np.maximum(np.asarray(domain, dtype=np.int64) - 1, 0).astype(np.float64))
    return np.maximum((bits.astype(np.uint64) + np.uint64(1)) // np.uint64(2), np.uint64(1))


def _round_function(right: np.ndarray, key: np.ndarray) -> np.ndarray:
    z = (right + key) * _GOLDEN  # splitmix64's finaliser: uint64 arithmetic wraps, as intended
    z ^= z >> np.uint64(30)
    z *= _MIX_1
    z ^= z >> np.uint64(27)
    z *= _MIX_2
    return z ^ (z >> np.uint64(31))


def _feistel(values: np.ndarray, half: np.ndarray, keys: np.ndarray) -> np.ndarray:
    mask = (np.uint64(1) << half) - np.uint64(1)
    left, right = values >> half, values & mask
    for round_index in range(ROUNDS):
        left, right = right, left ^ (_round_function(right, keys[round_index]) & mask)
    return (left << half) | right


def permute(values: np.ndarray, domain: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`perm_i(values[i])` where perm_i permutes range(domain[i]) under keys[:, i].

    values, domain: int64 arrays of one shape with 0 <= values < domain;
    keys: uint64 array of shape (ROUNDS, *values.shape).
    """
    values = np.asarray(values, dtype=np.uint64)
    domain = np.asarray(domain, dtype=np.uint64)
    if values.size and not (values < domain).all():
        raise ValueError("every value must lie inside its domain")
    half = half_width(domain)
    out = _feistel(values, half, keys)
    pending = np.flatnonzero(out >= domain)
    while pending.size:  # cycle-walking; on average fewer than 3 extra passes
        walked = _feistel(out[pending], half[pending], keys[:, pending])
        out[pending] = walked
        pending = pending[walked >= domain[pending]]
    return out.astype(np.int64)


def permutation(seed: int, cell: str, epoch: int, domain: int) -> np.ndarray:
    """The whole permutation of range(domain) for one (seed, cell, epoch); for tests and tools."""
    values = np.arange(domain, dtype=np.int64)
    keys = np.repeat(np.asarray(round_keys(seed, cell, epoch), dtype=np.uint64)[:, None], domain, axis=1)
    return permute(values, np.full(domain, domain, dtype=np.int64), keys)
