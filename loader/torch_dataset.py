"""The torch face: an `IterableDataset` of batch dicts that is also a DCP `Stateful`.

Iterate it directly, or through `MixtureDataLoader` (a `DataLoader` with `batch_size=None`):
with `num_workers=W`, worker w yields steps start + w, start + w + W, ..., and the DataLoader's
round-robin over workers hands them out in step order, each step once. The resume state must
follow what the consumer took, not what the workers computed ahead, so `MixtureDataLoader`
records the step of each batch it hands out in the dataset; a plain `DataLoader` with workers
cannot, and the dataset refuses it with a one-line error. Put the dataset in the state dict
given to `torch.distributed.checkpoint.save/load`: DCP calls its `state_dict()` /
`load_state_dict()` (the `Stateful` protocol).

Across the worker boundary a batch travels unpacked: one `bytes` holding its windows in the store's
dtype, segment starts and sources and its index (`to_wire`), a tenth of the packed bytes; the main process
packs it (`MixtureStream.pack`), so what the consumer gets is the same with and without workers. Bytes go
through the worker's pipe: for a few hundred KB that costs the main process less than a tensor's shared
memory (a new segment per batch, its descriptor passed over a socket, mapped and faulted in: measured,
1.1 ms of the main thread's CPU a batch with the tensor, 0.65 ms with bytes, packing included).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from typing_extensions import TypeIs

from loader.files import StoreAccess
from loader.schedule import SampleIndex
from loader.stream import Batch, Gathered, MixtureStream
from millrace.errors import ConfigError

PREFETCH_FACTOR = 4  # gathered batches each DataLoader worker keeps ready (about 0.3 MB each at 32 x 4096)


def batch_tensors(batch: Batch) -> dict[str, torch.Tensor]:
    """A batch as tensors (zero-copy from numpy: `input_ids` and `labels` are views of the batch's one int64
    buffer and share its memory); `segment_sources` ([b, S], see `Batch`) only when the store has sources."""
    tensors = {
        "input_ids": torch.from_numpy(batch.input_ids),
        "labels": torch.from_numpy(batch.labels),
        "segment_ids": torch.from_numpy(batch.segment_ids),
        "positions": torch.from_numpy(batch.positions),
        "cell_ids": torch.from_numpy(batch.cell_ids),
        "sample_positions": torch.from_numpy(batch.sample_positions),
        "step": torch.tensor(batch.step, dtype=torch.int64),
    }
    if batch.segment_sources is not None:
        tensors["segment_sources"] = torch.from_numpy(batch.segment_sources)
    return tensors


class Wire(TypedDict):
    """A gathered batch on its way from a data-loader worker: its arrays as one `bytes`, and how to cut it."""

    wire: bytes
    step: int
    phase: int  # the phase's index
    rows: int
    segments: int
    sources: bool


Item = dict[str, torch.Tensor] | Wire  # what the dataset yields: a batch (in this process), or a worker's wire


def is_wire(item: Item) -> TypeIs[Wire]:
    return "wire" in item


def to_wire(gathered: Gathered) -> Wire:
    """A gathered batch as one `bytes` (int64 arrays first, then int32, then the windows: each aligned) and the
    few integers that say how to cut it (`from_wire`)."""
    index = gathered.index
    sources = gathered.segment_sources
    parts = [
        index.positions,
        index.draws,
        index.epochs,
        index.sequences,
        gathered.starts,
        index.cell_ids,
        sources if sources is not None else np.zeros(0, dtype=np.int32),
        gathered.windows,
    ]
    return {
        "wire": b"".join(np.ascontiguousarray(part).reshape(-1).view(np.uint8).data for part in parts),
        "step": gathered.step,
        "phase": index.phase,
        "rows": int(index.positions.size),
        "segments": int(gathered.starts.size),
        "sources": sources is not None,
    }


def from_wire(item: Wire, seq_len: int, dtype: np.dtype) -> Gathered:
    wire, rows, segments = np.frombuffer(item["wire"], dtype=np.uint8), item["rows"], item["segments"]
    sizes: list[tuple[np.dtype, int]] = [(np.dtype(np.int64), rows)] * 4 + [
        (np.dtype(np.int64), segments),
        (np.dtype(np.int32), rows),
        (np.dtype(np.int32), segments if item["sources"] else 0),
        (dtype, rows * (seq_len + 1)),
    ]
    arrays, at = [], 0
    for kind, count in sizes:
        size = kind.itemsize * count
        arrays.append(wire[at : at + size].view(kind))
        at += size
    positions, draws, epochs, sequences, starts, cell_ids, sources, windows = arrays
    # the index's arrays go into the batch (and its tensors): copies, writable; the rest is only read by `pack`
    index = SampleIndex(
        positions.copy(), cell_ids.copy(), draws.copy(), epochs.copy(), sequences.copy(), item["phase"]
    )
    return Gathered(
        item["step"], index, windows.reshape(rows, seq_len + 1), starts, sources if item["sources"] else None
    )


class TorchMixtureDataset(IterableDataset[Item]):
    """Yields one dict of tensors per step for this rank, from the saved step onwards."""

    def __init__(
        self,
        manifest_path: Path | str,
        rank: int = 0,
        world: int = 1,
        prefetch: int = 2,
        sources: bool = True,
        store: StoreAccess | None = None,
    ):
        super().__init__()
        self.stream = MixtureStream(
            manifest_path, rank=rank, world=world, prefetch=prefetch, sources=sources, store=store
        )
        self._tracked_by_loader = False  # set by MixtureDataLoader; travels to the workers with the dataset

    @property
    def cell_names(self) -> list[str]:
        return self.stream.cell_names

    @property
    def source_names(self) -> list[str]:
        return self.stream.source_names

    def __iter__(self) -> Iterator[Item]:
        worker = get_worker_info()
        if worker is None:
            for batch in self.stream.iterate():
                yield batch_tensors(batch)
            return
        if not self._tracked_by_loader:
            raise ConfigError(
                f"{self.stream.path}: a plain DataLoader with num_workers={worker.num_workers} cannot tell the "
                "dataset which batches were consumed (its state_dict would be wrong); use "
                "loader.MixtureDataLoader(dataset, num_workers=...) or num_workers=0"
            )
        first = min(self.stream.step + worker.id, self.stream.steps)
        for gathered in self.stream.iterate(first, stride=worker.num_workers, gathered=True):
            yield to_wire(gathered)

    def unwire(self, item: Item) -> dict[str, torch.Tensor]:
        """A worker's item as the batch dict iterating in this process gives (packed here)."""
        if not is_wire(item):
            return item
        stream = self.stream
        return batch_tensors(stream.pack(from_wire(item, stream.seq_len, np.dtype(stream.manifest.dtype))))

    def taken(self, item: dict[str, torch.Tensor]) -> None:
        """The consumer took `item`: the state moves past its step."""
        self.stream.load_step(int(item["step"]) + 1)

    def state_dict(self) -> dict[str, object]:
        return self.stream.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        self.stream.load_state_dict(state_dict)


