"""Expert parallelism's device-to-host reads per MoE layer, counted on two gloo ranks: the split sizes in one
read, and no `repeat_interleave` that sizes its output from the device (on a GPU each stalls the host)."""

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from testkit.host_reads import counting_host_reads
from trainer.config import ModelConfig, MoEConfig
from trainer.moe import ExpertParallel, MoE

WORLD = 2


def ep_rank(rank: int, out: str) -> None:
    """One rank, both expert paths (grouped matmul and per-expert loop)."""
    dist.init_process_group("gloo", init_method=f"file://{out}.store", rank=rank, world_size=WORLD)
    results = {path: ep_layer(rank, path == "grouped-mm") for path in ("grouped-mm", "per-expert-loop")}
    Path(f"{out}.{rank}").write_text(json.dumps(results))
    dist.destroy_process_group()


def ep_layer(rank: int, grouped: bool) -> dict:
    """The layer's reads in forward and backward under expert parallelism, and its output against the same
    layer without it (every expert on this rank) on the same tokens."""
    torch.manual_seed(0)
    layer = MoE(ModelConfig(), MoEConfig(grouped_mm=grouped))
    for weight in layer.parameters():
        torch.nn.init.normal_(weight, std=0.1)
    whole = [w.detach().clone() for w in (layer.experts.w1, layer.experts.w3, layer.experts.w2)]
    x = torch.randn(2, 24, ModelConfig().d_model, generator=torch.Generator().manual_seed(rank))
    expected = layer(x)
    layer.parallel = ExpertParallel(dist.group.WORLD, layer.config.n_routed_experts)
    local = layer.parallel.local_experts
    for name, weight in zip(("w1", "w3", "w2"), whole):
        setattr(layer.experts, name, torch.nn.Parameter(weight[rank * local : (rank + 1) * local].clone()))
    with pytest.MonkeyPatch.context() as patch, counting_host_reads(patch) as forward:
        y = layer(x)
    with pytest.MonkeyPatch.context() as patch, counting_host_reads(patch) as backward:
        y.square().sum().backward()
    return {"forward": forward, "backward": backward, "error": (y - expected).abs().max().item()}


@pytest.mark.slow
def test_expert_parallel_reads_the_device_once_per_moe_layer(tmp_path):
    out = str(tmp_path / "reads")
    mp.spawn(ep_rank, args=(out,), nprocs=WORLD)
    for rank in range(WORLD):
        for path, result in json.loads(Path(f"{out}.{rank}").read_text()).items():
            assert result["forward"] == {"tolist": 1}, (rank, path, result)  # the splits, nothing more
            assert result["backward"] == {}, (rank, path, result)
            assert result["error"] < 1e-5, (rank, path)  # the same outputs as every expert on one rank
