"""Checkpoints with `torch.distributed.checkpoint`: model, optimiser, router biases, RNG, loader, step.

Layout under the run directory:

    checkpoints/step-00000120/      one DCP checkpoint (every rank writes its shards)
    checkpoints/.tmp-step-00000130/ a checkpoint being written; renamed when complete

A checkpoint appears under its final name only after every rank has finished
writing (write to a temporary directory, barrier, rename), so a crash mid-write
leaves the previous checkpoints intact. Only the newest `keep` are kept.

The router biases are buffers of the model, so they travel in the model state
dict. Per-rank items (RNG states, the loader's state) are keyed by rank.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from millrace.errors import ArtifactError

log = logging.getLogger(__name__)

PREFIX = "step-"
TMP_PREFIX = ".tmp-step-"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    if not directory.exists():
        return []
    found = []
    for path in directory.iterdir():
        if path.is_dir() and path.name.startswith(PREFIX) and path.name[len(PREFIX):].isdigit():
            found.append((int(path.name[len(PREFIX):]), path))
    return sorted(found)


def latest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(
    directory: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    rank_state: dict[str, Any],
    keep: int,
) -> Path:
    """Write checkpoint `step` atomically and prune all but the newest `keep`."""
    final = directory / checkpoint_name(step)
    tmp = directory / f"{TMP_PREFIX}{step:08d}"
    if _rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    _barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {
        "model": model_state,
        "optim": optim_state,
        "trainer": trainer_state,
        "ranks": {str(_rank()): {**rank_state, "rng": rng_state()}},
    }
    dcp.save(state, checkpoint_id=str(tmp))
    _barrier()
    if _rank() == 0:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for _, old in list_checkpoints(directory)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        log.info("checkpoint %s written", final)
    _barrier()
    return final


def load(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_template: dict[str, Any],
    rank_template: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load `path` into model and optimizer in place; returns (trainer state, this rank's state)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {
        "model": model_state,
        "optim": optim_state,
        "trainer": trainer_template,
        "ranks": {str(_rank()): {**rank_template, "rng": rng_state()}},
    }
    try:
        dcp.load(state, checkpoint_id=str(path))
    except Exception as exc:  # DCP raises several types; the user needs the path and the reason
        raise ArtifactError(f"{path}: cannot load checkpoint ({type(exc).__name__}: {exc})") from None
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    mine = state["ranks"][str(_rank())]
    set_rng_state(mine.pop("rng"))
    return state["trainer"], mine
