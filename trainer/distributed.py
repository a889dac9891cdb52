"""The process group, the device, the data × expert mesh, and how the model is spread over it.

Under `torchrun` (WORLD_SIZE > 1) the trainer joins a process group (NCCL on GPUs,
gloo on CPUs) and lays its ranks out on a two-dimensional device mesh
`("dp", "ep")` of `data_parallel × expert_parallel` ranks, built from `[parallel]`
alone (`trainer.layout`). Expert groups are contiguous ranks (rank = dp · ep_size + ep), so on
a GPU cluster an expert group stays inside one NVLink domain.
- Data: the loader is addressed by the data-parallel coordinate (rank `dp` of
  `data_parallel`); the ranks of one expert group split that batch by rows, so every
  rank computes distinct tokens and the global batch is cut into `world` equal parts.
- Dense parameters (attention, norms, dense FFNs, shared experts, router, embedding,
  head): FSDP2 `fully_shard` over the whole mesh flattened (every rank is a
  data-parallel replica of them).
- Routed experts: each MoE layer's stacked expert weights are a DTensor sharded by
  expert over `ep` (`Shard(0)`: `n_experts / ep` experts per group member), then
  FSDP2-sharded over `dp` on top, so no rank holds a whole expert set. Tokens reach
  their expert's rank by all-to-all inside the expert group (`trainer.moe`).
  `expert_parallel = 1` leaves them ordinary parameters, sharded with the rest.

The loss each rank back-propagates is its share of the *global* mean (its token
losses summed, divided by the global token count), so FSDP's reductions must sum
rather than average (`set_gradient_divide_factor(1)`): over all ranks for dense
gradients, over `dp` for expert gradients (the all-to-all already gathered every
token of the expert group).

`param_dtype = "bfloat16"`: FSDP2's `MixedPrecisionPolicy` casts the gathered
parameters to bf16 for forward and backward, keeps the sharded fp32 master weights
(so AdamW's state is fp32 and small updates are not rounded away), and reduces
gradients in fp32.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard, distribute_tensor

from trainer.config import ParallelConfig
from trainer.layout import Layout, resolve_layout
from trainer.model import Transformer
from trainer.moe import ExpertParallel

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    rank: int
    world: int
    device: torch.device
    mesh: DeviceMesh | None  # ("dp", "ep") when world > 1
    layout: Layout = field(default_factory=Layout)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def data_rank(self) -> int:
        """This rank's data-parallel coordinate: the loader's rank (of `layout.data_parallel`)."""
        return self.rank // self.layout.expert_parallel

    @property
    def expert_rank(self) -> int:
        return self.rank % self.layout.expert_parallel

    def rows(self, loader_rows: int) -> slice:
        """The rows of the data-parallel rank's batch that this member of the expert group computes."""
        share = loader_rows // self.layout.expert_parallel
        return slice(self.expert_rank * share, (self.expert_rank + 1) * share)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor


def init_runtime(config: ParallelConfig | None = None, n_experts: int = 0) -> Runtime:
    config = config or ParallelConfig()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    layout = resolve_layout(config.expert_parallel, config.data_parallel, world, n_experts)
    if world == 1:
        return Runtime(rank=0, world=1, device=device, mesh=None, layout=layout)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    mesh = init_device_mesh(device.type, (layout.data_parallel, layout.expert_parallel), mesh_dim_names=("dp", "ep"))
    log.info(
        "rank %d of %d on %s (%s): data %d of %d, expert %d of %d",
        dist.get_rank(),
        world,
        device,
        dist.get_backend(),
        dist.get_rank() // layout.expert_parallel,
        layout.data_parallel,
        dist.get_rank() % layout.expert_parallel,
        layout.expert_parallel,
    )
    return Runtime(rank=dist.get_rank(), world=world, device=device, mesh=mesh, layout=layout)


def close_runtime(runtime: Runtime) -> None:
    """Tear the process group down before the interpreter exits: left to the exit, gloo's threads were
    destroyed still joinable and a rank that had finished aborted (`terminate called without an active
    exception`), failing the whole torchrun job after a complete run."""
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()


def mixed_precision(config: ParallelConfig) -> MixedPrecisionPolicy:
    """bf16 parameters in forward and backward, fp32 master weights, gradients reduced in fp32."""
    if config.param_dtype == "bfloat16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard_experts(model: Transformer, runtime: Runtime, config: ParallelConfig) -> None:
    """Experts by expert over `ep` (DTensor Shard(0)), then FSDP over `dp`: each rank holds 1/world of them."""
    if runtime.mesh is None:
        raise ValueError("expert parallelism needs the device mesh of a distributed run")
    ep_mesh = runtime.mesh["ep"]
    for layer in model.moe_layers():
        layer.parallel = ExpertParallel(ep_mesh.get_group(), layer.config.n_routed_experts)
        for name in ("w1", "w3", "w2"):
            full = getattr(layer.experts, name)
            setattr(layer.experts, name, nn.Parameter(distribute_tensor(full.detach(), ep_mesh, [Shard(0)])))
        fully_shard(layer.experts, mesh=runtime.mesh["dp"], mp_policy=mixed_precision(config))


def reshard(model: nn.Module) -> None:
    """Free the gathered weights a forward without backward leaves behind (evaluation, sampling).

    FSDP2 does not reshard the root module after its forward (a backward is expected to follow), so after
    a no-gradient forward its parameters stay unsharded: every rank holds the full embedding, head and
    final norm until the next backward, and a norm summed over ranks counts them once per rank."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def parallelize(model: Transformer, runtime: Runtime, config: ParallelConfig) -> Transformer:
    if not runtime.distributed:
        return model

    if runtime.layout.expert_parallel > 1 and model.moe_layers():
        shard_experts(model, runtime, config)
    if runtime.mesh is None:
        raise ValueError(f"a distributed run of {runtime.world} ranks without its device mesh")
    everyone = runtime.mesh._flatten("dp_ep")  # dense parameters: every rank is a data-parallel replica
    policy = mixed_precision(config)
    for block in model.layers:
        fully_shard(block, mesh=everyone, mp_policy=policy)  # leaves the already-sharded experts to their own group
    fully_shard(model, mesh=everyone, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM
    return model
