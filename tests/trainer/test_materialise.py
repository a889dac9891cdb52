"""A model built on the meta device and materialised shard by shard: each rank allocates only its share,
and the shards put together are bit for bit the model one process initialises whole.

Four gloo processes on a data 2 × expert 2 mesh (experts sharded over `ep`, then FSDP over `dp`;
dense weights FSDP over all four). An init drawn from one generator over whole tensors would
give each rank values that belong to other rows, which the comparison catches; building the
whole model before sharding would show up as a rank allocating four times its share."""

import os

import pytest
import torch
import torch.multiprocessing as mp

from testkit.ports import free_port
from trainer.config import load_train_config, with_vocab
from trainer.distributed import init_runtime
from trainer.model_build import build_model

WORLD = 4
VOCAB = 96  # not a multiple of four ranks: the last embedding shard is shorter


def materialise_on_rank(rank: int, port: int, config_path: str, results: dict) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        OMP_NUM_THREADS="1",
    )
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    config = with_vocab(load_train_config(config_path), VOCAB)
    runtime = init_runtime(config.parallel, config.moe.n_routed_experts)
    model = build_model(config, runtime)
    local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in model.parameters())
    with torch.no_grad():
        full = {
            name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for name, p in model.named_parameters()
        }
    if rank == 0:
        results["full"] = full
    results[f"local-{rank}"] = local
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_the_sharded_meta_build_matches_the_whole_model_and_allocates_a_share(tiny_config):
    config_path = tiny_config("mesh", parallel={"data_parallel": 2, "expert_parallel": 2})
    config = with_vocab(load_train_config(config_path), VOCAB)
    whole = build_model(config, init_runtime(config.parallel, config.moe.n_routed_experts))
    total = sum(p.numel() for p in whole.parameters())
    assert not any(p.is_meta for p in whole.parameters())

    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(materialise_on_rank, args=(free_port(), str(config_path), results), nprocs=WORLD, join=True)
        results = dict(results)

    for name, param in whole.named_parameters():
        assert torch.equal(results["full"][name], param.detach()), name
    largest_row = max(p[0].numel() for p in whole.parameters())  # a shard boundary rounds up to whole rows
    n_params = len(list(whole.parameters()))
    for rank in range(WORLD):
        assert results[f"local-{rank}"] <= total / WORLD + n_params * largest_row
    assert sum(results[f"local-{rank}"] for rank in range(WORLD)) == total


def test_the_reference_model_builds_on_the_meta_device_without_memory():
    """535B parameters on paper and on the meta device: what every rank starts from."""
    from pathlib import Path

    from trainer.flops import count_params
    from trainer.model import Transformer

    config = load_train_config(Path(__file__).parents[2] / "trainer" / "configs" / "535b-a23b.toml")
    config = with_vocab(config, config.model.vocab_size or 129_280)
    with torch.device("meta"):
        model = Transformer(config.model, config.moe)
    built = sum(p.numel() for p in model.parameters())
    assert built == count_params(config).total
    assert 5.2e11 < built < 5.5e11
    assert all(p.is_meta for p in model.parameters())
