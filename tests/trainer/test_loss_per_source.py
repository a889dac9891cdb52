"""Loss per source from the batch's per-segment sources (a [b, S] table and the segment ids) equals the sums over
each token's own source, for the whole batch and for a micro-batch's rows."""

import numpy as np
import torch

from loader.packing import pack_segments
from trainer.loop import StepAccumulator


def test_loss_per_source_from_segment_sources_equals_the_per_token_sums():
    rng = np.random.default_rng(0)
    rows, length, n_sources = 6, 40, 4
    inside = rng.choice(rows * length, size=30, replace=False)
    starts = np.unique(np.concatenate([np.arange(rows) * length, inside])).astype(np.int64)
    sources = rng.integers(0, n_sources, size=starts.size).astype(np.int32)
    windows = rng.integers(1, 100, size=(rows, length + 1)).astype(np.uint16)
    _, segment_ids, _, table = pack_segments(windows, starts, sources)
    per_token = np.repeat(sources, np.diff(starts, append=rows * length)).reshape(rows, length)
    losses = torch.rand(rows, length, dtype=torch.float64)
    for part in (slice(None), slice(2, 5)):
        acc = StepAccumulator(1, n_sources, torch.device("cpu"))
        cells = torch.zeros(len(range(rows)[part]), dtype=torch.int64)
        acc.add(losses[part], cells, (torch.from_numpy(table)[part], torch.from_numpy(segment_ids)[part]))
        tokens = per_token[part].reshape(-1)
        expected = np.bincount(tokens, weights=losses[part].numpy().reshape(-1), minlength=n_sources)
        assert np.allclose(acc.sources[0].numpy(), expected)
        assert np.array_equal(acc.sources[1].numpy(), np.bincount(tokens, minlength=n_sources))
