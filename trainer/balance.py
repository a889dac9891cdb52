"""Aux-loss-free load balancing: the rule that moves each MoE layer's selection bias.

Once per optimizer step, with the step's per-expert token counts summed over
micro-batches and all-reduced over ranks (so every rank applies the same update):

    bias += rate · sign(mean_load − load);  bias −= mean(bias)

Over-loaded experts become less likely to be chosen, under-loaded ones more. The
bias is a buffer: the optimizer never sees it and the gradient norm cannot include
it. A rate of 0 leaves it exactly at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainer.moe import MoE


@dataclass(frozen=True)
class LayerLoad:
    layer: int
    load: list[float]  # fraction of routed token slots per expert
    max_violation: float  # (max load − mean load) / mean load
    entropy: float  # entropy of the load distribution / log(n_experts): 1.0 is perfectly even
    dead_experts: int  # experts that received no token this step
    router_entropy: float = 0.0  # mean over tokens of the entropy of the normalised router scores / log(n)

    def as_dict(self) -> dict:
        return {
            "layer": self.layer,
            "load": self.load,
            "max_violation": self.max_violation,
            "entropy": self.entropy,
            "dead_experts": self.dead_experts,
            "router_entropy": self.router_entropy,
        }


def global_counts(layer: MoE, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """This step's token counts per expert, summed over the data-parallel ranks."""
    counts = layer.step_counts.clone()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(counts, group=group)
    return counts


def load_stats(layer_index: int, counts: torch.Tensor, entropy_sum: float = 0.0, tokens: float = 0.0) -> LayerLoad:
    counts = counts.double()
    total = counts.sum().item()
    n = counts.numel()
    fractions = (counts / total) if total else torch.zeros_like(counts)
    mean = total / n if n else 0.0
    violation = (counts.max().item() - mean) / mean if mean else 0.0
    positive = fractions[fractions > 0]
    entropy = float(-(positive * positive.log()).sum() / math.log(n)) if n > 1 else 1.0
    return LayerLoad(
        layer=layer_index,
        load=[round(float(f), 6) for f in fractions],
        max_violation=float(violation),
        entropy=entropy,
        dead_experts=int((counts == 0).sum()),
        router_entropy=entropy_sum / tokens / math.log(n) if tokens and n > 1 else 0.0,
    )


@torch.no_grad()
def update_bias(layer: MoE, counts: torch.Tensor, rate: float) -> None:
    if rate == 0:
        return
    bias = layer.router.expert_bias
    counts = counts.to(bias.dtype)
    bias += rate * torch.sign(counts.mean() - counts)
    bias -= bias.mean()


def balance_step(layers: list[tuple[int, MoE]], rate: float) -> list[LayerLoad]:
    """After an optimizer step: measure each layer's load, move its bias, reset the counters."""
    stats = []
    for index, layer in layers:
        counts = global_counts(layer)
        entropy = layer.router.step_entropy.clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(entropy)
        stats.append(load_stats(index, counts, float(entropy[0]), float(entropy[1])))
        update_bias(layer, counts, rate)
        layer.step_counts.zero_()
        layer.router.step_entropy.zero_()
    return stats
