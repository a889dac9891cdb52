"""A node lost mid-run: the surviving ranks' collective fails, and they stop with one line naming this rank, its
node, the peer it lost and the command that continues the run, not gloo's traceback. Here the failure is gloo's
own: two processes in a gloo group, one exits between two all-reduces, the other's all-reduce raises."""

import multiprocessing
import os

import pytest
import torch
import torch.distributed as dist

from testkit.ports import free_port
from trainer.preemption import lost_peer


def _rank(rank: int, port: int, found: multiprocessing.Queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if rank == 1:
        os._exit(1)  # the lost node: gone without a word
    try:
        for _ in range(3):
            dist.all_reduce(tensor)
        found.put(("no error", None))
    except BaseException as exc:  # what the trainer's entry sees
        found.put((type(exc).__name__, lost_peer(exc)))


@pytest.mark.slow  # two spawned processes that import torch
def test_a_lost_peers_gloo_error_is_named_in_a_few_words():
    context = multiprocessing.get_context("spawn")
    found = context.Queue()
    port = free_port()
    ranks = [context.Process(target=_rank, args=(rank, port, found)) for rank in range(2)]
    for process in ranks:
        process.start()
    kind, words = found.get(timeout=120)
    for process in ranks:
        process.join(timeout=60)
    assert kind == "RuntimeError"  # gloo's: a bare RuntimeError from its TCP transport
    assert words is not None and "by peer" in words and "127.0.0.1:" in words and "\n" not in words
    assert lost_peer(RuntimeError("CUDA out of memory")) is None and lost_peer(ValueError("gloo/transport")) is None
