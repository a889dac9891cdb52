"""The training configuration: one pydantic model per component (torchtitan style).

A config file is TOML with one table per component:

    [model]       shape of the decoder (layers, widths, heads, vocabulary)
    [moe]         routed/shared experts, router, balancing
    [optimizer]   AdamW and gradient clipping
    [schedule]    warmup + cosine or warmup-stable-decay
    [data]        mixture + revision, micro-batching
    [checkpoint]  how often and how many to keep
    [run]         where the run is kept besides $MILLRACE_HOME/runs/<run>: an fsspec URL shared by every node
    [metrics]     logging cadence, TensorBoard, the peak FLOP/s behind MFU
    [eval]        held-out evaluation cadence and size
    [samples]     intermediate predictions: prompts, temperatures, cadence
    [health]      alert thresholds and the non-finite step guard
    [parallel]    the data x expert layout, mixed precision
    [train]       how a step runs on the hardware (loss chunks, compile, activation checkpointing)
    [plan]        the on-paper sizing: GPUs, their peak, an assumed MFU (the layout comes from [parallel])

Every field has a default, so a file names only what differs; unknown fields are errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic

from millrace.config import StrictModel, load_config
from millrace.errors import ConfigError
from millrace.urls import is_url


class ModelConfig(StrictModel):
    """Decoder shape. `vocab_size` 0 means: take it from the store's tokenizer."""

    d_model: int = pydantic.Field(64, gt=0)
    n_layers: int = pydantic.Field(2, gt=0)
    n_heads: int = pydantic.Field(4, gt=0)
    n_kv_heads: int = pydantic.Field(2, gt=0)
    head_dim: int = pydantic.Field(0, ge=0, description="0: d_model // n_heads")
    vocab_size: int = pydantic.Field(0, ge=0)
    dense_ffn_dim: int = pydantic.Field(256, gt=0, description="SwiGLU width of dense layers")
    n_dense_layers: int = pydantic.Field(0, ge=0, description="the first layers use a dense FFN instead of MoE")
    rope_theta: float = pydantic.Field(10000.0, gt=0)
    norm_eps: float = pydantic.Field(1e-5, gt=0)
    tie_embeddings: bool = False
    init_std: float = pydantic.Field(0.02, gt=0)
    attention: Literal["auto", "sdpa", "flex"] = pydantic.Field(
        "auto", description="document-masked attention kernel: flex (block mask) on CUDA, sdpa elsewhere, or forced"
    )

    @pydantic.model_validator(mode="after")
    def _heads(self) -> ModelConfig:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if not self.head_dim and self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}; set head_dim")
        if self.n_dense_layers > self.n_layers:
            raise ValueError("n_dense_layers exceeds n_layers")
        return self

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim or self.d_model // self.n_heads


class MoEConfig(StrictModel):
    """Token-choice top-k routing with aux-loss-free balancing (a rule-updated selection bias)."""

    n_routed_experts: int = pydantic.Field(8, ge=0, description="0 makes every layer dense")
    n_shared_experts: int = pydantic.Field(1, ge=0)
    top_k: int = pydantic.Field(2, gt=0)
    expert_ffn_dim: int = pydantic.Field(64, gt=0)
    score_func: Literal["sigmoid", "softmax"] = "sigmoid"
    normalize_gates: bool = True
    route_scale: float = pydantic.Field(1.0, gt=0)
    bias_update_rate: float = pydantic.Field(1e-3, ge=0, description="0 freezes the selection bias at zero")
    seq_aux_loss_coef: float = pydantic.Field(0.0, ge=0)
    z_loss_coef: float = pydantic.Field(0.0, ge=0)
    centre_router_input: bool = pydantic.Field(
        True, description="route on the input minus the mean input of the last step (trainer.moe.Router)"
    )
    grouped_mm: bool = pydantic.Field(True, description="torch._grouped_mm where it runs, else a per-expert loop")

    @pydantic.model_validator(mode="after")
    def _k(self) -> MoEConfig:
        if self.n_routed_experts and self.top_k > self.n_routed_experts:
            raise ValueError(f"top_k {self.top_k} exceeds n_routed_experts {self.n_routed_experts}")
        return self


class OptimizerConfig(StrictModel):
    lr: float = pydantic.Field(3e-3, gt=0, le=10)  # past 10 no run trains; 1e308 overflowed the schedule
    min_lr_ratio: float = pydantic.Field(0.1, ge=0, le=1)
    betas: tuple[Annotated[float, pydantic.Field(ge=0, lt=1)], Annotated[float, pydantic.Field(ge=0, lt=1)]] = (
        0.9,
        0.95,
    )
    eps: float = pydantic.Field(1e-8, gt=0)
    weight_decay: float = pydantic.Field(0.1, ge=0)
    grad_clip: float = pydantic.Field(1.0, ge=0, description="0 disables clipping")


