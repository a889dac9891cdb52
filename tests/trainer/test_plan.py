"""The reference 535B-A23B shape on paper, through the command line."""

import json
from pathlib import Path

import pytest

from millrace.cli import main as millrace

CONFIG = str(Path(__file__).parents[2] / "trainer" / "configs" / "535b-a23b.toml")


def test_reference_shape_lands_within_five_percent(capsys):
    assert millrace(["train", "plan", CONFIG, "--gpus", "792", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert abs(plan["params"]["total"] / 535e9 - 1) < 0.05
    assert abs(plan["params"]["active"] / 23e9 - 1) < 0.05
    assert abs(plan["flops_per_token"] * plan["tokens"] / 2.7e24 - 1) < 0.05  # the reference's 2.7e24 at 18.75T
    assert plan["gpus"] == 792 and plan["tokens"] == 18.75e12
    # the reference's 390,251 steps of 11,264 x 4096 (18.0T of the 18.75T prepared), bf16 over fp32 masters
    assert plan["steps"] == 390_251 and plan["trained_tokens"] == 390_251 * 11_264 * 4096
    assert plan["total_flops"] == pytest.approx(plan["flops_per_token"] * plan["trained_tokens"], rel=1e-12)
    assert (plan["param_dtype"], plan["master_dtype"]) == ("bfloat16", "float32")
    assert plan["memory_gib_per_gpu"]["gathered"] == pytest.approx(1.64, abs=0.01)  # bf16: half of fp32's
    state = plan["weights_gib_per_gpu"] + plan["grads_gib_per_gpu"] + plan["optimizer_gib_per_gpu"]
    assert abs(state - plan["params"]["total"] * 16 / plan["layout"]["gpus_used"] / 2**30) < 1e-6
    assert 20 < plan["days"] < 100


def test_reference_layout_on_792_gpus_in_racks_of_72_is_one_the_trainer_accepts(capsys):
    from trainer.config import load_train_config
    from trainer.layout import Layout, check_batch, resolve_layout

    assert millrace(["train", "plan", CONFIG, "--gpus", "792", "--gpus-per-node", "72", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    layout = plan["layout"]
    assert {
        key: layout[key] for key in ("data_parallel", "expert_parallel", "gpus_used", "gpus_idle", "loader_world")
    } == {"data_parallel": 11, "expert_parallel": 64, "gpus_used": 704, "gpus_idle": 88, "loader_world": 11}
    assert 11264 % layout["data_parallel"] == 0 and 384 % layout["expert_parallel"] == 0
    assert layout["ranks_per_node"] == 64 and layout["nodes"] == 11  # one expert group per rack, 8 GPUs idle each
    memory = plan["memory_gib_per_gpu"]
    assert memory["activations_checkpointed"] < memory["activations"] / 10
    assert memory["fits_checkpointed"] and not memory["fits"]  # 16 sequences of 4096 need checkpointing on 186 GiB
    # the trainer's own start-up checks, on the world torchrun would give it (not a 704-rank run)
    config = load_train_config(CONFIG)
    accepted = resolve_layout(
        config.parallel.expert_parallel,
        config.parallel.data_parallel,
        layout["gpus_used"],
        config.moe.n_routed_experts,
    )
    assert accepted == Layout(data_parallel=11, expert_parallel=64)
    assert check_batch(accepted, config.plan.global_batch, config.data.micro_batches) == 16
    with pytest.raises(Exception, match=r"parallel\.expert_parallel = 64 does not divide the world size 792"):
        resolve_layout(config.parallel.expert_parallel, 0, 792, config.moe.n_routed_experts)


def test_plan_text_and_help(capsys):
    assert millrace(["train", "plan", CONFIG, "--gpus", "792"]) == 0
    out = capsys.readouterr().out
    assert "total parameters" in out and "days" in out
    assert "390,251 of 11,264 x 4096 = 1.801e+13 tokens" in out
    assert "bfloat16 (what FSDP gathers) / float32 (sharded, updated by AdamW)" in out
    assert millrace(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "millrace train CONFIG" in out and "millrace train plan CONFIG --gpus N" in out


def test_plan_refuses_an_expert_split_that_does_not_divide(capsys):
    assert millrace(["train", "plan", CONFIG, "--gpus", "32"]) == 2  # fewer GPUs than one expert group
    assert "parallel.expert_parallel = 64" in capsys.readouterr().err


SHIPPED = sorted((Path(__file__).parents[2] / "trainer" / "configs").glob("*.toml"))


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: p.name)
def test_plan_plans_every_shipped_config_or_names_the_command_that_does(capsys, config):
    from millrace.config import parse_document

    code = millrace(["train", "plan", str(config), "--json"])
    out, err = capsys.readouterr()
    document = parse_document(config)
    if "ladder" in document:
        assert code != 0 and f"plan it with: millrace ladder plan {config}" in err
        return
    if "search" in document:
        assert code != 0 and f"plan it with: millrace mix search plan {config}" in err
        return
    assert code == 0, err
    plan = json.loads(out)
    assert plan["params"]["total"] > 0 and plan["flops_per_token"] > 0
    if config.name == "tiny.toml":  # vocab_size 0: the store's when training, the pipeline default on paper
        assert plan["vocab_size"] == 8192


def test_plan_of_a_tiny_config_says_which_vocabulary_and_fits_its_units(capsys):
    tiny = str(Path(__file__).parents[2] / "trainer" / "configs" / "tiny.toml")
    assert millrace(["train", "plan", tiny, "--vocab-size", "512"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary 512 (from --vocab-size)" in out and " K" in out and "0.00 B" not in out


def test_a_plan_of_a_trillion_layers_is_arithmetic_not_a_list_per_layer(tiny_config, capsys):
    """The config fuzz drill found `train plan` building a per-layer list: n_layers = 2^40 ran out of memory."""
    path = tiny_config(model={"n_layers": 2**40, "vocab_size": 8192})
    assert millrace(["train", "plan", str(path), "--gpus", "8", "--json"]) == 0
    assert capsys.readouterr().out.strip().startswith("{")


def test_plan_takes_the_configs_steps_and_refuses_more_than_the_budget_holds(tiny_config, capsys):
    shaped = {"vocab_size": 512}
    budget = {"tokens": 16 * 256 * 100, "seq_len": 256, "global_batch": 16}
    assert millrace(["train", "plan", str(tiny_config("all", model=shaped, plan=budget)), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 100  # no `steps`: what the budget holds
    assert millrace(["train", "plan", str(tiny_config("some", model=shaped, plan=budget, steps=60)), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["steps"], plan["trained_tokens"]) == (60, 60 * 16 * 256)
    assert plan["total_flops"] == pytest.approx(plan["flops_per_token"] * 60 * 16 * 256)
    assert millrace(["train", "plan", str(tiny_config("over", model=shaped, plan=budget, steps=101))]) == 2
    assert "steps = 101 exceeds the 100 steps" in capsys.readouterr().err
