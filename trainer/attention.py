"""Document-causal attention over packed sequences: a query sees earlier tokens of its own document.

Two kernels compute the same thing (tested against each other):
- `sdpa`: `scaled_dot_product_attention` with a dense block-diagonal causal mask. It
  runs everywhere (the CPU path), but a dense mask rules out the flash kernel and
  does the full L x L work however short the documents are.
- `flex`: FlexAttention with a `BlockMask` built from the loader's segment ids; the
  kernel skips every (query block, key block) tile the mask empties, so the work
  follows the documents' lengths. On CUDA both the mask builder and the kernel are
  compiled, for a few shape buckets (powers of two; masked padding fills the gap) rather
  than for every batch size and length met. torch 2.13 runs FlexAttention's forward on
  CPU but not its backward.

`auto` picks flex on CUDA and sdpa elsewhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from millrace.errors import ConfigError

DocumentMask = torch.Tensor | BlockMask
FLEX_BLOCK = 128  # FlexAttention's default tile (query and key block size)


def resolve_backend(choice: str, device: torch.device) -> str:
    """The kernel `[model] attention` means on `device`; flex on CPU only where no backward is needed."""
    backend = ("flex" if device.type == "cuda" else "sdpa") if choice == "auto" else choice
    if backend == "flex" and device.type != "cuda" and torch.is_grad_enabled():
        raise ConfigError(
            "model.attention = 'flex' trains only on CUDA (torch has no FlexAttention backward on "
            f"{device.type}); use 'auto' or 'sdpa'"
        )
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


def shape_bucket(size: int, smallest: int = 1) -> int:
    """The power of two at or above `size` (at least `smallest`): the sizes the compiled kernels see."""
    return max(smallest, 1 << (size - 1).bit_length())


def bucketed_segments(segment_ids: torch.Tensor) -> torch.Tensor:
    """Segment ids padded to the (batch, length) bucket: rows to a power of two, length to a power of two
    of at least one block (128). Each padding token is a document of its own (a negative id per position),
    so it sees only itself (no empty row) and the real tokens never see it: the kernel computes one
    diagonal tile per padding block and the real rows exactly as unpadded."""
    batch, length = segment_ids.shape
    rows, columns = shape_bucket(batch), shape_bucket(length, FLEX_BLOCK)
    if (rows, columns) == (batch, length):
        return segment_ids
    alone = -1 - torch.arange(columns, dtype=segment_ids.dtype, device=segment_ids.device)  # loader ids: int32
    padded = alone.expand(rows, columns).clone()
    padded[:batch, :length] = segment_ids
    return padded


def block_document_mask(segment_ids: torch.Tensor) -> BlockMask:
    """The same mask as a FlexAttention `BlockMask` (one per batch row, shared by the heads), built at the
    shape bucket of `segment_ids` (`attend` pads q, k, v to it), so that the compiled mask builder and
    kernel see one shape per bucket: evaluation's batches, a last partial batch or another length
    reuse the compiled code instead of recompiling until torch's recompile limit."""
    segments = bucketed_segments(segment_ids)

    def document_causal(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (segments[b, q] == segments[b, kv]) & (kv <= q)

    batch, length = segments.shape
    build = compiled_block_mask() if segments.is_cuda else create_block_mask
    return build(document_causal, batch, None, length, length, device=segments.device)


def document_mask(segment_ids: torch.Tensor, backend: str) -> DocumentMask:
    return block_document_mask(segment_ids) if backend == "flex" else dense_document_mask(segment_ids)


@functools.cache
def compiled_block_mask() -> Callable[..., BlockMask]:
    return torch.compile(create_block_mask, dynamic=False)


@functools.cache
def compiled_flex_attention() -> Callable[..., torch.Tensor]:
    kernel: Callable[..., torch.Tensor] = flex_attention  # its overload without `return_lse`, the one `attend` uses
    return torch.compile(kernel, dynamic=False)


def flex_kernel(device: torch.device) -> Callable[..., torch.Tensor]:
    """Compiled on CUDA (one compilation per shape bucket); the eager reference elsewhere (CPU forward)."""
    if device.type == "cuda":
        return compiled_flex_attention()
    return flex_attention


def padded_like(t: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """[b, h, L, hd] zero-padded to [rows, h, columns, hd] in `t`'s own memory layout: the compiled kernel
    guards on strides, so a padded batch must look like an unpadded one (v arrives as a transposed view)."""
    order = sorted(range(t.ndim), key=lambda dim: -t.stride()[dim])  # outermost dimension first
    shape = (rows, t.shape[1], columns, t.shape[3])
    padded = t.new_zeros([shape[dim] for dim in order]).permute([order.index(dim) for dim in range(t.ndim)])
    padded[: t.shape[0], :, : t.shape[2]] = t
    return padded


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: DocumentMask) -> torch.Tensor:
    """q [b, h, L, hd], k/v [b, kv_h, L, hd] (grouped-query heads shared) -> [b, h, L, hd]."""
    gqa = q.shape[1] != k.shape[1]
    if isinstance(mask, BlockMask):
        batch, _, length, _ = q.shape
        rows, _, columns, _ = mask.shape
        if (rows, columns) != (batch, length):  # off the bucket: one padded copy (rows and tail are masked)
            q, k, v = (padded_like(t, rows, columns) for t in (q, k, v))
        out = flex_kernel(q.device)(q, k, v, block_mask=mask, enable_gqa=gqa)
        return out[:batch, :, :length]
    if gqa and q.is_cuda:
        # CUDA's memory-efficient kernel takes a mask but not enable_gqa: share the KV heads by hand.
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
