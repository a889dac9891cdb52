"""A staged task on a work URL (here `file://`, the bucket drill is tests/drills/test_bucket_pipeline.py): it reads
only what its stage's inputs name, from its own scratch directory, uploads what it wrote, and leaves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from datatrove.pipeline.base import PipelineStep

from pipeline.remote_work import RemoteWork, RemoteWorkError, StagedTask, relocate


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
