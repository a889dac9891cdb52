"""Device-to-host reads per training step, counted (on a GPU each one stalls the host until the queue drains)."""

import pytest

from testkit.host_reads import counting_host_reads
from trainer import loop
from trainer.loop import train
from trainer.train_request import TrainRequest


@pytest.mark.slow
def test_a_training_step_reads_the_device_twice(built, tiny_config, monkeypatch):
    """The step's figures (loss, gradient norm, tokens per cell) in one read, the balance figures of every
    MoE layer in another, whatever the number of layers and experts; clipping stays on the device."""
    home, _ = built
    config = tiny_config(
        "reads",
        model={"n_layers": 3},
        moe={"n_routed_experts": 16},
        metrics={"log_every": 1000},
        eval={"enabled": False},
        samples={"enabled": False},
    )
    per_step = []
    step = loop.train_step

    def counted(*args, **kwargs):
        with counting_host_reads(monkeypatch) as reads:
            result = step(*args, **kwargs)
        per_step.append(dict(reads))
        return result

    monkeypatch.setattr(loop, "train_step", counted)
    result = train(config, home, TrainRequest(steps=3, run="reads"))
    assert len(per_step) == 3 and all(loss > 0 for loss in result.losses)
    assert per_step == [{"tolist": 1, "cpu": 1}] * 3, per_step
