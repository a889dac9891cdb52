"""Counting device-to-host reads on a CPU, where none of them costs anything.

On a GPU each read blocks the host until the device catches up: `.item()`, `float(t)`, `int(t)`, `bool(t)`
(all `aten._local_scalar_dense`), `.tolist()` and `.cpu()`, and a `repeat_interleave` with tensor repeats
and no `output_size` (it reads the repeats' sum to size its output). On a CPU they are free and some never
reach the dispatcher (`.tolist()`, `.cpu()` of a CPU tensor), so the count wraps those two methods and
watches the dispatcher for the scalar reads and the unsized `repeat_interleave`. What is counted is each
call the code makes, the number a GPU would pay.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

WRAPPED = ("tolist", "cpu")


class HostReads(Counter[str]):
    """Reads by kind; `paused` while code whose tensors live on the host on a GPU too runs."""

    paused = False

    def add(self, kind: str) -> None:
        if not self.paused:
            self[kind] += 1


class _ScalarReads(TorchDispatchMode):
    def __init__(self, counts: HostReads):
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
    ) -> object:
        if func is torch.ops.aten._local_scalar_dense.default:
            self.counts.add("item")
        elif func is torch.ops.aten.repeat_interleave.Tensor and (kwargs or {}).get("output_size") is None:
            self.counts.add("repeat_interleave")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counting_host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[HostReads]:
    """Yields a Counter of host reads by kind ("item", "tolist", "cpu", "repeat_interleave") made inside the
    block.

    AdamW's step is not counted: without `capturable` its step counters are host tensors on a GPU too
    (torch keeps them there so that reading them costs no sync)."""
    counts = HostReads()
    originals = {name: getattr(torch.Tensor, name) for name in WRAPPED}

    def wrap(name: str) -> Callable[..., object]:
        def read(self: torch.Tensor, *args: object, **kwargs: object) -> object:
            counts.add(name)
            return originals[name](self, *args, **kwargs)

        return read

    adamw_step = torch.optim.AdamW.step

    def host_side_step(optimizer: torch.optim.AdamW, *args: object, **kwargs: object) -> object:
        counts.paused = True
        try:
            return adamw_step(optimizer, *args, **kwargs)
        finally:
            counts.paused = False

    with monkeypatch.context() as patch:
        for name in WRAPPED:
            patch.setattr(torch.Tensor, name, wrap(name))
        patch.setattr(torch.optim.AdamW, "step", host_side_step)
        with _ScalarReads(counts):
            yield counts
