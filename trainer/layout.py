"""The data × expert layout: what `[parallel]` asks for, whether it runs, and a proposal for N GPUs.

Torch-free, so `millrace train plan` checks a layout with the same rules the trainer
applies at start-up (`check_layout`), without a process group.

A layout is `data_parallel × expert_parallel` ranks. An expert group is
`expert_parallel` contiguous ranks that split the experts; the loader is addressed by
the data-parallel coordinate (its world is `data_parallel`), and the members of an
expert group split that batch by rows. So the layout runs when the expert degree
divides the experts, and `data_parallel × expert_parallel` divides the global batch
(each rank computes whole sequences, and its micro-batches evenly).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from millrace.errors import ConfigError


@dataclass(frozen=True)
class Layout:
    """`data_parallel × expert_parallel` ranks; the trainer runs on exactly that many."""

    data_parallel: int = 1
    expert_parallel: int = 1

    @property
    def world(self) -> int:
        return self.data_parallel * self.expert_parallel


def resolve_layout(expert_parallel: int, data_parallel: int, world: int, n_experts: int) -> Layout:
    """The layout `[parallel]` asks for on `world` ranks (0 = derive), or a one-line error naming the field.

    One process is always 1 x 1 (it holds every expert), so a config written for a
    mesh also runs, and resumes, in a single process."""
    if world == 1:
        return Layout()
    expert = expert_parallel or (world if n_experts else 1)
    if world % expert:
        raise ConfigError(f"parallel.expert_parallel = {expert} does not divide the world size {world}")
    if n_experts and n_experts % expert:
        raise ConfigError(f"parallel.expert_parallel = {expert} does not divide moe.n_routed_experts = {n_experts}")
    data = data_parallel or world // expert
    if data * expert != world:
        raise ConfigError(
            f"parallel.data_parallel = {data} x parallel.expert_parallel = {expert} is {data * expert} ranks, "
            f"but the world size is {world}"
        )
    return Layout(data_parallel=data, expert_parallel=expert)


def check_batch(layout: Layout, global_batch: int, micro_batches: int) -> int:
    """Sequences each rank computes per step; a one-line error when the layout does not split the batch."""
    if global_batch % layout.data_parallel:
        raise ConfigError(
            f"parallel.data_parallel = {layout.data_parallel} does not divide the global batch "
            f"of {global_batch} sequences"
        )
    per_data_rank = global_batch // layout.data_parallel
    if per_data_rank % layout.expert_parallel:
        raise ConfigError(
            f"parallel.expert_parallel = {layout.expert_parallel} does not divide the data-parallel "
            f"batch of {per_data_rank} sequences"
        )
    per_rank = per_data_rank // layout.expert_parallel
    if per_rank % micro_batches:
        raise ConfigError(f"data.micro_batches = {micro_batches} does not divide the per-rank batch {per_rank}")
    return per_rank


@dataclass(frozen=True)
class ProposedLayout:
    data_parallel: int
    expert_parallel: int
    gpus: int
    gpus_per_node: int
    gpus_used: int
    gpus_idle: int
    loader_world: int
    ranks_per_node: int  # torchrun --nproc_per_node: expert groups never straddle a node unevenly
    nodes: int

    @property
    def layout(self) -> Layout:
        return Layout(self.data_parallel, self.expert_parallel)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _expert_groups(gpus: int, per_node: int, expert: int) -> int:
    """Expert groups that fit on `gpus` in nodes of `per_node`, a group inside one node or on whole nodes."""
    if expert <= per_node:
        return (gpus // per_node) * (per_node // expert) + (gpus % per_node) // expert
    if expert % per_node == 0:
        return (gpus // per_node) // (expert // per_node)
    return 0


def propose_layout(
    gpus: int,
    gpus_per_node: int,
    n_experts: int,
    global_batch: int,
    micro_batches: int = 1,
    expert_parallel: int = 0,
    data_parallel: int = 0,
) -> ProposedLayout:
    """The runnable layout that uses the most GPUs (ties: the larger expert degree, so fewer expert
    weights are gathered per rank); `expert_parallel` / `data_parallel` other than 0 are kept fixed."""
    per_node = gpus_per_node or gpus
    if expert_parallel:
        degrees = [expert_parallel]
    else:
        degrees = [e for e in range(1, max(n_experts, 1) + 1) if max(n_experts, 1) % e == 0]
    best: tuple[int, int, int] | None = None
    for expert in degrees:
        if n_experts and n_experts % expert:
            continue
        groups = _expert_groups(gpus, per_node, expert)
        candidates = [data_parallel] if data_parallel else range(groups, 0, -1)
        for data in candidates:
            if (
                0 < data <= groups
                and global_batch % (data * expert) == 0
                and (global_batch // (data * expert)) % micro_batches == 0
            ):
                best = max(best or (0, 0, 0), (data * expert, expert, data))
                break
    if best is None:
        fixed = f" with parallel.expert_parallel = {expert_parallel}" if expert_parallel else ""
        raise ConfigError(
            f"field 'parallel': no data x expert layout of {gpus} GPUs ({per_node} per node){fixed} "
            f"splits {n_experts} experts and a global batch of {global_batch} sequences"
        )
    used, expert, data = best
    groups_per_node = per_node // expert if expert <= per_node else 0
    ranks_per_node = groups_per_node * expert if groups_per_node else per_node
    return ProposedLayout(
        data_parallel=data,
        expert_parallel=expert,
        gpus=gpus,
        gpus_per_node=per_node,
        gpus_used=used,
        gpus_idle=gpus - used,
        loader_world=data,
        ranks_per_node=ranks_per_node,
        nodes=-(-used // ranks_per_node),
    )
