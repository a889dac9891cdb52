"""Two torchrun launchers meeting by c10d rendezvous train one run, and it resumes on another node count.

Two nodes are two `torchrun --nnodes 2` launchers on this machine, each starting two gloo
ranks, that find each other through a c10d rendezvous on 127.0.0.1 (what `srun torchrun`
does on a cluster, with the first node's address). Ranks are global across launchers: global
rank 0 alone writes run.json and metrics, every rank writes its checkpoint part to the run
directory both nodes share. The run trains 8 steps as data 2 x expert 2 (an expert group
inside each node), then resumes on one node of three ranks (data 3, experts whole), and
every step's loss and gradient norm must equal one process's to 1e-6 (see
test_distributed.py for why the gradient norm, and why 1e-6).

The global batch is 12 sequences so that both 4 and 3 ranks split it.
"""

import os
import signal
import subprocess
import sys

import pytest

from millrace.home import Home
from testkit.ports import free_port
from testkit.stores import build_mixture, make_store
from testkit.torchrun import curve
from trainer.loop import train
from trainer.records import read_metrics, read_run
from trainer.train_request import TrainRequest

SEQ_LEN, GLOBAL_BATCH, FIRST, STEPS = 32, 12, 8, 10
TIMEOUT = 300


@pytest.fixture(scope="module")
def built12(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("multinode-home"))
    make_store(home, {"c00q0": 30000, "c01q0": 20000, "c02q1": 12000})
    build_mixture(home, tokens=SEQ_LEN * GLOBAL_BATCH * STEPS, seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH)
    return home


def launch(nodes: int, ranks: int, port: int, config, home, steps: int) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(ranks),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "multinode",
        "--local-addr",
        "127.0.0.1",
        "--max-restarts",
        "0",
        "-m",
        "millrace",
        "train",
        str(config),
        "--home",
        str(home.root),
        "--run-name",
        "nodes",
        "--steps",
        str(steps),
        "--resume",
        "--no-progress",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def run_nodes(nodes: int, ranks: int, config, home, steps: int) -> None:
    """`nodes` launchers of `ranks` processes each; all must finish within TIMEOUT, or all are stopped."""
    port = free_port()
    launchers = [launch(nodes, ranks, port, config, home, steps) for _ in range(nodes)]
    try:
        outputs = [launcher.communicate(timeout=TIMEOUT)[0] for launcher in launchers]
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
                launcher.wait()
    for launcher, output in zip(launchers, outputs):
        assert launcher.returncode == 0, output[-3000:]


@pytest.mark.slow
def test_two_nodes_train_and_resume_on_one_node_of_three_ranks(built12, tiny_config):
    home = built12
    single = tiny_config("single")
    two_by_two = tiny_config("two-by-two", parallel={"data_parallel": 2, "expert_parallel": 2})
    three = tiny_config("three", parallel={"expert_parallel": 1})
    train(single, home, TrainRequest(steps=STEPS, run="reference"))
    reference = curve(home, "reference")
    assert len(reference) == STEPS

    run_nodes(2, 2, two_by_two, home, steps=FIRST)
    run_dir = home.run("nodes")
    assert read_run(run_dir).world_size == 4
    assert [record.step for record in read_metrics(run_dir)] == list(range(1, FIRST + 1))  # one writer
    assert len(list((run_dir / "checkpoints" / f"step-{FIRST:08d}").glob("*.distcp"))) == 4  # every rank's part

    run_nodes(1, 3, three, home, steps=STEPS)
    assert read_run(run_dir).start_step == FIRST
    assert read_run(run_dir).layout == {"data_parallel": 3, "expert_parallel": 1}
    moved = curve(home, "nodes")
    assert [loss for loss, _ in moved] == pytest.approx([loss for loss, _ in reference], rel=1e-6)
    assert [norm for _, norm in moved] == pytest.approx([norm for _, norm in reference], rel=1e-6)
