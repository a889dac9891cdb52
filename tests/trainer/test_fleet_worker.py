"""The local executor's long-lived workers: runs trained one after another in one worker process equal the
same runs each in a fresh process (the way a swarm's proxies are trained)."""

from __future__ import annotations

import pytest

from millrace.home import Home
from mixtures.build import build
from mixtures.new import NewRevision, new_revision
from testkit.stores import make_store
from trainer.fleet import FleetConfig, TrainingJob, run_jobs
from trainer.loop import train
from trainer.records import read_eval, read_metrics
from trainer.train_request import TrainRequest

BRANCH, STEPS = 2, 5


@pytest.fixture(scope="module")
def worker_home(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("worker-home"))
    make_store(home, {"c00q0": 8000, "c01q0": 6000, "c02q1": 4000}, held_out=2)
    new_revision(
        home,
        NewRevision(
            mixture="mix",
            revision="natural",
            store="t",
            strategy="natural",
            phases=["main:4096"],
            seq_len=32,
            global_batch=4,
        ),
    )
    new_revision(
        home,
        NewRevision(mixture="mix", revision="p0", continues="natural", at_step=BRANCH, phases=["main:2048:uniform"]),
    )
    new_revision(
        home,
        NewRevision(
            mixture="mix", revision="p1", continues="natural", at_step=BRANCH, phases=["main:2048:natural@c00*,c01*"]
        ),
    )
    for revision in ("natural", "p0", "p1"):
        build(home, "mix", revision)
    return home


def proxy_config(tiny_config, revision: str):
    """Evaluated once at the end, its peak FLOP/s measured (a worker measures it once, for every run)."""
    return tiny_config(
        revision,
        steps=STEPS,
        data={"mixture": "mix", "revision": revision},
        metrics={"tensorboard": False, "peak_flops_per_device": 0},
        eval={"every": STEPS, "max_sequences": 2},
        samples={"enabled": False},
    )


def outcome(home: Home, run: str):
    curve = [(r.step, r.loss, r.grad_norm) for r in read_metrics(home.run(run)) if r.step > BRANCH]
    last = read_eval(home.run(run))[-1]
    return curve, last.loss, last.bpb


@pytest.mark.slow
def test_proxies_one_after_another_in_one_worker_equal_each_in_a_fresh_process(worker_home, tiny_config):
    """Two proxies (two revisions continuing the shared run's) branched from one checkpoint, trained in one
    worker: their losses, grad norms and final held-out evaluation equal the same proxy trained in its own
    fresh `millrace train` process."""
    home = worker_home
    configs = [proxy_config(tiny_config, revision) for revision in ("natural", "p0", "p1")]
    train(configs[0], home, TrainRequest(steps=BRANCH, run="shared", checkpoint_every=BRANCH))

    def jobs(prefix: str) -> list[TrainingJob]:
        return [TrainingJob(f"{prefix}-{i}", config, start_from="shared") for i, config in enumerate(configs[1:])]

    pooled = run_jobs(home, jobs("worker"), FleetConfig(executor="local", concurrency=1, threads=1))
    # the second proxy is the one a worker could change (the first runs in a fresh worker): it alone, fresh
    fresh = run_jobs(home, jobs("fresh")[1:], FleetConfig(executor="local", threads=1, reuse_processes=False))
    assert [o.status for o in pooled + fresh] == ["completed"] * 3
    ours, alone = outcome(home, "worker-1"), outcome(home, "fresh-1")
    assert ours == alone and len(ours[0]) == STEPS - BRANCH
    assert outcome(home, "worker-0") != outcome(home, "worker-1")  # two mixtures: the comparison can fail
    logs = [(home.run(f"worker-{i}") / "train.log").read_text() for i in range(2)]
    pids = [log.split("$ (fleet worker ", 1)[1].split(")", 1)[0] for log in logs]
    assert pids[0] == pids[1]  # one worker trained both
