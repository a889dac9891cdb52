"""External evaluation sets (`[[validation.sets]]`): tokenized into the store, checked against the corpus.

Like the reference run's zero-weight "uncheatable" sets: documents that are evaluated and never
trained on. Each set is read with datatrove's readers (jsonl, parquet) or as plain text files
(one document per file), tokenized with the store's tokenizer (EOS after each document) and
written to `sets/<name>/set-NNNNN` shards of the cells' format, with `sets/<name>/set.json`
(kind "millrace.eval-set"). A set document that also occurs in the store (training or
held-out shards) is reported: exactly (the same token ids) or as a near duplicate (MinHash over
token 5-grams, 20 bands x 5 rows, confirmed at an estimated Jaccard >= 0.8), with the cell it
was found in. Near-duplicate search signs every stored document once during assembly; it only
runs when sets are configured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pydantic

from millrace.config import StrictModel
from millrace.errors import ConfigError
from millrace.names import NAME_PATTERN
from pipeline.store.format import EvalSetManifest, HeldOut, ShardSequence, write_eval_set_manifest

SET_PREFIX = "set"
SHINGLE, BANDS, ROWS, NEAR_JACCARD = 5, 20, 5, 0.8
SHOWN = 20  # overlapping documents listed by index in set.json


class EvalSetConfig(StrictModel):
    """One `[[validation.sets]]` table."""

    name: str = pydantic.Field(pattern=NAME_PATTERN)
    paths: list[str] = pydantic.Field(min_length=1)
    format: Literal["jsonl", "parquet", "text"] = "jsonl"
    text_key: str = "text"


def read_texts(config: EvalSetConfig) -> list[str]:
    """Every document's text, in path order (files inside a directory sorted)."""
    from datatrove.pipeline.readers import JsonlReader, ParquetReader

    texts: list[str] = []
    for raw in config.paths:
        path = Path(raw)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if config.format == "text":
                texts.append(file.read_text(encoding="utf-8", errors="replace"))
                continue
            reader_class = JsonlReader if config.format == "jsonl" else ParquetReader
            reader = reader_class(str(file.parent), glob_pattern=file.name, text_key=config.text_key, recursive=False)
            texts.extend(doc.text for doc in reader.run())
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise ConfigError(f"field 'validation.sets' set {config.name!r}: no document with text in {config.paths}")
    return texts


class NearDuplicateIndex:
    """MinHash LSH over token 5-grams of the stored documents (`add`), queried by set documents."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        perms = BANDS * ROWS
        self.weights = rng.integers(1, 2**63, size=SHINGLE, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.a = (rng.integers(1, 2**63, size=perms, dtype=np.uint64) * np.uint64(2) + np.uint64(1))[:, None]
        self.b = rng.integers(0, 2**63, size=perms, dtype=np.uint64)[:, None]
        self.bands: list[dict[bytes, int]] = [{} for _ in range(BANDS)]
        self.signatures: list[np.ndarray] = []
        self.cells: list[str] = []
        self.exact: dict[bytes, str] = {}

    def signature(self, tokens: np.ndarray) -> np.ndarray:
        # dedup's MinHash maths over token ids (imported here: `pipeline.config` reaches this module without datatrove)
        from pipeline.stages.dedup import minhash, shingle_hashes

        return minhash(shingle_hashes(np.asarray(tokens, dtype=np.uint64), self.weights), self.a, self.b)

    def add(self, tokens: np.ndarray, cell: str) -> None:
        self.exact.setdefault(np.asarray(tokens, dtype="<u4").tobytes(), cell)
        signature = self.signature(tokens)
        index = len(self.signatures)
        self.signatures.append(signature)
        self.cells.append(cell)
        for band, key in enumerate(signature.reshape(BANDS, ROWS)):
            self.bands[band].setdefault(key.tobytes(), index)

    def find(self, tokens: np.ndarray) -> tuple[str, str] | None:
        """("exact" | "near", cell) for a document the store holds, else None."""
        cell = self.exact.get(np.asarray(tokens, dtype="<u4").tobytes())
        if cell is not None:
            return "exact", cell
        signature = self.signature(tokens)
        for band, key in enumerate(signature.reshape(BANDS, ROWS)):
            hit = self.bands[band].get(key.tobytes())
            if hit is not None and (self.signatures[hit] == signature).mean() >= NEAR_JACCARD:
                return "near", self.cells[hit]
        return None


@dataclass
class WrittenSet:
    name: str
    held: HeldOut
    manifest_hash: str
    overlap: dict = field(default_factory=dict)


def write_eval_set(config: EvalSetConfig, set_dir: Path, tokenizer, eos_id: int, dtype: np.dtype, fingerprint: str,
                   shard_tokens: int, index: NearDuplicateIndex) -> WrittenSet:
    texts = read_texts(config)
    encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
    found: list[dict] = []
    counts = {"exact": 0, "near": 0}
    sequence = ShardSequence(set_dir, SET_PREFIX, dtype, shard_tokens)
    for number, (text, encoding) in enumerate(zip(texts, encoded)):
        ids = np.asarray(encoding.ids + [eos_id], dtype=np.int64)
        hit = index.find(ids)
        if hit is not None:
            counts[hit[0]] += 1
            if len(found) < SHOWN:
                found.append({"index": number, "kind": hit[0], "cell": hit[1]})
        sequence.add(ids, 0, config.name, len(text.encode("utf-8")))
    shards = sequence.close()
    documents, tokens, nbytes = sequence.totals()
    held = HeldOut(documents=documents, tokens=tokens, bytes=nbytes, shards=shards, sources=sequence.sources)
    overlap = {**counts, "documents": found}
    manifest = EvalSetManifest(name=config.name, dtype=str(dtype), tokenizer_fingerprint=fingerprint, held=held,
                               overlap=overlap)
    digest = write_eval_set_manifest(set_dir, manifest)
    return WrittenSet(config.name, held, digest, overlap)
