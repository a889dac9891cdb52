"""Run in a separate process by the tests: digests of batches, fresh or resumed from a state.

usage: python -m tests.loader.batch_digest MANIFEST STEPS_JSON [STATES_JSON M]
"""

from __future__ import annotations

import hashlib
import json
import sys

from loader import Batch, MixtureStream


def batch_digest(batch: Batch) -> str:
    digest = hashlib.sha256()
    for array in (batch.input_ids, batch.labels, batch.segment_ids, batch.positions, batch.cell_ids,
                  batch.sample_positions, batch.sources):
        digest.update(b"none" if array is None else array.tobytes())
    digest.update(json.dumps([batch.step, batch.phase, batch.cells]).encode())
    return digest.hexdigest()


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
