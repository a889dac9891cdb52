"""Batches as the tests compare them: digests (fresh or resumed, also run as a separate process) and each
cell's epoch order rebuilt from the shards independently of the loader.

usage: python -m testkit.batches MANIFEST STEPS_JSON [STATES_JSON M]
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from loader import Batch, MixtureStream


def batch_digest(batch: Batch) -> str:
    digest = hashlib.sha256()
    for array in (
        batch.input_ids,
        batch.labels,
        batch.segment_ids,
        batch.positions,
        batch.cell_ids,
        batch.sample_positions,
        batch.segment_sources,
    ):
        digest.update(b"none" if array is None else array.tobytes())
    digest.update(json.dumps([batch.step, batch.phase, batch.cells]).encode())
    return digest.hexdigest()


def epoch_stream(
    store_root: Path, cell: str, seed: int, epoch: int, block: int = 1024, run: int = 1
) -> tuple[np.ndarray, np.ndarray]:
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


def main() -> None:
    manifest, steps = sys.argv[1], json.loads(sys.argv[2])
    if len(sys.argv) > 3:  # resume each state in a fresh stream, take the next m batches
        states, m = json.loads(sys.argv[3]), int(sys.argv[4])
        out = []
        for state in states:
            stream = MixtureStream(manifest)
            stream.load_state_dict(state)
            batches = stream.iterate()
            out.append([batch_digest(next(batches)) for _ in range(m)])
            batches.close()
        print(json.dumps(out))
        return
    stream = MixtureStream(manifest)
    print(json.dumps([batch_digest(stream.batch(step)) for step in steps]))


if __name__ == "__main__":
    main()
