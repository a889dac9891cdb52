"""Two CPU processes under torchrun/gloo, experts split across them, match one process.

Tolerance: relative 1e-5 on each step's loss. The two runs do the same arithmetic
in float32 but not in the same order: FSDP's reduce-scatter sums the two ranks'
partial gradients, the all-to-all regroups tokens so each expert's matmul runs on
differently shaped blocks (BLAS blocking differs), and the ranks use one BLAS
thread each. Such reordering changes float32 results at about 1e-7 relative per
operation; over a few Adam steps we measured about 1e-8 relative on the loss, so
1e-5 leaves room while still catching any real error (a wrong expert, a dropped
token or a mis-scaled gradient moves the loss by 1e-3 or more from step 2 on).
"""

import os
import subprocess
import sys

import pytest

from trainer.loop import train
from trainer.metrics import read_metrics, read_run



def test_two_gloo_ranks_with_expert_parallelism_match_one_process(built, tiny_config):
    home, _ = built
    config = tiny_config("dist", parallel={"expert_parallel": 2})
    single = train(config, home, steps=4, run="single").losses
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "millrace", "train", str(config), "--home", str(home.root), "--run-name", "two",
               "--steps", "4", "--no-progress"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = home.run("two")
    assert read_run(run_dir)["world_size"] == 2
    two = [record["loss"] for record in read_metrics(run_dir)]
    assert two == pytest.approx(single, rel=1e-5)
    # each rank wrote its own expert shard into the DCP checkpoint
    assert len(list((run_dir / "checkpoints" / "step-00000004").glob("*.distcp"))) == 2
    # and a single process resumes the two-rank checkpoint (DCP reshards the expert DTensors)
    resumed = train(config, home, steps=5, run="two", resume=True)
    assert resumed.start_step == 4 and len(resumed.losses) == 1
