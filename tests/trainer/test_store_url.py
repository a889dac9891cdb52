"""A trainer node whose home holds only a store's manifests (the store itself published on S3, as the pipeline's
`[output] url` leaves it) trains from the bucket with `[data] store_url` and evaluates on the same held-out
tokens as a node with the whole store on disk. moto's S3 server runs on 127.0.0.1, stopped by PID."""

import shutil

import pytest

from millrace.home import Home
from pipeline.store.format import SHARD_FILES
from pipeline.store.remote import copy_store
from testkit.s3 import s3_server
from testkit.stores import build_mixture, make_store
from trainer.loop import train
from trainer.records import EvalRecord, read_eval, read_metrics
from trainer.train_request import TrainRequest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

CELLS = {"c00q0": 12000, "c01q1": 8000}


def manifests_only(home: Home, root) -> Home:
    """The same stores and mixtures with every shard file gone: what a driver keeps of a store it published."""
    node = Home.resolve(root)
    shutil.copytree(home.stores, node.stores)
    for suffix in (*SHARD_FILES, ".xxh"):
        for path in node.stores.rglob(f"*{suffix}"):
            path.unlink()
    return node


def evaluations(run_dir) -> list[EvalRecord]:
    return read_eval(run_dir)


@pytest.mark.slow
def test_a_node_with_only_the_manifests_trains_and_evaluates_from_the_store_on_s3(tmp_path, tiny_config):
    home = Home.resolve(tmp_path / "home")
    store = make_store(home, CELLS, held_out=6)
    build_mixture(home, tokens=32 * 8 * 8, seq_len=32, global_batch=8)
    local_config = tiny_config("local", eval={"every": 2})
    local = train(local_config, home, TrainRequest(steps=4, run="local", progress=False))

    with s3_server("stores") as s3:
        url = f"s3://stores/{store.parent.name}/{store.name}"
        copy_store(store, url, s3.storage_options)
        node = manifests_only(home, tmp_path / "node")
        assert not list(node.stores.rglob("*.bin"))
        data = {"store_url": url, "storage_options": s3.storage_options}
        remote = train(
            tiny_config("remote", eval={"every": 2}, data=data),
            node,
            TrainRequest(steps=4, run="remote", progress=False),
        )

    fetched = sorted(p.name for p in node.stores.rglob("*.bin"))
    assert fetched and all(name.startswith("validation-") for name in fetched)  # held-out only, no training shard
    assert remote.losses == pytest.approx(local.losses, abs=1e-6)
    for key in ("loss", "grad_norm"):
        assert [getattr(r, key) for r in read_metrics(remote.run_dir)] == pytest.approx(
            [getattr(r, key) for r in read_metrics(local.run_dir)], abs=1e-6
        ), key
    here, there = evaluations(local.run_dir), evaluations(remote.run_dir)
    assert [e.step for e in there] == [e.step for e in here] and there
    assert [e.loss.macro for e in there] == pytest.approx([e.loss.macro for e in here], abs=1e-6)
    assert "storage_options" not in (remote.run_dir / "run.json").read_text()  # credentials never recorded


def test_a_store_url_that_is_not_a_url_is_refused(tmp_path, tiny_config):
    from millrace.errors import ConfigError
    from trainer.config import load_train_config

    with pytest.raises(ConfigError, match="store_url"):
        load_train_config(tiny_config("bad", data={"store_url": "stores/t/v1"}))
