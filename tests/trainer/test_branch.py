"""`train --from-run`: a run branched from another run's checkpoint under its own name (a search proxy)."""

from __future__ import annotations

import pytest

from millrace.cli import main as millrace
from millrace.home import Home
from mixtures.build import build
from mixtures.new import NewRevision, new_revision
from testkit.stores import make_store
from trainer.loop import train
from trainer.records import read_metrics, read_run
from trainer.train_request import TrainRequest

CELLS = {"c00q0": 30000, "c01q0": 20000, "c02q1": 12000, "c03q1": 6000}
K = 3  # the shared checkpoint; the runs go to 2K


@pytest.fixture(scope="module")
def branch_home(tmp_path_factory):
    """A parent mixture, a child continuing it at step K, and an unrelated revision."""
    home = Home.resolve(tmp_path_factory.mktemp("branch-home"))
    make_store(home, CELLS)
    common = {"seq_len": 32, "global_batch": 8}
    new_revision(
        home,
        NewRevision(
            mixture="mix",
            revision="natural",
            store="t",
            strategy="natural",
            phases=["main:4096:natural@c00*,c01*,c02*"],
            **common,
        ),
    )
    new_revision(
        home, NewRevision(mixture="mix", revision="swap", continues="natural", at_step=K, phases=["main:2048:uniform"])
    )
    new_revision(
        home,
        NewRevision(mixture="mix", revision="other", store="t", strategy="uniform", phases=["main:4096"], **common),
    )
    for name in ("natural", "swap", "other"):
        build(home, "mix", name)
    return home


def stepped(run_dir, after: int) -> list[tuple[int, float, float]]:
    return [(r.step, r.loss, r.grad_norm) for r in read_metrics(run_dir) if r.step > after]


@pytest.mark.slow
def test_a_branched_run_equals_continuing_its_source(branch_home, tiny_config):
    """Branch onto the child under a new name from the parent's checkpoint at K: its steps K..2K equal the
    parent's own run continued onto the child, loss for loss and grad norm for grad norm."""
    config = tiny_config(steps=2 * K)
    parent = train(
        config, branch_home, TrainRequest(mixture="mix", revision="natural", steps=K, run="parent", checkpoint_every=K)
    )
    branched = train(
        config, branch_home, TrainRequest(mixture="mix", revision="swap", steps=2 * K, run="proxy", from_run="parent")
    )
    continued = train(
        config, branch_home, TrainRequest(mixture="mix", revision="swap", steps=2 * K, run="parent", resume=True)
    )
    assert branched.start_step == continued.start_step == K
    assert branched.losses == continued.losses and len(branched.losses) == K  # bit-identical on CPU
    assert stepped(branched.run_dir, K) == stepped(continued.run_dir, K)
    record = read_run(branched.run_dir)
    assert record.run == "proxy"
    assert [(r.revision, r.run, r.start_step) for r in record.revisions] == [
        ("natural", "parent", 0),
        ("swap", "proxy", K),
    ]
    assert [r.step for r in read_metrics(branched.run_dir)][:K] == [r.step for r in parent_lines(parent)]
    again = train(
        config,
        branch_home,
        TrainRequest(mixture="mix", revision="swap", steps=2 * K, run="proxy", from_run="parent", resume=True),
    )
    assert again.losses == []  # once it has its own checkpoint it continues from that, not from the source


def parent_lines(parent):
    return [r for r in read_metrics(parent.run_dir) if r.step <= K]


@pytest.mark.parametrize(
    ("revision", "source", "message"),
    [
        ("swap", "nobody", "--from-run nobody: run 'nobody' has no checkpoint in"),
        ("other", "source", "--from-run source: run 'source' trained on a revision that mix/other neither is"),
        ("swap", "late", "--from-run late: run 'late''s checkpoints are at steps 6, none at or before step 3"),
    ],
)
def test_a_wrong_source_is_one_line(branch_home, tiny_config, capsys, revision, source, message):
    config = tiny_config(steps=2 * K)
    if source != "nobody" and not branch_home.run(source).exists():
        steps = K if source == "source" else 2 * K
        train(
            config,
            branch_home,
            TrainRequest(mixture="mix", revision="natural", steps=steps, run=source, checkpoint_every=0),
        )
    argv = ["train", str(config), "--home", str(branch_home.root), "--mixture", "mix", "--revision", revision]
    code = millrace([*argv, "--run", f"branch-{source}", "--from-run", source, "--no-progress"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(errors) == 1 and message in errors[0], errors
    assert not branch_home.run(f"branch-{source}").exists()  # refused before anything was written
