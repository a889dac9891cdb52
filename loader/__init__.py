"""Deterministic, exact, resumable, elastic batches from a built mixture manifest.

`MixtureStream` is the numpy face; `TorchMixtureDataset` (imported lazily, so that
tools that only peek never import torch) is the torch `IterableDataset` + `Stateful`.
"""

from __future__ import annotations

from typing import Any

from loader.schedule import SampleIndex, Schedule
from loader.stream import Batch, MixtureStream

__all__ = ["Batch", "MixtureStream", "SampleIndex", "Schedule", "TorchMixtureDataset"]


def __getattr__(name: str) -> Any:
    if name == "TorchMixtureDataset":
        from loader.torch_dataset import TorchMixtureDataset

        return TorchMixtureDataset
    raise AttributeError(f"module 'loader' has no attribute {name!r}")
