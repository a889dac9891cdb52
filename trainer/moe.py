"""Mixture-of-experts FFN: token-choice top-k router, routed experts, shared experts.

Load balancing is aux-loss free: each layer keeps an `expert_bias` *buffer* (not a
Parameter, so no optimizer or gradient ever touches it) that is added to the scores
only to choose the experts; the gate weights come from the unbiased scores. The
trainer moves it once per optimizer step (`trainer.balance`).

The router scores the input minus its mean over the last step's tokens (`input_centre`, also a buffer
set once per step by `trainer.balance`). The part of the input that every token shares adds the same
amount to each token's score for an expert, so it ranks the experts alike for all tokens: once a model
has learned the unigram distribution it is most of a layer's input (99.7% of the squared norm in the
tiny MoE's second layer by step 20), routing follows it, and a bias rule moving a fixed step per update
cannot keep up with it. Centred, the scores rank experts by what tells tokens apart. An optional
sequence-wise auxiliary loss and a router z-loss can be switched on with
coefficients.

Routed experts run as one grouped matrix multiply (`torch._grouped_mm`) over the
tokens sorted by expert where the backend supports it, else as a loop over
experts; both paths compute the same thing (tested). Under expert parallelism the
sorted tokens travel to the rank that owns their expert with an all-to-all and
come back the same way. The k expert outputs of a token are summed in a fixed order
(no atomic `index_add`), so a step is bit-reproducible on a GPU as on a CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol, TypeVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.nn.functional import all_to_all_single as _all_to_all_single

from trainer.config import ModelConfig, MoEConfig


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The part of a (possibly DTensor) parameter held on this rank."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


class AllToAll(Protocol):
    """torch's differentiable `all_to_all_single` (autograd sends the gradients back), which torch leaves
    unannotated."""

    def __call__(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        group: dist.ProcessGroup | None,
    ) -> torch.Tensor: ...


all_to_all_single: AllToAll = _all_to_all_single

_Fn = TypeVar("_Fn")


class NotCompiled(Protocol):
    """`torch.compiler.disable` used bare as a decorator (torch leaves it unannotated): the function as it is."""

    def __call__(self, fn: _Fn) -> _Fn: ...


not_compiled: NotCompiled = torch.compiler.disable


@contextlib.contextmanager
def replaying(module: nn.Module) -> Iterator[None]:
    """Routing statistics off inside `module` while activation checkpointing recomputes its forward in the
    backward pass: the balancing rule must see each token once."""
    counters = [m for m in module.modules() if isinstance(m, (Router, MoE))]
    for counter in counters:
        counter.counting = False
    try:
        yield
    finally:
        for counter in counters:
            counter.counting = True


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


def grouped_mm_supported(x: torch.Tensor, *weights: torch.Tensor) -> bool:
    """`torch._grouped_mm` needs 16-byte aligned strides on CPU, and bf16 on CUDA and under `torch.compile`
    (its meta kernel takes only bf16; the loop's `counts.tolist()` breaks the graph instead)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if (x.device.type == "cuda" or torch.compiler.is_compiling()) and x.dtype != torch.bfloat16:
        return False
    return all(t.shape[-1] * t.element_size() % 16 == 0 for t in (x, *weights))


def tokens_per_expert(experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Counts of each expert id, exact integers, with a static shape: `torch.bincount`'s data-dependent
    output size breaks a `torch.compile` graph, a scatter-add does not."""
    return torch.zeros(n_experts, dtype=torch.int64, device=experts.device).scatter_add_(
        0, experts, torch.ones_like(experts)
    )


# Rows per expert group on CUDA: `_grouped_mm`'s kernels want each group's start 16-byte aligned (8 bf16 rows;
# 16 also covers fp8).
GROUP_ALIGN_ROWS = 16


def padded_groups(counts: torch.Tensor, align: int, n_rows: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Where each of the `n_rows` expert-sorted rows goes when every group is padded to a multiple of `align`:
    (row -> padded row [n_rows], padded group ends [n] int32, buffer rows). Shapes are static (compile-safe): the
    buffer is the worst case, and its padding rows (zeros, never read back) carry no gradient."""
    padded = (counts + align - 1) // align * align
    padded_ends = torch.cumsum(padded, 0)
    shift = (padded_ends - padded) - (torch.cumsum(counts, 0) - counts)  # padded start - unpadded start
    expert_of_row = torch.repeat_interleave(
        torch.arange(len(counts), device=counts.device), counts, output_size=n_rows
    )
    rows = torch.arange(n_rows, device=counts.device) + shift[expert_of_row]
    return rows, padded_ends.to(torch.int32), n_rows + len(counts) * (align - 1)


class RoutedExperts(nn.Module):
    """`n` SwiGLU experts stored as stacked weights [n, in, out] for grouped matmuls.

    Under expert parallelism the weights are DTensors sharded on the expert dimension;
    `forward` works on the local shard."""

    def __init__(self, n_experts: int, d_model: int, hidden: int, grouped: bool = True):
        super().__init__()
        self.grouped = grouped
        self.w1 = nn.Parameter(torch.empty(n_experts, d_model, hidden))
        self.w3 = nn.Parameter(torch.empty(n_experts, d_model, hidden))
        self.w2 = nn.Parameter(torch.empty(n_experts, hidden, d_model))

    def forward(self, x: torch.Tensor, counts: torch.Tensor, host_counts: list[int] | None = None) -> torch.Tensor:
        """`x` [T, d] sorted by (local) expert; `counts` [n_local] tokens per expert, and the same on the host
        where the caller already read them (the per-expert loop then reads nothing from the device)."""
        w1, w3, w2 = (local_tensor(w) for w in (self.w1, self.w3, self.w2))
        if torch.is_autocast_enabled(x.device.type):
            # `_grouped_mm` is on no autocast list, so the cast autocast gives every Linear weight is made here,
            # once per forward like theirs. Under FSDP with `param_dtype = "bfloat16"` the gathered weights
            # are already bf16 (MixedPrecisionPolicy casts at the all-gather) and `.to` returns them as they are.
            dtype = torch.get_autocast_dtype(x.device.type)
            x, w1, w3, w2 = (t.to(dtype) for t in (x, w1, w3, w2))
        if self.grouped and grouped_mm_supported(x, w1, w2):
            return self.forward_grouped(x, counts, w1, w3, w2, GROUP_ALIGN_ROWS if x.is_cuda else 1)
        return self.forward_loop(x, counts if host_counts is None else host_counts, w1, w3, w2)

    @staticmethod
    def forward_grouped(
        x: torch.Tensor, counts: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, align: int = 1
    ) -> torch.Tensor:
        """One grouped matmul per weight; with `align` > 1 each expert's rows are padded to a multiple of it."""
        if align > 1:
            rows, offsets, capacity = padded_groups(counts, align, x.shape[0])
            padded = x.new_zeros(capacity, x.shape[1]).index_copy(0, rows, x)
            return RoutedExperts.swiglu_grouped(padded, offsets, w1, w3, w2)[rows]
        return RoutedExperts.swiglu_grouped(x, torch.cumsum(counts, 0).to(torch.int32), w1, w3, w2)

    @staticmethod
    def swiglu_grouped(
        x: torch.Tensor, offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor
    ) -> torch.Tensor:
        hidden = F.silu(torch._grouped_mm(x, w1, offs=offsets)) * torch._grouped_mm(x, w3, offs=offsets)
        out: torch.Tensor = torch._grouped_mm(hidden, w2, offs=offsets)
        return out

    @staticmethod
    @not_compiled  # data-dependent slices: one graph break here, not a recompile per routing
    def forward_loop(
        x: torch.Tensor, counts: torch.Tensor | list[int], w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor
    ) -> torch.Tensor:
        outputs = []
        start = 0
        for expert, count in enumerate(counts.tolist() if isinstance(counts, torch.Tensor) else counts):
            chunk = x[start : start + count]
            outputs.append((F.silu(chunk @ w1[expert]) * (chunk @ w3[expert])) @ w2[expert])
            start += count
        return torch.cat(outputs) if outputs else x.new_zeros(0, w2.shape[-1])


class Router(nn.Module):
    """Scores in fp32 of the centred input; selection by score + bias; gates from the unbiased scores."""

    expert_bias: torch.Tensor  # buffers, registered in __init__
    step_entropy: torch.Tensor
    input_centre: torch.Tensor
    step_input: torch.Tensor

    def __init__(self, d_model: int, config: MoEConfig):
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.empty(config.n_routed_experts, d_model))
        self.register_buffer("expert_bias", torch.zeros(config.n_routed_experts, dtype=torch.float32))
        # The mean input of the last step, taken off before scoring (zero, and left there, when not centring);
        # Σ input and the token count since the last step, from which `trainer.balance` sets it.
        self.register_buffer("input_centre", torch.zeros(d_model, dtype=torch.float32))
        self.register_buffer("step_input", torch.zeros(d_model + 1, dtype=torch.float64), persistent=False)
        # Σ over tokens of the entropy of the normalised scores, and the token count, since the last step.
        self.register_buffer("step_entropy", torch.zeros(2, dtype=torch.float64), persistent=False)
        self.counting = True  # off while activation checkpointing replays a forward (`replaying`)
        # (sequence balance loss, z-loss) of the last forward, each times its coefficient, for the metrics.
        self.aux_terms: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [b, L, d] → (expert ids [b·L, k], gates [b·L, k], aux loss scalar)."""
        cfg = self.config
        batch, length, _ = x.shape
        with torch.autocast(x.device.type, enabled=False):
            flat = x.float().reshape(batch * length, -1)
            if cfg.centre_router_input:
                if self.counting:
                    with torch.no_grad():
                        self.step_input[:-1] += flat.sum(0).double()
                        self.step_input[-1] += flat.shape[0]
                flat = flat - self.input_centre
            logits = F.linear(flat, self.weight.float())
            scores = torch.sigmoid(logits) if cfg.score_func == "sigmoid" else torch.softmax(logits, dim=-1)
            selected = torch.topk(scores + self.expert_bias, cfg.top_k, dim=-1, sorted=True).indices
            gates = scores.gather(-1, selected)
            if self.counting:
                with torch.no_grad():
                    probs = scores / (scores.sum(-1, keepdim=True) + 1e-20)
                    self.step_entropy[0] += -(probs * torch.log(probs + 1e-20)).sum().double()
                    self.step_entropy[1] += probs.shape[0]
            if cfg.normalize_gates:
                gates = gates / (gates.sum(-1, keepdim=True) + 1e-20)
            gates = gates * cfg.route_scale
            balance = z_loss = logits.new_zeros(())
            if cfg.seq_aux_loss_coef:
                balance = cfg.seq_aux_loss_coef * self.sequence_aux_loss(scores, selected, batch, length)
            if cfg.z_loss_coef:
                z_loss = cfg.z_loss_coef * torch.logsumexp(logits, dim=-1).square().mean()
            self.aux_terms = torch.stack([balance, z_loss]).detach()
        return selected, gates, balance + z_loss

    def sequence_aux_loss(self, scores: torch.Tensor, selected: torch.Tensor, batch: int, length: int) -> torch.Tensor:
        """Sequence-wise balance loss: Σ_e f_e · P_e per sequence, averaged over sequences."""
        n, k = self.config.n_routed_experts, self.config.top_k
        probs = (scores / (scores.sum(-1, keepdim=True) + 1e-20)).reshape(batch, length, n).mean(1)
        hits = torch.zeros(batch, n, device=scores.device).scatter_add_(
            1, selected.reshape(batch, length * k), torch.ones(batch, length * k, device=scores.device)
        )
        fraction = hits * n / (k * length)
        return (fraction * probs).sum(-1).mean()


class ExpertParallel:
    """Where the experts live: `world` ranks of `group`, `n_experts // world` each."""

    def __init__(self, group: dist.ProcessGroup | None, n_experts: int):
        self.group = group
        self.world = dist.get_world_size(group) if group is not None else 1
        self.rank = dist.get_rank(group) if group is not None else 0
        if n_experts % self.world:
            raise ValueError(f"{n_experts} experts do not split over {self.world} expert-parallel ranks")
        self.local_experts = n_experts // self.world


class MoE(nn.Module):
    step_counts: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, model: ModelConfig, config: MoEConfig):
        super().__init__()
        self.config = config
        self.router = Router(model.d_model, config)
        self.experts = RoutedExperts(config.n_routed_experts, model.d_model, config.expert_ffn_dim, config.grouped_mm)
        self.shared = (
            SwiGLU(model.d_model, config.expert_ffn_dim * config.n_shared_experts) if config.n_shared_experts else None
        )
        self.parallel = ExpertParallel(None, config.n_routed_experts)
        # Tokens routed to each expert since the last optimizer step (read by trainer.balance).
        self.register_buffer("step_counts", torch.zeros(config.n_routed_experts), persistent=False)
        self.counting = True
        self.aux_loss: torch.Tensor | None = None

    def step_buffers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What a forward adds to until the optimizer step (kept out of evaluation by `trainer.evaluation`)."""
        return self.step_counts, self.router.step_entropy, self.router.step_input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, d = x.shape
        selected, gates, self.aux_loss = self.router(x)
        flat = x.reshape(batch * length, d)
        experts = selected.reshape(-1)
        order = torch.argsort(experts, stable=True)
        counts = tokens_per_expert(experts, self.config.n_routed_experts)
        if self.counting:
            self.step_counts += counts.detach().to(self.step_counts.dtype)
        # Each token's k copies, gathered in expert order and put back by a permutation (one write per row)
        # then summed over k: no atomic adds forward or backward, so the result is bit-reproducible on a GPU.
        top_k = self.config.top_k
        routed = flat[:, None].expand(-1, top_k, -1).reshape(-1, d)[order]
        out: torch.Tensor = (
            self.dispatch_and_compute(routed, counts) if self.parallel.world > 1 else self.experts(routed, counts)
        )
        out = out.to(flat.dtype) * gates.reshape(-1)[order, None].to(flat.dtype)
        y = out.new_empty(out.shape).index_copy(0, order, out).view(-1, top_k, d).sum(1)
        if self.shared is not None:
            y = y + self.shared(flat)
        return y.reshape(batch, length, d)

    def dispatch_and_compute(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Send tokens (sorted by global expert id) to their expert's rank, compute, bring them back."""
        ep = self.parallel
        local = ep.local_experts
        # recv_counts[s, e]: tokens rank s sends to my local expert e.
        recv_counts = torch.empty(ep.world * local, dtype=counts.dtype, device=counts.device)
        dist.all_to_all_single(recv_counts, counts.contiguous(), group=ep.group)
        # The splits must be host integers: the layer's one device-to-host read gives both directions' splits
        # and the received counts per (source, expert), so nothing after it reads the device again.
        host = torch.cat([counts.reshape(ep.world, local).sum(1), recv_counts]).tolist()
        send_splits, received_counts = host[: ep.world], host[ep.world :]
        recv_splits = [sum(received_counts[s * local : (s + 1) * local]) for s in range(ep.world)]
        per_expert = [sum(received_counts[e::local]) for e in range(local)]
        received = all_to_all_single(
            routed.new_empty(sum(recv_splits), routed.shape[1]),
            routed.contiguous(),
            recv_splits,
            send_splits,
            ep.group,
        )
        # Received rows are grouped (source rank, local expert); the experts want (local expert, source rank):
        # a stable sort on the key e * world + s regroups them and keeps each chunk's order.
        device = routed.device
        source = torch.arange(ep.world, device=device).repeat_interleave(local)
        expert = torch.arange(local, device=device).repeat(ep.world)
        keys = (expert * ep.world + source).repeat_interleave(recv_counts.to(device), output_size=sum(recv_splits))
        regroup = torch.argsort(keys, stable=True)
        expert_counts = recv_counts.reshape(ep.world, local).sum(0)
        computed = self.experts(received[regroup], expert_counts, per_expert)
        restored = torch.empty_like(computed).index_copy(0, regroup, computed)
        return all_to_all_single(
            restored.new_empty(sum(send_splits), restored.shape[1]),
            restored.contiguous(),
            send_splits,
            recv_splits,
            ep.group,
        )
