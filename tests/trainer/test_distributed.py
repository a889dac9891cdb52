"""CPU processes under torchrun/gloo on a data × expert mesh match one process, and resume at any world size.

One run is carried across world sizes: 4 ranks as data 2 x expert 2, built on the meta
device and initialised shard by shard (steps 1-2) -> 1 process (step 3) -> 2 ranks as
expert 2 (step 4) -> 1 process (step 5), each leg resuming the previous leg's checkpoint, and every
step's loss and gradient norm must
equal an uninterrupted single-process run's. Gradient norms matter: AdamW ignores the
gradient's scale, so a 2x error in a reduction would pass on losses alone.

Tolerance: relative 1e-6. The runs do the same float32 arithmetic in another order
(FSDP's reduce-scatter sums partial gradients, the all-to-all regroups tokens so each
expert's matmul runs on differently shaped blocks); two ranks measured about 1e-8
relative on the loss before this chain was written (the chain itself is checked at 1e-6, not
measured finer), while a wrong expert, a dropped token or a mis-scaled gradient moves the loss by 1e-3
or more from step 2 on and the gradient norm by far more.
"""

import pytest

from testkit.torchrun import curve, torchrun
from trainer.loop import train
from trainer.records import read_run
from trainer.train_request import TrainRequest

STEPS = 5


@pytest.mark.slow
def test_one_run_moves_across_world_sizes_and_matches_one_process(built, tiny_config):
    home, _ = built
    single = tiny_config("single")
    mesh = tiny_config("mesh", parallel={"data_parallel": 2, "expert_parallel": 2})
    experts = tiny_config("experts", parallel={"expert_parallel": 2})
    train(single, home, TrainRequest(steps=STEPS, run="reference"))
    reference = curve(home, "reference")
    assert len(reference) == STEPS

    torchrun(4, mesh, home, "moved", steps=2)  # from scratch: each rank materialises only its shard
    run_dir = home.run("moved")
    assert read_run(run_dir).layout == {"data_parallel": 2, "expert_parallel": 2}
    # four ranks, each holding a quarter of every expert weight, wrote their shards
    assert len(list((run_dir / "checkpoints" / "step-00000002").glob("*.distcp"))) == 4
    assert train(single, home, TrainRequest(steps=3, run="moved", resume=True)).start_step == 2
    printed = torchrun(2, experts, home, "moved", steps=4).splitlines()
    # one "files in" line, rank 0's; rank 1 names no folder as its own (on a cluster its node may have none)
    assert len([line for line in printed if "files in" in line]) == 1
    assert [line for line in printed if "rank 1" in line] == [
        f"run moved, rank 1: steps 3..4 done; rank 0 writes the run's files ({run_dir}, on its node unless shared)"
    ]
    assert read_run(run_dir).world_size == 2
    resumed = train(experts, home, TrainRequest(steps=STEPS, run="moved", resume=True))
    assert resumed.start_step == 4
    moved = curve(home, "moved")
    assert [loss for loss, _ in moved] == pytest.approx([loss for loss, _ in reference], rel=1e-6)
    assert [norm for _, norm in moved] == pytest.approx([norm for _, norm in reference], rel=1e-6)
