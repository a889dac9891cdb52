"""A run resumed onto a revision that continues its mixture: the reference run's mid-run swap."""

from __future__ import annotations

import pytest

from millrace.cli import main as millrace
from millrace.errors import ArtifactError
from millrace.home import Home
from mixtures.build import build
from mixtures.new import new_revision
from trainer.loop import train
from trainer.metrics import read_metrics, read_run
from tests.trainer.stores import make_store

CELLS = {"c00q0": 30000, "c01q0": 20000, "c02q1": 12000, "c03q1": 6000}
K = 4  # the switch; the runs go to 2K


@pytest.fixture(scope="module")
def lineage(tmp_path_factory):
    """A parent mixture over three cells and children continuing it at step K (and K - 2), with a fourth cell."""
    home = Home.resolve(tmp_path_factory.mktemp("lineage-home"))
    make_store(home, CELLS)
    new_revision(home, "mix", "natural", "t", strategy="natural", phases=["main:8192:natural@c00*,c01*,c02*"],
                 seq_len=32, global_batch=8)
    for name, at_step in (("swap", K), ("early", K - 2)):
        new_revision(home, "mix", name, None, continues="natural", at_step=at_step,
                     phases=["main:2048:uniform", "cooldown:1024:uniform@c02*,c03*"])
    new_revision(home, "mix", "other", "t", strategy="uniform", phases=["main:8192"], seq_len=32, global_batch=8)
    for name in ("natural", "swap", "early", "other"):
        build(home, "mix", name)
    return home


def grad_norms(run_dir) -> list[float]:
    return [r["grad_norm"] for r in read_metrics(run_dir)]


def test_resume_onto_the_child_equals_a_fresh_child_run(lineage, tiny_config):
    config = tiny_config(steps=2 * K)
    parent = train(config, lineage, "mix", "natural", steps=K, run="switched", checkpoint_every=K)
    resumed = train(config, lineage, "mix", "swap", steps=2 * K, run="switched", resume=True)
    fresh = train(config, lineage, "mix", "swap", steps=2 * K, run="fresh")
    assert resumed.start_step == K
    assert parent.losses + resumed.losses == fresh.losses  # bit-identical on CPU
    assert grad_norms(resumed.run_dir) == grad_norms(fresh.run_dir)
    run = read_run(resumed.run_dir)
    assert [(r["revision"], r["start_step"], r["stop_step"]) for r in run["revisions"]] == [
        ("natural", 0, K), ("swap", K, 2 * K)]
    assert [(r["revision"], r["start_step"]) for r in run["lineage"]] == [("natural", 0), ("swap", K)]
    last = read_metrics(resumed.run_dir)[-1]
    assert last["realised_tokens_per_cell"] == read_metrics(fresh.run_dir)[-1]["realised_tokens_per_cell"]
    assert last["realised_tokens_per_cell"]["c03q1"] > 0  # a cell the parent never drew


def test_a_checkpoint_past_the_switch_or_of_another_mixture_is_refused(lineage, tiny_config, capsys):
    config = tiny_config(steps=2 * K)
    train(config, lineage, "mix", "natural", steps=K, run="late", checkpoint_every=K)
    code = millrace(["train", str(config), "--home", str(lineage.root), "--mixture", "mix", "--revision", "early",
                     "--run", "late", "--resume", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"checkpoint: state is at step {K} of mix/natural, past step {K - 2} where early stops sharing" in err
    with pytest.raises(ArtifactError, match="does not continue it; refusing to resume a different mixture"):
        train(config, lineage, "mix", "other", steps=2 * K, run="late", resume=True)
    assert read_run(lineage.run("late"))["revision"] == "natural"  # the refusals wrote nothing
