"""The torch face: an `IterableDataset` of batch dicts that is also a DCP `Stateful`.

Use it with `DataLoader(dataset, batch_size=None, num_workers=0)` (or iterate it
directly): batching and prefetch already happen in `MixtureStream`, and worker
processes would each keep their own copy of the resume state. Put the dataset in
the state dict given to `torch.distributed.checkpoint.save/load`: DCP calls its
`state_dict()` / `load_state_dict()` (the `Stateful` protocol).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
from torch.utils.data import IterableDataset

from loader.stream import Batch, MixtureStream


def batch_tensors(batch: Batch) -> dict[str, torch.Tensor]:
    """A batch as tensors (zero-copy from numpy); `sources` only when the store has them."""
    tensors = {
        "input_ids": torch.from_numpy(batch.input_ids),
        "labels": torch.from_numpy(batch.labels),
        "segment_ids": torch.from_numpy(batch.segment_ids),
        "positions": torch.from_numpy(batch.positions),
        "cell_ids": torch.from_numpy(batch.cell_ids),
        "sample_positions": torch.from_numpy(batch.sample_positions),
        "step": torch.tensor(batch.step, dtype=torch.int64),
    }
    if batch.sources is not None:
        tensors["sources"] = torch.from_numpy(batch.sources)
    return tensors


class TorchMixtureDataset(IterableDataset):
    """Yields one dict of tensors per step for this rank, from the saved step onwards."""

    def __init__(self, manifest_path: Path | str, rank: int = 0, world: int = 1, prefetch: int = 2,
                 sources: bool = True):
        super().__init__()
        self.stream = MixtureStream(manifest_path, rank=rank, world=world, prefetch=prefetch, sources=sources)

    @property
    def cell_names(self) -> list[str]:
        return self.stream.cell_names

    @property
    def source_names(self) -> list[str]:
        return self.stream.source_names

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for batch in self.stream.iterate():
            yield batch_tensors(batch)

    def state_dict(self) -> dict:
        return self.stream.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.stream.load_state_dict(state_dict)
