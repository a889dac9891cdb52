"""Document-causal attention over packed sequences: a query sees earlier tokens of its own document.

Two kernels compute the same thing (tested against each other):
- `sdpa`: `scaled_dot_product_attention` with a dense block-diagonal causal mask. It
  runs everywhere (the CPU path), but a dense mask rules out the flash kernel and
  does the full L x L work however short the documents are.
- `flex`: FlexAttention with a `BlockMask` built from the loader's segment ids; the
  kernel skips every (query block, key block) tile the mask empties, so the work
  follows the documents' lengths. On CUDA both the mask builder and the kernel are
  compiled. torch 2.13 runs FlexAttention's forward on CPU but not its backward.

`auto` picks flex on CUDA and sdpa elsewhere.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from millrace.errors import ConfigError

DocumentMask = torch.Tensor | BlockMask


def resolve_backend(choice: str, device: torch.device) -> str:
    """The kernel `[model] attention` means on `device`; flex on CPU only where no backward is needed."""
    backend = ("flex" if device.type == "cuda" else "sdpa") if choice == "auto" else choice
    if backend == "flex" and device.type != "cuda" and torch.is_grad_enabled():
        raise ConfigError("model.attention = 'flex' trains only on CUDA (torch has no FlexAttention backward on "
                          f"{device.type}); use 'auto' or 'sdpa'")
    return backend


def dense_document_mask(segment_ids: torch.Tensor, queries: int | None = None) -> torch.Tensor:
    """[b, 1, Q, L] boolean: query i may attend key j iff j <= i and both are in the same document. The
    queries are the last Q of the L tokens (all of them by default; the new ones when keys are cached)."""
    length = segment_ids.shape[1]
    queries = length if queries is None else queries
    key = torch.arange(length, device=segment_ids.device)
    causal = key[None, :] <= key[length - queries :, None]
    same = segment_ids[:, length - queries :, None] == segment_ids[:, None, :]
    return (same & causal)[:, None]


def block_document_mask(segment_ids: torch.Tensor) -> BlockMask:
    """The same mask as a FlexAttention `BlockMask` (one per batch row, shared by the heads)."""

    def document_causal(b, h, q, kv):
        return (segment_ids[b, q] == segment_ids[b, kv]) & (kv <= q)

    batch, length = segment_ids.shape
    return create_block_mask(document_causal, batch, None, length, length, device=segment_ids.device,
                             _compile=segment_ids.is_cuda)


def document_mask(segment_ids: torch.Tensor, backend: str) -> DocumentMask:
    return block_document_mask(segment_ids) if backend == "flex" else dense_document_mask(segment_ids)


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention, dynamic=False)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: DocumentMask) -> torch.Tensor:
    """q [b, h, L, hd], k/v [b, kv_h, L, hd] (grouped-query heads shared) -> [b, h, L, hd]."""
    gqa = q.shape[1] != k.shape[1]
    if isinstance(mask, BlockMask):
        kernel = _compiled_flex() if q.is_cuda else flex_attention
        return kernel(q, k, v, block_mask=mask, enable_gqa=gqa)
    if gqa and q.is_cuda:
        # CUDA's memory-efficient kernel takes a mask but not enable_gqa: share the KV heads by hand.
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
