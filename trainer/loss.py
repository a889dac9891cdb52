"""Token cross-entropy in fp32 without a full fp32 copy of the logits.

The output projection and the loss run over chunks of tokens: each chunk's logits
are computed in the compute dtype, upcast to fp32 for the log-softmax, and dropped.
`torch.utils.checkpoint` recomputes a chunk's logits in the backward pass instead of
keeping them, so at most one chunk of logits ([chunk, vocab], fp32) is alive at a
time, in either pass, rather than the [batch x length, vocab] logits and their fp32
copy of the unchunked form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _chunk_losses(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, weight.to(hidden.dtype))
    return F.cross_entropy(logits.float(), labels, reduction="none")


EAGER_ON_CPU = True  # gradients in the forward on a CPU (`EagerChunkedLoss`); the proxy bench measures both
CPU_CHUNK_BYTES = 16 * 2**20  # below glibc's mmap threshold: larger blocks are mapped and unmapped every step
GPU_CHUNK_TOKENS = 8192


def loss_chunk_tokens(configured: int, vocab: int, device: torch.device) -> int:
    """The chunk size to use: the configured one, else one that suits the device.

    On a CPU a chunk's fp32 logits above the allocator's mmap threshold are page-faulted in anew
    at every step (at the demo's shape that was a third of the training time)."""
    if configured:
        return configured
    if device.type == "cuda":
        return GPU_CHUNK_TOKENS
    return max(64, CPU_CHUNK_BYTES // (4 * vocab))


class EagerChunkedLoss(torch.autograd.Function):
    """The CPU path: each chunk's gradients are computed in the forward, while its logits are at hand, for a
    loss whose upstream gradient is the same for every token (the training objective's sum / tokens); the
    backward only scales them. Three matmuls of the output layer's size, not the checkpoint's four (at the
    tiny proxy's shape the output layer is most of the FLOPs). Any other upstream gradient recomputes the
    chunks exactly."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int) -> torch.Tensor:
        cast = weight.to(hidden.dtype)
        losses = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            logits = F.linear(hidden[rows], cast).float()
            lse = torch.logsumexp(logits, dim=-1)
            losses[rows] = lse - logits.gather(1, labels[rows, None]).squeeze(1)
            probs = logits.sub_(lse[:, None]).exp_()
            probs[torch.arange(probs.shape[0], device=probs.device), labels[rows]] -= 1.0
            grad_hidden[rows] = probs @ cast.float()
            grad_weight.addmm_(probs.t(), hidden[rows].float())
        ctx.save_for_backward(hidden, weight, labels, grad_hidden, grad_weight)
        ctx.chunk = chunk
        return losses

    @staticmethod
    def backward(ctx, upstream: torch.Tensor):
        hidden, weight, labels, grad_hidden, grad_weight = ctx.saved_tensors
        if bool((upstream == upstream[0]).all()):
            scale = upstream[0]
            return (grad_hidden * scale).to(hidden.dtype), (grad_weight * scale).to(weight.dtype), None, None
        with torch.enable_grad():
            h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
            losses = torch.cat(
                [
                    _chunk_losses(h[s : s + ctx.chunk], w, labels[s : s + ctx.chunk])
                    for s in range(0, len(h), ctx.chunk)
                ]
            )
            grads = torch.autograd.grad(losses, [h, w], upstream)
        return grads[0], grads[1], None, None


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int
) -> torch.Tensor:
    """Per-token fp32 losses [b, L] of `hidden` [b, L, d] projected by `weight` [V, d] against `labels` [b, L]."""
    flat, targets = hidden.flatten(0, 1), labels.flatten()
    if flat.shape[0] <= chunk_tokens:  # one chunk: checkpointing would only recompute it, saving nothing
        return _chunk_losses(flat, weight, targets).view(labels.shape)
    if (
        EAGER_ON_CPU
        and flat.device.type == "cpu"
        and torch.is_grad_enabled()
        and (flat.requires_grad or weight.requires_grad)
    ):
        return EagerChunkedLoss.apply(flat, weight, targets, chunk_tokens).view(labels.shape)
    losses = []
    for start in range(0, flat.shape[0], chunk_tokens):
        rows = slice(start, start + chunk_tokens)
        if torch.is_grad_enabled():
            losses.append(checkpoint(_chunk_losses, flat[rows], weight, targets[rows], use_reentrant=False))
        else:
            losses.append(_chunk_losses(flat[rows], weight, targets[rows]))
    return torch.cat(losses).view(labels.shape)
