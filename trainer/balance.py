"""Aux-loss-free load balancing: the rule that moves each MoE layer's selection bias.

Once per optimizer step, with the step's per-expert token counts summed over
micro-batches and all-reduced over ranks (all layers in one all-reduce, so every rank
applies the same update):

    bias += rate · sign(mean_load − load);  bias −= mean(bias)

Over-loaded experts become less likely to be chosen, under-loaded ones more. The
bias is a buffer: the optimizer never sees it and the gradient norm cannot include
it. A rate of 0 leaves it exactly at zero.

The same all-reduce carries each router's input sum, and the router's `input_centre` becomes the
step's mean input (kept as it was after a step with no tokens or a non-finite input).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from trainer.moe import MoE
from trainer.records import ExpertLoad


@dataclass(frozen=True)
class LayerLoad:
    layer: int
    load: list[float]  # fraction of routed token slots per expert
    max_violation: float  # (max load − mean load) / mean load
    entropy: float  # entropy of the load distribution / log(n_experts): 1.0 is perfectly even
    dead_experts: int  # experts that received no token this step
    router_entropy: float = 0.0  # mean over tokens of the entropy of the normalised router scores / log(n)

    def record(self) -> ExpertLoad:
        """The layer's load as its metrics record carries it."""
        load: list[float | None] = list(self.load)
        return ExpertLoad(
            layer=self.layer,
            load=load,
            max_violation=self.max_violation,
            entropy=self.entropy,
            dead_experts=self.dead_experts,
            router_entropy=self.router_entropy,
        )


def step_totals(layers: list[tuple[int, MoE]], group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """[layers, n_experts + 2 + d_model + 1] float64 on the device: each layer's token counts per expert, its
    router entropy sum and token count, then its router input sum and token count, since the last step, summed
    over the data-parallel ranks in one all-reduce."""
    totals = torch.stack([torch.cat([buffer.double() for buffer in layer.step_buffers()]) for _, layer in layers])
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(totals, group=group)
    return totals


def load_stats(layer_index: int, counts: np.ndarray, entropy_sum: float = 0.0, tokens: float = 0.0) -> LayerLoad:
    """A layer's load figures from its host-side counts (no device reads)."""
    counts = np.asarray(counts, dtype=np.float64)
    total = float(counts.sum())
    n = counts.size
    fractions = counts / total if total else np.zeros_like(counts)
    mean = total / n if n else 0.0
    positive = fractions[fractions > 0]
    return LayerLoad(
        layer=layer_index,
        load=[round(float(f), 6) for f in fractions],
        max_violation=float((counts.max() - mean) / mean) if mean else 0.0,
        entropy=float(-(positive * np.log(positive)).sum() / math.log(n)) if n > 1 else 1.0,
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


@torch.no_grad()
def update_centre(layer: MoE, input_totals: torch.Tensor) -> None:
    """`input_totals` [d_model + 1]: Σ input, tokens. On the device, with no read: a mean that is not finite
    (no token, or an overflowed step) leaves the centre as it was."""
    centre = layer.router.input_centre
    mean = (input_totals[:-1] / input_totals[-1]).to(centre.dtype)
    centre.copy_(torch.where(torch.isfinite(mean).all(), mean, centre))


def balance_step(layers: list[tuple[int, MoE]], rate: float) -> list[LayerLoad]:
    """After an optimizer step: measure each layer's load, move its bias and its router's input centre,
    reset the counters.

    One all-reduce and one device-to-host read for all layers together: the bias and the centre move on
    the device, the figures are computed from a single host copy of the load columns (not a read per layer,
    let alone per expert)."""
    if not layers:
        return []
    totals = step_totals(layers)
    n_experts = layers[0][1].step_counts.numel()
    for row, (_, layer) in enumerate(layers):
        update_bias(layer, totals[row, :n_experts], rate)
        if layer.config.centre_router_input:
            update_centre(layer, totals[row, n_experts + 2 :])
        for buffer in layer.step_buffers():
            buffer.zero_()
    host = totals[:, : n_experts + 2].cpu().numpy()
    return [
        load_stats(index, host[row, :n_experts], float(host[row, n_experts]), float(host[row, n_experts + 1]))
        for row, (index, _) in enumerate(layers)
    ]
