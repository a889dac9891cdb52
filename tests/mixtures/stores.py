"""Small real token stores (shards, cell manifests, store.json) for the mixtures tests."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from millrace.home import Home
from pipeline.store import (
    CellManifest,
    CellSummary,
    ShardWriter,
    SourceCounts,
    StoreManifest,
    TokenizerInfo,
    write_cell_manifest,
    write_store_manifest,
)

VERSION = "2026.11.30"


def make_store(home: Home, cell_tokens: Mapping[str, int], name: str = "local", version: str = VERSION,
               doc_tokens: int = 97, shards_per_cell: int = 2) -> Path:
    """A store whose cells hold `cell_tokens[cell]` tokens in documents of about `doc_tokens`."""
    root = home.store(name, version)
    rng = np.random.default_rng(0)
    summaries = {}
    for cell, total in sorted(cell_tokens.items()):
        lengths = [doc_tokens] * (total // doc_tokens) + ([total % doc_tokens] if total % doc_tokens else [])
        shards = []
        for index in range(shards_per_cell):
            writer = ShardWriter(root / "cells" / cell / f"shard_{index:05d}", np.uint16)
            for length in lengths[index::shards_per_cell]:
                tokens = rng.integers(0, 1000, size=length, dtype=np.uint16)
                tokens[-1] = 0
                writer.add_document(tokens)
            shards.append(writer.close())
        manifest = CellManifest(
            cell=cell, dtype="uint16", tokenizer_fingerprint="sha256:test", documents=len(lengths), tokens=total,
            bytes=total * 4, shards=shards, sources={"test": SourceCounts(documents=len(lengths), tokens=total)},
        )
        digest = write_cell_manifest(root / "cells" / cell, manifest)
        summaries[cell] = CellSummary(documents=len(lengths), tokens=total, bytes=total * 4, manifest_hash=digest)
    write_store_manifest(root, StoreManifest(
        name=name, version=version, dtype="uint16",
        tokenizer=TokenizerInfo(fingerprint="sha256:test", vocab_size=1000, eos_id=0),
        cells=summaries, sources=["test"],
    ))
    return root


def grid(domains: int = 3, buckets: int = 5, base: int = 20000) -> dict[str, int]:
    """Cells cNNqQ with varied sizes."""
    return {f"c{d:02d}q{q}": base * (1 + d) + 701 * q for d in range(domains) for q in range(buckets)}