class ScheduleConfig(StrictModel):
    kind: Literal["cosine", "wsd"] = "cosine"
    warmup_steps: int = pydantic.Field(10, ge=0)
    decay_fraction: float = pydantic.Field(0.2, gt=0, le=1, description="wsd: share of steps spent decaying")


def _url_or_empty(value: str) -> str:
    if value and not is_url(value):
        raise ValueError(f"{value!r} is not a URL (protocol://...); leave it empty to use the home directory")
    return value


UrlOrEmpty = Annotated[str, pydantic.AfterValidator(_url_or_empty)]


def storage_options_field(url_field: str) -> Any:
    """fsspec options for `url_field`'s URL: they may hold credentials, so they are never copied into run.json."""
    return pydantic.Field(
        default_factory=dict,
        exclude=True,
        description=f"fsspec storage options for {url_field} (endpoint, profile); credentials best come from the "
        "environment",
    )


class DataConfig(StrictModel):
    mixture: str = "default"
    revision: str = "uniform-sampling"
    micro_batches: int = pydantic.Field(1, gt=0, description="gradient accumulation: splits each rank's batch")
    prefetch: int = pydantic.Field(2, ge=0)
    store_url: UrlOrEmpty = pydantic.Field(
        "",
        description="fsspec URL of the store version the mixture pins (s3://bucket/stores/<name>/<version>): "
        "training batches are read from there, held-out shards fetched from there into the home; '': the "
        "home's own store directory",
    )
    storage_options: dict[str, Any] = storage_options_field("store_url")


class CheckpointConfig(StrictModel):
    every: int = pydantic.Field(0, ge=0, description="steps between checkpoints; 0 only at the end")
    keep: int = pydantic.Field(2, gt=0)
    at_end: bool = True


class RunConfig(StrictModel):
    """A run kept at an fsspec URL (`trainer.run_url`): checkpoints and records a restart on other nodes finds."""

    url: UrlOrEmpty = pydantic.Field(
        "",
        description="fsspec URL of a runs root (s3://bucket/runs): the run lives at <url>/<run>; checkpoints are "
        "written there, records copied there at each checkpoint and at the end; '': the home directory only",
    )
    storage_options: dict[str, Any] = storage_options_field("url")


class MetricsConfig(StrictModel):
    log_every: int = pydantic.Field(1, gt=0)
    tensorboard: bool = True
    peak_flops_per_device: float = pydantic.Field(
        0.0, ge=0, description="FLOP/s behind MFU; 0: the GPU's bf16 dense peak from a table, else a timed matmul"
    )


class EvalConfig(StrictModel):
    """Held-out evaluation (`trainer.evaluation`): the same sequences at every evaluation."""

    enabled: bool = True
    every: int = pydantic.Field(0, ge=0, description="steps between evaluations; 0: about ten per run, plus the last")
    max_sequences: int = pydantic.Field(
        16, gt=0, description="held-out windows per cell (external sets are scored whole)"
    )
    batch_sequences: int = pydantic.Field(32, gt=0, description="windows per forward pass, whatever the world size")


MAX_NEW_TOKENS = 4096  # one full forward per new token: 1e9 of them was a hang, not a run


class SamplesConfig(StrictModel):
    """Intermediate predictions (`trainer.samples`)."""

    enabled: bool = True
    every: int = pydantic.Field(0, ge=0, description="steps between samples; 0: at each checkpoint")
    prompts: str = pydantic.Field(
        "auto",
        description='"auto" or a prompts file (.jsonl with id/prompt, or text lines) inside the config '
        "file's directory or $MILLRACE_HOME",
    )
    max_new_tokens: int = pydantic.Field(
        64, gt=0, le=MAX_NEW_TOKENS, description=f"at most {MAX_NEW_TOKENS:,} (each is a forward pass)"
    )
    prompt_tokens: int = pydantic.Field(32, gt=0, description="auto prompts: opening tokens of a held-out document")
    temperatures: list[float] = pydantic.Field([0.0, 0.2], min_length=1, description="0 (greedy) or from 0.01 to 100")
    seed: int = 0

    @pydantic.field_validator("temperatures")
    @classmethod
    def _temperatures(cls, values: list[float]) -> list[float]:
        for value in values:  # logits / 1e-300 are infinite: the softmax is NaN and sampling fails
            if value != 0 and not 0.01 <= value <= 100:
                raise ValueError(f"temperature {value!r} is neither 0 (greedy) nor from 0.01 to 100")
        return values


