"""What may change between a checkpoint and the run that resumes it.

The checkpoint records the settings that define the model and its training
(`recorded_settings`). On resume:
- a field that shapes a parameter (widths, layers, heads, vocabulary, experts) cannot
  change: the weights would not fit; the error names the field;
- a training setting (optimiser, schedule, routing and other model numerics) is refused unless the user
  allows it (`--allow-config-change`);
  then each change is returned, and `run.json` records it (the learning-rate horizon
  is checked on its own by `trainer.state.TrainerState`, and never changes);
- the layout (`[parallel]`), data cadence, checkpoint and metrics settings may change
  freely: a checkpoint resumes at any world size.
"""

from __future__ import annotations

import json
from typing import Any

from millrace.errors import ConfigError
from trainer.config import TrainConfig
from trainer.records import ConfigChange

SHAPE_FIELDS = {
    "model": (
        "d_model",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "head_dim",
        "vocab_size",
        "dense_ffn_dim",
        "n_dense_layers",
        "tie_embeddings",
    ),
    "moe": ("n_routed_experts", "n_shared_experts", "expert_ffn_dim"),
}
SETTING_SECTIONS = ("model", "moe", "optimizer", "schedule")
KERNEL_FIELDS = {"model.attention"}  # which kernel computes the same maths: free to change


def recorded_settings(config: TrainConfig) -> str:
    """The settings a checkpoint keeps, as canonical JSON (one string: DCP stores it as one item)."""
    body = {section: getattr(config, section).model_dump(mode="json") for section in SETTING_SECTIONS}
    return json.dumps(body, sort_keys=True)


def _flat(settings: dict[str, Any]) -> dict[str, Any]:
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{name}": inner for name, inner in value.items()})
        else:
            flat[key] = value
    return flat


def check_settings(recorded: str, current: str, allow_change: bool) -> list[ConfigChange]:
    """Changes from the checkpoint's settings to this run's; raises for a shape change, or any change unless
    allowed."""
    before, now = _flat(json.loads(recorded)), _flat(json.loads(current))
    changes = [
        ConfigChange(field=key, checkpoint=before.get(key), now=now.get(key))
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key) and key not in KERNEL_FIELDS
    ]
    shapes = {f"{section}.{name}" for section, names in SHAPE_FIELDS.items() for name in names}
    for change in changes:
        if change.field in shapes:
            raise ConfigError(
                f"field '{change.field}' is {change.now} here but {change.checkpoint} in the "
                "checkpoint: the model's shape cannot change on resume"
            )
    if changes and not allow_change:
        first = changes[0]
        names = ", ".join(f"'{change.field}'" for change in changes)
        raise ConfigError(
            f"field {names} changed since the checkpoint ({first.field}: {first.checkpoint} -> "
            f"{first.now}); pass --allow-config-change to resume with the new settings"
        )
    return changes
