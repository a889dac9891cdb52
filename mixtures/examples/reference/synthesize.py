"""Synthesize the reference-scale stats file: 200 cells (40 domains x 5 buckets), 23.1T tokens.

The numbers are SYNTHETIC, shaped like the reference run's corpus (domain sizes
spread over two orders of magnitude, lower quality buckets larger), not
measured on any real corpus. Run `python synthesize.py > available_tokens.json`;
the output is deterministic.
"""

from __future__ import annotations

import json
import sys

import numpy as np

TOTAL = 23_100_000_000_000
DOMAINS, BUCKETS = 40, 5
BUCKET_SHARE = np.array([0.27, 0.24, 0.21, 0.16, 0.12])


def synthesize(seed: int = 2025) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    domain = np.sort(rng.lognormal(mean=0.0, sigma=1.1, size=DOMAINS))[::-1]
    raw = domain[:, None] * BUCKET_SHARE[None, :] * rng.lognormal(0.0, 0.25, size=(DOMAINS, BUCKETS))
    tokens = np.floor(raw / raw.sum() * TOTAL).astype(np.int64)
    tokens[0, 0] += TOTAL - int(tokens.sum())
    return {f"c{d:02d}q{q}": int(tokens[d, q]) for d in range(DOMAINS) for q in range(BUCKETS)}


if __name__ == "__main__":
    json.dump({"available_tokens": synthesize()}, sys.stdout, indent=1)
    sys.stdout.write("\n")
