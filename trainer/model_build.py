"""Building the model and its optimiser for a run, after checking that it fits in memory (torch-only: no run
files, no loader)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from millrace.errors import ConfigError
from trainer.config import TrainConfig
from trainer.distributed import Runtime, parallelize
from trainer.flops import count_params
from trainer.model import Transformer

if TYPE_CHECKING:
    pass


def check_fits(config: TrainConfig, runtime: Runtime, config_path: Path) -> None:
    """Refuse a model whose fp32 weights and AdamW state cannot fit in this rank's share (535B on a laptop)."""
    needed = count_params(config).total * 4 * 3 // runtime.world  # weights + two moments, sharded over every rank
    if runtime.device.type == "cuda":
        available = torch.cuda.mem_get_info(runtime.device)[0]
    else:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // max(runtime.world, 1)
    if needed > available // 2:
        raise ConfigError(
            f"{config_path}: the model needs {needed / 2**30:,.1f} GiB per rank for its fp32 weights and AdamW "
            f"state over {runtime.world} rank(s), {available / 2**30:,.1f} GiB is free here; size it on paper "
            f"with `millrace train plan {config_path}`"
        )


def build_model(config: TrainConfig, runtime: Runtime) -> Transformer:
    """Built on the meta device, sharded there, then each rank materialises and initialises its shard only:
    no rank ever holds the whole model. fp32 master weights always (bf16 compute is a cast at use:
    `compute_in_bf16`, FSDP's mixed precision)."""
    torch.manual_seed(config.parallel.seed)
    with torch.device("meta"):
        model = Transformer(config.model, config.moe)
    model.use_kernels(config.train)
    model = parallelize(model, runtime, config.parallel)
    model.to_empty(device=runtime.device)
    model.init_weights(config.parallel.seed)
    return model


def compute_in_bf16(config: TrainConfig, runtime: Runtime) -> bool:
    """Autocast to bf16: on CUDA when `bf16_autocast`; and for `param_dtype = "bfloat16"` in one process,
    the single-process equivalent of FSDP's bf16 parameter cast (the weights and AdamW state stay fp32)."""
    parallel = config.parallel
    single_bf16 = parallel.param_dtype == "bfloat16" and not runtime.distributed
    return (runtime.device.type == "cuda" and parallel.bf16_autocast) or single_bf16


def build_optimizer(model: Transformer, config: TrainConfig) -> torch.optim.AdamW:
    """Weight decay on matrices only; the router bias is a buffer and never reaches the optimizer."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = config.optimizer
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=opt.lr,
        betas=opt.betas,
        eps=opt.eps,
        foreach=True,
    )
