"""What was (or will be) in a step's batch: per sample its position, cell, sequence, epoch, digest.

The digest is the first 16 hex digits of BLAKE2b over the sample's seq_len + 1 tokens
as little-endian int64, so it does not depend on the store's token dtype. In
index-only mode (stats-only manifest) there are no tokens and the digest is None.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np

from loader.stream import MixtureStream
from millrace.errors import ArtifactError, ConfigError
from mixtures.manifest import store_dir_of
from pipeline.store.format import store_tokenizer
from pipeline.store.trace import document_rows, has_trace

if TYPE_CHECKING:
    from tokenizers import Tokenizer

DECODE_CHARS = 80


class HeldDocument(TypedDict):
    """A stored document a sample's window overlaps (the pipeline's traceability sidecar)."""

    source: str
    id: str
    origin: str
    position: int


class PeekSample(TypedDict):
    position: int
    cell: str
    sequence: int
    epoch: int
    digest: str | None  # None in index-only mode
    text: NotRequired[str]  # with `decode`
    documents: NotRequired[list[HeldDocument] | None]  # with `decode`; None without the sidecar


class Peek(TypedDict):
    """`loader peek --json`: this rank's samples at one step."""

    mixture: str
    revision: str
    manifest_hash: str
    step: int
    phase: str
    rank: int
    world: int
    index_only: bool
    samples: list[PeekSample]


def token_digest(window: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(window, dtype="<i8").tobytes(), digest_size=8).hexdigest()


def load_tokenizer(stream: MixtureStream) -> Tokenizer:
    """The store's tokenizer, checked against the fingerprint its store.json pins."""
    if stream.tokenizer_store is None:
        raise ArtifactError(f"{stream.path}: the store's tokenizer is missing, cannot --decode")
    tokenizer: Tokenizer = store_tokenizer(stream.tokenizer_store)
    return tokenizer


def _documents(stream: MixtureStream, cell: str, sequence: int, epoch: int) -> list[HeldDocument] | None:
    """The stored documents a sample's window overlaps, in window order (source, original id, origin,
    input position); None for a store without the pipeline's traceability sidecar."""
    cell_dir = store_dir_of(stream.path) / "cells" / cell
    if not has_trace(cell_dir):
        return None
    rows = document_rows(cell_dir, stream.window_documents(cell, sequence, epoch))
    return [HeldDocument(source=r["source"], id=r["id"], origin=r["origin"], position=r["position"]) for r in rows]


def peek(stream: MixtureStream, step: int, decode: bool = False) -> Peek:
    """A JSON-ready description of this rank's samples at `step`."""
    index = stream.index(step)
    windows = None if stream.index_only else stream.windows(index)
    if decode and windows is None:
        raise ConfigError(f"{stream.path}: stats-only manifest has no tokens to --decode")
    tokenizer = load_tokenizer(stream) if decode else None
    samples: list[PeekSample] = []
    for row in range(index.positions.size):
        sample: PeekSample = {
            "position": int(index.positions[row]),
            "cell": stream.cell_names[int(index.cell_ids[row])],
            "sequence": int(index.sequences[row]),
            "epoch": int(index.epochs[row]),
            "digest": None if windows is None else token_digest(windows[row]),
        }
        if tokenizer is not None and windows is not None:
            ids = windows[row, : DECODE_CHARS * 2].tolist()
            sample["text"] = tokenizer.decode(ids, skip_special_tokens=False)[:DECODE_CHARS]
            sample["documents"] = _documents(stream, sample["cell"], sample["sequence"], sample["epoch"])
        samples.append(sample)
    return {
        "mixture": stream.manifest.mixture,
        "revision": stream.manifest.revision,
        "manifest_hash": stream.manifest_hash,
        "step": step,
        "phase": stream.phase_name(step),
        "rank": stream.rank,
        "world": stream.world,
        "index_only": stream.index_only,
        "samples": samples,
    }
