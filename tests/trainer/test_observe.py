"""Held-out evaluation, completions and health while training, on a store with validation shards."""

import json
import math

import numpy as np
import pytest
import torch

from loader.held_out import ValidationSequences
from millrace.cli import main as millrace
from millrace.home import Home
from testkit.stores import build_mixture, make_store
from trainer.distributed import Runtime
from trainer.evaluation import Evaluator
from trainer.health import TooManySkippedSteps
from trainer.loop import train
from trainer.model import Transformer
from trainer.records import EVAL_SCHEMA, MetricsRecord, read_eval, read_metrics, read_run, read_samples
from trainer.train_request import TrainRequest

CELLS = {"c00q0": 14000, "c00q1": 9000, "c01q0": 8000, "c01q1": 7000}
HELD = {"c00q0": 6, "c00q1": 6, "c01q0": 6}  # c01q1 is trained on but has no held-out data
SEQ_LEN, BATCH, STEPS = 32, 8, 30


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("observe-home"))
    make_store(home, CELLS, held_out=HELD)
    path = build_mixture(home, tokens=SEQ_LEN * BATCH * STEPS, seq_len=SEQ_LEN, global_batch=BATCH)
    return home, path


def observe_config(tiny_config, name="observe", **sections):
    base = {
        "eval": {"every": 4, "max_sequences": 3, "batch_sequences": 9},
        "samples": {"max_new_tokens": 6, "every": 5},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return tiny_config(name, **base)


@pytest.mark.slow
def test_evaluations_follow_the_contract_and_always_read_the_same_sequences(held, tiny_config):
    home, path = held
    result = train(observe_config(tiny_config), home, TrainRequest(steps=10, run="evals"))
    records = read_eval(result.run_dir)
    assert [r.step for r in records] == [4, 8, 10]  # every 4 steps, and the last one
    sequences = ValidationSequences(path, max_sequences=3)
    for record in records:
        assert record.schema_name == EVAL_SCHEMA and record.seconds > 0
        assert record.tokens == record.step * BATCH * SEQ_LEN
        assert record.sequences == {"cell": {e.name: e.sequences for e in sequences.entries}, "set": {}}
        assert record.without_held_out == ["c01q1"]  # in neither average, and named
        for metric in ("loss", "bpb"):
            block = getattr(record, metric).dump()
            assert set(block) == {"macro", "micro", "cell", "domain", "bucket", "source", "set"}
            assert set(block["cell"]) == set(HELD) and set(block["domain"]) == {"c00", "c01"}
            assert set(block["bucket"]) == {"q0", "q1"} and block["set"] == {}
            assert block["macro"] == pytest.approx(np.mean(list(block["cell"].values())))
        # bits per byte from the recorded bytes (2 per token in this store): nats / ln 2 / 2
        assert record.bpb.micro == pytest.approx(record.loss.micro / math.log(2) / 2)
        assert min(record.loss.cell.values()) <= record.loss.micro <= max(record.loss.cell.values())
    assert records[-1].loss.macro < records[0].loss.macro  # it learns what it never trained on
    assert records[0].loss.macro < math.log(256)


@pytest.mark.slow
def test_evaluation_is_the_same_whatever_the_pass_split_and_leaves_the_router_alone(held, tiny_config):
    _, path = held
    from trainer.config import load_train_config, with_vocab

    config = with_vocab(load_train_config(observe_config(tiny_config)), 256)
    model = Transformer(config.model, config.moe)
    model.init_weights(0)
    runtime = Runtime(rank=0, world=1, device=torch.device("cpu"), mesh=None)
    sequences = ValidationSequences(path, max_sequences=3)
    before = [b.clone() for layer in model.moe_layers() for b in layer.step_buffers()]
    results = [
        Evaluator(sequences, runtime, size, ["docs", "code", "man"], None).evaluate(model, 1, 0) for size in (1, 4, 9)
    ]
    for other in results[1:]:
        for metric in ("loss", "bpb"):
            mine, first = getattr(other, metric), getattr(results[0], metric)
            assert mine.macro == pytest.approx(first.macro, rel=1e-6)
            assert mine.cell == pytest.approx(first.cell, rel=1e-6)
            assert mine.source == pytest.approx(first.source, rel=1e-6)
    after = [b for layer in model.moe_layers() for b in layer.step_buffers()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))  # evaluation never feeds the bias rule


