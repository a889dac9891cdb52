"""The parameter norm is the model's, whatever the world size: 4 gloo ranks (data 2 x expert 2) log one
process's `param_norm` at every step, the steps that end with an evaluation or samples included.

FSDP2 leaves the root module's weights (embedding, head, final norm) gathered after a forward that no
backward follows; summed over ranks they counted once per rank (6 ranks read 40.77 for 21.77).
Tolerance as in test_distributed: the runs differ by float reordering (about 1e-8 relative).
"""

import os
import subprocess
import sys

import pytest

from millrace.home import Home
from testkit.stores import build_mixture, make_store
from trainer.loop import train
from trainer.records import read_eval, read_metrics, read_samples
from trainer.train_request import TrainRequest

STEPS = 4


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("norm-home"))
    make_store(home, {"c00q0": 9000, "c01q0": 6000}, held_out=4)
    build_mixture(home, tokens=32 * 8 * 10, seq_len=32, global_batch=8)
    return home


@pytest.mark.slow  # one process and four under torchrun: 50-100 s on the shared machine
def test_four_ranks_log_one_process_param_norm_at_evaluation_and_sampling_steps(held, tiny_config):
    config = tiny_config(
        "norms",
        parallel={"data_parallel": 2, "expert_parallel": 2},
        eval={"every": 2, "max_sequences": 2, "batch_sequences": 8},
        samples={"every": 3, "max_new_tokens": 2, "temperatures": [0.0]},
    )
    single = train(config, held, TrainRequest(steps=STEPS, run="one")).run_dir
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "4",
        "-m",
        "millrace",
        "train",
        str(config),
        "--home",
        str(held.root),
        "--run-name",
        "four",
        "--steps",
        str(STEPS),
        "--no-progress",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    four = held.run("four")
    assert [r.step for r in read_eval(four)] == [2, 4]
    assert {r.step for r in read_samples(four)} == {3, 4}
    one, many = read_metrics(single), read_metrics(four)
    assert [r.step for r in many] == list(range(1, STEPS + 1))
    for key in ("loss", "param_norm", "param_norm_with_router_bias"):
        assert [getattr(r, key) for r in many] == pytest.approx([getattr(r, key) for r in one], rel=1e-6), key