class MixtureDataLoader(DataLoader[Item]):
    """A `DataLoader` over a `TorchMixtureDataset` whose state follows the batches handed out.

    Batches are already whole steps, so `batch_size` is None; persistent workers would keep a
    stale copy of the state between iterations, so they are refused. With workers, each keeps
    `prefetch_factor` (default PREFETCH_FACTOR) gathered batches ready: they are small (the windows
    in the store's dtype), and a deeper queue rides out a worker's stall on a shared machine.
    """

    def __init__(self, dataset: TorchMixtureDataset, num_workers: int = 0, **kwargs: Any):
        if not isinstance(dataset, TorchMixtureDataset):
            raise ConfigError(f"MixtureDataLoader needs a TorchMixtureDataset, got {type(dataset).__name__}")
        if kwargs.get("persistent_workers"):
            raise ConfigError("MixtureDataLoader: persistent_workers=True would resume workers from a stale state")
        if kwargs.setdefault("batch_size", None) is not None:
            raise ConfigError("MixtureDataLoader: batch_size must be None (each item is already a whole step)")
        if num_workers:
            kwargs.setdefault("prefetch_factor", PREFETCH_FACTOR)
        dataset._tracked_by_loader = True
        super().__init__(dataset, num_workers=num_workers, **kwargs)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:  # type: ignore[override]  # yields batches, not an iterator object
        dataset = self.dataset
        assert isinstance(dataset, TorchMixtureDataset)  # checked in __init__
        for item in super().__iter__():
            batch = dataset.unwire(item)
            dataset.taken(batch)
            yield batch
