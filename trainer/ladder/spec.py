"""The ladder file: a base model config, rules that size each rung, the revision, the target.

A ladder is one model family: only width and depth change from rung to rung; experts,
top-k, shared experts and the sequence length stay the base config's. Every width-bound
dimension (query heads, expert and dense FFN widths) keeps the base config's ratio to
`d_model` unless the rules fix the ratio. Each rung trains on `tokens_per_active_param`
tokens per active parameter, where active parameters exclude the embedding and output
layers (the reference ladder's convention: 48B tokens / 791 = 61M active for d768).

    ladder = "reference"
    [base]
    config = "535b-a23b.toml"              # relative to this file, else a shipped trainer config
    [mixture]
    mixture = "default"
    revision = "reference"
    [rules]
    widths = [768, 1024, 1536, 2048]
    layers = [8, 12, 16, 22]               # or layers_per_width = 0.01 (round(d_model * it))
    tokens_per_active_param = 791
    small_rungs = "raise"                  # or "refuse": a rung too small for the store's cells (see plan.py)
    batch = [1024, 2048, 6144, 11264]      # or one number, or [rules.batch_rule]
    [rules.lr]                             # lr = base * (d/d0)^w * (batch tokens/b0)^b * (steps/s0)^s
    [target]
    config = "535b-a23b.toml"
    tokens = 18.75e12
    [fleet]                                # where the rungs train (trainer.fleet); default: here, in turn
    executor = "local"                     # in-process | local | torchrun | ray | slurm
    concurrency = 2
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pydantic

from millrace.config import StrictModel, load_config
from millrace.errors import ConfigError
from millrace.names import NAME_PATTERN
from trainer.fleet.config import FleetConfig

SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


class BaseSpec(StrictModel):
    config: str


class MixtureSpec(StrictModel):
    mixture: str = pydantic.Field(pattern=NAME_PATTERN)
    revision: str = pydantic.Field(pattern=NAME_PATTERN)


class BatchRule(StrictModel):
    """batch = clamp(round(coefficient * tokens^exponent to a multiple of `multiple`), minimum, maximum)."""

    coefficient: float = pydantic.Field(gt=0)
    exponent: float = 0.5
    multiple: int = pydantic.Field(1, gt=0)
    minimum: int = pydantic.Field(1, gt=0)
    maximum: int = pydantic.Field(1 << 40, gt=0)


class LRRule(StrictModel):
    """lr = base * (d_model / d_model_ref)^width_exponent * (batch tokens / batch_tokens_ref)^batch_exponent
    * (steps / steps_ref)^steps_exponent: the usual width (muP-like), batch (square-root) and horizon terms."""

    base: float = pydantic.Field(gt=0)
    d_model_ref: float = pydantic.Field(gt=0)
    batch_tokens_ref: float = pydantic.Field(1.0, gt=0)
    steps_ref: float = pydantic.Field(1.0, gt=0)
    width_exponent: float = -1.0
    batch_exponent: float = 0.5
    steps_exponent: float = 0.0


class Rules(StrictModel):
    widths: list[int] = pydantic.Field(min_length=1)
    names: list[str] | None = None
    layers: list[int] | None = None
    layers_per_width: float | None = pydantic.Field(None, gt=0)
    tokens_per_active_param: float = pydantic.Field(gt=0)
    batch: int | list[int] | None = None
    batch_rule: BatchRule | None = None
    lr: LRRule | None = None
    warmup_fraction: float | None = pydantic.Field(
        None,
        gt=0,
        lt=1,
        description="warmup steps as a share of each rung's steps (default: the base config's warmup_steps)",
    )
    head_dim: int | None = pydantic.Field(None, gt=0)
    n_kv_heads: int | None = pydantic.Field(None, gt=0)
    heads_per_width: float | None = pydantic.Field(None, gt=0)
    expert_ffn_per_width: float | None = pydantic.Field(None, gt=0)
    dense_ffn_per_width: float | None = pydantic.Field(None, gt=0)
    small_rungs: Literal["raise", "refuse"] = pydantic.Field(
        "raise",
        description="a rung whose budget can't give each phase one sequence per weighted cell of the "
        "store: 'raise' its tokens to the smallest budget that can (shown by `ladder plan`), or 'refuse' the plan",
    )

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> Rules:
        count = len(self.widths)
        if any(w <= 0 for w in self.widths) or self.widths != sorted(set(self.widths)):
            raise ValueError(f"widths must be positive and strictly increasing (got {self.widths})")
        if (self.layers is None) == (self.layers_per_width is None):
            raise ValueError("give exactly one of 'layers' and 'layers_per_width'")
        for field in ("layers", "names"):
            value = getattr(self, field)
            if value is not None and len(value) != count:
                raise ValueError(f"'{field}' has {len(value)} entries for {count} widths")
        if isinstance(self.batch, list) and len(self.batch) != count:
            raise ValueError(f"'batch' has {len(self.batch)} entries for {count} widths")
        if (self.batch is None) == (self.batch_rule is None):
            raise ValueError("give exactly one of 'batch' and 'batch_rule'")
        if self.names is not None and len(set(self.names)) != count:
            raise ValueError("rung names repeat")
        return self


class TargetModelSpec(StrictModel):
    """`[target]`: the large model the ladder predicts, by its config file or by a width of the rung family."""

    name: str = pydantic.Field("target", pattern=NAME_PATTERN)
    config: str | None = None
    d_model: int | None = pydantic.Field(None, gt=0, description="or a rung-family member of this width")
    layers: int | None = pydantic.Field(None, gt=0)
    tokens: float | None = pydantic.Field(None, gt=0, description="default: the config's plan.tokens, else the rule")
    batch: int | None = pydantic.Field(None, gt=0)

    @pydantic.model_validator(mode="after")
    def _one_shape(self) -> TargetModelSpec:
        if (self.config is None) == (self.d_model is None):
            raise ValueError("give exactly one of 'config' and 'd_model'")
        return self


class EvalSpec(StrictModel):
    evaluations: int = pydantic.Field(8, gt=0, description="held-out evaluations per rung (the curves)")
    max_sequences: int = pydantic.Field(
        8, gt=0, description="held-out windows per cell (external sets are scored whole)"
    )


class FitSpec(StrictModel):
    asymptote: float | None = pydantic.Field(None, ge=0, description="L_inf fixed; none: fitted")
    metric: str = "loss.macro"


class HereSpec(StrictModel):
    """How `seconds_here` is estimated: FLOPs / (peak of this machine's matmul x mfu)."""

    mfu: float = pydantic.Field(0.05, gt=0, le=1)
    peak_flops: float = pydantic.Field(0.0, ge=0, description="0: measure a matmul here")


class LadderSpec(StrictModel):
    ladder: str = pydantic.Field(pattern=NAME_PATTERN)
    description: str = ""
    base: BaseSpec
    mixture: MixtureSpec
    rules: Rules
    target: TargetModelSpec | None = None
    eval: EvalSpec = EvalSpec()
    fit: FitSpec = FitSpec()
    here: HereSpec = HereSpec()
    seeds: int = pydantic.Field(1, gt=0)
    fleet: FleetConfig = FleetConfig(executor="in-process", concurrency=1)  # where the rungs train

    def rung_names(self) -> list[str]:
        return self.rules.names or [f"d{w}" for w in self.rules.widths]


def resolve_path(path: str, ladder_file: Path) -> Path:
    """A config path relative to the ladder (or search) file, else a shipped config (trainer/configs/)."""
    for base in (ladder_file.parent, SHIPPED_CONFIGS):
        candidate = (base / path).resolve()
        if candidate.exists():
            return candidate
    raise ConfigError(f"{ladder_file}: config {path!r} not found next to it or in {SHIPPED_CONFIGS}")


def load_ladder(path: Path | str) -> LadderSpec:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: ladder file not found")
    return load_config(path, LadderSpec)
