"""Parameters, FLOPs and memory of a config, counted on paper (no model is built).

FLOPs per token follow the usual training estimate: 6 FLOPs per active matmul
parameter (forward 2, backward 4; the input embedding is a lookup, not a matmul)
plus attention's score and value products, 2·2·q_dim·L per layer forward, times 3
for forward + backward, halved because a causal mask skips half the pairs:
6 · n_layers · q_dim · seq_len.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from millrace.errors import ConfigError
from trainer.config import TrainConfig


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
            self.embedding + self.output + self.attention + self.dense_ffn + self.routers
            + self.shared_experts + self.routed_experts + self.norms
        )

    @property
    def active(self) -> int:
        return self.total - self.routed_experts + self.routed_active

    @property
    def active_matmul(self) -> int:
        """Active parameters that take part in a matmul (everything but the embedding lookup and norms)."""
        return self.active - self.embedding - self.norms

    def as_dict(self) -> dict:
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


def flops_per_token(config: TrainConfig, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward): 6·N_active_matmul + causal attention."""
    return 6.0 * count_params(config).active_matmul + attention_flops_per_token(config, seq_len)


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
    weights_gib_per_gpu: float
    grads_gib_per_gpu: float
    optimizer_gib_per_gpu: float
    peak_flops_per_gpu: float
    mfu: float
    days: float
    global_batch: int
    steps: int

    @property
    def state_gib_per_gpu(self) -> float:
        return self.weights_gib_per_gpu + self.grads_gib_per_gpu + self.optimizer_gib_per_gpu

    def as_dict(self) -> dict:
        body = asdict(self)
        body["params"] = self.params.as_dict()
        body["state_gib_per_gpu"] = self.state_gib_per_gpu
        return body


def plan(config: TrainConfig, gpus: int | None = None, tokens: float | None = None, mfu: float | None = None) -> Plan:
    """Sizing on paper. Sharding: FSDP shards every non-expert parameter over all GPUs; routed
    experts are split over `expert_parallel` ranks and FSDP-sharded over the remaining
    gpus / expert_parallel replicas, so every parameter's state is spread over all GPUs."""
    p = config.plan
    gpus = gpus or p.gpus
    tokens = tokens if tokens is not None else p.tokens
    mfu = mfu or p.mfu
    experts = config.moe.n_routed_experts
    expert_parallel = config.parallel.expert_parallel or (gpus if experts else 1)
    if experts and (experts % expert_parallel or gpus % expert_parallel):
        raise ConfigError(f"parallel.expert_parallel = {expert_parallel} must divide both the {experts} experts "
                          f"and the {gpus} GPUs")
    params = count_params(config)
    per_token = flops_per_token(config, p.seq_len)
    total = per_token * tokens
    gib = float(1 << 30)
    per_gpu = params.total / gpus
    days = total / (gpus * p.peak_flops_per_gpu * mfu) / 86400.0
    return Plan(
        params=params,
        seq_len=p.seq_len,
        tokens=tokens,
        flops_per_token=per_token,
        attention_flops_per_token=attention_flops_per_token(config, p.seq_len),
        total_flops=total,
        gpus=gpus,
        expert_parallel=expert_parallel,
        weights_gib_per_gpu=per_gpu * p.master_weight_bytes / gib,
        grads_gib_per_gpu=per_gpu * p.grad_bytes / gib,
        optimizer_gib_per_gpu=per_gpu * p.optimizer_bytes / gib,
        peak_flops_per_gpu=p.peak_flops_per_gpu,
        mfu=mfu,
        days=days,
        global_batch=p.global_batch,
        steps=int(tokens // (p.seq_len * p.global_batch)),
    )
