"""Drill: the disk fills while the pipeline, a training run or a report build writes. One line naming
the path, the previous store untouched, no temporary left behind, the run's status set, and a rerun once
there is space completes (the pipeline with the same cells, the run from its checkpoint)."""

import errno
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from pipeline.store.format import Store
from testkit.cli import run_millrace
from testkit.corpus import config_text, make_corpus, store_files


def _mount(point: Path, size: str, remount: bool = False) -> bool:
    options = f"remount,size={size}" if remount else f"size={size}"
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
    return result.returncode == 0


@pytest.fixture
def small_disk():
    point = Path("/tmp") / f"millrace-disk-{uuid.uuid4().hex[:8]}"
    point.mkdir()
    if os.geteuid() != 0 or not _mount(point, "64m"):
        point.rmdir()
        pytest.skip("needs root to mount a small tmpfs (the disk-full drill)")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        shutil.rmtree(point, ignore_errors=True)


def _run(config: Path, home: Path):
    return run_millrace(home, "pipeline", "run", str(config), "--json", timeout=300)


@pytest.mark.slow
def test_disk_full_fails_clearly_keeps_the_previous_store_and_a_rerun_completes(small_disk, tmp_path):
    corpus = make_corpus(tmp_path / "corpus", documents=120)
    home = small_disk / "home"
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text(config_text(corpus, version="2026.03.01"))
    second.write_text(config_text(corpus, version="2026.03.02"))

    done = _run(first, home)
    assert done.returncode == 0, done.stderr[-2000:]
    previous = home / "stores" / "local" / "2026.03.01"
    before = store_files(previous)

    stat = os.statvfs(small_disk)
    used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
    assert _mount(small_disk, f"{used + 128 * 1024}", remount=True)
    failed = _run(second, home)
    assert failed.returncode != 0
    last_line = failed.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error:") and "space" in last_line.lower(), failed.stderr[-2000:]
    assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
    assert store_files(previous) == before
    assert not (home / "stores" / "local" / "2026.03.02" / "store.json").exists()

    assert _mount(small_disk, "64m", remount=True)
    rerun = _run(second, home)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    ours = Store(home / "stores" / "local" / "2026.03.02")
    theirs = Store(previous)
    assert {c: s.tokens for c, s in ours.manifest.cells.items()} == {
        c: s.tokens for c, s in theirs.manifest.cells.items()
    }
    assert store_files(previous) == before


def _shrink_to(point: Path, free_bytes: int) -> None:
    stat = os.statvfs(point)
    used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
    assert _mount(point, f"{used + free_bytes}", remount=True)


def _one_error_line(result) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    return errors[0]


@pytest.mark.slow
def test_disk_full_in_train_and_report_build_one_line_no_temporaries_status_set(small_disk, built, tiny_config):
    source, _ = built
    home = small_disk / "home"
    shutil.copytree(source.stores, home / "stores")
    config = tiny_config()
    run = "full"
    _shrink_to(small_disk, 96 * 1024)  # room for run.json and the metrics lines, not for a checkpoint
    failed = run_millrace(
        home, "train", str(config), "--run", run, "--steps", "6", "--checkpoint-every", "3", "--no-progress"
    )
    line = _one_error_line(failed)
    run_dir = home / "runs" / run
    assert line.startswith(f"error: no space left on device writing {run_dir}"), line
    assert line.endswith(f"--run {run} --resume"), line
    assert not list(run_dir.rglob(".tmp-step-*")) and not list(run_dir.rglob(".*.tmp"))
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"

    _shrink_to(small_disk, 8 * 1024 * 1024)
    resumed = run_millrace(
        home,
        "train",
        str(config),
        "--run",
        run,
        "--steps",
        "6",
        "--checkpoint-every",
        "3",
        "--resume",
        "--no-progress",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [json.loads(r)["step"] for r in (run_dir / "metrics.jsonl").read_text().splitlines()] == list(range(1, 7))

    _shrink_to(small_disk, 0)
    report = run_millrace(home, "report", "build", "--json")
    line = _one_error_line(report)
    assert line.startswith(f"error: no space left on device writing {home / 'site'}"), line
    assert not list((home / "site").rglob(".*.tmp"))


def test_a_short_write_on_a_full_disk_names_the_path_and_keeps_the_previous_file(small_disk):
    """numpy's `tofile` reports a short write without an errno; the free space is measured while the temporary
    still holds what was written (once removed, the disk has room again and the rule never fired)."""
    import numpy as np

    from millrace.artifacts import DISK_FULL_BYTES, atomic_output, atomic_write_bytes

    target = small_disk / "tokens.bin"
    atomic_write_bytes(target, b"previous")
    _shrink_to(small_disk, 3 * DISK_FULL_BYTES)  # the short write leaves less than DISK_FULL_BYTES free
    with pytest.raises(OSError) as caught, atomic_output(target) as handle:
        np.zeros(8 * DISK_FULL_BYTES, dtype=np.uint8).tofile(handle)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target), caught.value
    assert target.read_bytes() == b"previous" and not list(small_disk.glob(".*.tmp"))


def test_a_copy_that_fills_the_disk_is_named_as_a_full_disk(small_disk, tmp_path):
    """`shutil.copytree` gathers its failures in a `shutil.Error` without their errno (assembly copies the
    cell models): the full disk behind it, naming the destination."""
    from millrace.errors import disk_full_cause

    source = tmp_path / "models"
    source.mkdir()
    (source / "model.bin").write_bytes(os.urandom(4 << 20))
    _shrink_to(small_disk, 1 << 20)
    with pytest.raises(shutil.Error) as caught:
        shutil.copytree(source, small_disk / "models")
    full = disk_full_cause(caught.value)
    assert (
        full is not None and full.errno == errno.ENOSPC and full.filename == str(small_disk / "models" / "model.bin")
    )


def test_the_full_disk_reported_is_the_one_that_names_its_file():
    """A stream's flush fails without a file name; the write behind it (or re-raised over it) names one."""
    from millrace.errors import disk_full_cause

    named = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/work/duplicates/fuzzy-00002.npy")
    try:
        try:
            raise named
        except OSError as exc:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from exc
    except OSError as outer:
        assert disk_full_cause(outer) is named
    assert disk_full_cause(OSError(errno.ENOSPC, "x")).filename is None  # none named: the first, as it is
