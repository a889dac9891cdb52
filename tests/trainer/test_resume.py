"""Resume refusals: one line naming the field or the file, never a traceback, and nothing overwritten."""

import pytest

from millrace.cli import main as millrace
from trainer.records import read_metrics, read_run


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def _args(config, home, *extra):
    return ["train", str(config), "--home", str(home.root), "--run", "changed", "--no-progress", *extra]


@pytest.mark.slow
def test_resume_refuses_a_shape_change_and_guards_training_settings(built, tiny_config, capsys):
    home, _ = built
    assert millrace(_args(tiny_config(), home, "--steps", "2")) == 0
    wider = tiny_config("wider", model={"dense_ffn_dim": 128, "d_model": 48})
    assert millrace(_args(wider, home, "--steps", "3", "--resume", "--allow-config-change")) == 2
    err = capsys.readouterr().err
    assert "field 'model.d_model' is 48 here but 32 in the checkpoint" in err and "Traceback" not in err

    faster = tiny_config("faster", optimizer={"lr": 1e-2}, schedule={"warmup_steps": 5})
    assert millrace(_args(faster, home, "--steps", "3", "--resume")) == 2
    err = capsys.readouterr().err
    assert "'optimizer.lr', 'schedule.warmup_steps'" in err and "--allow-config-change" in err
    assert len(_errors(err)) == 1
    assert [r.step for r in read_metrics(home.run("changed"))] == [1, 2]  # the refused resumes wrote nothing

    assert millrace(_args(faster, home, "--steps", "3", "--resume", "--allow-config-change")) == 0
    changes = read_run(home.run("changed")).config_changes
    assert {"step": 2, "field": "optimizer.lr", "checkpoint": 3e-3, "now": 1e-2} in [c.dump() for c in changes]
    assert [change.field for change in changes] == ["optimizer.lr", "schedule.warmup_steps"]


@pytest.mark.slow
def test_a_damaged_checkpoint_is_one_line(built, tiny_config, capsys):
    home, _ = built
    args = ["train", str(tiny_config()), "--home", str(home.root), "--run", "damaged", "--no-progress"]
    assert millrace([*args, "--steps", "1"]) == 0
    for shard in (home.run("damaged") / "checkpoints" / "step-00000001").glob("*.distcp"):
        shard.write_bytes(shard.read_bytes()[:100])
    capsys.readouterr()
    assert millrace([*args, "--steps", "2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_errors(err)) == 1, err
    assert "step-00000001/__0_0.distcp: digest mismatch" in _errors(err)[0]  # caught before DCP reads it
