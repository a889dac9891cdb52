"""Small real token stores (shards, cell manifests, store.json) for the mixtures tests."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from millrace.home import Home
from tests.store_builder import write_store

VERSION = "2026.11.30"


def make_store(home: Home, cell_tokens: Mapping[str, int], name: str = "local", version: str = VERSION,
               doc_tokens: int = 97, shards_per_cell: int = 2) -> Path:
    """A store whose cells hold `cell_tokens[cell]` tokens in documents of about `doc_tokens`."""
    rng = np.random.default_rng(0)
    cells = {}
    for cell, total in sorted(cell_tokens.items()):
        lengths = [doc_tokens] * (total // doc_tokens) + ([total % doc_tokens] if total % doc_tokens else [])
        shards = []
        for index in range(shards_per_cell):
            documents = []
            for length in lengths[index::shards_per_cell]:
                tokens = rng.integers(0, 1000, size=length, dtype=np.uint16)
                tokens[-1] = 0
                documents.append((tokens, 0))
            shards.append(documents)
        cells[cell] = shards
    return write_store(home, name, version, cells, ["test"], vocab_size=1000, eos_id=0,
                       tokenizer_path="tokenizer/tokenizer.json")


def grid(domains: int = 3, buckets: int = 5, base: int = 20000) -> dict[str, int]:
    """Cells cNNqQ with varied sizes."""
    return {f"c{d:02d}q{q}": base * (1 + d) + 701 * q for d in range(domains) for q in range(buckets)}
