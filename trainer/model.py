"""The decoder-only transformer: RMSNorm, rotary positions, grouped-query attention, SwiGLU or MoE.

Attention stays inside documents: the loader's packed sequences carry `segment_ids`
(one id per document), and the mask is block-diagonal and causal (`trainer.attention`:
SDPA with a dense mask, or FlexAttention with a block mask that skips empty tiles).
Rotary angles come from the loader's `positions`.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.utils.checkpoint import checkpoint

from trainer.attention import DocumentMask, attend, document_mask, resolve_backend
from trainer.config import ModelConfig, MoEConfig, TrainKernelConfig
from trainer.kv_cache import KVCache, LayerCache
from trainer.loss import chunked_cross_entropy, loss_chunk_tokens
from trainer.moe import MoE, SwiGLU, replaying


def rotary_inv_freq(config: ModelConfig) -> torch.Tensor:
    head_dim = config.resolved_head_dim
    return 1.0 / config.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim)


def row_seed(seed: int, name: str, row: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{name}:{row}".encode(), digest_size=8).digest(), "little") >> 1


def local_rows(param: torch.Tensor) -> tuple[torch.Tensor, range]:
    """This rank's piece of a parameter and the global rows (dimension 0) it holds.

    FSDP2 and expert parallelism shard on dimension 0 only (`Shard(0)`, or `_StridedShard(0)`
    where FSDP shards an expert-sharded weight again), so a shard is a contiguous run of rows."""
    if not isinstance(param, DTensor):
        return param, range(param.shape[0])
    if any(isinstance(placement, Shard) and placement.dim != 0 for placement in param.placements):
        raise ValueError(f"parameter sharded on {param.placements}: row-keyed initialisation needs dimension 0")

    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return param.to_local(), range(offset[0], offset[0] + shape[0])


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, rotate-half form; x [b, h, L, hd], cos/sin [b, 1, L, hd/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads = config.n_heads, config.n_kv_heads
        self.head_dim = config.resolved_head_dim
        self.wq = nn.Linear(config.d_model, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.d_model, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.d_model, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, config.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: DocumentMask,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        b, length, _ = x.shape
        q = self.wq(x).view(b, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        out = attend(q, k, v, mask)
        projected: torch.Tensor = self.wo(out.transpose(1, 2).reshape(b, length, -1))
        return projected


class Block(nn.Module):
    def __init__(self, config: ModelConfig, moe: MoEConfig, layer: int):
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.is_moe = layer >= config.n_dense_layers and moe.n_routed_experts > 0
        self.ffn = MoE(config, moe) if self.is_moe else SwiGLU(config.d_model, config.dense_ffn_dim)

        self.checkpointed = False  # activation checkpointing: keep the input, recompute the rest in backward
        self.run: Callable[..., torch.Tensor] = (
            self.residual
        )  # what forward calls: `residual`, or its compiled form (`Transformer.use_kernels`)

    def residual(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: DocumentMask,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, mask, cache)
        out: torch.Tensor = x + self.ffn(self.ffn_norm(x))
        return out

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: DocumentMask,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        if cache is not None:  # generation: eager (a compiled block would recompile for every cache length)
            return self.residual(x, cos, sin, mask, cache)
        if self.checkpointed and torch.is_grad_enabled():
            out: torch.Tensor = checkpoint(
                self.run, x, cos, sin, mask, use_reentrant=False, context_fn=self.recompute_contexts
            )
            return out
        return self.run(x, cos, sin, mask)

    def recompute_contexts(
        self,
    ) -> tuple[contextlib.AbstractContextManager[None], contextlib.AbstractContextManager[None]]:
        """Activation checkpointing: the first forward as is, the recomputation without routing statistics."""
        return contextlib.nullcontext(), replaying(self)


class Transformer(nn.Module):
    inv_freq: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, config: ModelConfig, moe: MoEConfig):
        super().__init__()
        if not config.vocab_size:
            raise ValueError("model.vocab_size is 0: fill it from the store's tokenizer first")
        self.config = config
        self.kernels = TrainKernelConfig()
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config, moe, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.embed.weight
        self.register_buffer("inv_freq", rotary_inv_freq(config), persistent=False)

    def init_weights(self, seed: int) -> None:
        """Normal(0, std) matrices, output projections scaled by depth.

        Each row of a parameter (each expert of a stacked expert weight) is drawn from its own
        generator keyed by (seed, name, row), so a rank materialising only its shard of a model
        built on the meta device gets exactly the values a whole single-process model has."""
        std = self.config.init_std
        deep = std / math.sqrt(2 * self.config.n_layers)
        generator = torch.Generator()
        with torch.no_grad():
            for name, param in self.named_parameters():
                local, rows = local_rows(param)
                if name.endswith("norm.weight"):
                    local.fill_(1.0)
                    continue
                scale = deep if name.endswith(("wo.weight", "w2.weight", "experts.w2")) else std
                for index, row in enumerate(rows):
                    generator.manual_seed(row_seed(seed, name, row))
                    local[index].copy_(torch.randn(param.shape[1:], generator=generator) * scale)
            self.reset_buffers()

    def reset_buffers(self) -> None:
        """Buffers are not checkpointed state (or are restored over this): fill them after `to_empty`."""
        self.inv_freq.copy_(rotary_inv_freq(self.config))
        for layer in self.moe_layers():
            layer.router.expert_bias.zero_()
            layer.router.input_centre.zero_()
            for buffer in layer.step_buffers():
                buffer.zero_()

    def use_kernels(self, kernels: TrainKernelConfig) -> None:
        """Switch the `[train]` kernel options on (before the model is sharded, so FSDP's hooks stay outside
        the compiled code: each block's body is compiled, not the module call)."""
        self.kernels = kernels
        for block in self.blocks():
            block.run = torch.compile(block.residual) if kernels.compile else block.residual
            block.checkpointed = kernels.activation_checkpointing == "full"

    def blocks(self) -> list[Block]:
        """The layers, typed (iterating an nn.ModuleList gives plain Modules)."""
        return [block for block in self.layers if isinstance(block, Block)]

    def indexed_moe_layers(self) -> list[tuple[int, MoE]]:
        """(layer index, its MoE) of each MoE layer."""
        return [(i, block.ffn) for i, block in enumerate(self.blocks()) if isinstance(block.ffn, MoE)]

    def moe_layers(self) -> list[MoE]:
        return [layer for _, layer in self.indexed_moe_layers()]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        segment_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [b, L, V], or with `labels` the fp32 per-token losses [b, L] (chunked: no full logits are
        kept), and the summed router auxiliary losses. With a `cache` (generation) the tokens are appended
        to it, attend to everything cached, and only the last position's logits are made: [b, 1, V].

        The loss runs inside `forward` so that a sharded output weight is gathered for it like any other."""
        x = self.embed(input_ids)
        angles = positions.float()[:, None, :, None] * self.inv_freq
        cos, sin = angles.cos(), angles.sin()
        if cache is None:
            mask = document_mask(segment_ids, resolve_backend(self.config.attention, input_ids.device))
            for block in self.layers:
                x = block(x, cos, sin, mask)
        else:
            mask = cache.extend(segment_ids)
            for block, layer_cache in zip(self.layers, cache.layers, strict=True):
                x = block(x, cos, sin, mask, layer_cache)
            x = x[:, -1:]
        aux = sum(
            (m.aux_loss for m in self.moe_layers() if m.aux_loss is not None), x.new_zeros((), dtype=torch.float32)
        )
        if labels is not None:
            chunk = loss_chunk_tokens(self.kernels.loss_chunk_tokens, self.output.weight.shape[0], x.device)
            return chunked_cross_entropy(self.norm(x), self.output.weight, labels, chunk), aux
        return self.output(self.norm(x)), aux
