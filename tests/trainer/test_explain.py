"""`millrace train explain`: tiny real runs with one injected fault each, explained at the faulty step.

A router-bias jump (a rule-updated buffer, no gradient) must be named as the group that moved while the
gradient-trained groups did not; a bad batch (one cell's labels replaced by one token) must be named as the
cell whose loss jumped. The batch's cells come from the loader's rebuild and must be those the trainer logged.
"""

import json

import numpy as np
import pytest

from millrace.artifacts import canonical_json, read_envelope
from millrace.cli import main
from millrace.errors import ArtifactError
from trainer import loop
from trainer.config import load_train_config, with_vocab
from trainer.explain import explain, explain_record, notable_steps
from trainer.loop import train
from trainer.records import (
    EXPLANATIONS_FILE,
    Explanations,
    MetricsRecord,
    RecordedTrainConfig,
    RunRecord,
    read_explanations,
    read_run,
)
from trainer.train_request import TrainRequest

FAULT = 8  # the metrics step (1-based) that the fault lands in: after the 2 warm-up steps


@pytest.fixture
def quiet(tiny_config):
    return tiny_config(
        "explain",
        eval={"enabled": False},
        samples={"enabled": False},
        schedule={"warmup_steps": 2},
        checkpoint={"every": 0, "at_end": False},
    )


