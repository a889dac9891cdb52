"""Parameters, FLOPs and memory of a config, counted on paper (no model is built).

FLOPs per token follow the usual training estimate: 6 FLOPs per active matmul
parameter (forward 2, backward 4; the input embedding is a lookup, not a matmul)
plus attention's score and value products, 2·2·q_dim·L per layer forward, times 3
for forward + backward, halved because a causal mask skips half the pairs:
6 · n_layers · q_dim · seq_len. This is an upper bound for packed documents: the
document mask leaves only each document's own causal pairs (`document_attention_pairs`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from millrace.errors import ConfigError
from trainer.config import TrainConfig
from trainer.layout import ProposedLayout, propose_layout


@dataclass(frozen=True)
class ParamCount:
    embedding: int
    output: int
    attention: int  # all layers
    dense_ffn: int  # dense layers' SwiGLU
    routers: int
    shared_experts: int
    routed_experts: int  # all routed experts of all MoE layers
    routed_active: int  # top_k experts per MoE layer
    norms: int

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.output
            + self.attention
            + self.dense_ffn
            + self.routers
            + self.shared_experts
            + self.routed_experts
            + self.norms
        )

    @property
    def active(self) -> int:
        return self.total - self.routed_experts + self.routed_active

    @property
    def active_matmul(self) -> int:
        """Active parameters that take part in a matmul (everything but the embedding lookup and norms)."""
        return self.active - self.embedding - self.norms

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total, "active": self.active, "active_matmul": self.active_matmul}


def count_params(config: TrainConfig) -> ParamCount:
    m, moe = config.model, config.moe
    d, hd = m.d_model, m.resolved_head_dim
    q_dim, kv_dim = m.n_heads * hd, m.n_kv_heads * hd
    n_moe = m.n_layers - m.n_dense_layers if moe.n_routed_experts else 0
    n_dense = m.n_layers - n_moe
    expert = 3 * d * moe.expert_ffn_dim
    return ParamCount(
        embedding=m.vocab_size * d,
        output=0 if m.tie_embeddings else m.vocab_size * d,
        attention=m.n_layers * (2 * d * q_dim + 2 * d * kv_dim),
        dense_ffn=n_dense * 3 * d * m.dense_ffn_dim,
        routers=n_moe * d * moe.n_routed_experts,
        shared_experts=n_moe * moe.n_shared_experts * expert,
        routed_experts=n_moe * moe.n_routed_experts * expert,
        routed_active=n_moe * moe.top_k * expert,
        norms=(2 * m.n_layers + 1) * d,
    )


def attention_flops_per_token(config: TrainConfig, seq_len: int) -> float:
    m = config.model
    return 6.0 * m.n_layers * m.n_heads * m.resolved_head_dim * seq_len


def document_attention_pairs(segment_ids: np.ndarray) -> int:
    """The (query, key) pairs a document-causal mask leaves of packed rows [b, L]: Σ n(n+1)/2 over the
    documents (runs of one segment id), the work FlexAttention's block mask lets the kernel do."""
    segment_ids = np.asarray(segment_ids)
    starts = np.ones(segment_ids.shape, dtype=bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    lengths = np.diff(np.append(np.flatnonzero(starts.reshape(-1)), segment_ids.size))
    return int((lengths * (lengths + 1) // 2).sum())


def masked_attention_flops(config: TrainConfig, pairs: int) -> float:
    """Training FLOPs (forward + backward) of attention over `pairs` unmasked pairs: the score and value
    products, 2·2·q_dim per pair per layer forward, times 3. Over one whole causal row of L tokens this is
    `attention_flops_per_token` (up to the diagonal)."""
    m = config.model
    return 12.0 * m.n_layers * m.n_heads * m.resolved_head_dim * pairs


def flops_per_token(config: TrainConfig, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward): 6·N_active_matmul + causal attention."""
    return 6.0 * count_params(config).active_matmul + attention_flops_per_token(config, seq_len)


@dataclass(frozen=True)
class Memory:
    """GiB per GPU, on paper. Activations are for one micro-batch of this rank's sequences with
    balanced routing, bf16; "checkpointed" keeps only each block's input and recomputes one block."""

    state: float  # fp32 master weights + gradients + AdamW moments, sharded over every used GPU
    gathered: float  # two blocks' unsharded weights (FSDP all-gather of one block while the next prefetches)
    activations: float
    activations_checkpointed: float
    logits: float  # the output logits and their gradient (the fp32 loss is computed in chunks)
    gpu_memory: float

    @property
    def total(self) -> float:
        return self.state + self.gathered + self.activations + self.logits

    @property
    def total_checkpointed(self) -> float:
        return self.state + self.gathered + self.activations_checkpointed + self.logits

    def as_dict(self) -> dict[str, float | bool]:
        return {
            **asdict(self),
            "total": self.total,
            "total_checkpointed": self.total_checkpointed,
            "fits": self.total <= self.gpu_memory,
            "fits_checkpointed": self.total_checkpointed <= self.gpu_memory,
        }


def activation_bytes_per_token(config: TrainConfig, moe_layer: bool, dtype_bytes: int = 2) -> float:
    """What autograd keeps for one token of one block: norm inputs, q/k/v and the attention output; for an
    MoE block the routed copies (k of them) with their w1, w3 and product activations, the shared experts'."""
    m, moe = config.model, config.moe
    d, q_dim, kv_dim = m.d_model, m.n_heads * m.resolved_head_dim, m.n_kv_heads * m.resolved_head_dim
    attention = 2 * d + 2 * q_dim + 2 * kv_dim
    if moe_layer:
        routed = moe.top_k * (2 * d + 3 * moe.expert_ffn_dim)
        ffn = 2 * d + routed + 3 * moe.expert_ffn_dim * moe.n_shared_experts + 4 * moe.n_routed_experts
    else:
        ffn = 2 * d + 3 * m.dense_ffn_dim
    return float(dtype_bytes * (attention + ffn))


def memory(config: TrainConfig, params: ParamCount, layout: ProposedLayout, seq_len: int, global_batch: int) -> Memory:
    p, m = config.plan, config.model
    gib = float(1 << 30)
    tokens = global_batch // layout.gpus_used // config.data.micro_batches * seq_len
    n_moe = m.n_layers - m.n_dense_layers if config.moe.n_routed_experts else 0
    n_dense = m.n_layers - n_moe
    kinds = {True: n_moe, False: n_dense}  # layers per kind (MoE or dense): arithmetic, never a list per layer
    per_kind = {moe: activation_bytes_per_token(config, moe) for moe, count in kinds.items() if count}
    compute_bytes = 2 if config.parallel.param_dtype == "bfloat16" else 4
    attention = params.attention / m.n_layers
    expert_block = (params.routers + params.shared_experts + params.routed_experts / layout.expert_parallel) / max(
        n_moe, 1
    )
    dense_block = params.dense_ffn / max(n_dense, 1)
    block = attention + max(expert_block if n_moe else 0, dense_block if n_moe < m.n_layers else 0)
    return Memory(
        state=params.total * (p.master_weight_bytes + p.grad_bytes + p.optimizer_bytes) / layout.gpus_used / gib,
        gathered=2 * block * compute_bytes / gib,
        activations=tokens * sum(per_kind[moe] * kinds[moe] for moe in per_kind) / gib,
        activations_checkpointed=tokens * (2 * m.d_model * m.n_layers + max(per_kind.values())) / gib,
        logits=2 * tokens * m.vocab_size * 2 / gib,
        gpu_memory=p.gpu_memory_gib,
    )


@dataclass(frozen=True)
class Plan:
    params: ParamCount
    seq_len: int
    tokens: float
    flops_per_token: float
    attention_flops_per_token: float
    total_flops: float
    gpus: int
    expert_parallel: int
    layout: ProposedLayout
    memory: Memory
    weights_gib_per_gpu: float
    grads_gib_per_gpu: float
    optimizer_gib_per_gpu: float
    peak_flops_per_gpu: float
    mfu: float
    days: float
    global_batch: int
    steps: int  # the config's `steps` (its learning-rate horizon), else as many as the token budget holds
    trained_tokens: float  # steps x global batch x seq_len: what the FLOPs and days count
    param_dtype: str  # the weights FSDP gathers and computes with
    master_dtype: str  # the sharded master weights AdamW updates

    @property
    def state_gib_per_gpu(self) -> float:
        return self.weights_gib_per_gpu + self.grads_gib_per_gpu + self.optimizer_gib_per_gpu

    def as_dict(self) -> dict[str, object]:
        body = asdict(self)
        body["params"] = self.params.as_dict()
        body["layout"] = (
            self.layout.as_dict()
        )  # data_parallel, expert_parallel, gpus_used, gpus_idle, loader_world, ...
        body["memory_gib_per_gpu"] = self.memory.as_dict()
        del body["memory"]
        body["state_gib_per_gpu"] = self.state_gib_per_gpu
        return body


MASTER_DTYPES = {2: "bfloat16", 4: "float32", 8: "float64"}


def planned_steps(config: TrainConfig, tokens: float) -> int:
    """The config's `steps` when set (refused beyond the token budget, as training refuses it), else the
    whole steps the budget holds."""
    p = config.plan
    budget = int(tokens // (p.seq_len * p.global_batch))
    if config.steps and tokens and config.steps > budget:
        raise ConfigError(
            f"steps = {config.steps:,} exceeds the {budget:,} steps of {p.global_batch:,} x {p.seq_len:,} "
            f"tokens that the budget of {tokens:.4g} tokens holds"
        )
    return config.steps or budget


def plan(
    config: TrainConfig,
    gpus: int | None = None,
    tokens: float | None = None,
    mfu: float | None = None,
    gpus_per_node: int | None = None,
) -> Plan:
    """Sizing on paper, on the layout `trainer.layout.propose_layout` finds for these GPUs (the trainer
    accepts it: the same rules). Sharding: FSDP shards every dense parameter over all used GPUs; routed
    experts are split over `expert_parallel` ranks and FSDP-sharded over `data_parallel`, so every
    parameter's state is spread over all used GPUs. FLOPs and days count the tokens of the planned steps."""
    p = config.plan
    gpus = gpus or p.gpus
    tokens = tokens if tokens is not None else p.tokens
    mfu = mfu or p.mfu
    layout = propose_layout(
        gpus,
        p.gpus_per_node if gpus_per_node is None else gpus_per_node,
        config.moe.n_routed_experts,
        p.global_batch,
        config.data.micro_batches,
        config.parallel.expert_parallel,
        config.parallel.data_parallel,
    )
    used = layout.gpus_used
    params = count_params(config)
    per_token = flops_per_token(config, p.seq_len)
    steps = planned_steps(config, tokens)
    trained = float(steps * p.global_batch * p.seq_len)
    total = per_token * trained
    gib = float(1 << 30)
    per_gpu = params.total / used
    days = total / (used * p.peak_flops_per_gpu * mfu) / 86400.0
    return Plan(
        params=params,
        seq_len=p.seq_len,
        tokens=tokens,
        flops_per_token=per_token,
        attention_flops_per_token=attention_flops_per_token(config, p.seq_len),
        total_flops=total,
        gpus=gpus,
        expert_parallel=layout.expert_parallel,
        layout=layout,
        memory=memory(config, params, layout, p.seq_len, p.global_batch),
        weights_gib_per_gpu=per_gpu * p.master_weight_bytes / gib,
        grads_gib_per_gpu=per_gpu * p.grad_bytes / gib,
        optimizer_gib_per_gpu=per_gpu * p.optimizer_bytes / gib,
        peak_flops_per_gpu=p.peak_flops_per_gpu,
        mfu=mfu,
        days=days,
        global_batch=p.global_batch,
        steps=steps,
        trained_tokens=trained,
        param_dtype=config.parallel.param_dtype,
        master_dtype=MASTER_DTYPES.get(p.master_weight_bytes, f"{p.master_weight_bytes} bytes"),
    )
