"""A staged task on a work URL (here `file://`, the bucket drill is tests/drills/test_bucket_pipeline.py): it reads
only what its phase's inputs name, from its own scratch directory, uploads what it wrote, and leaves nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from datatrove.pipeline.base import PipelineStep

from pipeline.remote_work import DRIVER_READS, RemoteWork, RemoteWorkError, StagedTask, relocate
from pipeline.store.remote import PublishShards, publish_store, remote_fs


class CopyUpper(PipelineStep):
    """Reads `source`, writes its text upper-cased to `target` (both paths of the work directory)."""

    name = "copy"

    def __init__(self, source: Path, target: Path, note: str = ""):
        super().__init__()
        self.source, self.target, self.note = source, target, note

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        yield from data or ()
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.target.write_text(self.source.read_text().upper() + str(self.source.parent))


def test_relocate_moves_the_paths_under_the_root_and_refuses_a_root_kept_as_a_string(tmp_path):
    mirror, scratch = tmp_path / "mirror", tmp_path / "scratch"
    step = CopyUpper(mirror / "a" / "in.txt", tmp_path / "elsewhere.txt")
    [moved] = relocate([step], mirror, scratch)
    assert (moved.source, moved.target) == (scratch / "a" / "in.txt", tmp_path / "elsewhere.txt")
    with pytest.raises(RemoteWorkError, match="as a string"):
        relocate([CopyUpper(mirror / "x", mirror / "y", note=str(mirror / "x"))], mirror, scratch)


def test_a_staged_task_reads_its_inputs_from_the_url_and_uploads_what_it_wrote(tmp_path):
    bucket, mirror, scratch = tmp_path / "bucket", tmp_path / "mirror", tmp_path / "scratch"
    (bucket / "filtered").mkdir(parents=True)
    (bucket / "filtered" / "00001.jsonl.zst").write_text("rank one")
    (bucket / "filtered" / "00000.jsonl.zst").write_text("rank zero: not read by rank 1")
    work = RemoteWork(f"file://{bucket}", {}, mirror, str(scratch))
    step = CopyUpper(mirror / "filtered" / "00001.jsonl.zst", mirror / "tokens" / "00001" / "out.txt")
    task = StagedTask("tokenize", [step], work)
    for _ in task(None, rank=1, world_size=2):
        pass
    written = (bucket / "tokens" / "00001" / "out.txt").read_text()
    assert written.startswith("RANK ONE") and str(scratch) in written and str(mirror) not in written
    assert sorted(p.relative_to(bucket).as_posix() for p in bucket.rglob("*") if p.is_file()) == [
        "filtered/00000.jsonl.zst",
        "filtered/00001.jsonl.zst",
        "tokens/00001/out.txt",
    ]
    assert list(scratch.iterdir()) == [] and not mirror.exists()  # the scratch directory went; the driver's untouched


def test_the_driver_pulls_only_the_small_files_it_reads_and_each_once(tmp_path):
    bucket, mirror = tmp_path / "bucket", tmp_path / "mirror"
    files = {
        "tokens/00000/a.npz": "the run's table, a row per document",
        "tokens/00000/a.placed.npz": "placed",
        "tokens/00000/a.candidates.tokens": "candidates",
        "tokens/00000/held-out.json": "{}",
        "store/cells/a/shard-00000-00000.bin": "tokens",
        "filtered/00000.jsonl.zst": "documents",
        "funnel/03-tokenize/00000.json": "{}",
    }
    for relative, text in files.items():
        (bucket / relative).parent.mkdir(parents=True, exist_ok=True)
        (bucket / relative).write_text(text)
    work = RemoteWork(f"file://{bucket}", {}, mirror)
    work.reset_mirror()
    work.pull(DRIVER_READS["tokenize"])
    pulled = sorted(p.relative_to(mirror).as_posix() for p in mirror.rglob("*") if p.is_file())
    assert pulled == ["funnel/03-tokenize/00000.json", "tokens/00000/held-out.json"]
    read = work.pulled_bytes
    assert read == sum(len(files[name]) for name in pulled)
    work.pull(DRIVER_READS["tokenize"])  # nothing changed on the bucket: nothing read again
    assert work.pulled_bytes == read


@pytest.mark.parametrize("target", ["file", "memory"])
def test_a_store_is_published_from_the_work_url_and_its_manifests(tmp_path, target):
    staged, manifests = tmp_path / "work" / "store", tmp_path / "home-store"
    shards = {
        "cells/a/shard-00000-00000.bin": b"\x01\x02" * 1000,
        "cells/a/documents-00000.parquet": b"trace",
        "cells/a/held-out-documents-00001.parquet": b"held-out trace",
    }
    written = {"cells/a/cell.json": b"{}", "tokenizer/tokenizer.json": b"{}", "store.json": b"{}"}
    for root, tree in ((staged, shards), (manifests, written)):
        for relative, body in tree.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(body)
    shards["cells/a/shard-00001-00000.bin"] = b"rank one's"  # another task's shard: its own task copies it
    (staged / "cells/a/shard-00001-00000.bin").write_bytes(shards["cells/a/shard-00001-00000.bin"])
    url = f"file://{tmp_path}/out" if target == "file" else f"memory://{tmp_path.name}/out"
    # each task publishes its own shards (on the server where one profile holds both URLs); the driver none
    step = PublishShards(f"file://{staged}", {}, url, {})
    for rank in range(2):
        list(step.run(None, rank, 2))
    fs, root = remote_fs(url)
    kept = fs.info(f"{root}/cells/a/shard-00000-00000.bin")
    list(step.run(None, 0, 2))  # a killed task's rerun keeps what is there at its size
    assert fs.info(f"{root}/cells/a/shard-00000-00000.bin") == kept
    assert publish_store(manifests, url) == 3  # the manifests, store.json last; no shard listed or copied
    published = {path[len(root) + 1 :]: fs.cat_file(path) for path in fs.find(root)}
    assert published == {**shards, **written}
    assert publish_store(manifests, url) == 0  # published: nothing to do


def test_a_copy_resumes_what_an_interrupted_one_left_and_never_writes_over_another_version(tmp_path):
    from millrace.errors import ArtifactError
    from pipeline.store.remote import copy_store

    store = tmp_path / "home-store"
    for relative, body in {
        "cells/a/shard-0.bin": b"\x01" * 500,
        "cells/a/cell.json": b"{}",
        "store.json": b"1",
    }.items():
        (store / relative).parent.mkdir(parents=True, exist_ok=True)
        (store / relative).write_bytes(body)
    url, out = f"file://{tmp_path}/out", tmp_path / "out"
    assert copy_store(store, url) == 3
    (out / "store.json").unlink()  # what a copy cut before its marker leaves ...
    (out / "cells" / "a" / "cell.json").unlink()  # ... with one object never written
    before = (out / "cells" / "a" / "shard-0.bin").stat().st_mtime_ns
    assert copy_store(store, url) == 2  # the missing object and the marker; the shard already there is kept
    assert (out / "cells" / "a" / "shard-0.bin").stat().st_mtime_ns == before
    assert copy_store(store, url) == 0  # the same store version there: nothing to copy
    (store / "store.json").write_bytes(b"2")  # another store version under the same URL
    with pytest.raises(ArtifactError, match=r"another store version is already published there"):
        copy_store(store, url)
    assert (out / "store.json").read_bytes() == b"1"


def test_a_killed_tasks_scratch_is_removed_by_the_next_task_on_its_node(tmp_path):
    import subprocess
    import sys

    from pipeline.remote_work import _HOST, SCRATCH_PREFIX, remove_stale_scratch

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # a process that has ended: its PID names no live process (unless reused at once)
    stale = tmp_path / f"{SCRATCH_PREFIX}tokenize-00001-{_HOST}-pid{dead}-x1"
    live = tmp_path / f"{SCRATCH_PREFIX}tokenize-00002-{_HOST}-pid{os.getpid()}-x2"
    elsewhere = tmp_path / f"{SCRATCH_PREFIX}tokenize-00003-othernode-pid{dead}-x3"
    for folder in (stale, live, elsewhere):
        (folder / "work").mkdir(parents=True)
    assert remove_stale_scratch(tmp_path) == [stale]
    assert sorted(tmp_path.iterdir()) == sorted([live, elsewhere])
