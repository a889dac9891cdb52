"""A run resumed onto a revision that continues its mixture: the reference run's mid-run swap."""

from __future__ import annotations

import pytest

from millrace.cli import main as millrace
from millrace.errors import ArtifactError
from millrace.home import Home
from mixtures.build import build
from mixtures.new import NewRevision, new_revision
from testkit.stores import make_store
from trainer.loop import train
from trainer.records import read_metrics, read_run
from trainer.train_request import TrainRequest

CELLS = {"c00q0": 30000, "c01q0": 20000, "c02q1": 12000, "c03q1": 6000}
K = 4  # the switch; the runs go to 2K


@pytest.fixture(scope="module")
def lineage(tmp_path_factory):
    """A parent mixture over three cells and children continuing it at step K (and K - 2), with a fourth cell."""
    home = Home.resolve(tmp_path_factory.mktemp("lineage-home"))
    make_store(home, CELLS)
    new_revision(
        home,
        NewRevision(
            mixture="mix",
            revision="natural",
            store="t",
            strategy="natural",
            phases=["main:8192:natural@c00*,c01*,c02*"],
            seq_len=32,
            global_batch=8,
        ),
    )
    for name, at_step in (("swap", K), ("early", K - 2)):
        new_revision(
            home,
            NewRevision(
                mixture="mix",
                revision=name,
                continues="natural",
                at_step=at_step,
                phases=["main:2048:uniform", "cooldown:1024:uniform@c02*,c03*"],
            ),
        )
    new_revision(
        home,
        NewRevision(
            mixture="mix",
            revision="other",
            store="t",
            strategy="uniform",
            phases=["main:8192"],
            seq_len=32,
            global_batch=8,
        ),
    )
    for name in ("natural", "swap", "early", "other"):
        build(home, "mix", name)
    return home


def grad_norms(run_dir) -> list[float]:
    return [r.grad_norm for r in read_metrics(run_dir)]


@pytest.mark.slow
def test_resume_onto_the_child_equals_a_fresh_child_run(lineage, tiny_config):
    """The parent's run to K, then the child from its checkpoint: in the same run, and under the child's
    own run name (the reference run's new run id); both equal a fresh child run to 2K."""
    config = tiny_config(steps=2 * K)
    parent = train(config, lineage, TrainRequest(mixture="mix", revision="natural", steps=K, checkpoint_every=K))
    assert parent.run == "tiny-mix-natural"
    switched = train(
        config, lineage, TrainRequest(mixture="mix", revision="swap", steps=2 * K, resume=True)
    )  # a new run id, as the CLI's default
    same_run = train(
        config, lineage, TrainRequest(mixture="mix", revision="swap", steps=2 * K, run=parent.run, resume=True)
    )
    fresh = train(config, lineage, TrainRequest(mixture="mix", revision="swap", steps=2 * K, run="fresh"))
    assert switched.run == "tiny-mix-swap" and switched.start_step == same_run.start_step == K
    assert parent.losses + switched.losses == parent.losses + same_run.losses == fresh.losses  # bit-identical on CPU
    assert grad_norms(switched.run_dir) == grad_norms(same_run.run_dir) == grad_norms(fresh.run_dir)
    run = read_run(switched.run_dir)
    assert [(r.revision, r.run, r.start_step, r.stop_step) for r in run.revisions] == [
        ("natural", "tiny-mix-natural", 0, K),
        ("swap", "tiny-mix-swap", K, 2 * K),
    ]
    assert [(r.revision, r.start_step) for r in run.lineage] == [("natural", 0), ("swap", K)]
    assert [(r.revision, r.start_step) for r in read_run(same_run.run_dir).revisions] == [
        ("natural", 0),
        ("swap", K),
    ]
    last = read_metrics(switched.run_dir)[-1]
    assert last.realised_tokens_per_cell == read_metrics(fresh.run_dir)[-1].realised_tokens_per_cell
    assert last.realised_tokens_per_cell["c03q1"] > 0  # a cell the parent never drew
    assert [r.step for r in read_metrics(switched.run_dir)] == list(range(1, 2 * K + 1))  # the parent's lines too


@pytest.mark.slow
def test_a_checkpoint_past_the_switch_or_of_another_mixture_is_refused(lineage, tiny_config, capsys):
    config = tiny_config(steps=2 * K)
    train(config, lineage, TrainRequest(mixture="mix", revision="natural", steps=K, run="late", checkpoint_every=K))
    code = millrace(
        [
            "train",
            str(config),
            "--home",
            str(lineage.root),
            "--mixture",
            "mix",
            "--revision",
            "early",
            "--run",
            "late",
            "--resume",
            "--no-progress",
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, errors
    err = errors[0]
    assert f"checkpoint: state is at step {K} of mix/natural, past step {K - 2} where early stops sharing" in err
    with pytest.raises(ArtifactError, match="does not continue it; refusing to resume a different mixture"):
        train(config, lineage, TrainRequest(mixture="mix", revision="other", steps=2 * K, run="late", resume=True))
    assert read_run(lineage.run("late")).revision == "natural"  # the refusals wrote nothing