AlertRule = Literal[
    "loss_jump",
    "grad_norm",
    "load_entropy",
    "dead_experts",
    "router_bias",
    "tokens_per_second",
    "mfu",
    "skipped_steps",
    "eval_regression",
]


class AlertTiming(StrictModel):
    """When a rule's condition becomes an alert (`[health.timing.<rule>]`): one band per problem, not a flicker.

    Steps are optimizer steps; the condition is read at each logged step (every step with `log_every = 1`)."""

    warmup_steps: int = pydantic.Field(0, ge=0, description="the rule cannot fire at or before this step")
    start_after: int = pydantic.Field(
        1, gt=0, description="steps the condition must hold, at every logged step, before the alert starts"
    )
    end_after: int = pydantic.Field(1, gt=0, description="steps it must stay clear before an active alert ends")


# Routing needs its first steps to settle (the router bias starts at zero), throughput its first steps to warm
# caches; a loss jump or a streak of skipped steps matters at once.
DEFAULT_TIMING: dict[AlertRule, dict[str, int]] = {
    "loss_jump": {"warmup_steps": 0, "start_after": 1, "end_after": 20},
    "grad_norm": {"warmup_steps": 20, "start_after": 3, "end_after": 20},
    "load_entropy": {"warmup_steps": 50, "start_after": 5, "end_after": 20},
    "dead_experts": {"warmup_steps": 50, "start_after": 5, "end_after": 20},
    "router_bias": {"warmup_steps": 0, "start_after": 1, "end_after": 20},
    "tokens_per_second": {"warmup_steps": 10, "start_after": 10, "end_after": 20},
    "mfu": {"warmup_steps": 10, "start_after": 10, "end_after": 20},
    "skipped_steps": {"warmup_steps": 0, "start_after": 1, "end_after": 1},  # its own 15-minute window
    "eval_regression": {"warmup_steps": 0, "start_after": 1, "end_after": 1},  # held until the next evaluation
}


class HealthConfig(StrictModel):
    """Alert thresholds and timing (`trainer.health`); thresholds from the reference run's rules."""

    grad_norm_max: float = pydantic.Field(2.0, ge=0, description="gradient norm ceiling (0: off)")
    loss_jump_max: float = pydantic.Field(
        1.0, ge=0, description="loss above its recent floor by more than this (0: off)"
    )
    loss_floor_steps: int = pydantic.Field(100, gt=0, description="steps the loss floor is taken over")
    load_entropy_min: float = pydantic.Field(
        0.995, ge=0, le=1, description="floor on the entropy of each layer's expert load, fraction of log E (0: off)"
    )
    load_window_tokens: int = pydantic.Field(
        65_536,
        ge=0,
        description="the load entropy is taken over the last steps holding at least this many tokens (0: per step)",
    )
    router_bias_max: float = pydantic.Field(400.0, ge=0, description="max |router bias| ceiling (0: off)")
    dead_experts_max: int = pydantic.Field(0, ge=0, description="experts allowed to receive no token in a step")
    tokens_per_second_min: float = pydantic.Field(0.0, ge=0, description="throughput floor (0: off)")
    mfu_min: float = pydantic.Field(
        0.15,
        ge=0,
        le=1,
        description="MFU floor, applied on a GPU against a published peak (configured or the device table); 0: off",
    )
    eval_regression: bool = pydantic.Field(True, description="alert when an evaluation is worse than the previous one")
    skipped_steps_max: int = pydantic.Field(
        3, gt=0, description="skipped steps within skipped_window_seconds that alert"
    )
    skipped_window_seconds: float = pydantic.Field(900.0, gt=0)
    max_consecutive_skips: int = pydantic.Field(5, gt=0, description="stop the run after this many skips in a row")
    timing: dict[AlertRule, AlertTiming] = pydantic.Field(
        default_factory=lambda: {rule: AlertTiming(**fields) for rule, fields in DEFAULT_TIMING.items()},
        description="per rule: warmup_steps, start_after, end_after; a rule's fields not given keep their defaults",
    )

    @pydantic.field_validator("timing", mode="before")
    @classmethod
    def _over_defaults(cls, given: object) -> object:
        if not isinstance(given, dict):
            return given
        merged: dict[str, Any] = {rule: dict(fields) for rule, fields in DEFAULT_TIMING.items()}
        for rule, fields in given.items():
            if isinstance(fields, AlertTiming):
                fields = fields.model_dump()
            merged[rule] = {**merged.get(rule, {}), **fields} if isinstance(fields, dict) else fields
        return merged


