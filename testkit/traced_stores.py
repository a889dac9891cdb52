"""A store whose pinned files are real: a byte-level BPE tokenizer trained on the store's own text (its sha256 in
store.json) and the pipeline's trace parts (theirs in cell.json), each document traced to a source, an id and
an origin. For the tests that damage a pinned file or decode a batch back to text and its sources."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from millrace.home import Home
from pipeline.steps.tokenize.tokenization import tokenizer_fingerprint, train_byte_level_bpe
from pipeline.store.trace import write_trace_part
from testkit.stores import Document, StoreContents, StoreFacts, StoreTokenizer, build_mixture, write_store

STORE, VERSION = "t", "2026.01.01"
SOURCES = ["web", "books"]
EOS = "<|endoftext|>"
WORDS = "river mill wheel water channel stone grain flour weir sluice race gate current bank meadow miller season "
WORDS += "harvest bread oven"


def documents(rng: np.random.Generator, count: int) -> list[str]:
    """`count` documents of 12 to 39 words drawn from `WORDS`."""
    return [" ".join(rng.choice(WORDS.split(), size=int(rng.integers(12, 40)))) for _ in range(count)]


def _trace_columns(cell: str, docs: list[Document]) -> dict[str, np.ndarray | list[int] | list[str]]:
    """The trace part of one shard: where each document's tokens start, its source, id and origin."""
    lengths = np.asarray([len(tokens) for tokens, _ in docs], dtype=np.int64)
    return {
        "shard": np.zeros(len(docs), np.int64),
        "document": np.arange(len(docs)),
        "token_start": np.concatenate([[0], np.cumsum(lengths)[:-1]]),
        "tokens": lengths,
        "source": [SOURCES[source] for _, source in docs],
        "id": [f"{cell}-{i}" for i in range(len(docs))],
        "origin": [f"/corpus/{cell}.jsonl"] * len(docs),
        "position": np.arange(1, len(docs) + 1),
    }


def write_traced_store(root: Path) -> Home:
    """Store `t/2026.01.01` under `root/home` (cells c00q0 and c01q1, sources alternating web and books), written
    with the store's own writers, its tokenizer copied in, and the `default` mixture's revisions built on it."""
    home = Home.resolve(root / "home")
    rng = np.random.default_rng(0)
    texts = {"c00q0": documents(rng, 40), "c01q1": documents(rng, 30)}
    tokenizer_file = train_byte_level_bpe([t for cell in texts.values() for t in cell], 300, EOS, root / "tok.json")
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    eos = tokenizer.token_to_id(EOS)
    assert eos is not None, f"{EOS} is not in the trained vocabulary"
    store_dir = home.store(STORE, VERSION)
    cells: dict[str, list[list[Document]]] = {}
    stats: dict[str, dict[str, object]] = {}
    for cell, cell_texts in texts.items():
        docs = [
            (np.asarray(tokenizer.encode(text).ids + [eos], dtype=np.uint16), i % 2)
            for i, text in enumerate(cell_texts)
        ]
        part = write_trace_part(store_dir / "cells" / cell, 0, _trace_columns(cell, docs), shards=1)
        cells[cell], stats[cell] = [docs], {"trace": {"parts": [part]}}
    fingerprint = tokenizer_fingerprint(tokenizer_file)
    write_store(
        home,
        STORE,
        VERSION,
        StoreContents(cells, SOURCES),
        StoreTokenizer(tokenizer.get_vocab_size(), eos, fingerprint, "tokenizer/tokenizer.json"),
        facts=StoreFacts(cell_stats=stats),
    )
    (store_dir / "tokenizer").mkdir()
    shutil.copyfile(tokenizer_file, store_dir / "tokenizer" / "tokenizer.json")
    build_mixture(home, tokens=32 * 8 * 4, seq_len=32, global_batch=8)
    return home
