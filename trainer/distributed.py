"""The process group, the device, and how the model is spread over ranks.

Under `torchrun` (WORLD_SIZE > 1) the trainer joins a process group (NCCL on GPUs,
gloo on CPUs) over a one-dimensional device mesh of all ranks:
- data parallel with FSDP2: every block, and the root for the embedding and output
  head, is `fully_shard`-ed over the mesh;
- expert parallel: with `parallel.expert_parallel` equal to the world size, each
  MoE layer's routed experts are sharded by expert over the same mesh (DTensor,
  `Shard(0)`), left out of FSDP (`ignored_params`), and tokens reach them by
  all-to-all (`trainer.moe`). With `expert_parallel = 1` the experts are ordinary
  FSDP-sharded parameters and every rank runs every expert.
  Other degrees (a 2-D mesh of expert groups × replicas) are not implemented here.

The loss each rank back-propagates is its share of the *global* mean (its token
losses summed, divided by the global token count), so FSDP's reduction must sum
rather than average (`set_gradient_divide_factor(1)`), and the gradients of the
expert shards, which already collect every rank's tokens through the all-to-all,
need no reduction at all.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from millrace.errors import ConfigError
from trainer.config import ParallelConfig
from trainer.model import Transformer
from trainer.moe import ExpertParallel

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    rank: int
    world: int
    device: torch.device
    mesh: object | None  # DeviceMesh over all ranks when world > 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(tensor)
        return tensor


def init_runtime() -> Runtime:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world == 1:
        return Runtime(rank=0, world=1, device=device, mesh=None)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))
    log.info("rank %d of %d on %s (%s)", dist.get_rank(), world, device, dist.get_backend())
    return Runtime(rank=dist.get_rank(), world=world, device=device, mesh=mesh)


def shard_experts(model: Transformer, runtime: Runtime) -> set[nn.Parameter]:
    """Give each rank `n_experts / world` experts (DTensor Shard(0)); returns those parameters."""
    from torch.distributed.tensor import Shard, distribute_tensor

    group = runtime.mesh.get_group()
    owned: set[nn.Parameter] = set()
    for layer in model.moe_layers():
        layer.parallel = ExpertParallel(group, layer.config.n_routed_experts)
        for name in ("w1", "w3", "w2"):
            full = getattr(layer.experts, name)
            param = nn.Parameter(distribute_tensor(full.detach(), runtime.mesh, [Shard(0)]))
            setattr(layer.experts, name, param)
            owned.add(param)
    return owned


def parallelize(model: Transformer, runtime: Runtime, config: ParallelConfig) -> Transformer:
    if not runtime.distributed:
        return model
    from torch.distributed.fsdp import FSDPModule, fully_shard

    degree = config.expert_parallel or runtime.world
    if degree not in (1, runtime.world):
        raise ConfigError(
            f"parallel.expert_parallel = {degree}: this trainer supports 1 or the world size ({runtime.world})"
        )
    n_experts = model.moe_config.n_routed_experts
    if degree > 1 and n_experts % degree:
        raise ConfigError(f"moe.n_routed_experts = {n_experts} does not split over {degree} expert-parallel ranks")
    experts = shard_experts(model, runtime) if degree > 1 and model.moe_layers() else set()
    for block in model.layers:
        fully_shard(block, mesh=runtime.mesh, ignored_params={p for p in block.parameters() if p in experts} or None)
    fully_shard(model, mesh=runtime.mesh, ignored_params=experts or None)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM
    return model
