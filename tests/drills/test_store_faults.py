"""Drill: a flipped byte, a truncated `.idx`, a deleted shard. `store verify` fails naming the file
(and a flipped byte's range); the loader opens without reading any shard file and fails, naming the
file (and the byte range), when a sample first touches the damage; neither changes anything written."""

import re
import shutil
import subprocess
import sys

import pytest

from loader import MixtureStream
from millrace.errors import ArtifactError
from millrace.home import Home
from testkit.damage import flip_byte
from testkit.stores import build_mixture, make_store

CELLS = {"c00q0": 4000, "c01q1": 3000}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("drill-store"))
    make_store(home, CELLS)
    build_mixture(home, tokens=32 * 8 * 4, seq_len=32, global_batch=8)
    return home


def truncate(path):
    path.write_bytes(path.read_bytes()[:-5])


FAULTS = {
    "flip a byte of a .bin": ("c01q1/shard_00000.bin", flip_byte),
    "flip a byte of an .idx": ("c00q0/shard_00000.idx", flip_byte),
    "flip a byte of a .src": ("c00q0/shard_00000.src", flip_byte),
    "truncate an .idx": ("c00q0/shard_00000.idx", truncate),
    "delete a shard": ("c01q1/shard_00000.bin", lambda p: p.unlink()),
}
FLIPS = {"flip a byte of a .bin", "flip a byte of an .idx", "flip a byte of a .src"}


def snapshot(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULTS))
def test_damaged_shard_is_named_by_verify_and_by_the_loader(pristine, tmp_path, fault):
    home = Home.resolve(tmp_path / "home")
    shutil.copytree(pristine.root, home.root)
    relative, damage = FAULTS[fault]
    target = home.store("t", "2026.01.01") / "cells" / relative
    damage(target)
    before = snapshot(home.root)

    verify = subprocess.run(
        [sys.executable, "-m", "millrace", "--home", str(home.root), "store", "verify", "t/2026.01.01"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode != 0
    assert target.name in verify.stdout + verify.stderr
    assert "Traceback" not in verify.stderr

    if fault in FLIPS:
        assert f"{target.name}: bytes [0, {target.stat().st_size}) differ" in verify.stdout

    manifest = next(home.stores.glob("t/*/mixtures/default/uniform-sampling/manifest.json"))
    stream = MixtureStream(manifest, prefetch=0)  # reads no shard file
    pattern = (
        re.escape(f"{target}: bytes [0, {target.stat().st_size}) differ") if fault in FLIPS else re.escape(str(target))
    )
    with pytest.raises(ArtifactError, match=pattern):
        for step in range(stream.steps):  # the damage is named when a sample first touches it
            stream.batch(step)
    assert snapshot(home.root) == before, "checking a damaged store must change nothing on disk"


@pytest.mark.slow
def test_pristine_store_verifies(pristine):
    verify = subprocess.run(
        [sys.executable, "-m", "millrace", "--home", str(pristine.root), "store", "verify", "t/2026.01.01", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stderr
