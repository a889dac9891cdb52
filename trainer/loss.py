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


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int
) -> torch.Tensor:
    """Per-token fp32 losses [b, L] of `hidden` [b, L, d] projected by `weight` [V, d] against `labels` [b, L]."""
    flat, targets = hidden.flatten(0, 1), labels.flatten()
    if flat.shape[0] <= chunk_tokens:  # one chunk: checkpointing would only recompute it, saving nothing
        return _chunk_losses(flat, weight, targets).view(labels.shape)
    losses = []
    for start in range(0, flat.shape[0], chunk_tokens):
        rows = slice(start, start + chunk_tokens)
        if torch.is_grad_enabled():
            losses.append(checkpoint(_chunk_losses, flat[rows], weight, targets[rows], use_reentrant=False))
        else:
            losses.append(_chunk_losses(flat[rows], weight, targets[rows]))
    return torch.cat(losses).view(labels.shape)
