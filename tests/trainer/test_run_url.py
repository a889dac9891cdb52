"""A run kept on S3 (moto's server on 127.0.0.1, its own process, stopped by PID): a job restarted on another
node (a home that never saw the run) finds the checkpoint and the records there and continues the same
curve as a straight local run."""

import shutil

import pytest

from millrace.home import Home
from testkit.s3_server import s3_server
from trainer.checkpoint import latest_checkpoint, list_checkpoints
from trainer.loop import train
from trainer.records import read_metrics
from trainer.run_url import RemoteDir

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3():
    with s3_server("runs") as server:
        yield server


def other_node(home: Home, tmp_path) -> Home:
    """The same stores and mixtures on a node that has never seen a run."""
    root = tmp_path / "other-node"
    shutil.copytree(home.root, root, ignore=shutil.ignore_patterns("runs"))
    return Home.resolve(root)


@pytest.mark.slow
def test_a_run_on_s3_resumes_on_another_node_like_a_straight_local_run(built, tiny_config, s3, tmp_path):
    home, _ = built
    straight = train(tiny_config("local", checkpoint={"every": 3}), home, steps=6, run="straight")
    remote = {"url": "s3://runs/team", "storage_options": s3.storage_options}
    config = tiny_config("remote", checkpoint={"every": 3, "keep": 1}, run=remote)
    first = train(config, home, steps=3, run="moved")
    assert not (first.run_dir / "checkpoints").exists()  # checkpoints go to the bucket only

    node = other_node(home, tmp_path)
    second = train(config, node, steps=6, run="moved", resume=True)
    assert second.start_step == 3
    assert first.losses + second.losses == pytest.approx(straight.losses, abs=1e-6)
    local, resumed = read_metrics(straight.run_dir), read_metrics(node.run("moved"))  # steps 1-3 came from S3
    assert [r["step"] for r in resumed] == list(range(1, 7))
    for key in ("loss", "grad_norm"):
        assert [r[key] for r in resumed] == pytest.approx([r[key] for r in local], abs=1e-6), key

    run = RemoteDir("s3://runs/team/moved", s3.storage_options)
    assert [step for step, _ in list_checkpoints(run / "checkpoints")] == [6]  # keep = 1 pruned step 3 there
    assert {"run.json", "metrics.jsonl"} <= set(run.files()) and "writer.lock" not in run.files()
    assert len(run.read_bytes("metrics.jsonl").splitlines()) == 6


@pytest.mark.slow
def test_an_unfinished_checkpoint_on_s3_is_never_loaded(built, tiny_config, s3, tmp_path):
    home, _ = built
    remote = {"url": "s3://runs/crash", "storage_options": s3.storage_options}
    config = tiny_config("remote", checkpoint={"every": 2, "keep": 2}, run=remote)
    train(config, home, steps=2, run="torn")
    checkpoints = RemoteDir("s3://runs/crash/torn/checkpoints", s3.storage_options)
    committed = checkpoints / "step-00000002"
    torn = checkpoints / "step-00000004"  # a crash between DCP's objects and the digests that commit them
    for name in committed.files():
        if name != "digests.json":
            torn.write_bytes(name, committed.read_bytes(name))
    latest = latest_checkpoint(checkpoints)
    assert latest is not None and latest[0] == 2
    resumed = train(config, other_node(home, tmp_path), steps=3, run="torn", resume=True)
    assert resumed.start_step == 2
