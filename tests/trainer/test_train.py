"""The tiny MoE trains on a real built mixture: loss falls, metrics follow the contract, resume is exact."""

import json
import math
from pathlib import Path

import pytest

from millrace.cli import main as millrace
from trainer.loop import train
from trainer.records import RunStore, read_metrics, read_run
from trainer.train_request import TrainRequest

CONTRACT = {
    "step",
    "time",
    "phase",
    "loss",
    "lr",
    "tokens",
    "tokens_per_second",
    "mfu",
    "data_wait_fraction",
    "grad_norm",
    "param_norm",
    "param_norm_with_router_bias",
    "router_bias",
    "expert_load",
    "loss_per_cell",
    "loss_per_source",
    "realised_tokens_per_cell",
}


@pytest.mark.slow
def test_tiny_moe_learns_from_the_loader_and_reports_everything(built, tiny_config):
    home, manifest_path = built
    result = train(tiny_config(), home, TrainRequest(steps=40, run="learn"))
    losses = result.losses
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0, losses
    records = read_metrics(result.run_dir)
    assert [r.step for r in records] == list(range(1, 41))
    for record in records:
        assert set(record.model_fields_set) >= CONTRACT
    last = records[-1]
    assert last.tokens == 40 * 8 * 32
    assert sum(last.realised_tokens_per_cell.values()) == last.tokens
    assert set(last.loss_per_source) <= {"docs", "code", "man"} and last.loss_per_source
    assert 0 < last.data_wait_fraction < 1 and last.mfu > 0
    bias_squared = sum(layer.norm**2 for layer in last.router_bias)
    assert bias_squared > 0  # the rule moved it
    assert math.isclose(last.param_norm_with_router_bias**2 - last.param_norm**2, bias_squared, rel_tol=1e-6)
    for layer in last.expert_load:
        assert math.isclose(sum(layer.load), 1.0, abs_tol=1e-4) and layer.max_violation >= 0
        assert 0 < layer.router_entropy <= 1 and 0 < layer.entropy <= 1
    run = read_run(result.run_dir)
    manifest = json.loads(manifest_path.read_text())
    planned = dict.fromkeys(manifest["cells"], 0)
    for phase in manifest["phases"]:
        for cell, count in phase["counts"].items():
            planned[cell] += count * manifest["seq_len"]
    assert run.planned_tokens_per_cell == planned
    assert run.status == "stopped" and run.total_steps == 60 and run.manifest_hash == manifest["content_hash"]
    assert run.store == RunStore(name="t", version="2026.01.01")


@pytest.mark.slow
def test_resume_continues_the_same_loss_curve_exactly(built, tiny_config):
    home, _ = built
    config = tiny_config(checkpoint={"every": 3, "keep": 2})
    straight = train(config, home, TrainRequest(steps=12, run="straight")).losses
    first = train(config, home, TrainRequest(steps=6, run="resumed"))
    second = train(config, home, TrainRequest(steps=12, run="resumed", resume=True))
    assert second.start_step == 6
    assert first.losses + second.losses == straight  # bit-identical on CPU: same ops, same order, same state
    kept = sorted(p.name for p in (second.run_dir / "checkpoints").iterdir())
    assert kept == ["step-00000009", "step-00000012"]  # keep = 2, no temporary directory left
    steps = [r.step for r in read_metrics(second.run_dir)]
    assert steps == list(range(1, 13))


@pytest.mark.slow
def test_rate_zero_keeps_every_router_bias_at_zero(built, tiny_config):
    home, _ = built
    result = train(tiny_config(moe={"bias_update_rate": 0.0}), home, TrainRequest(steps=8, run="frozen"))
    for record in read_metrics(result.run_dir):
        assert all(layer.norm == 0.0 and layer.max_abs == 0.0 for layer in record.router_bias)
        assert record.param_norm_with_router_bias == record.param_norm


@pytest.mark.slow
def test_gradient_accumulation_matches_one_big_batch(built, tiny_config):
    home, _ = built
    one = train(tiny_config(), home, TrainRequest(steps=3, run="micro1")).losses
    two = train(tiny_config("micro", data={"micro_batches": 2}), home, TrainRequest(steps=3, run="micro2")).losses
    assert two == pytest.approx(one, rel=1e-5)  # float sums in another order
    # AdamW ignores the gradient's scale, so a mis-scaled accumulation would pass on losses alone
    norms = [[record.grad_norm for record in read_metrics(home.run(run))] for run in ("micro1", "micro2")]
    assert norms[1] == pytest.approx(norms[0], rel=1e-5)


