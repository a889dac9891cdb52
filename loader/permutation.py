"""Keyed pseudo-random permutations of `range(n)` for any `n`, evaluated pointwise.

An alternating (unbalanced) Feistel network over `b` bits, `b` the smallest width
with `2^b >= n` (so fewer than 2n values): each round XORs one part of the word with
a keyed function of the other part (high `b - b//2` bits, low `b//2` bits), which is
invertible whatever the function, so the network is a bijection of `[0, 2^b)`.
Cycle-walking (re-applying it until the value falls below `n`) restricts it to a
bijection of `[0, n)`; each step leaves the domain with probability below 1/2.
Nothing is materialised: one value costs a few rounds, and a whole batch is
evaluated at once with numpy, each element carrying its own domain and key, so
draws from many cells and epochs go through one vectorised pass.

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


def widths(domain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) bit widths per element: low + high = max(2, bit_length(domain - 1)); domains below 2^53."""
    _, bits = np.frexp(np.maximum(np.asarray(domain, dtype=np.int64) - 1, 0).astype(np.float64))
    bits = np.maximum(bits, 2).astype(np.uint64)
    low = bits // np.uint64(2)
    return low, bits - low


def _round_function(part: np.ndarray, key: np.ndarray | np.uint64) -> np.ndarray:
    z = (part + key) * _GOLDEN  # splitmix64's finaliser: uint64 arithmetic wraps, as intended
    z ^= z >> np.uint64(30)
    z *= _MIX_1
    z ^= z >> np.uint64(27)
    z *= _MIX_2
    return z ^ (z >> np.uint64(31))


def _feistel(values: np.ndarray, low: np.ndarray, high: np.ndarray, keys: np.ndarray) -> np.ndarray:
    low_mask = (np.uint64(1) << low) - np.uint64(1)
    high_mask = (np.uint64(1) << high) - np.uint64(1)
    upper, lower = values >> low, values & low_mask
    for round_index in range(0, ROUNDS, 2):
        upper = upper ^ (_round_function(lower, keys[round_index]) & high_mask)
        lower = lower ^ (_round_function(upper, keys[round_index + 1]) & low_mask)
    permuted: np.ndarray = (upper << low) | lower
    return permuted


def permute(values: np.ndarray, domain: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`perm_i(values[i])` where perm_i permutes range(domain[i]) under keys[:, i].

    values, domain: int64 arrays of one shape with 0 <= values < domain;
    keys: uint64 array of shape (ROUNDS, *values.shape).
    """
    values = np.asarray(values, dtype=np.uint64)
    domain = np.asarray(domain, dtype=np.uint64)
    if values.size and not (values < domain).all():
        raise ValueError("every value must lie inside its domain")
    low, high = widths(domain)
    out = _feistel(values, low, high, keys)
    pending = np.flatnonzero(out >= domain)
    while pending.size:  # cycle-walking
        walked = _feistel(out[pending], low[pending], high[pending], keys[:, pending])
        out[pending] = walked
        pending = pending[walked >= domain[pending]]
    return out.astype(np.int64)


def permutation(seed: int, cell: str, epoch: int, domain: int) -> np.ndarray:
    """The whole permutation of range(domain) for one (seed, cell, epoch); for tests and tools."""
    values = np.arange(domain, dtype=np.int64)
    keys = np.repeat(np.asarray(round_keys(seed, cell, epoch), dtype=np.uint64)[:, None], domain, axis=1)
    return permute(values, np.full(domain, domain, dtype=np.int64), keys)


def block_shuffle(seed: int, name: str, epoch: int, size: int) -> np.ndarray:
    """A keyed random order of range(size) for a small, whole domain (a block of documents): the indices
    sorted by a keyed splitmix64 hash of each. O(size log size), materialised, so only for blocks; same
    on every machine (integer hashing and a stable sort, no generator whose stream could change)."""
    key = np.uint64(round_keys(seed, name, epoch)[0])
    return np.argsort(_round_function(np.arange(size, dtype=np.uint64), key), kind="stable")


def run_shuffle(seed: int, name: str, epoch: int, size: int, run: int) -> np.ndarray:
    """A keyed random order of range(size) that keeps runs of `run` consecutive values together: the runs
    [0, run), [run, 2 run), ... (the last may be short) in `block_shuffle` order. `run = 1` is
    `block_shuffle` itself."""
    if run == 1:
        return block_shuffle(seed, name, epoch, size)
    runs = -(-size // run)
    firsts = block_shuffle(seed, name, epoch, runs) * run
    lengths = np.minimum(firsts + run, size) - firsts
    within = np.arange(size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    order: np.ndarray = np.repeat(firsts, lengths) + within
    return order
