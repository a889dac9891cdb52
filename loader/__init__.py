"""Deterministic, exact, resumable, elastic batches from a built mixture manifest.

`MixtureStream` is the numpy face; `TorchMixtureDataset` with `MixtureDataLoader` (imported lazily, so that
tools that only peek never import torch) is the torch `IterableDataset` + `Stateful`.
"""

from __future__ import annotations

from typing import Any

from loader.schedule import SampleIndex, Schedule
from loader.stream import Batch, MixtureStream

__all__ = ["Batch", "MixtureDataLoader", "MixtureStream", "SampleIndex", "Schedule", "TorchMixtureDataset"]


def __getattr__(name: str) -> Any:
    if name in ("TorchMixtureDataset", "MixtureDataLoader"):
        from loader import torch_dataset  # lazy: heavy (torch): the package's names load on first use

        return getattr(torch_dataset, name)
    raise AttributeError(f"module 'loader' has no attribute {name!r}")
