"""A tiny MoE transformer (2 layers, 4 routed experts, top-2) for tests that need a real model in milliseconds."""

from __future__ import annotations

from typing import Any

import torch

from trainer.config import ModelConfig, MoEConfig, TrainKernelConfig
from trainer.model import Transformer


def tiny_model(seed: int = 0, **kernels: Any) -> Transformer:
    """Initialised from `seed`, with the kernel options given (`TrainKernelConfig` fields)."""
    torch.manual_seed(seed)
    model = Transformer(
        ModelConfig(
            d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=96, dense_ffn_dim=48, n_dense_layers=1
        ),
        MoEConfig(n_routed_experts=4, top_k=2, expert_ffn_dim=16),
    )
    model.init_weights(seed)
    model.use_kernels(TrainKernelConfig(**kernels))
    return model
