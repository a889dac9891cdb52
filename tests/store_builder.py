"""One way for the tests to write a small real token store: documents in, shards and manifests out.

Each room's tests make their own documents (random, learnable, hostile...); this writes them
with the store's own `ShardWriter` and manifests, as the pipeline's assembly does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from millrace.home import Home
from pipeline.store.format import (CellManifest, CellSummary, HeldOut, ShardTable, ShardWriter, SourceCounts,
                                   StoreManifest, TokenizerInfo, write_cell_manifest, write_store_manifest)

Document = tuple[np.ndarray, int]  # token ids (EOS included), source index


def write_store(home: Home, name: str, version: str, cells: Mapping[str, Sequence[Sequence[Document]]],
                sources: list[str], *, vocab_size: int, eos_id: int, fingerprint: str = "sha256:test",
                tokenizer_path: str | None = None, bytes_per_token: int = 4, cell_stats: Mapping[str, dict] = {},
                store_stats: dict | None = None, funnel: dict | None = None,
                validation: Mapping[str, Sequence[Document]] = {}) -> Path:
    """`cells[cell]` is a list of shards, each a list of documents; `validation[cell]` the cell's held-out
    documents (one validation shard); returns the store directory."""
    root = home.store(name, version)
    summaries = {}
    for cell, shards in sorted(cells.items()):
        infos, counts = [], {}
        for index, documents in enumerate(shards):
            writer = ShardWriter(root / "cells" / cell / f"shard_{index:05d}", np.uint16, durable=False)
            for tokens, source in documents:
                writer.add_document(tokens, source_id=source)
                count = counts.setdefault(sources[source], SourceCounts())
                count.documents += 1
                count.tokens += len(tokens)
                count.bytes += len(tokens) * bytes_per_token
            infos.append(writer.close())
        documents, tokens = sum(i.documents for i in infos), sum(i.tokens for i in infos)
        held = HeldOut()
        if validation.get(cell):
            writer = ShardWriter(root / "cells" / cell / "validation-00000", np.uint16)
            held_sources: dict[str, SourceCounts] = {}
            for doc, source in validation[cell]:
                writer.add_document(doc, source_id=source)
                count = held_sources.setdefault(sources[source], SourceCounts())
                count.documents += 1
                count.tokens += len(doc)
                count.bytes += len(doc) * bytes_per_token
            info = writer.close()
            held = HeldOut(documents=info.documents, tokens=info.tokens, bytes=info.tokens * bytes_per_token,
                           shards=[info], sources=held_sources)
        manifest = CellManifest(cell=cell, dtype="uint16", tokenizer_fingerprint=fingerprint, documents=documents,
                                tokens=tokens, bytes=tokens * bytes_per_token, shards=ShardTable.of(infos), sources=counts,
                                stats=dict(cell_stats.get(cell, {})), validation=held)
        summaries[cell] = CellSummary(documents=documents, tokens=tokens, bytes=tokens * bytes_per_token,
                                      validation_documents=held.documents, validation_tokens=held.tokens,
                                      manifest_hash=write_cell_manifest(root / "cells" / cell, manifest))
    write_store_manifest(root, StoreManifest(
        name=name, version=version, dtype="uint16", cells=summaries, sources=sources,
        tokenizer=TokenizerInfo(fingerprint=fingerprint, vocab_size=vocab_size, eos_id=eos_id, path=tokenizer_path),
        funnel=funnel or {}, stats=store_stats or {}))
    return root