@pytest.mark.slow
def test_samples_are_identical_on_rerun(held, tiny_config):
    home, _ = held
    config = observe_config(tiny_config, "samples")
    first = train(config, home, TrainRequest(steps=10, run="samples-a"))
    second = train(config, home, TrainRequest(steps=10, run="samples-b"))
    a, b = read_samples(first.run_dir), read_samples(second.run_dir)
    assert a == b and {r.step for r in a} == {5, 10}
    assert {r.temperature for r in a} == {0.0, 0.2}
    assert {r.prompt_id.split(":")[0] for r in a} == {"c00", "c01"}  # one auto prompt per domain
    for record in a:
        assert record.completion and record.completion_tokens >= 1 and record.mean_logprob <= 0


def poison_forward(monkeypatch, at_calls):
    """Training forwards number `at_calls` (1-based, training mode only) return NaN logits."""
    original = Transformer.forward
    calls = {"n": 0}

    def forward(self, *args, **kwargs):
        logits, aux = original(self, *args, **kwargs)
        if self.training:
            calls["n"] += 1
            if calls["n"] in at_calls:
                logits = logits * float("nan")
        return logits, aux

    monkeypatch.setattr(Transformer, "forward", forward)


@pytest.mark.slow
def test_a_nan_step_is_skipped_and_counted(held, tiny_config, monkeypatch):
    home, _ = held
    poison_forward(monkeypatch, {4})
    steps = []
    original_step = torch.optim.AdamW.step
    monkeypatch.setattr(
        torch.optim.AdamW, "step", lambda self, *a, **k: (steps.append(1), original_step(self, *a, **k))[1]
    )
    result = train(observe_config(tiny_config, "nan"), home, TrainRequest(steps=7, run="nan"))
    records = {r.step: r for r in read_metrics(result.run_dir)}
    assert len(steps) == 6  # seven steps, one update skipped
    skipped = records[4]
    assert skipped.skipped is True and skipped.loss is None and skipped.skipped_steps == 1
    assert skipped.alerts.active == []  # one skip is counted; three within 15 minutes alert (test_health)
    # no update and no bias rule: the parameters and the router bias are exactly those of step 3
    assert skipped.param_norm == records[3].param_norm
    assert skipped.router_bias == records[3].router_bias
    assert records[5].param_norm != records[3].param_norm
    assert all(records[s].skipped is False for s in (1, 2, 3, 5, 6, 7))
    assert result.losses[3] != result.losses[3]  # NaN, reported as it was


@pytest.mark.slow
def test_too_many_consecutive_skips_stop_the_run(held, tiny_config, monkeypatch):
    home, _ = held
    poison_forward(monkeypatch, {2, 3, 4})
    with pytest.raises(TooManySkippedSteps, match="3 consecutive steps skipped"):
        train(
            observe_config(tiny_config, "stop", health={"max_consecutive_skips": 3}),
            home,
            TrainRequest(steps=8, run="stop"),
        )
    assert read_run(home.run("stop")).status == "failed"


