"""The integrated MoE trainer: fed by the loader, observable, resumable, distributed.

Entry point: `trainer.train(config_path, home, TrainRequest(steps=..., run=..., resume=...))` (see
`trainer.loop.train`, `trainer.train_request.TrainRequest`). Imported lazily so that `millrace train plan`
and `--help` do not pay for torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["train"]


def __getattr__(name: str) -> Any:
    if name == "train":
        from trainer.loop import train  # lazy: heavy (torch): the package's names load on first use

        return train
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