@pytest.mark.slow  # an 8-step tiny training run
def test_a_router_bias_jump_is_named_as_the_group_that_moved(built, quiet, monkeypatch, capsys):
    home, _ = built
    real, calls = loop.balance_step, []

    def jumping(layers, rate):
        loads = real(layers, rate)
        calls.append(1)
        if len(calls) == FAULT:
            layers[0][1].router.expert_bias[0] += 5.0  # what a wrong bias-rule rate does in one step
        return loads

    monkeypatch.setattr(loop, "balance_step", jumping)
    train(quiet, home, TrainRequest(steps=FAULT, run="bias-jump"))
    found = explain(home, "bias-jump", FAULT)
    assert found["moved_groups"] == ["router_bias/layer 0"]
    trained = [g for g in found["groups"] if not g["rule_updated"]]
    assert trained and not any(g["moved"] for g in trained)
    logged = json.loads((home.run("bias-jump") / "metrics.jsonl").read_text().splitlines()[FAULT - 1])
    assert {c["cell"] for c in found["batch"]["cells"]} == set(logged["loss_per_cell"])
    assert sum(c["sequences"] for c in found["batch"]["cells"]) == found["batch"]["sequences"] == 8
    assert all(sum(c["sources"].values()) == c["sequences"] * 32 for c in found["batch"]["cells"])
    assert main(["train", "explain", "bias-jump", "--step", str(FAULT), "--home", str(home.root)]) == 0
    text = capsys.readouterr().out
    assert "groups that moved: router_bias/layer 0" in text and "batch: 8 sequences" in text
    assert main(["train", "explain", "bias-jump", "--step", str(FAULT - 1), "--home", str(home.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["moved_groups"] == []
    assert main(["train", "explain", "bias-jump", "--step", str(FAULT + 1), "--home", str(home.root)]) != 0
    assert f"--step {FAULT + 1}: no metrics record" in capsys.readouterr().err
    # run.json records the config file as dumped (the store's vocabulary filled in), every default included
    recorded = read_envelope(home.run("bias-jump") / "run.json", "millrace.run").payload["config"]
    vocab = read_run(home.run("bias-jump")).config.model.vocab_size
    expected = {"path": str(quiet), **with_vocab(load_train_config(quiet), vocab).model_dump(mode="json")}
    assert vocab > 0 and canonical_json(recorded) == canonical_json(expected)


@pytest.mark.slow  # an 8-step tiny training run
def test_a_bad_batch_names_the_cell_whose_loss_jumped(built, quiet, monkeypatch):
    home, _ = built
    real, calls, poisoned = loop.to_device, [], []

    def bad(batch, device, rows=slice(None)):
        data = real(batch, device, rows)
        calls.append(1)
        if len(calls) == FAULT:
            cell = int(data["cell_ids"][0])
            data["labels"][data["cell_ids"] == cell] = 0  # a token the store never holds, for every label of the rows
            poisoned.append(batch.cells[0])
        return data

    monkeypatch.setattr(loop, "to_device", bad)
    train(quiet, home, TrainRequest(steps=FAULT, run="bad-batch"))
    found = explain(home, "bad-batch", FAULT)
    assert found["jumped_cells"] == poisoned
    assert found["cells"][0]["cell"] == poisoned[0] and found["cells"][0]["excess"] > 0.5
    assert poisoned[0] in {c["cell"] for c in found["batch"]["cells"]}
    assert explain(home, "bad-batch", FAULT - 1)["jumped_cells"] == []


def test_notable_steps_are_the_alert_start_and_the_jumps_of_a_long_run():
    """20,000 logged steps of noisy loss with one loss spike, one grad-norm spike, one router-bias jump in the
    norm, and an alert elsewhere: those four steps and nothing else."""
    rng = np.random.default_rng(0)
    records = [
        {
            "step": s + 1,
            "loss": 3.0 + 0.01 * rng.standard_normal(),
            "grad_norm": 1.0 + 0.01 * rng.standard_normal(),
            "param_norm_with_router_bias": 100.0 + 0.001 * s,
        }
        for s in range(20_000)
    ]
    records[12_344]["loss"] = 12.0
    records[7_000]["grad_norm"] = 5.0
    for record in records[15_000:]:
        record["param_norm_with_router_bias"] += 3.0
    records[500]["alerts"] = {"started": [{"name": "dead_experts"}], "ended": [], "active": ["dead_experts"]}
    assert notable_steps([MetricsRecord.model_validate(r) for r in records]) == [501, 7_001, 12_345, 15_001]


def test_a_learning_rate_jump_is_named_with_the_resume_that_made_it_and_every_cell_jumped():
    """A run resumed at step 20 with its learning rate 100x (`--allow-config-change`): at step 21 every cell's
    loss jumps, and the explanation names the rate and the resume, not a cell; a new mixture phase at 25 and
    the warm-up's end are named where they fall; a quiet step names nothing."""
    rng = np.random.default_rng(1)
    cells = ("c00q0", "c00q1", "c01q0")
    records = []
    for step in range(1, 31):
        lr = 1e-3 * min(step / 2, 1.0) * (100 if step > 20 else 1)
        jump = 2.0 if step > 20 else 0.0
        losses = {cell: 3.0 + jump + 0.02 * rng.standard_normal() for cell in cells}
        phase = "main" if step < 25 else "cooldown"
        record = {"step": step, "lr": lr, "loss": 3.0 + jump, "loss_per_cell": losses, "phase": phase}
        records.append(MetricsRecord.model_validate(record))
    run = RunRecord.model_validate(
        {
            "config": {"schedule": {"kind": "cosine", "warmup_steps": 2}},
            "total_steps": 30,
            "config_changes": [{"step": 20, "field": "optimizer.lr", "checkpoint": 1e-3, "now": 0.1}],
        }
    )
    found = explain_record(records, 20, run=run)
    assert found["lr"]["changed"] and found["lr"]["ratio"] == pytest.approx(100.0)
    assert found["every_cell_jumped"]
    assert [e["what"] for e in found["schedule_changes"]] == ["resumed with optimizer.lr 0.001 -> 0.1"]
    assert [e["step"] for e in explain_record(records, 24, run=run)["schedule_changes"]] == [25]
    assert explain_record(records, 2, window=2, run=run)["schedule_changes"][0]["step"] == 3  # the warm-up's end
    quiet = explain_record(records, 15, run=run)
    assert not quiet["lr"]["changed"] and not quiet["every_cell_jumped"] and quiet["schedule_changes"] == []
    wsd = run.model_copy(update={"config": RecordedTrainConfig.model_validate({"schedule": {"kind": "wsd"}})})
    assert [e["what"] for e in explain_record(records, 24, run=wsd)["schedule_changes"]] == [
        "wsd decay began (steps 25..30)",  # the recorded decay_fraction's default, 0.2 of 30 steps
        "mixture phase main -> cooldown",
    ]


def test_explanations_read_into_their_record_and_a_bad_file_is_one_line(tmp_path):
    """explain.json as `write_explanations` writes it (a diverged step's NaN written by older runs, a tuple as a
    list) reads into `Explanations`; one without its `explained` object is one line naming the file and field."""
    assert read_explanations(tmp_path) == Explanations(explained={})
    path = tmp_path / EXPLANATIONS_FILE
    path.write_text(json.dumps({"run": "r", "steps": [3], "explained": {"3": {"loss": float("nan"), "span": (1, 2)}}}))
    found = read_explanations(tmp_path)
    assert (found.run, found.steps, found.explained["3"]["span"]) == ("r", [3], [1, 2])
    assert json.loads(found.model_dump_json())["explained"]["3"]["loss"] is None
    path.write_text(json.dumps({"run": "r", "steps": [3]}))
    with pytest.raises(ArtifactError) as caught:
        read_explanations(tmp_path)
    assert str(path) in str(caught.value) and "explained" in str(caught.value) and "\n" not in str(caught.value)