@pytest.mark.slow
def test_train_status_exits_3_while_an_alert_is_active(held, tiny_config, capsys):
    home, _ = held
    alerting = {"grad_norm_max": 1e-6, "timing": {"grad_norm": {"warmup_steps": 0, "start_after": 1}}}
    train(observe_config(tiny_config, "alerting", health=alerting), home, TrainRequest(steps=5, run="alerting"))
    calm = {
        "grad_norm_max": 0.0,
        "loss_jump_max": 0.0,
        "load_entropy_min": 0.0,
        "router_bias_max": 0.0,
        "dead_experts_max": 8,
        "eval_regression": False,
    }
    train(observe_config(tiny_config, "calm", health=calm), home, TrainRequest(steps=5, run="calm"))
    capsys.readouterr()
    assert millrace(["train", "status", "alerting", "--home", str(home.root)]) == 3
    text = capsys.readouterr().out
    assert "grad_norm since step 1" in text and "step 5 of 30" in text and "held-out at step 5" in text
    assert "over 3 cells with held-out data of 4 trained; no held-out data: c01q1" in text
    assert millrace(["train", "status", "alerting", "--home", str(home.root), "--json"]) == 3
    status = json.loads(capsys.readouterr().out)
    assert [a["name"] for a in status["alerts"]] == ["grad_norm"] and status["latest_eval"]["step"] == 5
    assert status["latest_eval"]["macro_cells"] == 3 and status["latest_eval"]["without_held_out"] == ["c01q1"]
    # the alert's value now (the last step's gradient norm), not the value it started with
    records = read_metrics(home.run("alerting"))
    alert = status["alerts"][0]
    assert alert["value_now"] == records[-1].grad_norm != alert["value"] == records[0].grad_norm
    assert f"{records[-1].grad_norm:.4g} at step 5" in text
    assert millrace(["train", "status", "calm", "--home", str(home.root)]) == 0
    assert "no active alert" in capsys.readouterr().out
    assert millrace(["train", "status", "nope", "--home", str(home.root)]) == 2
    error = capsys.readouterr().err
    assert "'nope': no run.json" in error and "alerting" in error and "calm" in error


@pytest.mark.slow
def test_evaluation_is_the_same_on_one_and_two_gloo_ranks(held, tiny_config):
    """Experts split over two ranks (all-to-all) and FSDP: the same held-out numbers as one process.

    Tolerance as in test_distributed: the two runs' parameters differ by float reordering (about 1e-8)."""
    from testkit.torchrun import torchrun

    home, _ = held
    config = observe_config(
        tiny_config, "eval-dist", parallel={"expert_parallel": 2}, eval={"every": 3}, samples={"enabled": False}
    )
    single = read_eval(train(config, home, TrainRequest(steps=3, run="eval-one")).run_dir)
    torchrun(2, config, home, "eval-two", 3)  # a fresh run: --resume finds no checkpoint and starts
    two = read_eval(home.run("eval-two"))
    assert [r.step for r in single] == [r.step for r in two] == [3]
    assert single[0].sequences == two[0].sequences and single[0].tokens == two[0].tokens
    for metric in ("loss", "bpb"):
        for group in ("cell", "domain", "bucket", "source"):
            mine, theirs = getattr(getattr(two[0], metric), group), getattr(getattr(single[0], metric), group)
            assert mine == pytest.approx(theirs, rel=1e-5), (metric, group)
        assert getattr(two[0], metric).macro == pytest.approx(getattr(single[0], metric).macro, rel=1e-5)


def test_the_mfu_floor_fires_only_against_a_published_peak():
    from trainer.config import HealthConfig
    from trainer.health import HealthMonitor

    record = MetricsRecord(step=11, loss=3.0, grad_norm=0.5, mfu=0.05, tokens_per_second=1e3)
    at_once = {"mfu": {"start_after": 1}}
    published = HealthMonitor(HealthConfig(timing=at_once), published_peak=True).check(record, now=0.0)
    assert [a.name for a in published.started] == ["mfu"]
    assert HealthMonitor(HealthConfig(timing=at_once)).check(record, now=0.0).active == []
    assert (
        HealthMonitor(HealthConfig(mfu_min=0.0, timing=at_once), published_peak=True).check(record, now=0.0).active
        == []
    )
