"""Norm maths of a training step: squared norms per parameter group reduced across ranks, gradient clipping,
the router biases' norms; one device read each."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from trainer.distributed import Runtime
from trainer.model import Transformer
from trainer.moe import local_tensor
from trainer.param_groups import group_of
from trainer.records import (
    RouterBias,
)


def squared_norm_on_device(tensors: Iterable[torch.Tensor], runtime: Runtime) -> torch.Tensor:
    """Σ x² (float64, on the device) over tensors whose elements each live on exactly one rank (FSDP or
    expert shards)."""
    total = torch.zeros((), dtype=torch.float64, device=runtime.device)
    for tensor in tensors:
        total += local_tensor(tensor).detach().double().pow(2).sum()
    return runtime.all_reduce(total)


def group_squared_norms(model: Transformer, runtime: Runtime) -> dict[str, float]:
    """Σ θ² per parameter group (`trainer.param_groups`), reduced over ranks in one call and read in one."""
    names = sorted({group_of(name) for name, _ in model.named_parameters()})
    sums = torch.zeros(len(names), dtype=torch.float64, device=runtime.device)
    for name, param in model.named_parameters():
        sums[names.index(group_of(name))] += local_tensor(param).detach().double().pow(2).sum()
    return dict(zip(names, runtime.all_reduce(sums).tolist()))


def clip_gradients(model: Transformer, max_norm: float, runtime: Runtime) -> torch.Tensor:
    """Gradient norm over gradient-trained parameters only (the bias has no gradient), then clip, all on
    the device (a scale of min(1, max_norm / norm)): the host reads the norm with the step's other figures."""
    grads = [local_tensor(p.grad) for p in model.parameters() if p.grad is not None]
    norm = squared_norm_on_device(grads, runtime).sqrt()
    if max_norm > 0 and grads:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0).to(grads[0].dtype))
    return norm


def router_bias_stats(model: Transformer) -> tuple[list[RouterBias], float]:
    """Per MoE layer the bias's norm and largest entry, and Σ bias² over layers: one host read for all."""
    biases = [(index, layer.router.expert_bias.detach().double()) for index, layer in model.indexed_moe_layers()]
    if not biases:
        return [], 0.0
    figures = torch.stack(
        [torch.stack([bias.pow(2).sum(), bias.norm(), bias.abs().max()]) for _, bias in biases]
    ).tolist()
    stats = [
        RouterBias(layer=index, norm=norm, max_abs=max_abs) for (index, _), (_, norm, max_abs) in zip(biases, figures)
    ]
    return stats, sum(layer_squared for layer_squared, _, _ in figures)
