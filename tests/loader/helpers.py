"""Small real stores and built manifests for the loader tests (counts set by the test)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from millrace.artifacts import sha256_file
from millrace.home import Home
from mixtures.manifest import BuiltManifest, ManifestCell, ManifestPhase, StoreRef, manifest_path, write_manifest
from pipeline.store.format import CELL_SCHEMA_VERSION, SCHEMA_VERSION, StoreManifest, write_stats_only_store
from tests.store_builder import write_store

EOS = 1
VOCAB = 500
SOURCES = ["alpha", "beta", "gamma"]


def make_store(home: Home, cells: dict[str, int], shards: int = 2, seed: int = 0, name: str = "t",
               version: str = "2026.01.01") -> Path:
    """A store whose cell c holds about cells[c] tokens in `shards` shards of random documents."""
    rng = np.random.default_rng(seed)
    documents = {}
    for cell, tokens in sorted(cells.items()):
        documents[cell], written = [], 0
        for shard in range(shards):
            target, docs = tokens * (shard + 1) // shards, []
            while written < target:
                length = int(min(rng.integers(1, 120), target - written))
                doc = rng.integers(2, VOCAB, size=length).astype(np.uint16)
                doc[-1] = EOS
                docs.append((doc, int(rng.integers(0, len(SOURCES)))))
                written += length
            documents[cell].append(docs)
    tokenizer = home.store(name, version) / "tokenizer" / "tokenizer.json"
    write_tokenizer(tokenizer)  # first: store.json pins its fingerprint, which readers check
    return write_store(home, name, version, documents, SOURCES, vocab_size=VOCAB, eos_id=EOS,
                       fingerprint=sha256_file(tokenizer), tokenizer_path="tokenizer/tokenizer.json")


def write_tokenizer(path: Path) -> None:
    """A word-level tokenizer whose id i decodes to `w<i>` (EOS is `<eos>`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(VOCAB)}
    vocab["<eos>"] = EOS
    del vocab[f"w{EOS}"]
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece()
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))


def make_stats_store(home: Home, cells: dict[str, int], name: str = "plan", version: str = "2026.01.01") -> Path:
    root = home.store(name, version)
    write_stats_only_store(root, name, version, cells)
    return root


def make_manifest(home: Home, store_root: Path, phases: list[dict[str, int]], seq_len: int = 16,
                  global_batch: int = 8, seed: int = 1234, mixture: str = "mix", revision: str = "r1",
                  phase_names: list[str] | None = None, document_block: int = 1024, document_run: int = 1) -> Path:
    """A BuiltManifest over `store_root` with exactly the given per-phase counts."""
    from millrace.artifacts import HASH_FIELD, payload_of, read_artifact

    body = read_artifact(store_root / "store.json", "millrace.store", (SCHEMA_VERSION,))
    store = StoreManifest.model_validate(payload_of(body))
    cells = {}
    for name, summary in store.cells.items():
        shards = 0
        if not store.stats_only:
            cell_body = read_artifact(store_root / "cells" / name / "cell.json", "millrace.cell", (CELL_SCHEMA_VERSION,))
            shards = len(cell_body["shards"]["names"])
        cells[name] = ManifestCell(name=name, available_tokens=summary.tokens, documents=summary.documents,
                                   sequences_available=max(0, (summary.tokens - 1) // seq_len),
                                   cell_manifest_hash=summary.manifest_hash, shards=shards)
    built_phases, position = [], 0
    for p, counts in enumerate(phases):
        sequences = sum(counts.values())
        assert sequences % global_batch == 0, "test counts must fill whole batches"
        built_phases.append(ManifestPhase(
            name=(phase_names or [f"phase{i}" for i in range(len(phases))])[p], token_budget=sequences * seq_len,
            start_position=position, sequences=sequences, start_step=position // global_batch,
            steps=sequences // global_batch, counts=counts,
            declared_weights={c: n / sequences for c, n in counts.items()}))
        position += sequences
    manifest = BuiltManifest(
        mixture=mixture, revision=revision, revision_hash="sha256:test", store=StoreRef(
            name=store.name, version=store.version, manifest_hash=body[HASH_FIELD], stats_only=store.stats_only),
        tokenizer_fingerprint=None if store.stats_only else "test", dtype=store.dtype,
        eos_id=None if store.stats_only else EOS, seed=seed, seq_len=seq_len, global_batch=global_batch,
        epoch_cap=8.0, document_block=document_block, document_run=document_run, cells=cells, phases=built_phases,
        total_sequences=position, total_steps=position // global_batch)
    path = manifest_path(home, store.name, store.version, mixture, revision)
    write_manifest(path, manifest)
    return path


def epoch_stream(store_root: Path, cell: str, seed: int, epoch: int, block: int = 1024,
                 run: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A cell's tokens in epoch `epoch`'s document order and each token's source, rebuilt independently of the
    loader from the store's shards: each block of `block` documents of a shard cut into runs of `run`
    documents, the runs in their keyed permuted order, each run's documents in store order."""
    from loader.permutation import block_shuffle
    from pipeline.store.format import ShardReader, Store

    tokens, sources = [], []
    for index, name in enumerate(Store(store_root).cell(cell).shards.names):
        reader = ShardReader(store_root / "cells" / cell / name)
        ids = reader.source_ids()
        for first in range(0, reader.documents, block):
            count = min(block, reader.documents - first)
            runs = [list(range(r, min(r + run, count))) for r in range(0, count, run)]
            for k in block_shuffle(seed, f"{cell}/{index}/{first // block}", epoch, len(runs)).tolist():
                for d in runs[k]:
                    document = reader.document(first + d)
                    tokens.append(document)
                    sources.append(np.full(document.size, ids[first + d], dtype=np.int32))
    return np.concatenate(tokens), np.concatenate(sources)