class ParallelConfig(StrictModel):
    """The layout: `data_parallel x expert_parallel` ranks (`trainer.distributed`)."""

    expert_parallel: int = pydantic.Field(
        0, ge=0, description="ranks in one expert group (divides the experts and the world); 0 = all ranks"
    )
    data_parallel: int = pydantic.Field(0, ge=0, description="data-parallel size; 0 = world / expert_parallel")
    param_dtype: Literal["float32", "bfloat16"] = pydantic.Field(
        "float32", description="dtype of the weights in compute; master weights and AdamW state are always fp32"
    )
    bf16_autocast: bool = pydantic.Field(True, description="bf16 autocast on CUDA (ignored on CPU)")
    seed: int = 0


class TrainKernelConfig(StrictModel):
    """How a step runs on the hardware; no option here changes the maths (each is tested against its plain form)."""

    loss_chunk_tokens: int = pydantic.Field(
        0,
        ge=0,
        description="tokens per chunk of the output projection + fp32 cross-entropy; 0: auto (8192 on a "
        "GPU; on a CPU as many as keep a chunk's fp32 logits under 16 MB, which the allocator reuses)",
    )
    compile: bool = pydantic.Field(False, description="torch.compile each transformer block's body")
    activation_checkpointing: Literal["none", "full"] = pydantic.Field(
        "none", description="full: keep each block's input only and recompute the block in the backward pass"
    )


class PlanConfig(StrictModel):
    """On-paper sizing for `millrace train plan`."""

    tokens: float = pydantic.Field(0, ge=0, description="token budget; 0 uses the manifest's")
    seq_len: int = pydantic.Field(4096, gt=0)
    global_batch: int = pydantic.Field(1024, gt=0)
    gpus: int = pydantic.Field(8, gt=0)
    gpus_per_node: int = pydantic.Field(0, ge=0, description="GPUs per node (NVLink domain); 0: all on one node")
    peak_flops_per_gpu: float = pydantic.Field(2.5e15, gt=0)
    mfu: float = pydantic.Field(0.35, gt=0, le=1)
    gpu_memory_gib: float = pydantic.Field(186, gt=0)
    master_weight_bytes: int = pydantic.Field(4, gt=0)
    grad_bytes: int = pydantic.Field(4, gt=0)
    optimizer_bytes: int = pydantic.Field(8, gt=0, description="AdamW: two fp32 moments")


class TrainConfig(StrictModel):
    model: ModelConfig = ModelConfig()
    moe: MoEConfig = MoEConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    data: DataConfig = DataConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    run: RunConfig = RunConfig()
    metrics: MetricsConfig = MetricsConfig()
    eval: EvalConfig = EvalConfig()
    samples: SamplesConfig = SamplesConfig()
    health: HealthConfig = HealthConfig()
    parallel: ParallelConfig = ParallelConfig()
    train: TrainKernelConfig = TrainKernelConfig()
    plan: PlanConfig = PlanConfig()
    steps: int = pydantic.Field(0, ge=0, description="0: the manifest's total steps")

    @pydantic.model_validator(mode="after")
    def _moe_layers(self) -> TrainConfig:
        if self.moe.n_routed_experts == 0 and self.model.n_dense_layers < self.model.n_layers:
            object.__setattr__(self, "model", self.model.model_copy(update={"n_dense_layers": self.model.n_layers}))
        return self


SHIPPED_CONFIGS = Path(__file__).parent / "configs"  # the configs millrace ships, found by name from anywhere


def shipped_configs() -> dict[str, Path]:
    """The shipped training configs by name (`tiny` -> .../trainer/configs/tiny.toml)."""
    return {path.stem: path for path in sorted(SHIPPED_CONFIGS.glob("*.toml"))}


def resolve_train_config(spec: Path | str) -> Path:
    """A config file's path, or a shipped config's by its name (`tiny`, `tiny.toml`, or the repository-relative
    `trainer/configs/tiny.toml` run from elsewhere); a miss names the shipped ones."""
    path = Path(spec)
    if path.exists():
        return path
    shipped = shipped_configs()
    name = path.name[: -len(".toml")] if path.name.endswith(".toml") else path.name
    if name in shipped and (path.parent == Path(".") or path.parent.parts[-2:] == ("trainer", "configs")):
        return shipped[name]
    raise ConfigError(
        f"{spec}: training config not found (no such file, nor a shipped config of that name; shipped in "
        f"{SHIPPED_CONFIGS}: {', '.join(shipped) or 'none'}; list them with `millrace train configs`)"
    )


def load_train_config(path: Path | str) -> TrainConfig:
    """A training config from a file, or a shipped one by name (`resolve_train_config`)."""
    return load_config(resolve_train_config(path), TrainConfig)


def with_vocab(config: TrainConfig, vocab_size: int) -> TrainConfig:
    """The config with `model.vocab_size` filled from the store when it was left at 0."""
    if config.model.vocab_size:
        return config
    return config.model_copy(update={"model": config.model.model_copy(update={"vocab_size": vocab_size})})
