"""The checkpointed parts of a run, each a torch `Stateful` (`state_dict` / `load_state_dict`).

`trainer.checkpoint` saves and loads a mapping of name -> part; every part knows how
to describe itself and how to take itself back, so a new part (evaluation cursor,
lineage record) is one more entry, not a change to the checkpoint code.
- `ModelState`, `OptimizerState`: DCP's sharding-aware state dicts of the model and
  AdamW (FSDP / expert DTensors are resharded on load).
- `TrainerState`: step, tokens, the horizon and manifest it belongs to, realised tokens per cell.
  A checkpoint of an ancestor revision (one this run's revision continues) loads when its
  step is at most the steps the two share (`mixtures.lineage`): a resume onto a mixture switch.
- `LoaderPart`, `RngState`: the loader's position and torch's RNG, each stored once (no
  part is keyed by rank, so a checkpoint written at one world size loads at any other).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from loader import MixtureStream
from millrace.errors import ArtifactError, ConfigError
from mixtures.lineage import check_lineage_resume
from mixtures.manifest import BuiltManifest
from trainer.records import ConfigChange
from trainer.resume import check_settings


class ModelState:
    def __init__(self, model: torch.nn.Module):
        self.model = model

    def state_dict(self) -> dict[str, Any]:
        return get_model_state_dict(self.model)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_model_state_dict(self.model, state)


class OptimizerState:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.model, self.optimizer)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.optimizer, state)


@dataclass
class TrainerState:
    """The run's counters and the settings they were reached with (`trainer.resume`).

    Loading refuses a checkpoint of another manifest, or of another model shape, or
    (unless `allow_config_change`) of other training settings; allowed changes are
    kept in `config_changes`."""

    horizon: int
    manifest_hash: str
    cell_names: list[str]
    settings: str  # `trainer.resume.recorded_settings` of this run
    manifest: BuiltManifest | None = None  # for a checkpoint of an ancestor revision
    allow_config_change: bool = False
    step: int = 0
    tokens: int = 0
    realised_tokens_per_cell: dict[str, int] = field(default_factory=dict)
    config_changes: list[ConfigChange] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.realised_tokens_per_cell = dict.fromkeys(self.cell_names, 0) | self.realised_tokens_per_cell

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tokens": self.tokens,
            "horizon": self.horizon,
            "manifest_hash": self.manifest_hash,
            "settings": self.settings,
            "realised_tokens_per_cell": dict(self.realised_tokens_per_cell),
        }

    def expect_cells(self, names: list[str]) -> None:
        """Shape the load template like a checkpoint whose counters name these cells (an ancestor's may
        name fewer than this manifest); `load_state_dict` adds the rest back at zero."""
        self.realised_tokens_per_cell = dict.fromkeys(names, 0)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["manifest_hash"] != self.manifest_hash:
            if self.manifest is None:
                raise ArtifactError(f"checkpoint is from manifest {state['manifest_hash']}, not {self.manifest_hash}")
            check_lineage_resume(
                self.manifest, self.manifest_hash, state["manifest_hash"], int(state["step"]), "checkpoint"
            )
        if state["horizon"] != self.horizon:
            raise ConfigError(
                f"checkpoint's learning-rate horizon is {state['horizon']} steps, this run's is "
                f"{self.horizon} (set `steps` in the config to keep one horizon across a mixture switch)"
            )
        self.config_changes = check_settings(state["settings"], self.settings, self.allow_config_change)
        self.step = int(state["step"])
        self.tokens = int(state["tokens"])
        self.realised_tokens_per_cell = dict.fromkeys(self.cell_names, 0) | dict(state["realised_tokens_per_cell"])

    def advance(self, global_tokens: int, cell_tokens: list[float]) -> None:
        """Count one finished optimizer step."""
        for name, tokens in zip(self.cell_names, cell_tokens):
            self.realised_tokens_per_cell[name] += int(tokens)
        self.tokens += global_tokens
        self.step += 1


def rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class LoaderPart:
    """The loader's position. It depends on the step alone (never on rank or world), so it is stored once
    and a checkpoint resumes at any world size."""

    def __init__(self, stream: MixtureStream):
        self.stream = stream

    def state_dict(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state)


class RngState:
    """Torch's RNG, stored once: every rank seeds alike and draws alike (nothing rank-specific is random)."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        return rng_state()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        set_rng_state(state)