def test_train_cli_refuses_bad_input_with_one_line(built, tiny_config, capsys):
    home, _ = built
    assert millrace(["train", str(tiny_config(optimizer={"lr": -1.0})), "--home", str(home.root)]) == 2
    assert "field 'optimizer.lr'" in capsys.readouterr().err
    assert millrace(["train", str(tiny_config()), "--revision", "nope", "--home", str(home.root)]) == 2
    assert "revision 'nope'" in capsys.readouterr().err
    assert millrace(["train", str(tiny_config()), "--steps", "1000", "--home", str(home.root)]) == 2
    assert "exceeds" in capsys.readouterr().err
    reference = Path(__file__).parents[2] / "trainer" / "configs" / "535b-a23b.toml"
    text = "\n".join(line for line in reference.read_text().splitlines() if not line.startswith("steps ="))
    path = home.root / "big.toml"
    path.write_text(text)
    assert millrace(["train", str(path), "--revision", "uniform-sampling", "--home", str(home.root)]) == 2
    assert "millrace train plan" in capsys.readouterr().err  # refused before allocating 2 TB


@pytest.mark.slow
def test_train_cli_runs_and_resumes(built, tiny_config, capsys):
    home, _ = built
    args = ["train", str(tiny_config()), "--home", str(home.root), "--run", "cli", "--no-progress"]
    assert millrace([*args, "--steps", "2"]) == 0
    assert millrace([*args, "--steps", "2"]) == 2  # refuses to overwrite a run with checkpoints
    assert "--resume" in capsys.readouterr().err
    assert millrace([*args, "--steps", "3", "--resume"]) == 0
    assert "steps 2..3" in capsys.readouterr().out


@pytest.mark.slow
def test_bf16_compute_keeps_fp32_master_weights_and_adam_state(built, tiny_config):
    import torch

    from trainer.config import load_train_config, with_vocab
    from trainer.distributed import Runtime
    from trainer.model_build import build_model, build_optimizer, compute_in_bf16

    home, _ = built
    config = tiny_config(
        "bf16",
        parallel={"param_dtype": "bfloat16"},
        moe={"score_func": "softmax", "seq_aux_loss_coef": 0.001, "z_loss_coef": 1e-4},
    )
    loaded = with_vocab(load_train_config(config), 256)
    runtime = Runtime(rank=0, world=1, device=torch.device("cpu"), mesh=None)
    model = build_model(loaded, runtime)
    optimizer = build_optimizer(model, loaded)
    assert compute_in_bf16(loaded, runtime)
    ids = torch.randint(0, 256, (2, 16))
    positions = torch.arange(16).repeat(2, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(ids, positions, torch.zeros_like(ids))
    assert logits.dtype == torch.bfloat16  # the compute is bf16 ...
    before = model.output.weight.detach().clone()
    logits.float().logsumexp(-1).mean().backward()
    optimizer.param_groups[0]["lr"] = optimizer.param_groups[1]["lr"] = 1e-6
    optimizer.step()
    # ... the weights and both AdamW moments are fp32, so an update of 1e-6 on weights of ~0.02 survives
    # (bf16 keeps 8 bits of mantissa: 0.02 + 1e-6 rounds back to 0.02)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    state = optimizer.state[model.output.weight]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    assert (model.output.weight != before).float().mean() > 0.9
    for layer in model.moe_layers():  # balancing state in full precision (bf16 cannot count past 256 tokens)
        assert layer.step_counts.dtype == torch.float32 and layer.router.expert_bias.dtype == torch.float32
    bf16 = train(config, home, TrainRequest(steps=3, run="bf16")).losses
    fp32 = train(
        tiny_config("fp32", moe={"score_func": "softmax", "seq_aux_loss_coef": 0.001, "z_loss_coef": 1e-4}),
        home,
        TrainRequest(steps=3, run="fp32"),
    ).losses
    assert bf16 == pytest.approx(fp32, rel=2e-2) and bf16 != fp32  # bf16 rounding, nothing worse
