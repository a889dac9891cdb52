"""A real token store (written with the store's ShardWriter) and a mixture built from it.

Documents follow a fixed Zipf-like unigram law with a repeated bigram pattern, so a
model can learn them and its loss must fall from ln(vocab).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from millrace.home import Home
from tests.store_builder import write_store

EOS = 1
VOCAB = 256
SOURCES = ["docs", "code", "man"]


def make_store(home: Home, cells: dict[str, int], name: str = "t", version: str = "2026.01.01", seed: int = 0,
               vocab: int = VOCAB, held_out: int = 0) -> Path:
    """`held_out`: the first documents of each cell's draw that go to its validation shard instead."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(2, vocab)
    probs = 1.0 / (ranks - 1.0) ** 1.1
    probs /= probs.sum()
    documents, validation = {}, {}
    for c, (cell, tokens) in enumerate(sorted(cells.items())):
        docs, written = [], 0
        while written < tokens:
            length = int(min(rng.integers(8, 96), tokens - written))
            doc = rng.choice(ranks, size=length, p=probs).astype(np.uint16)
            doc[1::2] = (doc[0::2][: len(doc[1::2])] + 7 * (c + 1)) % (vocab - 2) + 2  # learnable bigrams
            doc[-1] = EOS
            docs.append((doc, int(rng.integers(0, len(SOURCES)))))
            written += length
        documents[cell] = [docs[held_out:]]
        validation[cell] = docs[:held_out]
    return write_store(home, name, version, documents, SOURCES, vocab_size=vocab, eos_id=EOS, fingerprint="test",
                       bytes_per_token=2, validation=validation)


def build_mixture(home: Home, store: str = "t", mixture: str = "default", revision: str = "uniform-sampling",
                  tokens: int = 0, seq_len: int = 32, global_batch: int = 8) -> Path:
    """The mixtures room's own `mix new` + `mix build` on the store: a real built manifest."""
    from mixtures.build import build
    from mixtures.new import new_revision

    phases = [f"main:{tokens}:uniform"] if tokens else None
    new_revision(home, mixture, revision, store, strategy="uniform", phases=phases, seq_len=seq_len,
                 global_batch=global_batch)
    return build(home, mixture, revision)
